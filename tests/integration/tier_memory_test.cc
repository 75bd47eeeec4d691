// Tier 0: the last committed checkpoint kept in host memory restores without
// the disk, verified like a checkpoint on disk, and never outranks a newer
// one.
#include <gtest/gtest.h>

#include "stint/checkpointer.h"
#include "util/status_matchers.h"
#include "util/step_state.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

CheckpointOptions MemoryOptions(const std::string& root, bool compress) {
  CheckpointOptions o;
  o.root = root;
  o.keep_in_memory = true;
  o.compress = compress;
  o.chunk_size = 8192;
  o.keep_last = 5;
  return o;
}

class TierMemory : public ::testing::TestWithParam<bool> {};

TEST_P(TierMemory, RestoresTheLastCommitFromMemoryWhenTheDiskLostIt) {
  TempDir dir;
  std::string root = dir.Sub("ckpt");
  auto ckpt = Checkpointer::Open(MemoryOptions(root, GetParam()));
  ASSERT_OK(ckpt);
  for (uint64_t step : {1, 2}) {
    StepState s(step);
    auto h = (*ckpt)->Save(step, s.AsState());
    ASSERT_OK(h);
    ASSERT_OK(h->durable.get());
  }
  ASSERT_OK((*ckpt)->Flush());
  EXPECT_EQ((*ckpt)->stats().in_memory_step, std::optional<uint64_t>(2));

  // With the disk intact the same step comes from memory.
  StepState out(0);
  auto loaded = (*ckpt)->Load(out.Dests());
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->step, 2u);
  EXPECT_EQ(loaded->tier, 0);
  EXPECT_EQ(loaded->dir, "memory:/step-00000002");
  EXPECT_EQ(loaded->blobs.at("step"), "2");
  EXPECT_TRUE(out.SameData(StepState(2)));

  // The node-local disk loses everything: memory still restores step 2.
  ASSERT_OK(RemoveRecursively(Env::Default(), root + "/step-00000002"));
  ASSERT_OK(RemoveRecursively(Env::Default(), root + "/step-00000001"));
  StepState again(0);
  loaded = (*ckpt)->Load(again.Dests());
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->tier, 0);
  EXPECT_TRUE(again.SameData(StepState(2)));
}

TEST_P(TierMemory, ReshardsFromMemoryLikeFromDisk) {
  TempDir dir;
  auto ckpt = Checkpointer::Open(MemoryOptions(dir.Sub("ckpt"), GetParam()));
  ASSERT_OK(ckpt);
  StepState s(4);
  auto h = (*ckpt)->Save(4, s.AsState());
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());
  ASSERT_OK((*ckpt)->Flush());
  // Rows [50, 150) of w only.
  std::vector<float> part(100 * 100);
  auto loaded =
      (*ckpt)->Load({{"w", DType::kFloat32, {200, 100}, {50, 0}, {100, 100}, part.data()}});
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->tier, 0);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), s.w.begin() + 50 * 100));
}

TEST(TierMemory, ANewerCheckpointOnDiskOutranksMemory) {
  TempDir dir;
  std::string root = dir.Sub("ckpt");
  {
    CheckpointOptions o = MemoryOptions(root, false);
    o.keep_in_memory = false;
    auto other = Checkpointer::Open(o);
    StepState s(9);
    auto h = (*other)->Save(9, s.AsState());
    ASSERT_OK(h);
    ASSERT_OK(h->durable.get());
  }
  auto ckpt = Checkpointer::Open(MemoryOptions(root, false));
  StepState s(3);
  auto h = (*ckpt)->Save(3, s.AsState());
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());
  ASSERT_OK((*ckpt)->Flush());
  StepState out(0);
  auto loaded = (*ckpt)->Load(out.Dests());
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->step, 9u);
  EXPECT_EQ(loaded->tier, 1);
  // An explicit step still finds memory first.
  loaded = (*ckpt)->Load(out.Dests(), LoadOptions{3});
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->tier, 0);
}

TEST(TierMemory, GivesWayWhenItHoldsTheOnlyRoomASaveNeeds) {
  TempDir dir;
  CheckpointOptions o = MemoryOptions(dir.Sub("ckpt"), false);
  o.staging_bytes = 1u << 20;  // room for one snapshot only
  o.busy_policy = BusyPolicy::kSkip;
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  for (uint64_t step : {1, 2, 3}) {
    StepState s(step);
    auto h = (*ckpt)->Save(step, s.AsState());
    ASSERT_OK(h);
    ASSERT_FALSE(h->skipped) << "step " << step;
    ASSERT_OK(h->durable.get());
    ASSERT_OK((*ckpt)->Flush());
  }
  EXPECT_EQ((*ckpt)->stats().in_memory_step, std::optional<uint64_t>(3));
}

INSTANTIATE_TEST_SUITE_P(Codecs, TierMemory, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "zstd" : "raw"; });

}  // namespace
}  // namespace stint
