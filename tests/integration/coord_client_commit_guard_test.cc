// CheckpointOptions::commit_guard with the real Checkpointer on real files
// (no coordinator): asked once per save, after data and MANIFEST are synced
// and before the rename; a refusal commits nothing and reaches the durable
// future unchanged.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "checkpoint/commit.h"
#include "format/manifest.h"
#include "stint/checkpointer.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

class CommitGuardTest : public ::testing::Test {
 protected:
  CheckpointOptions Options() {
    CheckpointOptions o;
    o.root = root_;
    o.job_id = "job-guard";
    o.fencing_token = 41;
    o.io_engine = "posix";
    o.keep_last = 0;
    o.commit_guard = [this](uint64_t step) {
      std::lock_guard<std::mutex> lock(mu_);
      asked_.push_back(step);
      Env* env = Env::Default();
      // Everything is on disk under a .tmp- name, nothing under step-N yet.
      bool tmp_with_manifest = false;
      auto children = env->GetChildren(root_);
      if (children.ok()) {
        for (const auto& name : *children) {
          auto tmp_step = ParseTmpDirStep(name);
          if (tmp_step && *tmp_step == step &&
              env->FileExists(root_ + "/" + name + "/" + kManifestName) &&
              env->FileExists(root_ + "/" + name + "/" + RankFileName(0))) {
            tmp_with_manifest = true;
          }
        }
      }
      seen_before_rename_.push_back(tmp_with_manifest &&
                                    !env->FileExists(root_ + "/" + StepDirName(step)));
      return verdict_;
    };
    return o;
  }
  State MakeState() {
    State s;
    s.tensors.push_back({"w", DType::kFloat32, {int64_t(w_.size())}, {}, {}, w_.data()});
    s.blobs["user.json"] = "{}";
    return s;
  }
  void SetVerdict(Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    verdict_ = std::move(s);
  }
  std::optional<std::string> Latest() {
    auto l = ReadLatest(Env::Default(), root_);
    EXPECT_OK(l);
    return l.ok() ? *l : std::nullopt;
  }
  bool AnyTmpLeft() {
    auto children = Env::Default()->GetChildren(root_);
    if (!children.ok()) return true;
    for (const auto& name : *children) {
      if (name.rfind(kTmpPrefix, 0) == 0) return true;
    }
    return false;
  }

  TempDir dir_;
  const std::string root_ = dir_.Sub("ckpt");
  std::vector<float> w_ = std::vector<float>(64 * 1024, 0.25f);
  std::mutex mu_;
  Status verdict_;
  std::vector<uint64_t> asked_;
  std::vector<bool> seen_before_rename_;
};

TEST_F(CommitGuardTest, AnOkGuardCommitsAndIsAskedOnceRightBeforeTheRename) {
  auto ckpt = Checkpointer::Open(Options());
  ASSERT_OK(ckpt);
  for (uint64_t step : {10, 20}) {
    auto h = (*ckpt)->Save(step, MakeState());
    ASSERT_OK(h);
    ASSERT_OK(h->durable.get());
  }
  EXPECT_EQ(asked_, (std::vector<uint64_t>{10, 20}));
  EXPECT_EQ(seen_before_rename_, (std::vector<bool>{true, true}));
  EXPECT_EQ(Latest(), StepDirName(20));
}

TEST_F(CommitGuardTest, ARefusalCommitsNothingAndReachesTheDurableFuture) {
  auto ckpt = Checkpointer::Open(Options());
  ASSERT_OK(ckpt);
  auto first = (*ckpt)->Save(10, MakeState());
  ASSERT_OK(first);
  ASSERT_OK(first->durable.get());

  // Not a fencing verdict (kAborted, below): the writer stays the writer.
  const Status refusal =
      Status::Unavailable("cannot confirm fencing token 41 of job 3: not committing step 20");
  SetVerdict(refusal);
  auto second = (*ckpt)->Save(20, MakeState());
  ASSERT_OK(second);
  const Status durable = second->durable.get();
  EXPECT_EQ(durable.code(), refusal.code());
  EXPECT_EQ(durable.message(), refusal.message());

  // Nothing committed was touched, nothing half-made is left.
  EXPECT_FALSE(Env::Default()->FileExists(root_ + "/" + StepDirName(20)));
  EXPECT_EQ(Latest(), StepDirName(10));
  EXPECT_FALSE(AnyTmpLeft());
  auto steps = (*ckpt)->ListCommitted();
  ASSERT_OK(steps);
  EXPECT_EQ(*steps, std::vector<uint64_t>{10});
  EXPECT_OK(first->durable.get());  // an earlier save keeps its result
  auto stats = (*ckpt)->stats();
  EXPECT_EQ(stats.failed, 1u);
  EXPECT_EQ(stats.committed, 1u);

  // The error comes back once more from the next call, then the way is clear.
  Status flushed = (*ckpt)->Flush();
  EXPECT_EQ(flushed.code(), Code::kUnavailable);
  EXPECT_NE(flushed.message().find("fencing token 41"), std::string::npos) << flushed.message();
  EXPECT_OK((*ckpt)->Flush());

  // The step that was refused can be saved later (the guard decides again).
  SetVerdict(Status::OK());
  auto retry = (*ckpt)->Save(20, MakeState());
  ASSERT_OK(retry);
  ASSERT_OK(retry->durable.get());
  EXPECT_EQ(Latest(), StepDirName(20));
  EXPECT_EQ(asked_, (std::vector<uint64_t>{10, 20, 20}));
}

// kAborted from the guard fences this writer: it commits nothing more and
// lets go of the root at once, so the writer that replaced it can open it.
TEST_F(CommitGuardTest, AFencedWriterRefusesLaterSavesAndLetsGoOfTheRoot) {
  auto ckpt = Checkpointer::Open(Options());
  ASSERT_OK(ckpt);
  auto first = (*ckpt)->Save(10, MakeState());
  ASSERT_OK(first);
  ASSERT_OK(first->durable.get());
  EXPECT_EQ(Checkpointer::Open(Options()).status().code(), Code::kFailedPrecondition);

  SetVerdict(Status::Aborted("fenced: fencing token 41 of job 3 is stale: not committing step 20"));
  auto second = (*ckpt)->Save(20, MakeState());
  ASSERT_OK(second);
  EXPECT_EQ(second->durable.get().code(), Code::kAborted);

  SetVerdict(Status::OK());
  auto later = (*ckpt)->Save(30, MakeState());
  ASSERT_FALSE(later.ok());
  EXPECT_EQ(later.status().code(), Code::kAborted);
  EXPECT_NE(later.status().message().find("fenced"), std::string::npos) << later.status().ToString();

  auto successor = Checkpointer::Open(Options());  // while the fenced one is still open
  ASSERT_OK(successor);
  auto next = (*successor)->Save(30, MakeState());
  ASSERT_OK(next);
  ASSERT_OK(next->durable.get());
  EXPECT_EQ(Latest(), StepDirName(30));
}

TEST_F(CommitGuardTest, AReopenedRootLoadsTheLastCheckpointTheGuardAllowed) {
  {
    auto ckpt = Checkpointer::Open(Options());
    ASSERT_OK(ckpt);
    auto a = (*ckpt)->Save(5, MakeState());
    ASSERT_OK(a);
    ASSERT_OK(a->durable.get());
    SetVerdict(Status::Aborted("fenced: stale"));
    auto b = (*ckpt)->Save(6, MakeState());
    ASSERT_OK(b);
    EXPECT_FALSE(b->durable.get().ok());
  }
  CheckpointOptions o = Options();
  o.commit_guard = nullptr;
  auto reopened = Checkpointer::Open(o);
  ASSERT_OK(reopened);
  std::vector<float> out(w_.size(), 0);
  auto loaded =
      (*reopened)->Load({{"w", DType::kFloat32, {int64_t(out.size())}, {}, {}, out.data()}});
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->step, 5u);
  EXPECT_TRUE(loaded->skipped.empty());
  EXPECT_EQ(out, w_);
}

}  // namespace
}  // namespace stint
