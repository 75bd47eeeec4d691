// Background copies give way to saves: the gate a copy waits on between
// pieces, the staging progress that keeps it closed until a save is staged,
// and the lower priority background threads run at.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "base/background_thread.h"
#include "checkpoint/foreground_gate.h"
#include "checkpoint/snapshot_progress.h"
#include "util/status_matchers.h"

namespace stint {
namespace {

TEST(ForegroundGate, YieldReturnsOnlyOnceEverySaveEnded) {
  ForegroundGate gate;
  gate.Yield(std::chrono::hours(1));  // no save: at once
  auto first = std::make_unique<ForegroundGate::Hold>(&gate);
  auto second = std::make_unique<ForegroundGate::Hold>(&gate);
  std::atomic<int> holds_left{2};
  std::atomic<bool> returned{false};
  int left_at_return = -1;
  std::thread copy([&] {
    gate.Yield(std::chrono::hours(1));  // far beyond this test's own deadline
    left_at_return = holds_left.load();
    returned = true;
  });
  holds_left = 1;
  first.reset();
  holds_left = 0;
  second.reset();
  copy.join();
  EXPECT_TRUE(returned);
  EXPECT_EQ(left_at_return, 0);
}

TEST(ForegroundGate, ACopyIsSlowedNeverStarved) {
  ForegroundGate gate;
  ForegroundGate::Hold saving(&gate);
  gate.Yield(std::chrono::milliseconds(1));  // returns after its patience
}

TEST(ForegroundGate, ProgressKeepsWhatItHoldsUntilTheSaveIsStaged) {
  const bool host_groups[2] = {true, true};
  SnapshotProgress progress(7, std::chrono::steady_clock::now(), host_groups, 0);
  auto held = std::make_shared<int>(1);
  std::weak_ptr<int> watch = held;
  progress.KeepUntilStaged(std::move(held));
  progress.HostGroupDone(WriteBarrier::kForward);
  EXPECT_FALSE(watch.expired());  // one group still copies
  progress.HostGroupDone(WriteBarrier::kOptimizerStep);
  EXPECT_TRUE(progress.staged_ready());
  EXPECT_TRUE(watch.expired());
  // Kept after the save was staged: released at once.
  auto late = std::make_shared<int>(2);
  std::weak_ptr<int> late_watch = late;
  progress.KeepUntilStaged(std::move(late));
  EXPECT_TRUE(late_watch.expired());
}

TEST(ForegroundGate, AFailedStagingReleasesToo) {
  const bool host_groups[2] = {true, true};
  SnapshotProgress progress(8, std::chrono::steady_clock::now(), host_groups, 0);
  auto held = std::make_shared<int>(1);
  std::weak_ptr<int> watch = held;
  progress.KeepUntilStaged(std::move(held));
  progress.Fail(Status::IoError("copy failed"));
  EXPECT_TRUE(watch.expired());
}

int ThreadNice() {
  errno = 0;
  return getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
}

TEST(BackgroundThread, LowersOnlyTheCallingThreadAndNeverRaises) {
  const int main_nice = ThreadNice();
  int lowered = 0, already_lower = 0;
  Status first, second;
  std::thread background([&] {
    first = LowerCurrentThreadPriority();
    lowered = ThreadNice();
    // A thread already below it stays where it is.
    ASSERT_EQ(setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 15), 0);
    second = LowerCurrentThreadPriority();
    already_lower = ThreadNice();
  });
  background.join();
  EXPECT_OK(first);
  EXPECT_OK(second);
  EXPECT_EQ(lowered, std::max(main_nice, kBackgroundNice));
  EXPECT_EQ(already_lower, 15);
  EXPECT_EQ(ThreadNice(), main_nice);  // per thread, not the process
}

}  // namespace
}  // namespace stint
