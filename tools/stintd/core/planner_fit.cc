// Fitting: where and when a pending job fits on the free profiles. A gang
// fits in one window or spans several windows of one pool (sized with
// gang_span_slowdown per extra window); a non-gang job takes GPUs from any
// windows of its pool. EarliestFit finds the earliest start, FitAt the best
// allocation at a given start, Reserve takes it from the profiles.
#include "stintd/core/planner.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace stint::stintd::internal {

// The best allocation starting exactly at t on profiles `p`, or none: in
// the pool cheapest per useful GPU-hour (GroupCost), then the most GPUs
// after the span slowdown (one window beats several with as many GPUs),
// then the longest segment, then (one window) the tightest.
// only_slot >= 0 restricts a single-window gang to that window, and a
// spanning allocation to that window's pool.
Planner::Fit Planner::FitAt(const JobCtx& j, TimeMs t, const Profiles& profiles,
                            int only_slot) const {
  Fit best;
  if (t == kNever) return best;
  const Job& job = *j.job;
  const std::vector<FreeProfile>& p = profiles.windows;
  const FreeProfile* team = j.team->profile >= 0 ? &profiles.teams[j.team->profile] : nullptr;
  const TimeMs t_end = AddMs(t, j.len);
  int want = job.max_gpus;
  if (team != nullptr) {
    const int room = team->Min(t, t_end);
    if (room < job.min_gpus) return best;
    want = std::min(want, room);
  }
  if (want < job.min_gpus) return best;  // max_gpus < min_gpus: never started short
  // The segment also ends where the team's room drops below what it holds.
  auto team_end = [team, t](int g) { return team == nullptr ? kNever : team->FirstBelow(t, g); };
  // An elastic job takes no more GPUs than its team's budget pays for.
  auto budget_gpus = [&](int group) {
    const Pool* pool = group_pool_[group];
    return BudgetGpus(j, pool != nullptr ? pool->price_per_gpu_hour : 0);
  };
  int best_free = 0;
  double best_cost = 0;
  auto take = [&](Fit fit, int free) {
    const double cost = GroupCost(j, slots_[fit.parts.front().slot].group);
    if (best.start != kNever && cost != best_cost) {
      if (cost > best_cost) return;
      best = std::move(fit);
      best_free = free;
      best_cost = cost;
      return;
    }
    const double e = SpanEffective(job, fit.gpus, fit.parts.size());
    const double b = best.start == kNever ? -1 : SpanEffective(job, best.gpus, best.parts.size());
    if (e > b || (e == b && (fit.end > best.end || (fit.end == best.end && free < best_free)))) {
      best_cost = cost;
      best = std::move(fit);
      best_free = free;
    }
  };
  if (job.gang) {
    auto consider = [&](int slot) {
      const int free = p[slot].Min(t, t_end);
      const int g = std::min({want, free, budget_gpus(slots_[slot].group)});
      if (g < job.min_gpus) return;
      const TimeMs end = std::min({p[slot].FirstBelow(t, g), AddMs(t, j.run), team_end(g)});
      take(Fit{t, end, g, {Part{slot, g}}}, free);
    };
    if (only_slot >= 0) {
      consider(only_slot);
    } else {
      for (int g : j.groups) {
        for (int slot : groups_[g]) consider(slot);
      }
    }
  }
  std::vector<std::pair<int, int>> avail;  // (free, slot)
  for (int g : j.groups) {
    if (only_slot >= 0 && g != slots_[only_slot].group) continue;
    avail.clear();
    int sum = 0;
    for (int slot : groups_[g]) {
      const int free = p[slot].Min(t, t_end);
      if (free <= 0) continue;
      avail.emplace_back(free, slot);
      sum += free;
    }
    if (sum < job.min_gpus) continue;
    // Fewest windows: the biggest holes first.
    std::sort(avail.begin(), avail.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    const int g_total = std::min({want, sum, budget_gpus(g)});
    if (g_total < job.min_gpus) continue;
    Fit fit{t, team_end(g_total), g_total, {}};
    int left = g_total;
    for (const auto& [free, slot] : avail) {
      if (left == 0) break;
      const int n = std::min(free, left);
      fit.parts.push_back(Part{slot, n});
      fit.end = std::min(fit.end, p[slot].FirstBelow(t, n));
      left -= n;
    }
    // A gang on one window was weighed above.
    if (job.gang && fit.parts.size() < 2) continue;
    fit.end = std::min(fit.end, AddMs(t, SpanRunMs(j, fit.parts.size())));
    take(std::move(fit), sum);
  }
  return best;
}

// GPUs a gang on `windows` windows is worth (its progress rate in GPUs at
// one window's speed); a non-gang job's ranks do not wait on each other.
double Planner::SpanEffective(const Job& job, int gpus, size_t windows) const {
  if (!job.gang || windows < 2) return gpus;
  return gpus / (1.0 + c_.gang_span_slowdown * static_cast<double>(windows - 1));
}

// The whole segment a job wants on `windows` windows: its work runs
// slower by the span slowdown.
TimeMs Planner::SpanRunMs(const JobCtx& j, size_t windows) const {
  if (j.run == kNever || !j.job->gang || windows < 2) return j.run;
  const double factor = 1.0 + c_.gang_span_slowdown * static_cast<double>(windows - 1);
  return SecondsToMs(j.job->restart_seconds + j.job->remaining_seconds * factor +
                     j.job->checkpoint_seconds + c_.safety_seconds);
}

// The earliest fit at or after `from` on the current profiles.
Planner::Fit Planner::EarliestFit(const JobCtx& j, TimeMs from) const {
  const Job& job = *j.job;
  const std::vector<FreeProfile>& p = profiles_.windows;
  const FreeProfile* team = j.team->profile >= 0 ? &profiles_.teams[j.team->profile] : nullptr;
  if (team != nullptr) {
    from = team->EarliestFit(from, j.len, job.min_gpus);
    if (from == kNever) return Fit();
  }
  // The windows of each group that have a GPU free at some time >= from
  // (or min_gpus, should that be <= 0), with the most they ever have free: the others add nothing
  // to any fit from here on, so every loop below skips them (with 1,000 full node windows, most
  // of them). The same answers, far fewer profile walks.
  std::vector<std::vector<std::pair<int, int>>> live(j.groups.size());  // (slot, max free)
  for (size_t k = 0; k < j.groups.size(); k++) {
    for (int slot : groups_[j.groups[k]]) {
      const int most = p[slot].MaxFrom(from);
      if (most > 0 || most >= job.min_gpus) live[k].emplace_back(slot, most);
    }
  }
  TimeMs t_best = kNever;
  if (job.gang) {
    for (size_t k = 0; k < j.groups.size(); k++) {
      for (const auto& [slot, most] : live[k]) {
        // Never min_gpus free from `from` on: no fit in this window alone.
        if (most < job.min_gpus) continue;
        // Leapfrog the window's and the team's earliest fits until they agree.
        TimeMs t = from;
        while (t < t_best) {
          t = p[slot].EarliestFit(t, j.len, job.min_gpus);
          if (t == kNever || team == nullptr) break;
          const TimeMs t_team = team->EarliestFit(t, j.len, job.min_gpus);
          if (t_team == t) break;
          t = t_team;
        }
        t_best = std::min(t_best, t);
      }
    }
    // A gang may also span windows of a pool: earlier starts on several
    // windows are looked for below.
  }
  // Combined windows: the sum of what each window keeps free over the
  // whole minimum segment only grows when some window's free count
  // rises, so those are the only candidate starts.
  // A window with nothing free from `from` on adds 0 to every sum, and its
  // rises change no sum: between two kept candidates no counted window
  // rises, so no sum grows and no later start fits where the earlier did
  // not.
  std::vector<TimeMs> candidates;
  for (size_t k = 0; k < j.groups.size(); k++) {
    const int g = j.groups[k];
    if (group_capacity_[g] < job.min_gpus) continue;
    candidates.assign(1, from);
    for (const auto& [slot, most] : live[k]) p[slot].AppendRises(from, &candidates);
    if (team != nullptr) team->AppendRises(from, &candidates);
    // The walk below stops at t_best: later candidates need no sorting.
    candidates.erase(std::remove_if(candidates.begin(), candidates.end(),
                                    [t_best](TimeMs t) { return t >= t_best; }),
                     candidates.end());
    std::sort(candidates.begin(), candidates.end());
    candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
    for (TimeMs t : candidates) {
      if (t >= t_best) break;
      const TimeMs t_end = AddMs(t, j.len);
      if (team != nullptr && team->Min(t, t_end) < job.min_gpus) continue;
      int sum = 0;
      for (const auto& [slot, most] : live[k]) {
        sum += std::max(0, p[slot].Min(t, t_end));
        if (sum >= job.min_gpus) break;
      }
      if (sum >= job.min_gpus) {
        t_best = t;
        break;
      }
    }
  }
  return FitAt(j, t_best, profiles_);
}

void Planner::Reserve(const JobCtx& j, const Fit& fit) {
  for (const Part& part : fit.parts)
    profiles_.windows[part.slot].Add(fit.start, fit.end, -part.gpus);
  if (j.team->profile >= 0) profiles_.teams[j.team->profile].Add(fit.start, fit.end, -fit.gpus);
}

}  // namespace stint::stintd::internal
