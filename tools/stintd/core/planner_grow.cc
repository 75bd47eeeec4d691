// Grow (PolicyConfig::grow_elastic): after the queue is planned, elastic
// segments below max_gpus take GPUs nothing is planned on until they end.
#include "stintd/core/planner.h"

#include <algorithm>

namespace stint::stintd::internal {

// After the queue is planned: an elastic segment below its max_gpus with
// enough work left takes GPUs no job is planned on until its release,
// in the windows it already uses (a re-form costs about restart_seconds,
// hence grow_min_seconds). On stint-agent nodes the agents start the
// added ranks (stintd keeps the grows they can launch: whole workers, no
// torchrun).
void Planner::Grow() {
  for (const auto& [id, seg] : s_.segments) {
    if (seg.state != SegmentState::kRunning || seg.shrink_deadline_ms != 0) continue;
    auto job_it = s_.jobs.find(seg.job_id);
    if (job_it == s_.jobs.end()) continue;
    const Job& job = job_it->second;
    const int room = job.max_gpus - seg.gpus();
    if (room <= 0 || job.remaining_seconds < c_.grow_min_seconds) continue;
    const TimeMs release = ReleaseMs(s_, seg);
    GrowDecision d{id, {}};
    // Never above the team's guarantee + borrowing limit, nor past what its
    // budget pays a minimum segment of at the segment's price.
    PendingInfo scratch;  // ContextFor does not read a running job's queue info
    const JobCtx j = ContextFor(job, &scratch, 0);
    const int team = j.team->profile;
    int left = std::min(room, BudgetGpus(j, seg.price_per_gpu_hour));
    if (team >= 0) left = std::min(left, profiles_.teams[team].Min(now_, release));
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
    if (d.add.empty()) continue;
    int added = 0;
    for (const Allocation& a : d.add) added += a.gpus;
    j.team->budget_left -= added * seg.price_per_gpu_hour * (j.len / 3.6e6);
    plan_.grows.push_back(std::move(d));
  }
}

}  // namespace stint::stintd::internal
