// The policy's public entry points (policy.h): MakePlan runs one Planner
// pass (planner.h, one file per step).
#include "stintd/core/policy.h"

#include "stintd/core/planner.h"

namespace stint::stintd {

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
    case BlockReason::kBudget:
      return "budget";
    case BlockReason::kPrice:
      return "price";
    case BlockReason::kStorage:
      return "storage";
    case BlockReason::kDepth:
      return "depth";
  }
  return "unknown";
}

TimeMs MinSegmentMs(const Job& job, const PolicyConfig& config) {
  return SecondsToMs(job.restart_seconds + job.checkpoint_interval_seconds +
                     job.checkpoint_seconds + config.safety_seconds);
}

Plan MakePlan(const ClusterState& state, TimeMs now, const PolicyConfig& config) {
  return internal::Planner(state, now, config).Run();
}

}  // namespace stint::stintd
