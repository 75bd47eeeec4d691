// Preemption: a pending job ahead takes the GPUs of running segments of a
// lower priority level (or of its level and a higher service class), the
// cheapest minimal set of victims in one window (or one pool, for a gang no
// window holds), checkpoint-aware, never CRITICAL, never younger than
// min_run.
#include "stintd/core/planner.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

namespace stint::stintd::internal {

// Victims `chosen` released at their deadlines; does the job then fit in
// `slot` (gang) or its pool at the latest deadline? Leaves profiles_ as
// it found them.
bool Planner::FitsAfterPreempting(const JobCtx& j, const std::vector<int>& chosen, int slot,
                                  Fit* fit) {
  TimeMs start = now_;
  std::vector<std::pair<int, FreeProfile>> saved_windows, saved_teams;
  auto save = [](std::vector<std::pair<int, FreeProfile>>& saved, std::vector<FreeProfile>& from,
                 int i) {
    if (i < 0) return;
    const bool have =
        std::any_of(saved.begin(), saved.end(), [i](const auto& s) { return s.first == i; });
    if (!have) saved.emplace_back(i, from[i]);
  };
  for (int v : chosen) {
    start = std::max(start, victims_[v].deadline);
    for (const VictimPart& part : victims_[v].parts)
      save(saved_windows, profiles_.windows, part.slot);
    save(saved_teams, profiles_.teams, victims_[v].team);
  }
  ReleaseVictims(chosen);
  *fit = FitAt(j, start, profiles_, slot);
  for (auto& [i, profile] : saved_windows) profiles_.windows[i] = std::move(profile);
  for (auto& [i, profile] : saved_teams) profiles_.teams[i] = std::move(profile);
  return fit->start == start;
}

void Planner::ReleaseVictims(const std::vector<int>& chosen) {
  for (int v : chosen) {
    const Victim& victim = victims_[v];
    for (const VictimPart& part : victim.parts) {
      profiles_.windows[part.slot].Add(victim.deadline, part.hold_end, part.gpus);
    }
    if (victim.team >= 0)
      profiles_.teams[victim.team].Add(victim.deadline, victim.release, victim.seg->gpus());
  }
}

// A lower level, or the same level and at least service_preempt_classes
// classes above with more work left (when both jobs know theirs: a job
// near its end is not stopped for one that needs longer, the case where
// sharing by attained service is worse than FIFO). Aging orders the
// queue but never gives the right to take GPUs from a running job.
// A job the queue guard lifted preempts with its lifted class (class 0).
bool Planner::MayPreempt(const Job& job, int job_class, const Victim& victim) const {
  if (victim.job->priority != job.priority) return victim.job->priority < job.priority;
  if (c_.service_preempt_classes <= 0 || victim.starving ||
      victim.service_class < job_class + c_.service_preempt_classes)
    return false;
  const double victim_left = victim.job->remaining_seconds * victim.job->max_gpus;
  const double job_left = job.remaining_seconds * job.max_gpus;
  return victim_left <= 0 || job_left <= 0 || victim_left > job_left;
}

// Victim order: lowest level first, then the most attained service, then
// the cheapest, then the youngest segment.
bool Planner::VictimBefore(int a, int b) const {
  const Victim& x = victims_[a];
  const Victim& y = victims_[b];
  if (x.job->priority != y.job->priority) return x.job->priority < y.job->priority;
  if (x.service_class != y.service_class) return x.service_class > y.service_class;
  if (x.cost != y.cost) return x.cost < y.cost;
  if (x.seg->start_ms != y.seg->start_ms) return x.seg->start_ms > y.seg->start_ms;
  return x.seg->id < y.seg->id;
}

// Looks for the cheapest minimal set of victims, all in one window, whose
// release lets the job start before `unassisted` (its start without a
// preemption). On success notifies them and returns the job's fit.
// own_team: only the job's own team's segments (a job its quota blocks).
bool Planner::TryPreempt(const JobCtx& j, TimeMs unassisted, Fit* out, bool own_team) {
  const Job& job = *j.job;
  if (victims_.empty()) return false;
  if (job.priority == Priority::kLow && c_.service_preempt_classes <= 0) return false;
  const int job_class = j.info->service_class;
  // The victims this job may take, by window and by pool (ascending):
  // the lists a walk over every victim for every window would build.
  std::map<int, std::vector<int>> by_slot, by_group;
  for (size_t v = 0; v < victims_.size(); v++) {
    const Victim& victim = victims_[v];
    if (victim.taken || !MayPreempt(job, job_class, victim)) continue;
    if (own_team && victim.team != j.team->profile) continue;
    const int vi = static_cast<int>(v);
    for (const VictimPart& part : victim.parts) {
      std::vector<int>& in_slot = by_slot[part.slot];
      if (in_slot.empty() || in_slot.back() != vi) in_slot.push_back(vi);
      std::vector<int>& in_group = by_group[slots_[part.slot].group];
      if (in_group.empty() || in_group.back() != vi) in_group.push_back(vi);
    }
  }
  if (by_slot.empty()) return false;
  std::vector<int> best;
  double best_cost = 0;
  int best_slot = -1;
  std::vector<int> cands, chosen, trial;
  for (int g : j.groups) {
    bool spanned = false;  // the pool-wide search for a gang no window holds is done
    for (int slot : groups_[g]) {
      const Window& w = *slots_[slot].w;
      if (!w.open_at(now_) || w.end_ms - now_ < j.len) continue;
      // A gang larger than this window spans the pool: victims anywhere in it.
      const bool span = job.gang && w.gpus < job.min_gpus;
      if (span && spanned) continue;
      spanned = spanned || span;
      const std::map<int, std::vector<int>>& index = span ? by_group : by_slot;
      auto found = index.find(span ? g : slot);
      if (found == index.end()) continue;
      cands = found->second;
      std::sort(cands.begin(), cands.end(), [this](int a, int b) { return VictimBefore(a, b); });
      chosen.clear();
      Fit fit;
      bool fits = false;
      for (int v : cands) {
        chosen.push_back(v);
        if (FitsAfterPreempting(j, chosen, slot, &fit)) {
          fits = true;
          break;
        }
      }
      if (!fits) continue;
      // Reverse pass: drop every victim the others make unnecessary.
      for (size_t i = chosen.size(); i-- > 0;) {
        trial = chosen;
        trial.erase(trial.begin() + static_cast<std::ptrdiff_t>(i));
        if (!trial.empty() && FitsAfterPreempting(j, trial, slot, &fit)) chosen = trial;
      }
      FitsAfterPreempting(j, chosen, slot, &fit);
      if (fit.start >= unassisted) continue;  // it would start as early without taking anything
      double cost = 0;
      for (int v : chosen) cost += victims_[v].cost;
      if (best_slot < 0 || cost < best_cost || (cost == best_cost && chosen.size() < best.size())) {
        best = chosen;
        best_cost = cost;
        best_slot = slot;
      }
    }
  }
  if (best_slot < 0) return false;
  TimeMs start = now_;
  for (int v : best) {
    Victim& victim = victims_[v];
    victim.taken = true;
    start = std::max(start, victim.deadline);
    plan_.notices.push_back(
        NoticeDecision{victim.seg->id, victim.deadline, NoticeReason::kPreempted, job.id});
  }
  ReleaseVictims(best);
  preempting_[job.id] = start;
  *out = FitAt(j, start, profiles_, best_slot);
  return out->start == start;
}

}  // namespace stint::stintd::internal
