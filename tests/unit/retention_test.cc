// Retention policy (which committed steps to delete), the delete itself, and
// applying both to a root with a held step.
#include "checkpoint/retention.h"

#include <gtest/gtest.h>

#include <limits>
#include <optional>
#include <vector>

#include "checkpoint/commit.h"
#include "format/manifest.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

using Steps = std::vector<uint64_t>;
constexpr std::optional<uint64_t> kNone = std::nullopt;

TEST(StepsToDeleteTest, KeepLast) {
  EXPECT_EQ(StepsToDelete({1, 2, 3, 4, 5, 6}, 2, 0, kNone), (Steps{1, 2, 3, 4}));
  EXPECT_EQ(StepsToDelete({1, 2, 3, 4, 5, 6}, 1, 0, kNone), (Steps{1, 2, 3, 4, 5}));
  EXPECT_EQ(StepsToDelete({1, 2, 3}, 3, 0, kNone), Steps{});
  EXPECT_EQ(StepsToDelete({1, 2, 3}, 10, 0, kNone), Steps{});
  EXPECT_EQ(StepsToDelete({}, 2, 0, kNone), Steps{});
  EXPECT_EQ(StepsToDelete({7}, 1, 0, kNone), Steps{});
}

TEST(StepsToDeleteTest, KeepLastZeroOrNegativeKeepsAll) {
  EXPECT_EQ(StepsToDelete({1, 2, 3, 4}, 0, 0, kNone), Steps{});
  EXPECT_EQ(StepsToDelete({1, 2, 3, 4}, 0, 3, 1), Steps{});
  EXPECT_EQ(StepsToDelete({1, 2, 3, 4}, -1, 0, kNone), Steps{});
}

TEST(StepsToDeleteTest, KeepEvery) {
  // Newest 2 kept, plus multiples of 4 forever.
  EXPECT_EQ(StepsToDelete({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 2, 4, kNone), (Steps{1, 2, 3, 5, 6, 7}));
  EXPECT_EQ(StepsToDelete({100, 200, 300, 400}, 1, 100, kNone), Steps{});  // all multiples
  EXPECT_EQ(StepsToDelete({1, 2, 3}, 1, 1, kNone), Steps{});
  // Step 0 is a multiple of everything.
  EXPECT_EQ(StepsToDelete({0, 1, 2, 3}, 1, 7, kNone), (Steps{1, 2}));
}

TEST(StepsToDeleteTest, Protect) {
  // What LATEST names survives even when it is not among the newest.
  EXPECT_EQ(StepsToDelete({1, 2, 3, 4, 5}, 2, 0, 2), (Steps{1, 3}));
  EXPECT_EQ(StepsToDelete({1, 2, 3, 4, 5}, 2, 0, 5), (Steps{1, 2, 3}));   // already kept
  EXPECT_EQ(StepsToDelete({1, 2, 3, 4, 5}, 2, 0, 99), (Steps{1, 2, 3}));  // not present
  EXPECT_EQ(StepsToDelete({1, 2, 3, 4, 5}, 2, 2, 1), (Steps{3}));
}

TEST(StepsToDeleteTest, UnsortedAndDuplicateInput) {
  EXPECT_EQ(StepsToDelete({5, 1, 4, 2, 3}, 2, 0, kNone), (Steps{1, 2, 3}));
  // Duplicates count once toward keep_last and are reported once.
  EXPECT_EQ(StepsToDelete({3, 1, 3, 2, 1, 3}, 1, 0, kNone), (Steps{1, 2}));
  EXPECT_EQ(StepsToDelete({2, 2, 2}, 1, 0, kNone), Steps{});
}

TEST(StepsToDeleteTest, LargeSteps) {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(StepsToDelete({max, 0, max - 1}, 1, 0, kNone), (Steps{0, max - 1}));
}

// A committed-looking step directory with a manifest and a data file.
void MakeStepDir(const std::string& root, uint64_t step) {
  std::string dir = root + "/" + StepDirName(step);
  ASSERT_OK(Env::Default()->CreateDir(dir));
  Manifest m;
  m.step = step;
  ASSERT_OK(WriteStringToFileSync(Env::Default(), dir + "/" + kManifestName, EncodeManifest(m)));
  ASSERT_OK(WriteStringToFileSync(Env::Default(), dir + "/" + RankFileName(0), "data"));
}

TEST(DeleteCheckpointTest, RemovesTheDirectoryAndLeavesNoTmp) {
  TempDir tmp;
  MakeStepDir(tmp.path(), 3);
  MakeStepDir(tmp.path(), 4);
  ASSERT_OK(DeleteCheckpoint(Env::Default(), tmp.path(), 3));
  auto children = Env::Default()->GetChildren(tmp.path());
  ASSERT_OK(children);
  EXPECT_EQ(*children, std::vector<std::string>{StepDirName(4)});
  auto steps = ListCheckpointSteps(Env::Default(), tmp.path());
  ASSERT_OK(steps);
  EXPECT_EQ(*steps, Steps{4});
}

TEST(DeleteCheckpointTest, MissingStepIsNotFound) {
  TempDir tmp;
  Status s = DeleteCheckpoint(Env::Default(), tmp.path(), 9);
  EXPECT_EQ(s.code(), Code::kNotFound) << s.ToString();
}

TEST(ApplyRetentionTest, KeepsWhatLatestNamesAndTheHeldStep) {
  TempDir tmp;
  for (uint64_t step = 1; step <= 5; ++step) MakeStepDir(tmp.path(), step);
  ASSERT_OK(WriteLatest(Env::Default(), tmp.path(), StepDirName(2)));
  RetentionGuard guard;
  guard.Hold(3);
  ASSERT_OK(ApplyRetention(Env::Default(), tmp.path(), 1, 0, &guard));
  auto steps = ListCheckpointSteps(Env::Default(), tmp.path());
  ASSERT_OK(steps);
  EXPECT_EQ(*steps, (Steps{2, 3, 5}));

  guard.Release();
  ASSERT_OK(ApplyRetention(Env::Default(), tmp.path(), 1, 0, &guard));
  steps = ListCheckpointSteps(Env::Default(), tmp.path());
  ASSERT_OK(steps);
  EXPECT_EQ(*steps, (Steps{2, 5}));
}

}  // namespace
}  // namespace stint
