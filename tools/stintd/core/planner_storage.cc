// Storage in a pass: a job starts only in a pool that reaches its newest
// checkpoint, and a running segment moves only to a pool that reaches where
// it writes (core/storage.h). A pool that reaches it only in an object
// store pays the download in its restart.
#include <string>
#include <utility>
#include <vector>

#include "stintd/core/planner.h"
#include "stintd/core/storage.h"

namespace stint::stintd::internal {

void Planner::FilterReachable(JobCtx* j) {
  const Job& job = *j->job;
  if (job.stored.empty()) return;
  // Migrate plans a running job's move: its emergency checkpoint goes where
  // its segment writes, and nowhere else.
  const bool moving = job.state == JobState::kRunning && job.segment_id != 0;
  std::vector<int> kept;
  StepReach last;
  for (int g : j->groups) {
    const Pool* pool = group_pool_[g];
    StepReach r = moving ? SegmentReach(s_, job, job.segment_id, pool)
                         : NewestStepReach(s_, job, pool);
    if (!r.reachable) {
      last = std::move(r);
      continue;
    }
    if (r.transfer_bytes > 0 && c_.object_store_gbps > 0)
      j->transfer_s[g] = r.transfer_bytes / (c_.object_store_gbps * 1e9);
    kept.push_back(g);
  }
  if (kept.empty() && !j->groups.empty()) {
    j->excluded = BlockReason::kStorage;
    j->excluded_detail = "no pool it may use with a window reaches its newest checkpoint (step " +
                         std::to_string(last.step) + " at " + last.where + ")";
  }
  j->groups = std::move(kept);
}

}  // namespace stint::stintd::internal
