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
#include "util/temp_dir.h"

namespace stint {
namespace {

struct Child {
  pid_t pid = -1;
  int out = -1;  // its stdout
};

Child Start(const std::vector<std::string>& args) {
  int p[2];
  if (pipe(p) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], 1);
    close(p[0]);
    close(p[1]);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(STINT_TRAIN_BINARY));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(STINT_TRAIN_BINARY, argv.data());
    _exit(127);
  }
  close(p[1]);
  return Child{pid, p[0]};
}

// Reads the child's stdout until a line starting with `prefix` (or EOF).
bool WaitForLine(int fd, const std::string& prefix, std::string* all) {
  char c;
  std::string line;
  while (read(fd, &c, 1) == 1) {
    *all += c;
    if (c != '\n') {
      line += c;
      continue;
    }
    if (line.rfind(prefix, 0) == 0) return true;
    line.clear();
  }
  return false;
}

int Finish(Child& c, std::string* all) {
  char buf[4096];
  ssize_t n;
  while ((n = read(c.out, buf, sizeof(buf))) > 0) all->append(buf, size_t(n));
  close(c.out);
  int status = 0;
  waitpid(c.pid, &status, 0);
  return status;
}

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

uint64_t StepOf(const std::string& line) { return std::strtoull(line.c_str() + 5, nullptr, 10); }

class PreemptResume : public ::testing::Test {
 protected:
  std::vector<std::string> Args(const std::string& name) {
    return {"--ckpt-dir", dir_.Sub(name), "--steps", std::to_string(kSteps), "--every", "25",
            "--log", dir_.Sub(name + ".log"), "--step-ms", "3"};
  }
  // The uninterrupted run.
  void Reference(std::string* checksum, std::vector<std::string>* log) {
    Child c = Start(Args("reference"));
    std::string out;
    int status = Finish(c, &out);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
    *checksum = Checksum(out);
    ASSERT_EQ(checksum->size(), 16u) << out;
    *log = ReadLines(dir_.Sub("reference.log"));
    ASSERT_EQ(log->size(), size_t(kSteps));
  }
  static constexpr int kSteps = 300;
  TempDir dir_;
};

TEST_F(PreemptResume, SigtermAtRandomStepsIsExactlyOnceAndBitIdentical) {
  std::string want;
  std::vector<std::string> want_log;
  Reference(&want, &want_log);
  if (HasFatalFailure()) return;

  uint32_t seed = uint32_t(std::chrono::steady_clock::now().time_since_epoch().count());
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  int preemptions = 0;
  std::string got;
  for (int attempt = 0; attempt < 200; ++attempt) {
    Child c = Start(Args("preempted"));
    std::string out;
    ASSERT_TRUE(WaitForLine(c.out, "ready", &out)) << out;
    bool send = preemptions < 25;
    if (send) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % 60));
      kill(c.pid, SIGTERM);
    }
    int status = Finish(c, &out);
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
  EXPECT_EQ(got, want) << "the resumed run's parameters/optimizer state differ from the uninterrupted run";
  // Emergency checkpoints lose nothing: the committed steps, with their
  // samples, are exactly the reference's, each once.
  EXPECT_EQ(ReadLines(dir_.Sub("preempted.log")), want_log);
}

TEST_F(PreemptResume, SigkillResumesFromLastCommitAndLosesAtMostAnInterval) {
  std::string want;
  std::vector<std::string> want_log;
  Reference(&want, &want_log);
  if (HasFatalFailure()) return;

  uint32_t seed = uint32_t(std::chrono::steady_clock::now().time_since_epoch().count());
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  int kills = 0;
  std::string got;
  std::vector<std::string> segments_log;  // what survives: each segment's log up to the next resume
  const std::string log_path = dir_.Sub("killed.log");
  for (int attempt = 0; attempt < 50; ++attempt) {
    size_t before = ReadLines(log_path).size();
    Child c = Start(Args("killed"));
    std::string out;
    ASSERT_TRUE(WaitForLine(c.out, "ready", &out)) << out;
    uint64_t resumed = std::strtoull(out.c_str() + out.find("step ") + 5, nullptr, 10);
    // Steps logged after `resumed` by the previous, killed segment were lost and are replayed.
    std::vector<std::string> lines = ReadLines(log_path);
    uint64_t last_logged = before == 0 ? 0 : StepOf(lines[before - 1]);
    if (kills > 0) EXPECT_LE(last_logged - resumed, 2 * 25u) << "lost more than the checkpoint interval allows";
    while (!segments_log.empty() && StepOf(segments_log.back()) > resumed) segments_log.pop_back();
    bool kill_it = kills < 6;
    if (kill_it) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng() % 300));
      kill(c.pid, SIGKILL);
    }
    int status = Finish(c, &out);
    lines = ReadLines(log_path);
    segments_log.insert(segments_log.end(), lines.begin() + long(before), lines.end());
    if (WIFSIGNALED(status)) {
      ++kills;
      continue;
    }
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
    got = Checksum(out);
    break;
  }
  EXPECT_GE(kills, 3);
  EXPECT_EQ(got, want);
  EXPECT_EQ(segments_log, want_log) << "after dropping replayed steps, every sample once, in order";
}

TEST_F(PreemptResume, NoTimeForAnEmergencyCheckpointReportsTheLoss) {
  // A grace period shorter than the safety margin: nothing fits.
  std::vector<std::string> args = Args("no_grace");
  args.insert(args.end(), {"--grace", "0.5"});
  Child c = Start(args);
  std::string out;
  ASSERT_TRUE(WaitForLine(c.out, "ready", &out)) << out;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(c.pid, SIGTERM);
  int status = Finish(c, &out);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  ASSERT_EQ(WEXITSTATUS(status), kExitRequeue) << out;
  size_t at = out.find("preempted at step ");
  ASSERT_NE(at, std::string::npos) << out;
  uint64_t preempted = std::strtoull(out.c_str() + at + 18, nullptr, 10);
  // Landing right on a checkpointed step loses nothing; otherwise the loss is stated.
  EXPECT_TRUE(out.find("will be lost") != std::string::npos || out.find("nothing is lost") != std::string::npos)
      << out;

  Child again = Start(Args("no_grace"));
  std::string out2;
  ASSERT_TRUE(WaitForLine(again.out, "ready", &out2)) << out2;
  kill(again.pid, SIGKILL);
  Finish(again, &out2);
  uint64_t resumed = std::strtoull(out2.c_str() + out2.find("step ") + 5, nullptr, 10);
  EXPECT_LE(resumed, preempted);
  EXPECT_EQ(resumed % 25, 0u) << "resumed from a periodic checkpoint";
  EXPECT_LE(preempted - resumed, 2 * 25u);
}

}  // namespace
}  // namespace stint
