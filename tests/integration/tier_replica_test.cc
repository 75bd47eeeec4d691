// Tier 2: background replication to a second directory with its own
// retention; a failing replica never affects tier 1; load picks the newest
// checkpoint that verifies on any tier.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <memory>

#include "checkpoint/foreground_gate.h"
#include "checkpoint/replica.h"
#include "stint/checkpointer.h"
#include "util/checkpoint_checks.h"
#include "util/fault_env.h"
#include "util/status_matchers.h"
#include "util/step_state.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

CheckpointOptions ReplicaOptions(const TempDir& dir, Env* replica_env = nullptr) {
  CheckpointOptions o;
  o.root = dir.Sub("nvme");
  o.replica_root = dir.Sub("shared");
  o.replica_env = replica_env;
  o.chunk_size = 8192;
  o.keep_last = 3;
  o.replica_keep_last = 2;
  return o;
}

void SaveSteps(Checkpointer* ckpt, std::vector<uint64_t> steps) {
  for (uint64_t step : steps) {
    StepState s(step);
    auto h = ckpt->Save(step, s.AsState());
    ASSERT_OK(h);
    ASSERT_OK(h->durable.get());
  }
}

TEST(TierReplica, ReplicatesEveryCommitWithItsOwnRetention) {
  TempDir dir;
  auto ckpt = Checkpointer::Open(ReplicaOptions(dir));
  ASSERT_OK(ckpt);
  for (uint64_t step : {1, 2, 3, 4}) {
    StepState s(step);
    auto h = (*ckpt)->Save(step, s.AsState());
    ASSERT_OK(h);
    ASSERT_OK(h->durable.get());
    Status r = h->replicated.get();
    ASSERT_TRUE(r.ok() || r.code() == Code::kCancelled) << r.ToString();
  }
  ASSERT_OK((*ckpt)->FlushReplication());
  EXPECT_EQ(*(*ckpt)->ListCommitted(), (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(*(*ckpt)->ListReplicated(), (std::vector<uint64_t>{3, 4}));
  auto stats = (*ckpt)->stats();
  EXPECT_EQ(stats.replica_failed, 0u);
  ASSERT_TRUE(stats.last_replica.has_value());
  EXPECT_EQ(stats.last_replica->step, 4u);
  EXPECT_GT(stats.last_replica->bytes, 80000u);
  EXPECT_GE(stats.last_replica->durable_seconds, stats.last_replica->replicate_seconds);
  // The replica is a complete committed checkpoint in its own right.
  auto reader = CheckpointReader::Open(dir.Sub("shared") + "/step-00000004");
  ASSERT_OK(reader);
  EXPECT_OK((*reader)->Verify());
  std::ifstream latest(dir.Sub("shared") + "/LATEST");
  std::string name;
  latest >> name;
  EXPECT_EQ(name, "step-00000004");
}

TEST(TierReplica, CorruptTier1CopyLoadsTheSameStepFromTier2) {
  TempDir dir;
  auto ckpt = Checkpointer::Open(ReplicaOptions(dir));
  ASSERT_OK(ckpt);
  SaveSteps(ckpt->get(), {1, 2});
  ASSERT_OK((*ckpt)->FlushReplication());
  FlipByte(dir.Sub("nvme") + "/step-00000002/rank-00000.stint", 100);

  StepState out(0);
  auto loaded = (*ckpt)->Load(out.Dests());
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->step, 2u);
  EXPECT_EQ(loaded->tier, 2);
  EXPECT_TRUE(out.SameData(StepState(2)));
  ASSERT_EQ(loaded->skipped.size(), 1u);
  EXPECT_EQ(loaded->skipped[0].rfind("[tier 1] step-00000002: DATA_LOSS", 0), 0u)
      << loaded->skipped[0];
}

TEST(TierReplica, AnotherPoolResumesFromTier2Alone) {
  TempDir dir;
  {
    auto ckpt = Checkpointer::Open(ReplicaOptions(dir));
    SaveSteps(ckpt->get(), {5, 6});
  }  // the destructor finishes the replication
  CheckpointOptions o = ReplicaOptions(dir);
  o.root = dir.Sub("other-node-nvme");
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  StepState out(0);
  auto loaded = (*ckpt)->Load(out.Dests());
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->step, 6u);
  EXPECT_EQ(loaded->tier, 2);
  EXPECT_TRUE(out.SameData(StepState(6)));
}

TEST(TierReplica, EnospcOnTheReplicaNeverAffectsTier1AndIsReported) {
  TempDir dir;
  FaultEnv replica_env(Env::Default());
  auto ckpt = Checkpointer::Open(ReplicaOptions(dir, &replica_env));
  ASSERT_OK(ckpt);
  SaveSteps(ckpt->get(), {1});
  ASSERT_OK((*ckpt)->FlushReplication());

  replica_env.FailWritesAfterBytes(20000, ENOSPC);
  StepState s(2);
  auto h = (*ckpt)->Save(2, s.AsState());
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());  // tier 1 committed
  Status r = h->replicated.get();
  EXPECT_EQ(r.code(), Code::kResourceExhausted) << r.ToString();
  Status flushed = (*ckpt)->FlushReplication();
  EXPECT_EQ(flushed.code(), Code::kResourceExhausted) << flushed.ToString();
  EXPECT_OK((*ckpt)->FlushReplication());  // returned once
  EXPECT_OK((*ckpt)->Flush());             // never a tier-1 error
  auto stats = (*ckpt)->stats();
  EXPECT_EQ(stats.committed, 2u);
  EXPECT_EQ(stats.replica_failed, 1u);
  EXPECT_NE(stats.last_replica_error.find("RESOURCE_EXHAUSTED"), std::string::npos);
  // Nothing half-copied is visible on tier 2; tier 1 loads the newest.
  EXPECT_EQ(*(*ckpt)->ListReplicated(), (std::vector<uint64_t>{1}));
  StepState out(0);
  auto loaded = (*ckpt)->Load(out.Dests());
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->step, 2u);
  EXPECT_EQ(loaded->tier, 1);

  // Space comes back: the next commit replicates again.
  replica_env.Reset();
  SaveSteps(ckpt->get(), {3});
  ASSERT_OK((*ckpt)->FlushReplication());
  EXPECT_EQ(*(*ckpt)->ListReplicated(), (std::vector<uint64_t>{1, 3}));
}

TEST(TierReplica, ReplicaRootInsideRootIsRefused) {
  TempDir dir;
  CheckpointOptions o = ReplicaOptions(dir);
  o.replica_root = o.root + "/replica";
  auto ckpt = Checkpointer::Open(o);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), Code::kInvalidArgument);
}

TEST(TierReplica, UnreachableReplicaAtOpenStillCheckpointsToTier1) {
  TempDir dir;
  CheckpointOptions o = ReplicaOptions(dir);
  // Its parent is a file: no directory can be made there (a missing parent
  // would be created, like mkdir -p).
  ASSERT_TRUE(WriteWholeFile(dir.Sub("a-file"), "x"));
  o.replica_root = dir.Sub("a-file/shared");
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  StepState s(1);
  auto h = (*ckpt)->Save(1, s.AsState());
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());
  EXPECT_FALSE(h->replicated.get().ok());
  EXPECT_FALSE((*ckpt)->FlushReplication().ok());
  EXPECT_EQ(*(*ckpt)->ListCommitted(), (std::vector<uint64_t>{1}));
}

// A copy gives way to a save running in the same Checkpointer: it starts no
// piece while the save holds the gate, and goes on once it ends.
TEST(TierReplica, ACopyWaitsWhileASaveRuns) {
  TempDir dir;
  CheckpointOptions o = ReplicaOptions(dir);
  {
    CheckpointOptions tier1 = o;
    tier1.replica_root.clear();
    auto ckpt = Checkpointer::Open(tier1);
    ASSERT_OK(ckpt);
    SaveSteps(ckpt->get(), {1});
  }
  o.env = Env::Default();
  o.replica_env = Env::Default();
  ForegroundGate gate;
  RetentionGuard guard;
  auto saving = std::make_unique<ForegroundGate::Hold>(&gate);
  Replicator replicator(o, &guard, nullptr, &gate);
  std::promise<Status> done;
  auto replicated = done.get_future();
  replicator.Enqueue(1, std::chrono::steady_clock::now(), std::move(done));
  // The gate's patience (30 s) is far beyond this wait: nothing is copied.
  EXPECT_FALSE(replicator.WaitUntilIdle(std::chrono::steady_clock::now() +
                                        std::chrono::milliseconds(300)));
  EXPECT_FALSE(Env::Default()->FileExists(dir.Sub("shared") + "/step-00000001"));
  saving.reset();
  ASSERT_TRUE(replicator.WaitUntilIdle(std::chrono::steady_clock::now() + std::chrono::seconds(60)));
  EXPECT_OK(replicated.get());
  EXPECT_TRUE(Env::Default()->FileExists(dir.Sub("shared") + "/step-00000001/MANIFEST.json"));
}

}  // namespace
}  // namespace stint
