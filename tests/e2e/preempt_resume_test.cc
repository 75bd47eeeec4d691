// End-to-end: a real LibTorch training run (examples/resumable_training) is
// SIGTERMed at random steps (>= 20 times) or SIGKILLed, restarted each time,
// and compared with an uninterrupted run: final parameters and optimizer
// state bit-identical, every sample consumed exactly once (SIGTERM) or the
// loss bounded by the checkpoint interval (SIGKILL).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "stint/preemption.h"
#include "util/subprocess.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

std::string Checksum(const std::string& out) {
  size_t pos = out.find("checksum ");
  return pos == std::string::npos ? "" : out.substr(pos + 9, 16);
}

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(f, l);) lines.push_back(l);
  return lines;
}

// Random kill points differ per run; the seed is in every failure message.
uint32_t TimeSeed() {
  return uint32_t(std::chrono::steady_clock::now().time_since_epoch().count());
}

uint64_t StepOf(const std::string& line) { return std::strtoull(line.c_str() + 5, nullptr, 10); }

class PreemptResume : public ::testing::Test {
 protected:
  std::vector<std::string> Args(const std::string& name) {
    return {"--ckpt-dir", dir_.Sub(name),
            "--steps",    std::to_string(kSteps),
            "--every",    "25",
            "--log",      dir_.Sub(name + ".log"),
            "--step-ms",  "3"};
  }
  // What a run leaves: its final state's checksum and its committed steps.
  struct Outcome {
    std::string checksum;
    std::vector<std::string> log;
  };
  // The uninterrupted run.
  void Reference(Outcome* want) {
    RunResult r = RunProgram(STINT_TRAIN_BINARY, Args("reference"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    want->checksum = Checksum(r.output);
    ASSERT_EQ(want->checksum.size(), 16u) << r.output;
    want->log = ReadLines(dir_.Sub("reference.log"));
    ASSERT_EQ(want->log.size(), size_t(kSteps));
  }
  static constexpr int kSteps = 400;  // enough for 20+ preemptions at ~10 steps each
  TempDir dir_;
};

TEST_F(PreemptResume, SigtermAtRandomStepsIsExactlyOnceAndBitIdentical) {
  Outcome want;
  ASSERT_NO_FATAL_FAILURE(Reference(&want));
  const uint32_t seed = TimeSeed();
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  int preemptions = 0;
  std::string got;
  for (int attempt = 0; attempt < 200; ++attempt) {
    ChildProcess c(STINT_TRAIN_BINARY, Args("preempted"));
    ASSERT_TRUE(c.WaitForLine("ready")) << c.output();
    std::string out = c.output();
    bool send = preemptions < 25;
    if (send) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % 60));
      kill(c.pid(), SIGTERM);
    }
    int status = c.Wait();
    out = c.output();
    ASSERT_TRUE(WIFEXITED(status)) << "died by a signal: the watcher did not take SIGTERM\n" << out;
    if (WEXITSTATUS(status) == kExitRequeue) {
      ASSERT_NE(out.find("preempted at step"), std::string::npos) << out;
      ++preemptions;
      continue;
    }
    ASSERT_EQ(WEXITSTATUS(status), 0) << out;
    got = Checksum(out);
    break;
  }
  EXPECT_GE(preemptions, 20);
  EXPECT_EQ(got, want.checksum)
      << "the resumed run's parameters/optimizer state differ from the uninterrupted run";
  // Emergency checkpoints lose nothing: the committed steps, with their
  // samples, are exactly the reference's, each once.
  EXPECT_EQ(ReadLines(dir_.Sub("preempted.log")), want.log);
}

TEST_F(PreemptResume, SigkillResumesFromLastCommitAndLosesAtMostAnInterval) {
  Outcome want;
  ASSERT_NO_FATAL_FAILURE(Reference(&want));
  const uint32_t seed = TimeSeed();
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  int kills = 0;
  std::string got;
  std::vector<std::string> segments_log;  // what survives: each segment's log up to the next resume
  const std::string log_path = dir_.Sub("killed.log");
  for (int attempt = 0; attempt < 50; ++attempt) {
    size_t before = ReadLines(log_path).size();
    ChildProcess c(STINT_TRAIN_BINARY, Args("killed"));
    ASSERT_TRUE(c.WaitForLine("ready")) << c.output();
    std::string out = c.output();
    uint64_t resumed = std::strtoull(out.c_str() + out.find("step ") + 5, nullptr, 10);
    // Steps logged after `resumed` by the previous, killed segment were lost and are replayed.
    std::vector<std::string> lines = ReadLines(log_path);
    uint64_t last_logged = before == 0 ? 0 : StepOf(lines[before - 1]);
    if (kills > 0) {
      EXPECT_LE(last_logged - resumed, 2 * 25u) << "lost more than the checkpoint interval allows";
    }
    while (!segments_log.empty() && StepOf(segments_log.back()) > resumed) segments_log.pop_back();
    // Never near the end: a segment trains at most ~110 steps (3 ms each)
    // before the longest pause below, so one resumed 120 steps short of
    // the end is killed before it completes, never in its teardown.
    bool kill_it = kills < 6 && resumed + 120 <= uint64_t(kSteps);
    if (kill_it) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng() % 300));
      kill(c.pid(), SIGKILL);
    }
    int status = c.Wait();
    out = c.output();
    lines = ReadLines(log_path);
    segments_log.insert(segments_log.end(), lines.begin() + long(before), lines.end());
    // A kill that landed after the final step (a segment that resumed near
    // the end trains to it within the pause) only cut the teardown short:
    // the run is complete, and its next start would train nothing.
    const bool finished = out.find("final step") != std::string::npos;
    if (WIFSIGNALED(status) && !finished) {
      ++kills;
      continue;
    }
    ASSERT_TRUE(finished || (WIFEXITED(status) && WEXITSTATUS(status) == 0)) << out;
    got = Checksum(out);
    break;
  }
  EXPECT_GE(kills, 3);
  EXPECT_EQ(got, want.checksum);
  EXPECT_EQ(segments_log, want.log) << "after dropping replayed steps, every sample once, in order";
}

// A run that completed (here: resumed at its last step) reports it, then
// tears down; a SIGTERM then, as tools/demo.sh's kills can land, leaves its
// exit code 0: the preemption signals stay caught until exit.
TEST_F(PreemptResume, SigtermAfterTheRunReportedCompletionStillExitsZero) {
  // A SIGTERM while a run that printed its final step winds down: exit 0.
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::vector<std::string> args = Args("completed-" + std::to_string(attempt));
    ChildProcess c(STINT_TRAIN_BINARY, args);
    ASSERT_TRUE(c.WaitForLine("final step")) << c.output();
    kill(c.pid(), SIGTERM);
    const int status = c.Wait();
    ASSERT_TRUE(WIFEXITED(status))
        << "killed by signal " << WTERMSIG(status) << " after it completed\n"
        << c.output();
    EXPECT_EQ(WEXITSTATUS(status), 0) << c.output();
  }
  // Started again, the completed run (its root's COMPLETE) trains nothing and exits 0.
  RunResult again = RunProgram(STINT_TRAIN_BINARY, Args("completed-0"));
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("complete: the run finished at step " + std::to_string(kSteps)),
            std::string::npos)
      << again.output;
  EXPECT_EQ(again.output.find("final step"), std::string::npos) << again.output;
}

TEST_F(PreemptResume, NoTimeForAnEmergencyCheckpointReportsTheLoss) {
  // A grace period shorter than the safety margin: nothing fits.
  std::vector<std::string> args = Args("no_grace");
  args.insert(args.end(), {"--grace", "0.5"});
  ChildProcess c(STINT_TRAIN_BINARY, args);
  ASSERT_TRUE(c.WaitForLine("ready")) << c.output();
  std::string out = c.output();
  // Past two periodic checkpoints (every 25 steps; ~300 ms on an idle
  // machine), so that the checkpoint throughput is measured when SIGTERM
  // comes even on a loaded one: with none measured yet, the plan tries an
  // emergency checkpoint rather than stating the loss.
  for (int i = 0; i < 2000 && ReadLines(dir_.Sub("no_grace.log")).size() < 60; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  kill(c.pid(), SIGTERM);
  int status = c.Wait();
  out = c.output();
  ASSERT_TRUE(WIFEXITED(status)) << out;
  ASSERT_EQ(WEXITSTATUS(status), kExitRequeue) << out;
  size_t at = out.find("preempted at step ");
  ASSERT_NE(at, std::string::npos) << out;
  uint64_t preempted = std::strtoull(out.c_str() + at + 18, nullptr, 10);
  // Landing right on a checkpointed step loses nothing; otherwise the loss is stated.
  EXPECT_TRUE(out.find("will be lost") != std::string::npos ||
              out.find("nothing is lost") != std::string::npos)
      << out;

  ChildProcess again(STINT_TRAIN_BINARY, Args("no_grace"));
  ASSERT_TRUE(again.WaitForLine("ready")) << again.output();
  std::string out2 = again.output();
  kill(again.pid(), SIGKILL);
  again.Wait();
  uint64_t resumed = std::strtoull(out2.c_str() + out2.find("step ") + 5, nullptr, 10);
  EXPECT_LE(resumed, preempted);
  EXPECT_EQ(resumed % 25, 0u) << "resumed from a periodic checkpoint";
  EXPECT_LE(preempted - resumed, 2 * 25u);
}

}  // namespace
}  // namespace stint
