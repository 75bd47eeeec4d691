// examples/train_mlp run as a subprocess: 200 steps in one go, and 120 steps
// then a resume to 200, must end with the same parameter checksum.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <regex>
#include <sstream>
#include <string>

#include "util/subprocess.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

// `args` is split at spaces (no argument here contains one).
RunResult RunTrainMlp(const std::string& args) {
  std::vector<std::string> argv;
  std::istringstream in(args);
  for (std::string a; in >> a;) argv.push_back(a);
  return RunProgram(STINT_TRAIN_MLP, argv);
}

// "final step 200 eval_loss 0.012345 checksum 0123456789abcdef" -> step, checksum.
bool ParseFinal(const std::string& output, std::string* step, std::string* checksum) {
  std::smatch m;
  static const std::regex kFinal(R"(final step (\d+) eval_loss \S+ checksum ([0-9a-f]{16}))");
  if (!std::regex_search(output, m, kFinal)) return false;
  *step = m[1];
  *checksum = m[2];
  return true;
}

TEST(TrainResumeTest, ResumedRunMatchesUninterruptedRun) {
  TempDir dir;
  const std::string common = " --every 50 --seed 3 --hidden 48 --schedule-steps 200";

  RunResult whole = RunTrainMlp("--ckpt-dir " + dir.Sub("whole") + " --steps 200" + common);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  std::string step, want;
  ASSERT_TRUE(ParseFinal(whole.output, &step, &want)) << whole.output;
  EXPECT_EQ(step, "200");
  EXPECT_EQ(whole.output.find("resumed"), std::string::npos) << whole.output;

  RunResult first = RunTrainMlp("--ckpt-dir " + dir.Sub("split") + " --steps 120" + common);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  std::string early;
  ASSERT_TRUE(ParseFinal(first.output, &step, &early)) << first.output;
  EXPECT_EQ(step, "120");
  EXPECT_NE(early, want);  // the comparison below means something

  RunResult second = RunTrainMlp("--ckpt-dir " + dir.Sub("split") + " --steps 200" + common);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from step 120"), std::string::npos) << second.output;
  std::string got;
  ASSERT_TRUE(ParseFinal(second.output, &step, &got)) << second.output;
  EXPECT_EQ(step, "200");
  EXPECT_EQ(got, want) << "uninterrupted:\n" << whole.output << "\nresumed:\n" << second.output;

  // Nothing left to do: resumes at 200 and reports the same state.
  RunResult again = RunTrainMlp("--ckpt-dir " + dir.Sub("split") + " --steps 200" + common);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("resumed from step 200"), std::string::npos) << again.output;
  ASSERT_TRUE(ParseFinal(again.output, &step, &got)) << again.output;
  EXPECT_EQ(got, want);
}

TEST(TrainResumeTest, RefusesCheckpointWrittenWithOtherFlags) {
  TempDir dir;
  RunResult first =
      RunTrainMlp("--ckpt-dir " + dir.Sub("c") + " --steps 20 --every 10 --hidden 16");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  RunResult other =
      RunTrainMlp("--ckpt-dir " + dir.Sub("c") + " --steps 40 --every 10 --hidden 16 --seed 9");
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("other flags"), std::string::npos) << other.output;
  // A different width does not even fit the checkpoint: the adapter names the tensor.
  RunResult wider =
      RunTrainMlp("--ckpt-dir " + dir.Sub("c") + " --steps 40 --every 10 --hidden 24");
  EXPECT_EQ(wider.exit_code, 1) << wider.output;
  EXPECT_NE(wider.output.find("model.0.weight"), std::string::npos) << wider.output;
}

}  // namespace
}  // namespace stint
