// Names in a checkpoint root: step-*, rank-*.stint, .tmp-*, and LATEST.
#include "checkpoint/commit.h"

#include <gtest/gtest.h>

#include <limits>
#include <set>
#include <string>

#include "format/manifest.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

TEST(StepDirNameTest, Format) {
  EXPECT_EQ(StepDirName(0), "step-00000000");
  EXPECT_EQ(StepDirName(12), "step-00000012");
  EXPECT_EQ(StepDirName(99999999), "step-99999999");
  EXPECT_EQ(StepDirName(123456789), "step-123456789");  // wider past 8 digits, never cut
  EXPECT_EQ(StepDirName(kMax), "step-18446744073709551615");
}

TEST(StepDirNameTest, RoundTrip) {
  for (uint64_t step : {uint64_t(0), uint64_t(1), uint64_t(12), uint64_t(99999999),
                        uint64_t(100000000), uint64_t(1) << 40, kMax - 1, kMax}) {
    auto parsed = ParseStepDirName(StepDirName(step));
    ASSERT_TRUE(parsed.has_value()) << StepDirName(step);
    EXPECT_EQ(*parsed, step);
  }
}

TEST(StepDirNameTest, SortsNumericallyUpTo8Digits) {
  // Names sort like steps within the zero-padded range, which keeps ls output sane.
  EXPECT_LT(StepDirName(9), StepDirName(10));
  EXPECT_LT(StepDirName(1234567), StepDirName(99999999));
}

TEST(ParseStepDirNameTest, Overflow) {
  EXPECT_EQ(ParseStepDirName("step-18446744073709551615"), kMax);
  EXPECT_FALSE(ParseStepDirName("step-18446744073709551616"));  // max + 1
  EXPECT_FALSE(ParseStepDirName("step-18446744073709551620"));
  EXPECT_FALSE(ParseStepDirName("step-99999999999999999999"));   // 20 digits
  EXPECT_FALSE(ParseStepDirName("step-100000000000000000000"));  // 21 digits
  EXPECT_FALSE(ParseStepDirName("step-000000000000000000001"));  // 21 digits, small value
}

TEST(ParseStepDirNameTest, Junk) {
  for (const char* junk : {"",
                           "step",
                           "step-",
                           "Step-00000001",
                           "STEP-00000001",
                           "steps-00000001",
                           "step_00000001",
                           "step-0000000a",
                           "step--0000001",
                           "step-+0000001",
                           "step- 0000001",
                           " step-00000001",
                           "step-00000001 ",
                           "step-00000001\n",
                           "step-00000001/",
                           "step-1e5",
                           "step-0x10",
                           "xstep-00000001",
                           ".tmp-1-0000000000000000",
                           "LATEST",
                           "LATEST.tmp",
                           "rank-00000.stint"}) {
    EXPECT_FALSE(ParseStepDirName(junk)) << "'" << junk << "'";
  }
  // A NUL inside the digits: 13 characters, as long as a real step directory name.
  EXPECT_FALSE(ParseStepDirName(std::string("step-0000") + '\0' + "001"));
}

TEST(RankFileNameTest, Format) {
  EXPECT_EQ(RankFileName(0), "rank-00000.stint");
  EXPECT_EQ(RankFileName(7), "rank-00007.stint");
  EXPECT_EQ(RankFileName(99999), "rank-99999.stint");
  EXPECT_EQ(RankFileName(123456), "rank-123456.stint");
}

TEST(TmpDirNameTest, Format) {
  EXPECT_EQ(TmpDirName(12, 0xabc), ".tmp-12-0000000000000abc");
  EXPECT_EQ(TmpDirName(0, 0), ".tmp-0-0000000000000000");
  EXPECT_EQ(TmpDirName(kMax, kMax), ".tmp-18446744073709551615-ffffffffffffffff");
}

TEST(TmpDirNameTest, IsNeverAStepDirAndIsUniquePerNonce) {
  std::set<std::string> names;
  for (uint64_t nonce = 0; nonce < 100; ++nonce) {
    std::string name = TmpDirName(5, nonce * 0x9e3779b97f4a7c15ULL);
    EXPECT_EQ(name.compare(0, sizeof(kTmpPrefix) - 1, kTmpPrefix), 0) << name;
    EXPECT_FALSE(ParseStepDirName(name)) << name;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), 100u);
}

TEST(LatestTest, WriteReadRoundTrip) {
  TempDir tmp;
  auto none = ReadLatest(Env::Default(), tmp.path());
  ASSERT_OK(none);
  EXPECT_FALSE(none->has_value());
  ASSERT_OK(WriteLatest(Env::Default(), tmp.path(), StepDirName(42)));
  auto latest = ReadLatest(Env::Default(), tmp.path());
  ASSERT_OK(latest);
  EXPECT_EQ(latest->value(), "step-00000042");
  EXPECT_FALSE(Env::Default()->FileExists(tmp.path() + "/LATEST.tmp"));
}

TEST(LatestTest, JunkIsDataLoss) {
  TempDir tmp;
  for (const char* junk : {"", "\n", "step-", "../etc/passwd\n", "step-00000001 trailing\n"}) {
    ASSERT_OK(WriteStringToFileSync(Env::Default(), tmp.path() + "/LATEST", junk));
    auto latest = ReadLatest(Env::Default(), tmp.path());
    EXPECT_EQ(latest.status().code(), Code::kDataLoss) << "'" << junk << "'";
  }
  // CRLF from a hand edit on another OS is tolerated.
  ASSERT_OK(WriteStringToFileSync(Env::Default(), tmp.path() + "/LATEST", "step-00000003\r\n"));
  auto latest = ReadLatest(Env::Default(), tmp.path());
  ASSERT_OK(latest);
  EXPECT_EQ(latest->value(), "step-00000003");
}

TEST(ListCheckpointStepsTest, OnlyStepDirsWithManifest) {
  TempDir tmp;
  Env* env = Env::Default();
  for (uint64_t step : {uint64_t(30), uint64_t(4), uint64_t(100000000)}) {
    std::string dir = tmp.path() + "/" + StepDirName(step);
    ASSERT_OK(env->CreateDir(dir));
    ASSERT_OK(WriteStringToFileSync(env, dir + "/" + kManifestName, "{}"));
  }
  ASSERT_OK(env->CreateDir(tmp.path() + "/" + StepDirName(50)));  // no manifest
  ASSERT_OK(env->CreateDir(tmp.path() + "/" + TmpDirName(60, 1)));
  ASSERT_OK(
      WriteStringToFileSync(env, tmp.path() + "/" + TmpDirName(60, 1) + "/" + kManifestName, "{}"));
  ASSERT_OK(env->CreateDir(tmp.path() + "/step-junk"));
  ASSERT_OK(WriteLatest(env, tmp.path(), StepDirName(30)));
  auto steps = ListCheckpointSteps(env, tmp.path());
  ASSERT_OK(steps);
  EXPECT_EQ(*steps, (std::vector<uint64_t>{4, 30, 100000000}));
}

TEST(ListCheckpointStepsTest, MissingRootIsNotFound) {
  TempDir tmp;
  EXPECT_EQ(ListCheckpointSteps(Env::Default(), tmp.Sub("nope")).status().code(), Code::kNotFound);
}

TEST(CleanLeftoversTest, RemovesTmpDirsAndLatestTmpOnly) {
  TempDir tmp;
  Env* env = Env::Default();
  ASSERT_OK(env->CreateDir(tmp.path() + "/" + StepDirName(1)));
  ASSERT_OK(env->CreateDir(tmp.path() + "/" + TmpDirName(2, 7)));
  ASSERT_OK(
      WriteStringToFileSync(env, tmp.path() + "/" + TmpDirName(2, 7) + "/rank-00000.stint", "x"));
  ASSERT_OK(env->CreateDir(tmp.path() + "/.tmp-deleting-step-00000000"));
  ASSERT_OK(WriteStringToFileSync(env, tmp.path() + "/LATEST.tmp", "step-00000002\n"));
  ASSERT_OK(WriteLatest(env, tmp.path(), StepDirName(1)));
  ASSERT_OK(CleanLeftovers(env, tmp.path()));
  auto children = env->GetChildren(tmp.path());
  ASSERT_OK(children);
  std::set<std::string> left(children->begin(), children->end());
  EXPECT_EQ(left, (std::set<std::string>{"LATEST", StepDirName(1)}));
}

}  // namespace
}  // namespace stint
