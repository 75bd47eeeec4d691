#include "stintd/core/policy.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "stintd/core/free_profile.h"

namespace stint::stintd {
namespace {

// Pending jobs (by position) for which a priority preemption is looked for.
// A preemption search walks every window's victims, so it is kept to the
// head of the queue, where a preemption matters; plan_depth bounds the rest.
constexpr int kPreemptScanJobs = 32;

std::string Secs(TimeMs ms) { return std::to_string(std::llround(ms / 1000.0)) + " s"; }

std::string PoolPhrase(const Job& job) {
  return job.pool.empty() ? "any pool" : "pool " + job.pool;
}

double ScoreParts(const Job& job, TimeMs now, const PolicyConfig& c, int team_held,
                  const Team* team, double usage_sum, PendingInfo* info) {
  const double level = c.level_points * static_cast<int>(job.priority);
  const double hours = std::max<TimeMs>(0, now - job.eligible_ms) / 3.6e6;
  const double aging = std::max(0.0, std::min(c.aging_points_per_hour * hours, c.aging_cap_points));
  const double guarantee =
      team != nullptr && team_held < team->guaranteed_gpus ? c.guarantee_bonus_points : 0.0;
  const double share = team != nullptr && usage_sum > 0 ? team->usage_gpu_seconds / usage_sum : 0.0;
  const double fair_share = -c.fair_share_points * share;
  const int service_class = QueueGuarded(job, now, c) ? 0 : ServiceClass(job, c);
  const double service = -c.service_class_points * service_class;
  const double score = level + aging + guarantee + fair_share + service;
  if (info != nullptr) {
    info->score = score;
    info->score_level = level;
    info->score_aging = aging;
    info->score_guarantee = guarantee;
    info->score_fair_share = fair_share;
    info->score_service = service;
    info->service_class = service_class;
  }
  return score;
}

double UsageSum(const ClusterState& s) {
  double sum = 0;
  for (const auto& [name, t] : s.teams) sum += std::max(0.0, t.usage_gpu_seconds);
  return sum;
}

// The time an active segment gives its GPUs back.
TimeMs ReleaseMs(const ClusterState& s, const Segment& seg) {
  if (seg.state == SegmentState::kNotified) return seg.deadline_ms;
  TimeMs release = seg.planned_end_ms;
  for (const Allocation& a : seg.allocs) {
    auto w = s.windows.find(a.window_id);
    if (w != s.windows.end()) release = std::min(release, w->second.end_ms);
  }
  return release;
}

// One pass of the policy. Holds the per-window free profiles while the
// queue is walked in order; everything it decides goes into plan_.
class Planner {
 public:
  Planner(const ClusterState& s, TimeMs now, const PolicyConfig& c) : s_(s), now_(now), c_(c) {}

  Plan Run() {
    BuildWindows();
    ScanSegments();
    OrderPending();
    base_ = profiles_;
    Backfill();
    if (c_.grow_elastic) Grow();
    ComputeStats();
    return std::move(plan_);
  }

 private:
  struct Slot {
    const Window* w;
    int group;  // index into groups_ (the window's pool)
  };
  struct TeamState {
    const Team* team = nullptr;  // null: not registered (no guarantee, no limit)
    int held_all = 0;            // active segments, for the guarantee bonus (as JobScore sees it)
    int profile = -1;            // index into Profiles::teams; -1: unlimited
    int limit = INT_MAX;         // guarantee + borrowing limit
  };
  // Free GPUs per window and quota room per limited team, both over time.
  // The quota is a profile too, not a count at `now`: otherwise a team's
  // small jobs could start now on the room its big job is reserved to get
  // later, and push that job back on every pass.
  struct Profiles {
    std::vector<FreeProfile> windows;  // per slot
    std::vector<FreeProfile> teams;    // per TeamState::profile
  };
  struct VictimPart {
    int slot;
    int gpus;
    TimeMs hold_end;  // when the segment would have released it
  };
  struct Victim {
    const Segment* seg;
    const Job* job;
    TimeMs deadline;  // if preempted now
    TimeMs release;   // when it would have ended
    int team;         // its TeamState::profile
    int service_class;
    double cost;  // GPU-seconds lost + spent restarting
    std::vector<VictimPart> parts;
    bool taken = false;
    bool starving;  // the starvation guard shields it from same-level preemption
    int workers;    // live workers of the segment
  };
  struct Part {
    int slot;
    int gpus;
  };
  struct Fit {
    TimeMs start = kNever;  // kNever: does not fit
    TimeMs end = kNever;
    int gpus = 0;
    std::vector<Part> parts;
  };
  struct JobCtx {
    const Job* job;
    PendingInfo* info;
    TeamState* team;
    int position;
    TimeMs len;  // what must fit: the minimum segment (or the rest of the work if shorter)
    TimeMs run;  // the whole segment it wants: restart + remaining + checkpoint + safety; kNever if
                 // unknown
    std::vector<int> groups;
  };

  void BuildWindows() {
    std::map<std::string, int> group_of;
    for (const auto& [id, w] : s_.windows) {
      if (w.end_ms <= now_ || w.gpus <= 0) continue;  // closed: no capacity, nothing to plan in it
      auto g = group_of.find(w.pool);
      if (g == group_of.end()) {
        g = group_of.emplace(w.pool, static_cast<int>(groups_.size())).first;
        groups_.emplace_back();
      }
      const int slot = static_cast<int>(slots_.size());
      slots_.push_back(Slot{&w, g->second});
      groups_[g->second].push_back(slot);
      slot_of_[id] = slot;
      profiles_.windows.emplace_back(now_, w.start_ms, w.end_ms, w.gpus);
    }
    for (auto& [pool, g] : group_of) group_by_pool_[pool] = g;
    for (size_t g = 0; g < groups_.size(); g++) all_groups_.push_back(static_cast<int>(g));
    for (const std::vector<int>& group : groups_) {
      int capacity = 0;
      for (int slot : group) capacity += slots_[slot].w->gpus;
      group_capacity_.push_back(capacity);
    }
  }

  int SlotOf(int64_t window_id) const {
    auto it = slot_of_.find(window_id);
    return it == slot_of_.end() ? -1 : it->second;
  }

  TeamState& TeamOf(const std::string& name) {
    auto it = teams_.find(name);
    if (it != teams_.end()) return it->second;
    TeamState& t = teams_[name];
    auto team = s_.teams.find(name);
    if (team == s_.teams.end()) return t;
    t.team = &team->second;
    if (t.team->borrow_limit_gpus >= 0) {
      t.limit = static_cast<int>(std::min<int64_t>(
          INT_MAX, static_cast<int64_t>(t.team->guaranteed_gpus) + t.team->borrow_limit_gpus));
      t.profile = static_cast<int>(profiles_.teams.size());
      profiles_.teams.emplace_back(now_, now_, kNever, t.limit);
    }
    return t;
  }

  // Losses, notices, holds, and the segments a preemption may take.
  void ScanSegments() {
    const TimeMs lease_ttl = SecondsToMs(c_.lease_ttl_seconds);
    const TimeMs start_grace = SecondsToMs(c_.start_grace_seconds);
    const TimeMs min_run = SecondsToMs(c_.min_run_seconds);
    std::map<int64_t, int> live_workers;  // by segment
    for (const auto& [id, w] : s_.workers) {
      if (!w.released) live_workers[w.segment_id]++;
    }
    for (const auto& [id, seg] : s_.segments) {
      if (!SegmentActive(seg.state)) continue;
      auto job_it = s_.jobs.find(seg.job_id);
      const Job* job = job_it == s_.jobs.end() ? nullptr : &job_it->second;
      const TimeMs release = ReleaseMs(s_, seg);
      if (job != nullptr) TeamOf(job->team).held_all += seg.gpus();

      bool lost = false;
      if (seg.state == SegmentState::kNotified && now_ >= seg.deadline_ms) {
        plan_.lost.push_back(LostDecision{id, "no ack by the deadline"});
        lost = true;
      } else if (now_ - seg.start_ms > start_grace &&
                 (seg.last_heartbeat_ms == 0 || now_ - seg.last_heartbeat_ms > lease_ttl)) {
        plan_.lost.push_back(LostDecision{id, "all worker leases expired"});
        lost = true;
      }
      if (lost) continue;  // its GPUs are free for this very plan

      const int team = job != nullptr ? TeamOf(job->team).profile : -1;
      if (team >= 0) profiles_.teams[team].Add(now_, release, -seg.gpus());
      bool noticed = false;
      if (seg.state == SegmentState::kRunning && release != kNever) {
        const double lead_s = (job != nullptr ? job->checkpoint_seconds : 0) + c_.safety_seconds;
        if (now_ >= release - SecondsToMs(lead_s)) {
          plan_.notices.push_back(NoticeDecision{id, release, NoticeReasonFor(seg, release), 0});
          noticed = true;
        }
      }
      if (seg.state == SegmentState::kNotified && seg.preempted_for != 0) {
        TimeMs& d = preempting_[seg.preempted_for];
        d = std::max(d, seg.deadline_ms);
      }
      const bool shrinking = seg.shrink_deadline_ms != 0;
      if (shrinking && seg.shrink_for != 0) {
        TimeMs& d = preempting_[seg.shrink_for];
        d = std::max(d, seg.shrink_deadline_ms);
      }

      Victim v{&seg, job, 0, release, team, job != nullptr ? ServiceClass(*job, c_) : 0,
               0, {}, false, job != nullptr && Starving(*job, now_, c_), live_workers[id]};
      for (const Allocation& a : seg.allocs) {
        const int slot = SlotOf(a.window_id);
        if (slot < 0) continue;
        const TimeMs hold_end = std::min(release, slots_[slot].w->end_ms);
        // A shrinking segment holds what it gives up only to the shrink's deadline.
        int leaving = 0;
        for (const Allocation& r : seg.shrink_release)
          leaving += r.window_id == a.window_id ? std::min(r.gpus, a.gpus) : 0;
        profiles_.windows[slot].Add(now_, hold_end, -(a.gpus - leaving));
        if (leaving > 0)
          profiles_.windows[slot].Add(now_, std::min(hold_end, seg.shrink_deadline_ms), -leaving);
        allocated_now_ += slots_[slot].w->open_at(now_) ? a.gpus : 0;
        v.parts.push_back(VictimPart{slot, a.gpus, hold_end});
      }
      if (seg.state == SegmentState::kRunning && !noticed && !shrinking && job != nullptr &&
          job->preemptible &&
          job->priority != Priority::kCritical && now_ - seg.start_ms >= min_run &&
          !v.parts.empty()) {
        // Checkpoint-aware cost: the work since its last durable checkpoint
        // (at most the segment's age) is redone, and it pays a checkpoint
        // now and a restart later; all of it on every GPU it holds.
        const double age_s = (now_ - seg.start_ms) / 1000.0;
        const double since_ckpt_s =
            job->checkpoint_ms > 0 ? std::max(0.0, (now_ - job->checkpoint_ms) / 1000.0) : age_s;
        v.cost = seg.gpus() *
                 (std::min(since_ckpt_s, age_s) + job->restart_seconds + job->checkpoint_seconds);
        v.deadline = std::min(
            release, now_ + SecondsToMs(std::min(job->checkpoint_seconds + c_.safety_seconds,
                                                 c_.max_grace_seconds)));
        victims_.push_back(std::move(v));
      }
    }
  }

  NoticeReason NoticeReasonFor(const Segment& seg, TimeMs release) const {
    for (const Allocation& a : seg.allocs) {
      auto w = s_.windows.find(a.window_id);
      if (w != s_.windows.end() && w->second.closed_early && w->second.end_ms == release) {
        return NoticeReason::kRevoked;
      }
    }
    return NoticeReason::kWindowClose;
  }

  void OrderPending() {
    const double usage_sum = UsageSum(s_);
    // Scores into the infos first, then sort compact keys: with 10,000
    // pending jobs this is most of a plan's time.
    struct Key {
      double score;
      double left;  // GPU-seconds of work left; unknown: infinity
      TimeMs submit_ms;
      int64_t id;
      size_t index;
    };
    std::vector<PendingInfo> infos;
    std::vector<const Job*> jobs;
    std::vector<Key> keys;
    infos.reserve(s_.jobs.size());
    jobs.reserve(s_.jobs.size());
    keys.reserve(s_.jobs.size());
    for (const auto& [id, job] : s_.jobs) {
      if (job.state != JobState::kPending) continue;
      const TeamState& t = TeamOf(job.team);
      PendingInfo info;
      info.job_id = id;
      ScoreParts(job, now_, c_, t.held_all, t.team, usage_sum, &info);
      const double left = job.remaining_seconds > 0 ? job.remaining_seconds * job.max_gpus
                                                    : std::numeric_limits<double>::infinity();
      keys.push_back(Key{info.score, left, job.submit_ms, id, infos.size()});
      infos.push_back(std::move(info));
      jobs.push_back(&job);
    }
    std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
      if (a.score != b.score) return a.score > b.score;
      // Equal scores (a burst submitted at once): the least work left first
      // (shortest-first minimises their mean JCT), unknown last.
      if (a.left != b.left) return a.left < b.left;
      if (a.submit_ms != b.submit_ms) return a.submit_ms < b.submit_ms;
      return a.id < b.id;
    });
    plan_.pending.reserve(keys.size());
    order_.reserve(keys.size());
    for (const Key& k : keys) {
      plan_.pending.push_back(std::move(infos[k.index]));
      plan_.pending.back().position = static_cast<int>(plan_.pending.size());
      order_.push_back(jobs[k.index]);
    }
  }

  JobCtx MakeCtx(size_t index) {
    const Job& job = *order_[index];
    JobCtx j{&job, &plan_.pending[index], &TeamOf(job.team), static_cast<int>(index) + 1, 0, kNever,
             {}};
    if (job.remaining_seconds > 0) {
      j.run = SecondsToMs(job.restart_seconds + job.remaining_seconds + job.checkpoint_seconds +
                          c_.safety_seconds);
    }
    // A job about to finish need not fit a whole checkpoint interval: it
    // only has to fit the rest of its work.
    j.len = std::max<TimeMs>(1, std::min(MinSegmentMs(job, c_), j.run));
    if (job.pool.empty()) {
      j.groups = all_groups_;
    } else {
      auto g = group_by_pool_.find(job.pool);
      if (g != group_by_pool_.end()) j.groups.push_back(g->second);
    }
    return j;
  }

  // ---- Fitting ----

  // The best allocation starting exactly at t on profiles `p`, or none:
  // the most GPUs after the span slowdown (one window beats several with as
  // many GPUs), then the longest segment, then (one window) the tightest.
  // only_slot >= 0 restricts a single-window gang to that window, and a
  // spanning allocation to that window's pool.
  Fit FitAt(const JobCtx& j, TimeMs t, const Profiles& profiles, int only_slot = -1) const {
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
    int best_free = 0;
    auto take = [&](Fit fit, int free) {
      const double e = SpanEffective(job, fit.gpus, fit.parts.size());
      const double b = best.start == kNever ? -1 : SpanEffective(job, best.gpus, best.parts.size());
      if (e > b || (e == b && (fit.end > best.end || (fit.end == best.end && free < best_free)))) {
        best = std::move(fit);
        best_free = free;
      }
    };
    if (job.gang) {
      auto consider = [&](int slot) {
        const int free = p[slot].Min(t, t_end);
        if (free < job.min_gpus) return;
        const int g = std::min(want, free);
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
      const int g_total = std::min(want, sum);
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
  double SpanEffective(const Job& job, int gpus, size_t windows) const {
    if (!job.gang || windows < 2) return gpus;
    return gpus / (1.0 + c_.gang_span_slowdown * static_cast<double>(windows - 1));
  }

  // The whole segment a job wants on `windows` windows: its work runs
  // slower by the span slowdown.
  TimeMs SpanRunMs(const JobCtx& j, size_t windows) const {
    if (j.run == kNever || !j.job->gang || windows < 2) return j.run;
    const double factor = 1.0 + c_.gang_span_slowdown * static_cast<double>(windows - 1);
    return SecondsToMs(j.job->restart_seconds + j.job->remaining_seconds * factor +
                       j.job->checkpoint_seconds + c_.safety_seconds);
  }

  // The earliest fit at or after `from` on the current profiles.
  Fit EarliestFit(const JobCtx& j, TimeMs from) const {
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

  void Reserve(const JobCtx& j, const Fit& fit) {
    for (const Part& part : fit.parts)
      profiles_.windows[part.slot].Add(fit.start, fit.end, -part.gpus);
    if (j.team->profile >= 0) profiles_.teams[j.team->profile].Add(fit.start, fit.end, -fit.gpus);
  }

  // ---- Preemption ----

  // Victims `chosen` released at their deadlines; does the job then fit in
  // `slot` (gang) or its pool at the latest deadline? Leaves profiles_ as
  // it found them.
  bool FitsAfterPreempting(const JobCtx& j, const std::vector<int>& chosen, int slot, Fit* fit) {
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

  void ReleaseVictims(const std::vector<int>& chosen) {
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
  bool MayPreempt(const Job& job, int job_class, const Victim& victim) const {
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
  bool VictimBefore(int a, int b) const {
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
  bool TryPreempt(const JobCtx& j, TimeMs unassisted, Fit* out, bool own_team = false) {
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
        if (best_slot < 0 || cost < best_cost ||
            (cost == best_cost && chosen.size() < best.size())) {
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

  // ---- Shrink and grow ----

  // What victim `v` can give up and keep >= its job's min_gpus: GPUs from
  // its last allocation backwards (the highest ranks leave), at most
  // `wanted`; a node window's part only whole (its ranks leave the node).
  std::vector<VictimPart> Shrinkable(const Victim& v, int wanted) const {
    std::vector<VictimPart> out;
    int spare = v.seg->gpus() - v.job->min_gpus;
    for (size_t i = v.parts.size(); i-- > 0 && spare > 0 && wanted > 0;) {
      const VictimPart& part = v.parts[i];
      const bool node = !slots_[part.slot].w->node.empty();
      if (node && part.gpus > spare) continue;
      const int n = node ? part.gpus : std::min({part.gpus, spare, wanted});
      out.push_back(VictimPart{part.slot, n, part.hold_end});
      spare -= n;
      wanted -= n;
    }
    return out;
  }

  // Shrink before preempt: elastic segments the job may preempt, running
  // above their min_gpus, give up GPUs (in preemption order, each as few as
  // the job still needs) until the job fits at the latest shrink deadline,
  // if that is before `unassisted`. On success records the shrinks, counts
  // the GPUs free from their deadlines on and returns the job's fit.
  bool TryShrink(const JobCtx& j, TimeMs unassisted, Fit* out) {
    const Job& job = *j.job;
    if (!c_.shrink_before_preempt || victims_.empty()) return false;
    const int job_class = j.info->service_class;
    std::vector<int> cands;
    for (size_t v = 0; v < victims_.size(); v++) {
      const Victim& victim = victims_[v];
      if (!victim.taken && victim.seg->gpus() > victim.job->min_gpus &&
          victim.workers >= c_.shrink_min_workers && MayPreempt(job, job_class, victim))
        cands.push_back(static_cast<int>(v));
    }
    if (cands.empty()) return false;
    std::sort(cands.begin(), cands.end(), [this](int a, int b) { return VictimBefore(a, b); });
    const Profiles saved = profiles_;
    std::vector<std::pair<int, std::vector<VictimPart>>> shrinks;
    TimeMs start = now_;
    for (int v : cands) {
      const Victim& victim = victims_[v];
      // GPUs still missing at the shrink's deadline in the job's best pool.
      const TimeMs at = std::max(start, victim.deadline);
      int have = 0;
      for (int g : j.groups) {
        int sum = 0;
        for (int slot : groups_[g]) sum += std::max(0, profiles_.windows[slot].Min(at, AddMs(at, j.len)));
        have = std::max(have, sum);
      }
      std::vector<VictimPart> parts = Shrinkable(victim, std::max(1, job.min_gpus - have));
      if (parts.empty()) continue;
      for (const VictimPart& part : parts)
        profiles_.windows[part.slot].Add(victim.deadline, part.hold_end, part.gpus);
      start = at;
      shrinks.emplace_back(v, std::move(parts));
      Fit fit = FitAt(j, start, profiles_);
      if (fit.start != start) continue;
      if (start >= unassisted) break;
      for (auto& [sv, released] : shrinks) {
        Victim& shrunk = victims_[sv];
        shrunk.taken = true;
        ShrinkDecision d{shrunk.seg->id, {}, shrunk.deadline, job.id};
        for (const VictimPart& part : released)
          d.release.push_back(Allocation{slots_[part.slot].w->id, part.gpus});
        plan_.shrinks.push_back(std::move(d));
      }
      preempting_[job.id] = start;
      *out = std::move(fit);
      return true;
    }
    profiles_ = saved;
    return false;
  }

  // After the queue is planned: an elastic segment below its max_gpus with
  // enough work left takes GPUs no job is planned on until its release,
  // in the windows it already uses (a re-form costs about restart_seconds,
  // hence grow_min_seconds). On stint-agent nodes the agents start the
  // added ranks (stintd keeps the grows they can launch: whole workers, no
  // torchrun).
  void Grow() {
    for (const auto& [id, seg] : s_.segments) {
      if (seg.state != SegmentState::kRunning || seg.shrink_deadline_ms != 0) continue;
      auto job_it = s_.jobs.find(seg.job_id);
      if (job_it == s_.jobs.end()) continue;
      const Job& job = job_it->second;
      const int room = job.max_gpus - seg.gpus();
      if (room <= 0 || job.remaining_seconds < c_.grow_min_seconds) continue;
      const TimeMs release = ReleaseMs(s_, seg);
      GrowDecision d{id, {}};
      // Never above the team's guarantee + borrowing limit.
      const int team = TeamOf(job.team).profile;
      int left = team < 0 ? room : std::min(room, profiles_.teams[team].Min(now_, release));
      for (const Allocation& a : seg.allocs) {
        const int slot = SlotOf(a.window_id);
        if (slot < 0 || left == 0) continue;
        const int n = std::min(left, profiles_.windows[slot].Min(now_, release));
        if (n <= 0) continue;
        profiles_.windows[slot].Add(now_, release, -n);
        if (team >= 0) profiles_.teams[team].Add(now_, release, -n);
        d.add.push_back(Allocation{a.window_id, n});
        left -= n;
      }
      // On stint-agent nodes a spanning job also grows onto other node
      // windows of its pool (back onto a node a shrink gave up).
      const int first = seg.allocs.empty() ? -1 : SlotOf(seg.allocs.front().window_id);
      const bool spans = !job.gang && !seg.placement.empty() && first >= 0;
      for (size_t k = 0; spans && k < groups_[slots_[first].group].size(); k++) {
        const int slot = groups_[slots_[first].group][k];
        const int64_t wid = slots_[slot].w->id;
        if (left == 0 || slots_[slot].w->node.empty() ||
            std::any_of(seg.allocs.begin(), seg.allocs.end(),
                        [&](const Allocation& a) { return a.window_id == wid; }))
          continue;
        const int n = std::min(left, profiles_.windows[slot].Min(now_, release));
        if (n <= 0) continue;
        profiles_.windows[slot].Add(now_, release, -n);
        d.add.push_back(Allocation{wid, n});
        left -= n;
      }
      if (!d.add.empty()) plan_.grows.push_back(std::move(d));
    }
  }

  // ---- The walk over the queue ----

  void Backfill() {
    const size_t n = order_.size();
    const size_t depth = static_cast<size_t>(std::max(0, c_.plan_depth));
    // Jobs whose victims are already checkpointing go first: the GPUs were
    // taken for them, and letting a job ahead backfill into the hole would
    // make the preemption a loss for everyone.
    std::vector<size_t> walk;
    for (size_t i = 0; i < n; i++) {
      if (preempting_.count(order_[i]->id)) walk.push_back(i);
    }
    for (size_t i = 0; i < std::min(n, depth); i++) {
      if (!preempting_.count(order_[i]->id)) walk.push_back(i);
    }
    std::vector<bool> planned(n, false);
    for (size_t i : walk) {
      planned[i] = true;
      PlanJob(i);
    }
    const std::string beyond =
        "beyond plan depth " + std::to_string(depth) + ": not planned this pass";
    for (size_t i = 0; i < n; i++) {
      if (planned[i]) continue;
      plan_.pending[i].reason = BlockReason::kDepth;
      plan_.pending[i].detail = beyond;
      plan_.pending[i].planned_start_ms = kNever;
    }
  }

  void PlanJob(size_t index) {
    JobCtx j = MakeCtx(index);
    const Job& job = *j.job;
    PendingInfo& info = *j.info;
    Fit fit = EarliestFit(j, now_);
    const int room_now = j.team->profile >= 0 ? profiles_.teams[j.team->profile].At(now_) : INT_MAX;
    if (room_now < job.min_gpus && !preempting_.count(job.id)) {
      // Blocked by its quota now. It may take its team's own GPUs back from
      // the team's running jobs it may preempt (a lower level or service
      // class), so that a team's short jobs do not queue behind its long
      // ones; never another team's: that would take the team above its cap.
      Fit assisted;
      if (!preempted_ && j.position <= kPreemptScanJobs &&
          TryPreempt(j, fit.start, &assisted, /*own_team=*/true)) {
        preempted_ = true;
        if (assisted.start != kNever) Reserve(j, assisted);
        info.planned_start_ms = assisted.start;
        info.planned_gpus = assisted.start == kNever ? 0 : assisted.gpus;
        Classify(j, /*preempting=*/true, assisted);
        return;
      }
      // Otherwise it keeps its place for when the team's own segments end.
      if (fit.start != kNever) Reserve(j, fit);
      const Team& t = *j.team->team;
      info.reason = BlockReason::kQuota;
      info.detail = "team " + job.team + " is at " + std::to_string(j.team->limit - room_now) +
                    " of its " + std::to_string(j.team->limit) + " GPUs (guarantee " +
                    std::to_string(t.guaranteed_gpus) + " + borrow " +
                    std::to_string(t.borrow_limit_gpus) + "); needs " +
                    std::to_string(job.min_gpus) + "; " + StartPhrase(fit);
      info.planned_start_ms = fit.start;
      info.planned_gpus = fit.start == kNever ? 0 : fit.gpus;
      return;
    }
    if (fit.start == now_) {
      Reserve(j, fit);
      StartDecision d{job.id, {}, fit.end};
      for (const Part& part : fit.parts)
        d.allocs.push_back(Allocation{slots_[part.slot].w->id, part.gpus});
      std::sort(d.allocs.begin(), d.allocs.end(),
                [](const Allocation& a, const Allocation& b) { return a.window_id < b.window_id; });
      plan_.starts.push_back(std::move(d));
      info.reason = BlockReason::kNone;
      info.planned_start_ms = now_;
      info.planned_gpus = fit.gpus;
      return;
    }
    bool preempting = preempting_.count(job.id) > 0;
    if (!preempting && !preempted_ && j.position <= kPreemptScanJobs) {
      Fit assisted;
      if (TryShrink(j, fit.start, &assisted) || TryPreempt(j, fit.start, &assisted)) {
        preempted_ = true;
        preempting = true;
        fit = std::move(assisted);
      }
    }
    if (fit.start != kNever) Reserve(j, fit);
    info.planned_start_ms = fit.start;
    info.planned_gpus = fit.start == kNever ? 0 : fit.gpus;
    Classify(j, preempting, fit);
  }

  std::string StartPhrase(const Fit& fit) const {
    return fit.start == kNever ? "no planned start within the plan"
                               : "planned start in " + Secs(fit.start - now_);
  }

  // FitAt(j, now_, base_).start == now_, without building the fit: the
  // team has room for min_gpus and some group of the job keeps min_gpus free
  // over the minimum segment (a window that alone holds a gang is such a
  // group too). base_ does not change during Backfill, so each group's sum
  // is taken once per segment length.
  bool FitsNowOnBase(const JobCtx& j) {
    const Job& job = *j.job;
    if (job.min_gpus <= 0) return FitAt(j, now_, base_).start == now_;
    const TimeMs t_end = AddMs(now_, j.len);
    int want = job.max_gpus;
    if (j.team->profile >= 0) {
      const int room = base_.teams[j.team->profile].Min(now_, t_end);
      if (room < job.min_gpus) return false;
      want = std::min(want, room);
    }
    if (want < job.min_gpus) return false;
    for (int g : j.groups) {
      auto [it, fresh] = base_group_free_.emplace(std::make_pair(g, j.len), 0);
      if (fresh) {
        for (int slot : groups_[g]) it->second += std::max(0, base_.windows[slot].Min(now_, t_end));
      }
      if (it->second >= job.min_gpus) return true;
    }
    return false;
  }

  // Kept per (group, length): every window walk is the same for jobs alike.
  bool FitsOnEmptyWindows(const JobCtx& j) {
    const Job& job = *j.job;
    for (int g : j.groups) {
      auto [it, fresh] = empty_group_gpus_.emplace(std::make_pair(g, j.len), 0);
      if (fresh) {
        for (int slot : groups_[g]) {
          const Window& w = *slots_[slot].w;
          if (!w.open_at(now_) || w.end_ms - now_ < j.len) continue;
          it->second += w.gpus;
        }
      }
      if (it->second >= job.min_gpus) return true;  // a gang too may span the pool's windows
    }
    return false;
  }

  void Classify(const JobCtx& j, bool preempting, const Fit& fit) {
    const Job& job = *j.job;
    PendingInfo& info = *j.info;
    if (preempting) {
      info.reason = BlockReason::kPreempting;
      info.detail = "segments of a lower priority or service class were notified to make room; " +
                    StartPhrase(fit);
      return;
    }
    if (FitsNowOnBase(j)) {
      info.reason = BlockReason::kPriority;
      info.detail = "fits now, but the GPUs are reserved for jobs ahead; " + StartPhrase(fit);
      return;
    }
    if (FitsOnEmptyWindows(j)) {
      info.reason = BlockReason::kPriority;
      info.detail = "the " + std::to_string(job.min_gpus) +
                    " GPUs it needs are held by running segments; " + StartPhrase(fit);
      return;
    }
    // What is free now in open windows that last a minimum segment.
    int free_sum = 0, pool_free_max = 0, open_windows = 0, capacity_sum = 0;
    int longest_slot = -1;  // the open window that closes last
    for (int g : j.groups) {
      int pool_free = 0;
      for (int slot : groups_[g]) {
        const Window& w = *slots_[slot].w;
        if (!w.open_at(now_)) continue;
        open_windows++;
        if (longest_slot < 0 || w.end_ms > slots_[longest_slot].w->end_ms) longest_slot = slot;
        if (w.end_ms - now_ < j.len) continue;
        capacity_sum += w.gpus;
        pool_free += std::max(0, base_.windows[slot].At(now_));
      }
      free_sum += pool_free;
      pool_free_max = std::max(pool_free_max, pool_free);
    }
    // A gang spans the windows of one pool, never several pools: with enough
    // GPUs only across pools it is blocked by the gang rule.
    if (job.gang && (free_sum >= job.min_gpus || capacity_sum >= job.min_gpus)) {
      info.reason = BlockReason::kGang;
      info.detail = "gang of " + std::to_string(job.min_gpus) +
                    " GPUs: " + std::to_string(free_sum) + " free in total, at most " +
                    std::to_string(pool_free_max) + " in one pool; " + StartPhrase(fit);
      return;
    }
    info.reason = BlockReason::kWindow;
    std::string detail;
    if (open_windows == 0) {
      detail = "no open window in " + PoolPhrase(job);
      if (fit.start != kNever && !fit.parts.empty()) {
        detail += "; window " + std::to_string(slots_[fit.parts[0].slot].w->id) + " opens in " +
                  Secs(slots_[fit.parts[0].slot].w->start_ms - now_);
      }
    } else if (longest_slot >= 0 && slots_[longest_slot].w->end_ms - now_ < j.len) {
      const Window& w = *slots_[longest_slot].w;
      detail = "window " + std::to_string(w.id) + " closes in " + Secs(w.end_ms - now_) +
               "; needs " + Secs(j.len);
    } else {
      detail = "needs " + std::to_string(job.min_gpus) + " GPUs; the open windows in " +
               PoolPhrase(job) + " have fewer in total";
    }
    if (fit.start != kNever) detail += "; " + StartPhrase(fit);
    info.detail = std::move(detail);
  }

  // ---- Stats ----

  void ComputeStats() {
    PlanStats& st = plan_.stats;
    for (const Slot& slot : slots_) {
      if (slot.w->open_at(now_)) st.open_window_gpus += slot.w->gpus;
    }
    st.allocated_gpus = allocated_now_;
    st.free_gpus = std::max(0, st.open_window_gpus - st.allocated_gpus);
    for (const auto& [id, job] : s_.jobs) {
      if (job.state == JobState::kPending) st.pending_jobs++;
      if (job.state == JobState::kRunning) st.running_jobs++;
    }
    if (order_.empty()) return;
    // Free GPUs the head of the queue could not use even if it were alone.
    const JobCtx head = MakeCtx(0);
    std::vector<bool> usable(slots_.size(), false);
    const TimeMs t_end = AddMs(now_, head.len);
    for (int g : head.groups) {
      int sum = 0;
      for (int slot : groups_[g]) sum += std::max(0, base_.windows[slot].Min(now_, t_end));
      if (sum >= head.job->min_gpus) {
        for (int slot : groups_[g]) usable[slot] = base_.windows[slot].Min(now_, t_end) > 0;
      }
    }
    for (size_t slot = 0; slot < slots_.size(); slot++) {
      if (slots_[slot].w->open_at(now_) && !usable[slot]) {
        st.fragmented_gpus += std::max(0, base_.windows[slot].At(now_));
      }
    }
  }

  const ClusterState& s_;
  const TimeMs now_;
  const PolicyConfig& c_;
  Plan plan_;

  std::vector<Slot> slots_;               // windows not yet closed, by id
  std::vector<std::vector<int>> groups_;  // slots by pool
  std::vector<int> all_groups_;
  std::map<std::string, int> group_by_pool_;
  std::map<int64_t, int> slot_of_;  // window id -> slot
  Profiles profiles_;               // after the active segments and the reservations so far
  Profiles base_;                   // after the active segments only
  std::map<std::pair<int, TimeMs>, int> base_group_free_;  // (group, length) -> free GPUs on base_
  std::map<std::pair<int, TimeMs>, int> empty_group_gpus_;  // (group, length) -> open window GPUs
  std::vector<int> group_capacity_;                         // GPUs of each group's windows
  int allocated_now_ = 0;

  std::map<std::string, TeamState> teams_;
  std::vector<Victim> victims_;
  std::map<int64_t, TimeMs> preempting_;  // job -> latest deadline of its victims
  bool preempted_ = false;                // one new preemption per pass
  std::vector<const Job*> order_;         // pending jobs by position
};

}  // namespace

const char* BlockReasonName(BlockReason r) {
  switch (r) {
    case BlockReason::kNone:
      return "none";
    case BlockReason::kQuota:
      return "quota";
    case BlockReason::kWindow:
      return "window";
    case BlockReason::kGang:
      return "gang";
    case BlockReason::kPriority:
      return "priority";
    case BlockReason::kPreempting:
      return "preempting";
    case BlockReason::kDepth:
      return "depth";
  }
  return "unknown";
}

bool Starving(const Job& job, TimeMs now, const PolicyConfig& config) {
  if (!config.service_starvation_guard) return false;
  // Run time: attained GPU-seconds at max_gpus; wait: the rest since submit.
  const double run = job.service_gpu_seconds / std::max(1, job.max_gpus);
  if (run <= 0) return false;
  // With the work left known, its slowdown is bounded against its whole
  // work: projected JCT (time so far + left) > (1 + factor) x (run + left).
  // A job with much left may wait longer than one near its end before it is
  // shielded. Without an estimate (left 0) this is wait > factor x run.
  const double left = std::max(0.0, job.remaining_seconds);
  const double elapsed = std::max<TimeMs>(0, now - job.submit_ms) / 1000.0;
  return elapsed + left > (1 + config.service_starvation_factor) * (run + left);
}

bool QueueGuarded(const Job& job, TimeMs now, const PolicyConfig& config) {
  if (!config.service_class_by_remaining || config.service_queue_guard_factor <= 0 ||
      job.service_gpu_seconds > 0 || job.remaining_seconds <= 0)
    return false;
  const double waited = std::max<TimeMs>(0, now - job.submit_ms) / 1000.0;
  return waited > config.service_queue_guard_factor * job.remaining_seconds;
}

int ServiceClass(const Job& job, const PolicyConfig& config) {
  auto class_of = [&](double gpu_seconds) {
    int k = 0;
    double threshold = config.service_class_gpu_hours * 3600.0;
    while (k + 1 < config.service_classes && threshold > 0 && gpu_seconds >= threshold) {
      k++;
      threshold *= std::max(1.0, config.service_class_factor);
    }
    return k;
  };
  const int attained = class_of(job.service_gpu_seconds);
  // The work left where the job reports it (service_class_by_remaining),
  // no more than service_class_remaining_max_drop below the service attained.
  if (!config.service_class_by_remaining || job.remaining_seconds <= 0) return attained;
  return std::max(class_of(job.remaining_seconds * job.max_gpus),
                  attained - std::max(0, config.service_class_remaining_max_drop));
}

TimeMs MinSegmentMs(const Job& job, const PolicyConfig& config) {
  return SecondsToMs(job.restart_seconds + job.checkpoint_interval_seconds +
                     job.checkpoint_seconds + config.safety_seconds);
}

double JobScore(const ClusterState& state, const Job& job, TimeMs now, const PolicyConfig& config,
                PendingInfo* info) {
  int held = 0;
  for (const auto& [id, seg] : state.segments) {
    if (!SegmentActive(seg.state)) continue;
    auto j = state.jobs.find(seg.job_id);
    if (j != state.jobs.end() && j->second.team == job.team) held += seg.gpus();
  }
  auto team = state.teams.find(job.team);
  return ScoreParts(job, now, config, held, team == state.teams.end() ? nullptr : &team->second,
                    UsageSum(state), info);
}

Plan MakePlan(const ClusterState& state, TimeMs now, const PolicyConfig& config) {
  return Planner(state, now, config).Run();
}

}  // namespace stint::stintd
