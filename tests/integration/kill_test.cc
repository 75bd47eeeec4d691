// SIGKILLs a real saving process at random points, again and again on the
// same root; after each kill the newest committed checkpoint loads and
// verifies, and it is never older than the last one the writer reported
// durable.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "util/checkpoint_checks.h"
#include "util/step_state.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

// Starts crash_writer with stdout on a pipe.
pid_t Spawn(const std::string& root, const char* engine, int* out_fd) {
  int p[2];
  if (pipe(p) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], 1);
    close(p[0]);
    close(p[1]);
    execl(STINT_CRASH_WRITER, STINT_CRASH_WRITER, root.c_str(), engine, (char*)nullptr);
    _exit(127);
  }
  close(p[1]);
  *out_fd = p[0];
  return pid;
}

// The last "durable N" the writer printed.
uint64_t LastDurable(int fd, uint64_t previous) {
  std::string all;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) all.append(buf, size_t(n));
  close(fd);
  uint64_t last = previous;
  size_t pos = 0;
  while ((pos = all.find("durable ", pos)) != std::string::npos) {
    last = std::strtoull(all.c_str() + pos + 8, nullptr, 10);
    pos += 8;
  }
  return last;
}

constexpr int64_t kWriterRows = 5000;  // as in crash_writer.cc

class KillTest : public ::testing::TestWithParam<const char*> {};

TEST_P(KillTest, SigkillAtRandomPoints) {
  const char* engine = GetParam();
  const int kills = std::getenv("STINT_KILLS") ? std::atoi(std::getenv("STINT_KILLS")) : 50;
  uint32_t seed = uint32_t(std::chrono::steady_clock::now().time_since_epoch().count());
  std::mt19937 rng(seed);
  std::printf("seed %u, %d kills\n", seed, kills);
  TempDir dir;
  std::string root = dir.Sub("ckpt");
  uint64_t durable = 0;
  int loaded_nonzero = 0;
  for (int i = 0; i < kills; ++i) {
    int fd = -1;
    pid_t pid = Spawn(root, engine, &fd);
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(std::chrono::microseconds(2000 + rng() % 120000));
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int wstatus = 0;
    ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(wstatus)) << "writer exited by itself (status " << wstatus
                                      << "): it failed; seed " << seed;
    durable = LastDurable(fd, durable);
    if (durable == 0) continue;  // killed before its first commit
    // Anything from the last reported commit on (a later one may have committed
    // just before the kill) is acceptable; nothing older, nothing half-written.
    std::vector<uint64_t> allowed;
    for (uint64_t s = durable; s <= durable + 1000; ++s) allowed.push_back(s);
    uint64_t loaded = 0;
    ExpectNewestLoadsOneOf(root, allowed, engine, &loaded, kWriterRows);
    ASSERT_FALSE(HasFailure()) << "after kill " << i << ", seed " << seed;
    durable = loaded;
    ++loaded_nonzero;
  }
  EXPECT_GT(loaded_nonzero, kills / 2) << "the writer rarely got to commit: kill delays too short";
}

INSTANTIATE_TEST_SUITE_P(Engines, KillTest, ::testing::Values("uring", "posix"));

}  // namespace
}  // namespace stint
