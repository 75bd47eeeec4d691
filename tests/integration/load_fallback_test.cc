// Load's fallback through the public Checkpointer API on real files: every
// checkpoint that does not load is passed over with a reason in `skipped`
// (a step-* entry that is a file, a MANIFEST that cannot be read, one whose
// step is not its directory's, one of a newer format version), only damage
// is offered to Quarantine, a newer format is never quarantined nor deleted
// by retention, load(step=N) of a step that is not there is kNotFound, and a
// blob named like another rank's ("rank-00001/x") is the saver's own.
#include <gtest/gtest.h>

#include <cerrno>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/commit.h"
#include "format/manifest.h"
#include "stint/checkpointer.h"
#include "util/fault_env.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// One tensor whose values say which step saved it, and a blob.
struct Counter {
  std::vector<int64_t> values = std::vector<int64_t>(1000, 0);
  std::string label;
  void Set(uint64_t step) {
    for (size_t i = 0; i < values.size(); ++i) values[i] = int64_t(step * 1000 + i);
    label = "step " + std::to_string(step);
  }
  State AsState() const {
    State s;
    s.tensors.push_back({"values", DType::kInt64, {int64_t(values.size())}, {}, {},
                         const_cast<int64_t*>(values.data())});
    s.blobs["label"] = label;
    return s;
  }
  std::vector<TensorDest> Dests() {
    return {{"values", DType::kInt64, {int64_t(values.size())}, {}, {}, values.data()}};
  }
};

class LoadFallbackTest : public ::testing::Test {
 protected:
  CheckpointOptions Options() {
    CheckpointOptions o;
    o.root = root_;
    o.chunk_size = 4096;
    o.keep_last = 0;  // all, unless a test says otherwise
    return o;
  }
  // Saves steps durably, each with Counter::Set(step).
  void SaveSteps(Checkpointer* ckpt, const std::vector<uint64_t>& steps) {
    for (uint64_t step : steps) {
      Counter c;
      c.Set(step);
      auto h = ckpt->Save(step, c.AsState());
      ASSERT_OK(h);
      ASSERT_OK(h->durable.get());
      ASSERT_OK(ckpt->Flush());
    }
  }
  // Loads the newest that loads; expects `step`'s values and label.
  LoadResult ExpectLoadsStep(Checkpointer* ckpt, uint64_t step) {
    Counter got, want;
    want.Set(step);
    auto r = ckpt->Load(got.Dests());
    EXPECT_OK(r);
    if (!r.ok()) return {};
    EXPECT_EQ(r->step, step);
    EXPECT_EQ(got.values, want.values);
    EXPECT_EQ(r->blobs["label"], want.label);
    return *r;
  }
  std::string StepDir(uint64_t step) const { return root_ + "/" + StepDirName(step); }
  // Rewrites a committed step's MANIFEST as a newer stint would write it:
  // the same JSON with format version 2.0.
  void MakeNewerFormat(uint64_t step) {
    const std::string path = StepDir(step) + "/" + kManifestName;
    auto doc = nlohmann::json::parse(ReadWholeFile(path));
    doc["manifest"]["version"] = {kFormatMajor + 1, 0};
    ASSERT_OK(WriteStringToFileSync(Env::Default(), path, doc.dump(1)));
  }

  TempDir dir_;
  const std::string root_ = dir_.Sub("ckpt");
};

TEST_F(LoadFallbackTest, AStepEntryThatIsAFileIsSkippedWithAReason) {
  auto ckpt = Checkpointer::Open(Options());
  ASSERT_OK(ckpt);
  SaveSteps(ckpt->get(), {1, 2});
  // A file where step 3's directory would be, and LATEST naming it.
  ASSERT_OK(WriteStringToFileSync(Env::Default(), StepDir(3), "not a checkpoint"));
  ASSERT_OK(WriteLatest(Env::Default(), root_, StepDirName(3)));
  LoadResult r = ExpectLoadsStep(ckpt->get(), 2);
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_TRUE(Contains(r.skipped[0], StepDirName(3))) << r.skipped[0];
  EXPECT_EQ(r.skipped_steps, std::vector<uint64_t>{3});  // not a checkpoint: moved aside
  ASSERT_OK((*ckpt)->Quarantine(3));
  EXPECT_FALSE(Env::Default()->FileExists(StepDir(3)));
  EXPECT_TRUE(ExpectLoadsStep(ckpt->get(), 2).skipped.empty());
}

TEST_F(LoadFallbackTest, AnUnreadableCheckpointIsSkippedAndLeftInPlace) {
  FaultEnv env(Env::Default());
  CheckpointOptions o = Options();
  o.env = &env;
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  SaveSteps(ckpt->get(), {1, 2, 3});
  for (const std::string& file : {std::string(kManifestName), RankFileName(0)}) {
    SCOPED_TRACE(file);
    env.FailReadsOf(StepDirName(3) + "/" + file, EIO);
    LoadResult r = ExpectLoadsStep(ckpt->get(), 2);
    ASSERT_EQ(r.skipped.size(), 1u);
    EXPECT_TRUE(Contains(r.skipped[0], StepDirName(3) + "/" + file)) << r.skipped[0];
    EXPECT_TRUE(Contains(r.skipped[0], "Input/output error")) << r.skipped[0];
    EXPECT_TRUE(r.skipped_steps.empty());  // unreadable now is not damaged
    env.Reset();
  }
  ExpectLoadsStep(ckpt->get(), 3);
}

TEST_F(LoadFallbackTest, AManifestWhoseStepIsNotItsDirectorysIsDamage) {
  auto ckpt = Checkpointer::Open(Options());
  ASSERT_OK(ckpt);
  SaveSteps(ckpt->get(), {1, 2, 3});
  // Step 3's checkpoint under step 9's name: it must not load as "the newest".
  ASSERT_OK(Env::Default()->RenameFile(StepDir(3), StepDir(9)));
  ASSERT_OK(WriteLatest(Env::Default(), root_, StepDirName(9)));
  LoadResult r = ExpectLoadsStep(ckpt->get(), 2);
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_TRUE(Contains(r.skipped[0], "says step 3, but its directory is " + StepDirName(9)))
      << r.skipped[0];
  EXPECT_EQ(r.skipped_steps, std::vector<uint64_t>{9});
  LoadOptions exact;
  exact.step = 9;
  Counter got;
  EXPECT_EQ((*ckpt)->Load(got.Dests(), exact).status().code(), Code::kDataLoss);
}

TEST_F(LoadFallbackTest, LoadOfAStepThatIsNotThereIsNotFound) {
  auto ckpt = Checkpointer::Open(Options());
  ASSERT_OK(ckpt);
  SaveSteps(ckpt->get(), {1, 2});
  LoadOptions exact;
  exact.step = 7;
  Counter got;
  auto r = (*ckpt)->Load(got.Dests(), exact);
  EXPECT_EQ(r.status().code(), Code::kNotFound) << r.status().ToString();
  EXPECT_TRUE(Contains(r.status().message(), StepDirName(7))) << r.status().ToString();
}

TEST_F(LoadFallbackTest, ABlobNamedLikeAnotherRanksIsTheSaversOwn) {
  auto ckpt = Checkpointer::Open(Options());
  ASSERT_OK(ckpt);
  Counter c;
  c.Set(1);
  State s = c.AsState();
  s.blobs["rank-00001/x"] = "a user's key";
  auto h = (*ckpt)->Save(1, s);
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());
  LoadResult r = ExpectLoadsStep(ckpt->get(), 1);
  EXPECT_EQ(r.blobs["rank-00001/x"], "a user's key");
}

TEST_F(LoadFallbackTest, ANewerFormatIsSkippedNeverQuarantinedNorDeleted) {
  CheckpointOptions o = Options();
  {
    auto ckpt = Checkpointer::Open(o);
    ASSERT_OK(ckpt);
    SaveSteps(ckpt->get(), {1, 2, 3});
  }
  MakeNewerFormat(3);
  const std::string manifest = ReadWholeFile(StepDir(3) + "/" + kManifestName);
  const std::string data = ReadWholeFile(StepDir(3) + "/" + RankFileName(0));

  o.keep_last = 1;
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  LoadResult r = ExpectLoadsStep(ckpt->get(), 2);
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_TRUE(Contains(r.skipped[0], StepDirName(3))) << r.skipped[0];
  EXPECT_TRUE(Contains(r.skipped[0], "unknown checkpoint format version 2.0")) << r.skipped[0];
  EXPECT_TRUE(r.skipped_steps.empty());  // not damage: nothing to quarantine
  Status q = (*ckpt)->Quarantine(3);
  EXPECT_EQ(q.code(), Code::kFailedPrecondition) << q.ToString();
  EXPECT_TRUE(Contains(q.message(), "format version")) << q.ToString();

  // Retention is due for steps 1 to 3 after step 4; what the newer
  // checkpoint references is unknown, so it deletes nothing and says why.
  SaveSteps(ckpt->get(), {4});
  EXPECT_EQ(*(*ckpt)->ListCommitted(), (std::vector<uint64_t>{1, 2, 3, 4}));
  const std::string held_back = (*ckpt)->stats().retention_held_back;
  EXPECT_TRUE(Contains(held_back, "retention deleted nothing")) << held_back;
  EXPECT_TRUE(Contains(held_back, StepDirName(3))) << held_back;
  EXPECT_EQ(ReadWholeFile(StepDir(3) + "/" + kManifestName), manifest);
  EXPECT_EQ(ReadWholeFile(StepDir(3) + "/" + RankFileName(0)), data);
}

}  // namespace
}  // namespace stint
