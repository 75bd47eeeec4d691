// PlanPreemption (pure: no clock, no signals) and LaunchEnvFromEnvironment.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>

#include "stint/preemption.h"
#include "util/status_matchers.h"

namespace stint {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const SteadyTime kNow = SteadyTime() + std::chrono::hours(1000);

PreemptionNotice NoticeWithDeadline(SteadyTime deadline) {
  return PreemptionNotice{"signal SIGTERM", kNow, deadline};
}

TEST(PlanPreemption, NoNoticeIsNotPreempted) {
  const PreemptionPlan plan = PlanPreemption(std::nullopt, kNow, seconds(2), CheckpointCost{});
  EXPECT_FALSE(plan.preempted);
  EXPECT_FALSE(plan.save);
  EXPECT_EQ(plan.steps_lost, 0u);
}

TEST(PlanPreemption, CheckpointThatFitsIsSaved) {
  CheckpointCost cost;
  cost.state_bytes = 1000000000;  // 1 GB at 1 GB/s + 0.05 s: 1.05 s
  cost.bytes_per_second = 1e9;
  cost.steps_since_durable = 37;
  const PreemptionPlan plan =
      PlanPreemption(NoticeWithDeadline(kNow + seconds(30)), kNow, seconds(2), cost);
  EXPECT_TRUE(plan.preempted);
  EXPECT_TRUE(plan.save);
  EXPECT_DOUBLE_EQ(plan.remaining_seconds, 28.0);
  EXPECT_DOUBLE_EQ(plan.estimated_seconds, 1.05);
  EXPECT_EQ(plan.steps_lost, 0u);
  EXPECT_EQ(plan.reason, "emergency checkpoint needs 1.1 s, 28.0 s left: saving");
}

TEST(PlanPreemption, CheckpointExactlyFillingTheTimeLeftIsSaved) {
  CheckpointCost cost;
  cost.state_bytes = 2000;
  cost.bytes_per_second = 1000;
  cost.fixed_seconds = 0;
  const PreemptionPlan plan =
      PlanPreemption(NoticeWithDeadline(kNow + seconds(3)), kNow, seconds(1), cost);
  EXPECT_TRUE(plan.save);
}

TEST(PlanPreemption, CheckpointThatDoesNotFitReportsTheStepsLost) {
  CheckpointCost cost;
  cost.state_bytes = 12250000000ull;  // 12.25 s at 1 GB/s, + 0.05 s
  cost.bytes_per_second = 1e9;
  cost.steps_since_durable = 37;
  const PreemptionPlan plan =
      PlanPreemption(NoticeWithDeadline(kNow + milliseconds(6100)), kNow, seconds(2), cost);
  EXPECT_TRUE(plan.preempted);
  EXPECT_FALSE(plan.save);
  EXPECT_NEAR(plan.remaining_seconds, 4.1, 1e-9);
  EXPECT_NEAR(plan.estimated_seconds, 12.3, 1e-9);
  EXPECT_EQ(plan.steps_lost, 37u);
  EXPECT_EQ(plan.reason,
            "emergency checkpoint needs 12.3 s, 4.1 s left: 37 steps since the last durable "
            "checkpoint will be lost");
}

TEST(PlanPreemption, OneStepLostIsSingular) {
  CheckpointCost cost;
  cost.state_bytes = 100;
  cost.bytes_per_second = 1;
  cost.steps_since_durable = 1;
  const PreemptionPlan plan =
      PlanPreemption(NoticeWithDeadline(kNow + seconds(10)), kNow, seconds(0), cost);
  EXPECT_FALSE(plan.save);
  EXPECT_NE(plan.reason.find(": 1 step since the last durable checkpoint will be lost"),
            std::string::npos)
      << plan.reason;
}

TEST(PlanPreemption, NothingLostWhenTheLastCheckpointIsCurrent) {
  CheckpointCost cost;
  cost.state_bytes = 100;
  cost.bytes_per_second = 1;
  cost.steps_since_durable = 0;
  const PreemptionPlan plan =
      PlanPreemption(NoticeWithDeadline(kNow + seconds(10)), kNow, seconds(0), cost);
  EXPECT_FALSE(plan.save);
  EXPECT_EQ(plan.steps_lost, 0u);
  EXPECT_NE(plan.reason.find("nothing is lost"), std::string::npos) << plan.reason;
}

TEST(PlanPreemption, UnknownThroughputTries) {
  CheckpointCost cost;
  cost.state_bytes = 1ull << 40;
  cost.bytes_per_second = 0;
  cost.steps_since_durable = 5;
  const PreemptionPlan plan =
      PlanPreemption(NoticeWithDeadline(kNow + seconds(30)), kNow, seconds(2), cost);
  EXPECT_TRUE(plan.preempted);
  EXPECT_TRUE(plan.save);
  EXPECT_EQ(plan.estimated_seconds, 0);
  EXPECT_EQ(plan.steps_lost, 0u);
  EXPECT_EQ(plan.reason.rfind("throughput unknown: trying", 0), 0u) << plan.reason;
}

TEST(PlanPreemption, DeadlineAlreadyPassedLosesTheSteps) {
  CheckpointCost cost;
  cost.state_bytes = 1000;
  cost.bytes_per_second = 1e9;
  cost.fixed_seconds = 0.05;
  cost.steps_since_durable = 12;
  // The deadline was 1 s ago; with the 2 s margin that is 3 s too late.
  const PreemptionPlan plan =
      PlanPreemption(NoticeWithDeadline(kNow - seconds(1)), kNow, seconds(2), cost);
  EXPECT_TRUE(plan.preempted);
  EXPECT_FALSE(plan.save);
  EXPECT_DOUBLE_EQ(plan.remaining_seconds, -3.0);
  EXPECT_EQ(plan.steps_lost, 12u);
  EXPECT_NE(plan.reason.find("the deadline has passed"), std::string::npos) << plan.reason;
  EXPECT_NE(plan.reason.find("12 steps since the last durable checkpoint will be lost"),
            std::string::npos)
      << plan.reason;
}

TEST(PlanPreemption, SafetyMarginEatsIntoTheTimeLeft) {
  CheckpointCost cost;
  cost.state_bytes = 3000;
  cost.bytes_per_second = 1000;  // 3.05 s
  const auto notice = NoticeWithDeadline(kNow + seconds(5));
  EXPECT_TRUE(PlanPreemption(notice, kNow, seconds(1), cost).save);
  EXPECT_FALSE(PlanPreemption(notice, kNow, seconds(2), cost).save);
}

// Sets the launcher variables for one test and puts back what was there.
}  // namespace
}  // namespace stint
