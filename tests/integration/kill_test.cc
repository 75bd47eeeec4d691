// SIGKILLs a real saving process at random points, again and again on the
// same root; after each kill the newest committed checkpoint loads and
// verifies, and it is never older than the last one the writer reported
// durable.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "util/checkpoint_checks.h"
#include "util/step_state.h"
#include "util/subprocess.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

// The last "durable N" the writer printed.
uint64_t LastDurable(const std::string& out, uint64_t previous) {
  uint64_t last = previous;
  size_t pos = 0;
  while ((pos = out.find("durable ", pos)) != std::string::npos) {
    last = std::strtoull(out.c_str() + pos + 8, nullptr, 10);
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
  // Kills land up to this long after the start; doubled (to 4 s at most)
  // whenever a writer had committed nothing yet, so a slow machine (ASan, a
  // busy host) still sees most kills land between commits.
  uint32_t spread_us = 120000;
  for (int i = 0; i < kills; ++i) {
    ChildProcess writer(STINT_CRASH_WRITER, {root, engine}, /*merge_stderr=*/false);
    ASSERT_TRUE(writer.started());
    std::this_thread::sleep_for(std::chrono::microseconds(2000 + rng() % spread_us));
    ASSERT_EQ(kill(writer.pid(), SIGKILL), 0);
    int wstatus = writer.Wait();
    ASSERT_TRUE(WIFSIGNALED(wstatus))
        << "writer exited by itself (status " << wstatus << "): it failed; seed " << seed;
    if (writer.output().find("durable ") == std::string::npos)
      spread_us = std::min<uint32_t>(2 * spread_us, 4000000);
    durable = LastDurable(writer.output(), durable);
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
