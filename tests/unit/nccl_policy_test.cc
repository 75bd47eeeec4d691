// The NCCL backend's pure decisions, on any machine: the recovery ladder
// as a function of the library version (nccl_recovery.h), and where a
// collective's data may live and how host data is cut into staged chunks
// (nccl_staging.h).
#include <gtest/gtest.h>

#include "nccl_recovery.h"
#include "nccl_staging.h"

namespace stint {
namespace {

TEST(NcclVersion, CodeMatchesNcclsEncodingOnBothSidesOf2_9) {
  EXPECT_EQ(NcclVersionCode(2, 8, 4), 2804);
  EXPECT_EQ(NcclVersionCode(2, 9, 6), 20906);
  EXPECT_EQ(NcclVersionCode(2, 28, 9), 22809);
  EXPECT_EQ(NcclVersionCode(3, 0, 1), 30001);
  EXPECT_EQ(NcclVersionText(2804), "2.8.4");
  EXPECT_EQ(NcclVersionText(22809), "2.28.9");
  EXPECT_EQ(NcclVersionText(23007), "2.30.7");
}

// Below 2.26.2 an abort may hang, and every in-process rung needs one:
// only a process restart is left.
TEST(NcclRecovery, BelowTheAbortFixOnlyAProcessRestartIsLeft) {
  for (int v : {NcclVersionCode(2, 8, 4), NcclVersionCode(2, 18, 1), NcclVersionCode(2, 26, 1)}) {
    const NcclRecoveryPlan plan = PlanNcclRecovery(v);
    EXPECT_FALSE(plan.shrink) << plan.summary;
    EXPECT_FALSE(plan.revoke) << plan.summary;
    EXPECT_TRUE(plan.abort_may_hang) << plan.summary;
    EXPECT_FALSE(plan.reinit) << plan.summary;
    EXPECT_FALSE(plan.known_broken) << plan.summary;
    EXPECT_EQ(plan.summary.find("re-init"), std::string::npos) << plan.summary;
    EXPECT_NE(plan.summary.find("restart"), std::string::npos) << plan.summary;
  }
  const NcclRecoveryPlan fixed = PlanNcclRecovery(NcclVersionCode(2, 26, 2));
  EXPECT_FALSE(fixed.abort_may_hang);
  EXPECT_TRUE(fixed.reinit);
  EXPECT_EQ(fixed.summary, "NCCL 2.26.2: re-init, restart (ncclCommShrink needs 2.27.3)");
}

TEST(NcclRecovery, ShrinkFrom2_27_3) {
  EXPECT_FALSE(PlanNcclRecovery(NcclVersionCode(2, 27, 2)).shrink);
  const NcclRecoveryPlan plan = PlanNcclRecovery(NcclVersionCode(2, 27, 3));
  EXPECT_TRUE(plan.shrink);
  EXPECT_FALSE(plan.revoke);
  EXPECT_EQ(plan.summary, "NCCL 2.27.3: shrink, re-init, restart");
  EXPECT_TRUE(PlanNcclRecovery(NcclVersionCode(2, 28, 2)).shrink);
}

TEST(NcclRecovery, TheBrokenRangeFallsBackToReinit) {
  for (int patch = 3; patch <= 8; ++patch) {
    const NcclRecoveryPlan plan = PlanNcclRecovery(NcclVersionCode(2, 28, patch));
    EXPECT_TRUE(plan.known_broken) << plan.summary;
    EXPECT_FALSE(plan.shrink) << plan.summary;
    EXPECT_FALSE(plan.revoke) << "2.28.7 has revoke but is in the broken range: " << plan.summary;
    EXPECT_NE(plan.summary.find("segfault"), std::string::npos) << plan.summary;
  }
}

TEST(NcclRecovery, RevokeFrom2_28_7OutsideTheBrokenRange) {
  for (int v : {NcclVersionCode(2, 28, 9), NcclVersionCode(2, 30, 7), NcclVersionCode(2, 31, 2),
                NcclVersionCode(3, 0, 0)}) {
    const NcclRecoveryPlan plan = PlanNcclRecovery(v);
    EXPECT_TRUE(plan.shrink) << plan.summary;
    EXPECT_TRUE(plan.revoke) << plan.summary;
    EXPECT_FALSE(plan.known_broken) << plan.summary;
    EXPECT_FALSE(plan.abort_may_hang) << plan.summary;
  }
  EXPECT_EQ(PlanNcclRecovery(NcclVersionCode(2, 28, 9)).summary,
            "NCCL 2.28.9: shrink, revoke, re-init, restart");
}

TEST(NcclStaging, DeviceMemoryOfTheCommunicatorsDeviceAndManagedMemoryAreUsedInPlace) {
  EXPECT_EQ(RouteNcclBuffer(NcclMemoryKind::kDevice, 1, 1), NcclRoute::kDirect);
  EXPECT_EQ(RouteNcclBuffer(NcclMemoryKind::kManaged, 0, 1), NcclRoute::kDirect);
}

TEST(NcclStaging, HostMemoryPageableOrPinnedIsStaged) {
  EXPECT_EQ(RouteNcclBuffer(NcclMemoryKind::kUnregistered, -1, 0), NcclRoute::kStaged);
  EXPECT_EQ(RouteNcclBuffer(NcclMemoryKind::kHost, 0, 0), NcclRoute::kStaged);
  EXPECT_EQ(RouteNcclBuffer(NcclMemoryKind::kHost, 1, 0), NcclRoute::kStaged);
}

TEST(NcclStaging, DeviceMemoryOfAnotherDeviceIsRefused) {
  EXPECT_EQ(RouteNcclBuffer(NcclMemoryKind::kDevice, 0, 1), NcclRoute::kRefused);
}

TEST(NcclStaging, ChunksNeverSplitAnElement) {
  EXPECT_EQ(NcclStagingChunkBytes(1, 4096), 4096u);
  EXPECT_EQ(NcclStagingChunkBytes(8, 4096), 4096u);
  EXPECT_EQ(NcclStagingChunkBytes(3, 4096), 4095u);
  EXPECT_EQ(NcclStagingChunkBytes(16, 20), 16u);
  EXPECT_EQ(NcclStagingChunkBytes(16, 16), 16u);
}

TEST(NcclStaging, SmallCallsAllocateLittleLargeOnesTheCapacity) {
  EXPECT_EQ(NcclStagingAllocation(0, kNcclStagingCapacity), 256u);
  EXPECT_EQ(NcclStagingAllocation(16, kNcclStagingCapacity), 256u);
  EXPECT_EQ(NcclStagingAllocation(257, kNcclStagingCapacity), 512u);
  EXPECT_EQ(NcclStagingAllocation(size_t{1} << 30, kNcclStagingCapacity), kNcclStagingCapacity);
  // A chunk of the allocation holds at least one element of any dtype.
  EXPECT_GE(NcclStagingChunkBytes(16, NcclStagingAllocation(16, kNcclStagingCapacity)), 16u);
}

}  // namespace
}  // namespace stint
