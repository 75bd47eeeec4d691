// Fault injection through the Env seam: a crash at every op of a save (with
// and without a torn write, with and without losing unsynced data), ENOSPC,
// EIO and fsync failures. After each: the previous checkpoint loads and
// verifies, nothing half-written is loaded, and saving works again.
#include <gtest/gtest.h>

#include <cerrno>

#include "stint/checkpoint_reader.h"
#include "stint/checkpointer.h"
#include "util/fault_env.h"
#include "util/checkpoint_checks.h"
#include "util/status_matchers.h"
#include "util/step_state.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

CheckpointOptions FaultOptions(const std::string& root, Env* env, const char* engine,
                               bool compress) {
  CheckpointOptions o;
  o.root = root;
  o.env = env;
  o.io_engine = engine;
  o.compress = compress;
  o.chunk_size = 8192;
  o.io_size = 16384;  // many write ops, so crashes land inside the data file too
  o.keep_last = 2;
  return o;
}

class CrashTest : public ::testing::TestWithParam<std::tuple<const char*, bool, bool, bool>> {};

// Crash at op k of saving step 2, for every k until the save completes.
TEST_P(CrashTest, CrashAtEveryOpOfASave) {
  const auto [engine, compress, torn, power_cut] = GetParam();
  int crashes = 0;
  for (uint64_t k = 1;; ++k) {
    TempDir dir;
    std::string root = dir.Sub("ckpt");
    FaultEnv env(Env::Default());
    bool completed = false, reported = false;
    {
      auto ckpt = Checkpointer::Open(FaultOptions(root, &env, engine, compress));
      ASSERT_OK(ckpt);
      StepState s1(1);
      auto h1 = (*ckpt)->Save(1, s1.AsState());
      ASSERT_OK(h1);
      ASSERT_OK(h1->durable.get());
      // What follows a commit (retention, SAVE_TIMES) is done before op k is counted.
      ASSERT_OK((*ckpt)->Flush());
      env.CrashAtOp(env.ops() + k, torn);
      StepState s2(2);
      auto h2 = (*ckpt)->Save(2, s2.AsState());
      ASSERT_OK(h2);
      Status d = h2->durable.get();
      (*ckpt)->Flush().IgnoreError();  // a crash after the commit fails it: only waited for
      reported = d.ok();
      completed = !env.crashed();
      if (completed) {
        ASSERT_OK(d);
      } else if (!reported) {
        EXPECT_NE(d.ToString().find("simulated crash"), std::string::npos) << d.ToString();
      }
    }
    if (power_cut) {
      ASSERT_OK(env.DropUnsyncedData());
    }
    // A save reported durable loads whatever crashed after its commit (the
    // retention or SAVE_TIMES that follow it); one that was not may have
    // reached its commit point before the crash. Nothing else may load.
    ExpectNewestLoadsOneOf(root, reported ? std::vector<uint64_t>{2} : std::vector<uint64_t>{1, 2},
                           engine);
    if (HasFatalFailure()) {
      ADD_FAILURE() << "crash at op " << k;
      return;
    }
    if (completed) break;
    ++crashes;
  }
  EXPECT_GT(crashes, 15);  // the save really has that many steps to cut
}

INSTANTIATE_TEST_SUITE_P(Faults, CrashTest,
                         ::testing::Combine(::testing::Values("uring", "posix"), ::testing::Bool(),
                                            ::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_zstd" : "_raw") +
                                  (std::get<2>(info.param) ? "_torn" : "") +
                                  (std::get<3>(info.param) ? "_powercut" : "_processcrash");
                         });

class DiskFaultTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    root_ = dir_.Sub("ckpt");
    auto ckpt = Checkpointer::Open(FaultOptions(root_, &env_, GetParam(), false));
    ASSERT_OK(ckpt);
    ckpt_ = std::move(*ckpt);
    StepState s1(1);
    auto h = ckpt_->Save(1, s1.AsState());
    ASSERT_OK(h);
    ASSERT_OK(h->durable.get());
  }
  // After a failed save of step 2: the error is on the future and once more
  // on the next call; step 1 still loads; step 3 saves once the fault is gone.
  void ExpectFailedThenRecovers(Code want) {
    StepState s2(2);
    auto h = ckpt_->Save(2, s2.AsState());
    ASSERT_OK(h);
    Status d = h->durable.get();
    EXPECT_EQ(d.code(), want) << d.ToString();
    Status again = ckpt_->Flush();
    EXPECT_EQ(again.code(), want) << "background error must surface on the next call";
    EXPECT_OK(ckpt_->Flush()) << "reported once, then cleared";
    env_.Reset();
    StepState s3(3);
    auto h3 = ckpt_->Save(3, s3.AsState());
    ASSERT_OK(h3);
    ASSERT_OK(h3->durable.get());
    ckpt_.reset();
    ExpectNewestLoadsOneOf(root_, {3}, GetParam());
    auto steps = Checkpointer::Open(FaultOptions(root_, Env::Default(), GetParam(), false));
    ASSERT_OK(steps);
    EXPECT_EQ(*(*steps)->ListCommitted(), (std::vector<uint64_t>{1, 3}));
  }

  TempDir dir_;
  std::string root_;
  FaultEnv env_{Env::Default()};
  std::unique_ptr<Checkpointer> ckpt_;
};

TEST_P(DiskFaultTest, DiskFullMidWrite) {
  env_.FailWritesAfterBytes(50000, ENOSPC);
  ExpectFailedThenRecovers(Code::kResourceExhausted);
}

// Disk full on one save, handled on its durable future: the next save is
// not refused for it and commits; Flush() reports it once (nobody may have
// looked at the future), then nothing.
TEST_P(DiskFaultTest, DiskFullOnOneSaveTheNextSaveCommits) {
  env_.FailWritesAfterBytes(50000, ENOSPC);
  StepState s2(2);
  auto h2 = ckpt_->Save(2, s2.AsState());
  ASSERT_OK(h2);
  EXPECT_EQ(h2->durable.get().code(), Code::kResourceExhausted);
  env_.Reset();  // the disk has room again
  StepState s3(3);
  auto h3 = ckpt_->Save(3, s3.AsState());
  ASSERT_OK(h3) << "a handled background error came back from the next Save()";
  ASSERT_OK(h3->durable.get());
  Status flushed = ckpt_->Flush();
  EXPECT_EQ(flushed.code(), Code::kResourceExhausted) << flushed.ToString();
  EXPECT_NE(flushed.message().find("step 2"), std::string::npos) << flushed.ToString();
  EXPECT_OK(ckpt_->Flush());
  EXPECT_EQ(*ckpt_->ListCommitted(), (std::vector<uint64_t>{1, 3}));
  ckpt_.reset();
  ExpectNewestLoadsOneOf(root_, {3}, GetParam());
}

TEST_P(DiskFaultTest, DiskFullWritingManifest) {
  // The data file is ~84 KiB in 16 KiB writes; fail just after it, in the manifest.
  env_.FailWritesAfterBytes(86016 + 10, ENOSPC);
  ExpectFailedThenRecovers(Code::kResourceExhausted);
}

TEST_P(DiskFaultTest, EioMidWrite) {
  env_.FailWritesAfterBytes(20000, EIO);
  ExpectFailedThenRecovers(Code::kIoError);
}

TEST_P(DiskFaultTest, FsyncFailureAtEverySync) {
  // Data fdatasync, manifest fsync, tmp dir, root, LATEST, root: each one in turn.
  for (uint64_t n = 1; n <= 6; ++n) {
    env_.FailNthSync(n);
    StepState s(10 + n);
    auto h = ckpt_->Save(10 + n, s.AsState());
    ASSERT_OK(h);
    Status d = h->durable.get();
    EXPECT_EQ(d.code(), Code::kIoError) << "sync " << n << ": " << d.ToString();
    ckpt_->Flush().IgnoreError();  // the same error, delivered once more
  }
  env_.Reset();
  ckpt_.reset();
  // A failed fsync never counts as committed; whatever is on disk verifies.
  ExpectNewestLoadsOneOf(root_, {1, 15, 16}, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Faults, DiskFaultTest, ::testing::Values("uring", "posix"));

}  // namespace
}  // namespace stint
