// PlanPreemption: does an emergency checkpoint fit in the time that is left?
#include <cinttypes>
#include <cstdio>

#include "stint/preemption.h"

namespace stint {
namespace {

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

std::string StepsLost(uint64_t steps) {
  if (steps == 0) return "no steps since the last durable checkpoint, nothing is lost";
  char buf[96];
  std::snprintf(buf, sizeof(buf),
                "%" PRIu64 " step%s since the last durable checkpoint will be lost", steps,
                steps == 1 ? "" : "s");
  return buf;
}

}  // namespace

PreemptionPlan PlanPreemption(const std::optional<PreemptionNotice>& notice, SteadyTime now,
                              std::chrono::milliseconds safety, const CheckpointCost& cost) {
  PreemptionPlan plan;
  if (!notice) {
    plan.reason = "no preemption notice";
    return plan;
  }
  plan.preempted = true;
  plan.remaining_seconds = std::chrono::duration<double>(notice->deadline - safety - now).count();
  const std::string left = plan.remaining_seconds > 0 ? Seconds(plan.remaining_seconds) + " left"
                                                      : "the deadline has passed";
  if (cost.bytes_per_second <= 0) {
    // Nothing measured yet (no checkpoint persisted in this run). A save cut
    // short by the kill costs nothing, since the previous checkpoint stays
    // loadable, while not trying loses every step since it for sure.
    plan.save = true;
    plan.estimated_seconds = 0;
    plan.reason = "throughput unknown: trying (" + left + ")";
    return plan;
  }
  plan.estimated_seconds =
      cost.fixed_seconds + static_cast<double>(cost.state_bytes) / cost.bytes_per_second;
  const std::string needs = "emergency checkpoint needs " + Seconds(plan.estimated_seconds) + ", ";
  if (plan.estimated_seconds <= plan.remaining_seconds) {
    plan.save = true;
    plan.reason = needs + left + ": saving";
  } else {
    plan.steps_lost = cost.steps_since_durable;
    plan.reason = needs + left + ": " + StepsLost(cost.steps_since_durable);
  }
  return plan;
}

}  // namespace stint
