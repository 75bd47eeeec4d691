// The Planner's scan of the active segments: which are lost (no ack by the
// deadline, every lease expired), which get a notice now (their window closes
// or was revoked), what each holds in the free profiles until it releases,
// and which of them a preemption may take (the victims, with their cost).
#include "stintd/core/planner.h"

#include <algorithm>
#include <map>
#include <utility>

namespace stint::stintd::internal {

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

// Losses, notices, holds, and the segments a preemption may take.
void Planner::ScanSegments() {
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

    Victim v{&seg,
             job,
             0,
             release,
             team,
             job != nullptr ? ServiceClass(*job, c_) : 0,
             0,
             {},
             false,
             job != nullptr && Starving(*job, now_, c_),
             live_workers[id]};
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
        job->preemptible && job->priority != Priority::kCritical &&
        now_ - seg.start_ms >= min_run && !v.parts.empty()) {
      // Checkpoint-aware cost: the work since its last durable checkpoint
      // (at most the segment's age) is redone, and it pays a checkpoint
      // now and a restart later; all of it on every GPU it holds.
      const double age_s = (now_ - seg.start_ms) / 1000.0;
      const double since_ckpt_s =
          job->checkpoint_ms > 0 ? std::max(0.0, (now_ - job->checkpoint_ms) / 1000.0) : age_s;
      v.cost = seg.gpus() *
               (std::min(since_ckpt_s, age_s) + job->restart_seconds + job->checkpoint_seconds);
      v.deadline =
          std::min(release, now_ + SecondsToMs(std::min(job->checkpoint_seconds + c_.safety_seconds,
                                                        c_.max_grace_seconds)));
      victims_.push_back(std::move(v));
    }
  }
}

NoticeReason Planner::NoticeReasonFor(const Segment& seg, TimeMs release) const {
  for (const Allocation& a : seg.allocs) {
    auto w = s_.windows.find(a.window_id);
    if (w != s_.windows.end() && w->second.closed_early && w->second.end_ms == release) {
      return NoticeReason::kRevoked;
    }
  }
  return NoticeReason::kWindowClose;
}

}  // namespace stint::stintd::internal
