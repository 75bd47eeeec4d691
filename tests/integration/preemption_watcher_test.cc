// PreemptionWatcher with real signals: raise(), kill(), a burst, the handlers
// that were there before (chained while installed, back afterwards), and a
// forked child whose SIGTERM ends in kExitRequeue instead of death.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "stint/preemption.h"
#include "util/status_matchers.h"

namespace stint {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Polls `done` every millisecond for up to `limit`.
bool WaitFor(const std::function<bool()>& done, milliseconds limit = seconds(5)) {
  const auto give_up = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > give_up) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

std::atomic<int> g_plain_calls{0};
void CountingHandler(int) { g_plain_calls.fetch_add(1); }

std::atomic<int> g_info_calls{0};
std::atomic<int> g_info_signo{0};
void CountingInfoHandler(int sig, siginfo_t* info, void*) {
  g_info_signo.store(info != nullptr ? info->si_signo : -sig);
  g_info_calls.fetch_add(1);
}

struct sigaction Query(int sig) {
  struct sigaction current = {};
  EXPECT_EQ(sigaction(sig, nullptr, &current), 0);
  return current;
}

// Puts a disposition in place for one test and the original back after it.
class ScopedDisposition {
 public:
  ScopedDisposition(int sig, const struct sigaction& action) : sig_(sig) {
    EXPECT_EQ(sigaction(sig, &action, &saved_), 0);
  }
  ~ScopedDisposition() { sigaction(sig_, &saved_, nullptr); }

 private:
  const int sig_;
  struct sigaction saved_ = {};
};

struct sigaction PlainHandler(void (*handler)(int)) {
  struct sigaction action = {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  return action;
}

class PreemptionWatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* value = getenv("STINT_GRACE_SECONDS")) saved_grace_ = value;
    unsetenv("STINT_GRACE_SECONDS");
    g_plain_calls = 0;
    g_info_calls = 0;
    g_info_signo = 0;
  }
  void TearDown() override {
    if (saved_grace_) {
      setenv("STINT_GRACE_SECONDS", saved_grace_->c_str(), 1);
    } else {
      unsetenv("STINT_GRACE_SECONDS");
    }
  }

  static std::unique_ptr<PreemptionWatcher> MustInstall(const PreemptionOptions& options = {}) {
    auto watcher = PreemptionWatcher::Install(options);
    EXPECT_OK(watcher);
    return watcher.ok() ? std::move(watcher).value() : nullptr;
  }

 private:
  std::optional<std::string> saved_grace_;
};

TEST_F(PreemptionWatcherTest, SigtermBecomesANoticeWithTheGraceDeadline) {
  PreemptionOptions options;
  options.grace = seconds(10);
  auto watcher = MustInstall(options);
  ASSERT_NE(watcher, nullptr);
  EXPECT_FALSE(watcher->requested());
  EXPECT_FALSE(watcher->notice().has_value());
  EXPECT_FALSE(watcher->PlanAt(CheckpointCost{}).preempted);

  const auto before = Clock::now();
  ASSERT_EQ(raise(SIGTERM), 0);  // without the watcher this would end the test binary
  ASSERT_TRUE(WaitFor([&] { return watcher->requested(); }));
  const auto after = Clock::now();

  const std::optional<PreemptionNotice> notice = watcher->notice();
  ASSERT_TRUE(notice.has_value());
  EXPECT_EQ(notice->source, "signal SIGTERM");
  EXPECT_GE(notice->received, before);
  EXPECT_LE(notice->received, after);
  EXPECT_EQ(notice->deadline - notice->received, seconds(10));
  EXPECT_GE(watcher->signals_received(), 1u);

  CheckpointCost cost;
  cost.state_bytes = 1000;
  cost.bytes_per_second = 1e6;
  const PreemptionPlan plan = watcher->PlanAt(cost);
  EXPECT_TRUE(plan.preempted);
  EXPECT_TRUE(plan.save);
  EXPECT_GT(plan.remaining_seconds, 7.0);  // 10 s grace - 2 s safety - the time the test took
  EXPECT_LE(plan.remaining_seconds, 8.0);
}

TEST_F(PreemptionWatcherTest, Sigusr1FromKillIsANotice) {
  auto watcher = MustInstall();
  ASSERT_NE(watcher, nullptr);
  ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
  ASSERT_TRUE(WaitFor([&] { return watcher->requested(); }));
  EXPECT_EQ(watcher->notice()->source, "signal SIGUSR1");
  EXPECT_EQ(watcher->notice()->deadline - watcher->notice()->received, seconds(30));
}

TEST_F(PreemptionWatcherTest, ConfiguredSignalsOnly) {
  PreemptionOptions options;
  options.signals = {SIGUSR2};
  struct sigaction ignore = PlainHandler(SIG_IGN);
  ScopedDisposition usr1(SIGUSR1, ignore);
  auto watcher = MustInstall(options);
  ASSERT_NE(watcher, nullptr);
  EXPECT_EQ(Query(SIGUSR1).sa_handler, SIG_IGN);  // not taken over
  ASSERT_EQ(raise(SIGUSR2), 0);
  ASSERT_TRUE(WaitFor([&] { return watcher->requested(); }));
  EXPECT_EQ(watcher->notice()->source, "signal SIGUSR2");
}

TEST_F(PreemptionWatcherTest, GraceSecondsFromEnvironmentOverridesOptions) {
  setenv("STINT_GRACE_SECONDS", "3.5", 1);
  PreemptionOptions options;
  options.grace = seconds(100);
  auto watcher = MustInstall(options);
  ASSERT_NE(watcher, nullptr);
  ASSERT_EQ(raise(SIGTERM), 0);
  ASSERT_TRUE(WaitFor([&] { return watcher->requested(); }));
  EXPECT_EQ(watcher->notice()->deadline - watcher->notice()->received, milliseconds(3500));
}

TEST_F(PreemptionWatcherTest, EmptyGraceSecondsCountsAsUnset) {
  setenv("STINT_GRACE_SECONDS", "", 1);
  PreemptionOptions options;
  options.grace = seconds(7);
  auto watcher = MustInstall(options);
  ASSERT_NE(watcher, nullptr);
  ASSERT_EQ(raise(SIGTERM), 0);
  ASSERT_TRUE(WaitFor([&] { return watcher->requested(); }));
  EXPECT_EQ(watcher->notice()->deadline - watcher->notice()->received, seconds(7));
}

TEST_F(PreemptionWatcherTest, MalformedGraceSecondsIsInvalidArgumentNamingTheVariable) {
  const struct sigaction before = Query(SIGTERM);
  for (const char* bad : {"abc", "-1", "0", "0.0000", "1e3", "inf", "nan", " 5", "5 ", "1.2.3", ".",
                          "0x10", "99999999999"}) {
    SCOPED_TRACE(bad);
    setenv("STINT_GRACE_SECONDS", bad, 1);
    auto watcher = PreemptionWatcher::Install();
    ASSERT_FALSE(watcher.ok());
    EXPECT_EQ(watcher.status().code(), Code::kInvalidArgument);
    EXPECT_NE(watcher.status().message().find("STINT_GRACE_SECONDS"), std::string::npos)
        << watcher.status().ToString();
    // Nothing stays installed.
    EXPECT_EQ(Query(SIGTERM).sa_handler, before.sa_handler);
  }
  // The failed attempts did not keep the one-per-process slot.
  unsetenv("STINT_GRACE_SECONDS");
  auto watcher = MustInstall();
  EXPECT_NE(watcher, nullptr);
}

TEST_F(PreemptionWatcherTest, InvalidOptionsAreRejected) {
  auto expect_invalid = [](const PreemptionOptions& options) {
    auto watcher = PreemptionWatcher::Install(options);
    ASSERT_FALSE(watcher.ok());
    EXPECT_EQ(watcher.status().code(), Code::kInvalidArgument) << watcher.status().ToString();
  };
  PreemptionOptions no_signals;
  no_signals.signals.clear();
  expect_invalid(no_signals);
  PreemptionOptions sigkill;
  sigkill.signals = {SIGTERM, SIGKILL};
  expect_invalid(sigkill);
  PreemptionOptions zero;
  zero.signals = {0};
  expect_invalid(zero);
  PreemptionOptions too_big;
  too_big.signals = {NSIG};
  expect_invalid(too_big);
  PreemptionOptions no_grace;
  no_grace.grace = milliseconds(0);
  expect_invalid(no_grace);
  PreemptionOptions negative_safety;
  negative_safety.safety = milliseconds(-1);
  expect_invalid(negative_safety);
  EXPECT_EQ(Query(SIGTERM).sa_handler, SIG_DFL);
}

TEST_F(PreemptionWatcherTest, DuplicateSignalsAreInstalledOnce) {
  struct sigaction counting = PlainHandler(&CountingHandler);
  ScopedDisposition usr1(SIGUSR1, counting);
  PreemptionOptions options;
  options.signals = {SIGUSR1, SIGUSR1};
  {
    auto watcher = MustInstall(options);
    ASSERT_NE(watcher, nullptr);
    ASSERT_EQ(raise(SIGUSR1), 0);
    ASSERT_TRUE(WaitFor([&] { return watcher->requested(); }));
    EXPECT_EQ(g_plain_calls.load(), 1);  // chained once, not to itself
  }
  EXPECT_EQ(Query(SIGUSR1).sa_handler, &CountingHandler);
}

TEST_F(PreemptionWatcherTest, NotifyWithAnEarlierDeadlineWins) {
  PreemptionOptions options;
  options.grace = seconds(5);
  auto watcher = MustInstall(options);
  ASSERT_NE(watcher, nullptr);

  const auto now = Clock::now();
  watcher->Notify("coordinator", now + seconds(60));
  EXPECT_TRUE(watcher->requested());  // Notify is synchronous
  EXPECT_EQ(watcher->notice()->source, "coordinator");
  EXPECT_EQ(watcher->notice()->deadline, now + seconds(60));

  // The signal's deadline (now + 5 s) is earlier.
  ASSERT_EQ(raise(SIGTERM), 0);
  ASSERT_TRUE(WaitFor([&] { return watcher->signals_received() >= 1; }));
  EXPECT_EQ(watcher->notice()->source, "signal SIGTERM");

  watcher->Notify("metadata", now + seconds(1));
  EXPECT_EQ(watcher->notice()->source, "metadata");
  EXPECT_EQ(watcher->notice()->deadline, now + seconds(1));

  // Later notices do not give time back.
  watcher->Notify("late", now + seconds(100));
  ASSERT_EQ(raise(SIGUSR1), 0);
  ASSERT_TRUE(WaitFor([&] { return watcher->signals_received() >= 2; }));
  EXPECT_EQ(watcher->notice()->source, "metadata");
}

TEST_F(PreemptionWatcherTest, SecondInstallIsAlreadyExists) {
  auto first = MustInstall();
  ASSERT_NE(first, nullptr);
  auto second = PreemptionWatcher::Install();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kAlreadyExists) << second.status().ToString();
  // The failed second one did not disturb the first.
  ASSERT_EQ(raise(SIGTERM), 0);
  ASSERT_TRUE(WaitFor([&] { return first->requested(); }));
  // Once the first is gone, a new one may be installed.
  first.reset();
  auto third = MustInstall();
  EXPECT_NE(third, nullptr);
}

TEST_F(PreemptionWatcherTest, PreviousHandlerIsChainedWhileInstalledAndBackAfterwards) {
  struct sigaction counting = PlainHandler(&CountingHandler);
  ScopedDisposition usr1(SIGUSR1, counting);
  {
    auto watcher = MustInstall();
    ASSERT_NE(watcher, nullptr);
    EXPECT_NE(Query(SIGUSR1).sa_handler, &CountingHandler);  // ours is in front
    ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
    ASSERT_TRUE(WaitFor([&] { return watcher->requested(); }));
    ASSERT_TRUE(WaitFor([] { return g_plain_calls.load() >= 1; }));
    EXPECT_EQ(g_plain_calls.load(), 1);
  }
  const struct sigaction restored = Query(SIGUSR1);
  EXPECT_FALSE(restored.sa_flags & SA_SIGINFO);
  EXPECT_EQ(restored.sa_handler, &CountingHandler);
  ASSERT_EQ(raise(SIGUSR1), 0);  // raise() runs the handler before it returns
  EXPECT_EQ(g_plain_calls.load(), 2);
  // SIGTERM had the default action before, and has it again.
  EXPECT_EQ(Query(SIGTERM).sa_handler, SIG_DFL);
}

TEST_F(PreemptionWatcherTest, SiginfoHandlerIsChainedWithItsSiginfo) {
  struct sigaction counting = {};
  counting.sa_sigaction = &CountingInfoHandler;
  counting.sa_flags = SA_SIGINFO;
  sigemptyset(&counting.sa_mask);
  ScopedDisposition term(SIGTERM, counting);
  {
    auto watcher = MustInstall();
    ASSERT_NE(watcher, nullptr);
    ASSERT_EQ(raise(SIGTERM), 0);
    EXPECT_EQ(g_info_calls.load(), 1);
    EXPECT_EQ(g_info_signo.load(), SIGTERM);
    ASSERT_TRUE(WaitFor([&] { return watcher->requested(); }));
  }
  const struct sigaction restored = Query(SIGTERM);
  EXPECT_TRUE(restored.sa_flags & SA_SIGINFO);
  EXPECT_EQ(restored.sa_sigaction, &CountingInfoHandler);
}

TEST_F(PreemptionWatcherTest, IgnoredSignalIsWatchedAndIgnoredAgainAfterwards) {
  struct sigaction ignore = PlainHandler(SIG_IGN);
  ScopedDisposition usr1(SIGUSR1, ignore);
  {
    auto watcher = MustInstall();
    ASSERT_NE(watcher, nullptr);
    ASSERT_EQ(raise(SIGUSR1), 0);
    ASSERT_TRUE(WaitFor([&] { return watcher->requested(); }));
  }
  EXPECT_EQ(Query(SIGUSR1).sa_handler, SIG_IGN);
}

TEST_F(PreemptionWatcherTest, HandlerInstalledAfterTheWatcherIsLeftInPlace) {
  struct sigaction original = Query(SIGUSR1);
  {
    auto watcher = MustInstall();
    ASSERT_NE(watcher, nullptr);
    struct sigaction counting = PlainHandler(&CountingHandler);
    ASSERT_EQ(sigaction(SIGUSR1, &counting, nullptr), 0);
  }
  EXPECT_EQ(Query(SIGUSR1).sa_handler, &CountingHandler);
  ASSERT_EQ(sigaction(SIGUSR1, &original, nullptr), 0);
}

TEST_F(PreemptionWatcherTest, BurstOfSignalsNeitherDeadlocksNorCrashes) {
  struct sigaction counting = PlainHandler(&CountingHandler);
  ScopedDisposition usr1(SIGUSR1, counting);
  auto watcher = MustInstall();
  ASSERT_NE(watcher, nullptr);

  // Notify from another thread meanwhile: the watcher thread and callers
  // take the same lock while handlers keep interrupting both.
  std::atomic<bool> stop{false};
  std::thread notifier([&] {
    while (!stop.load()) {
      watcher->Notify("poller", Clock::now() + seconds(120));
      (void)watcher->notice();
    }
  });
  for (int i = 0; i < 100; ++i) {
    if (i % 2 == 0) {
      ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
    } else {
      ASSERT_EQ(raise(SIGTERM), 0);
    }
  }
  // The kernel merges a pending standard signal with a new one, so "some"
  // is all that can be said about the count; the last raise() was delivered.
  ASSERT_TRUE(WaitFor([&] { return watcher->signals_received() >= 1; }));
  stop.store(true);
  notifier.join();
  EXPECT_TRUE(watcher->requested());
  EXPECT_LE(watcher->signals_received(), 100u);
  EXPECT_GE(g_plain_calls.load(), 1);
  EXPECT_LE(g_plain_calls.load(), 50);
  // The earliest deadline is a signal's (30 s), not the poller's (120 s).
  EXPECT_EQ(watcher->notice()->source.rfind("signal SIG", 0), 0u) << watcher->notice()->source;

  const auto start = Clock::now();
  watcher.reset();
  EXPECT_LT(Clock::now() - start, seconds(2));  // woken by the stop eventfd, not the timeout
}

// Reaps `pid`, waiting up to `limit`; SIGKILLs it if it does not finish.
std::optional<int> WaitForChild(pid_t pid, milliseconds limit) {
  const auto give_up = Clock::now() + limit;
  for (;;) {
    int status = 0;
    const pid_t rc = waitpid(pid, &status, WNOHANG);
    if (rc == pid) return status;
    if (rc < 0 && errno != EINTR) return std::nullopt;
    if (Clock::now() > give_up) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return std::nullopt;
    }
    std::this_thread::sleep_for(milliseconds(2));
  }
}

// Reads one byte from `fd` within `limit`.
bool ReadByte(int fd, milliseconds limit) {
  struct pollfd p = {fd, POLLIN, 0};
  if (poll(&p, 1, int(limit.count())) != 1) return false;
  char c;
  return read(fd, &c, 1) == 1;
}

// Forks a child that (optionally) installs a watcher, says "ready" on a
// pipe, and waits up to 10 s for a notice; then sends it SIGTERM and returns
// its wait status.
std::optional<int> SigtermChild(bool install) {
  int ready[2];
  EXPECT_EQ(pipe2(ready, O_CLOEXEC), 0);
  const pid_t pid = fork();
  if (pid < 0) return std::nullopt;
  if (pid == 0) {
    close(ready[0]);
    std::unique_ptr<PreemptionWatcher> watcher;
    if (install) {
      auto installed = PreemptionWatcher::Install();
      if (!installed.ok()) _exit(3);
      watcher = std::move(installed).value();
    }
    if (write(ready[1], "r", 1) != 1) _exit(4);
    const auto give_up = Clock::now() + seconds(10);
    while (Clock::now() < give_up) {
      if (watcher && watcher->requested()) {
        _exit(watcher->notice()->source == "signal SIGTERM" ? kExitRequeue : 5);
      }
      std::this_thread::sleep_for(milliseconds(1));
    }
    _exit(6);
  }
  close(ready[1]);
  const bool child_ready = ReadByte(ready[0], seconds(10));
  close(ready[0]);
  EXPECT_TRUE(child_ready);
  if (child_ready) {
    EXPECT_EQ(kill(pid, SIGTERM), 0);
  }
  return WaitForChild(pid, seconds(10));
}

TEST_F(PreemptionWatcherTest, ForkedChildWithoutWatcherDiesOfSigterm) {
  const std::optional<int> status = SigtermChild(/*install=*/false);
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFSIGNALED(*status)) << "status " << *status;
  EXPECT_EQ(WTERMSIG(*status), SIGTERM);
}

TEST_F(PreemptionWatcherTest, ForkedChildWithWatcherExitsWithRequeueOnSigterm) {
  const std::optional<int> status = SigtermChild(/*install=*/true);
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status)) << "status " << *status;
  EXPECT_EQ(WEXITSTATUS(*status), kExitRequeue);
}

TEST_F(PreemptionWatcherTest, ChildForkedFromAWatchedProcessGetsTheOldDispositionsBack) {
  auto watcher = MustInstall();
  ASSERT_NE(watcher, nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Only async-signal-safe calls: the parent has the watcher thread.
    struct sigaction current;
    if (sigaction(SIGTERM, nullptr, &current) != 0) _exit(3);
    if (current.sa_handler != SIG_DFL) _exit(4);
    raise(SIGTERM);  // dies here, as it would have without the watcher
    _exit(5);
  }
  const std::optional<int> status = WaitForChild(pid, seconds(10));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFSIGNALED(*status)) << "status " << *status;
  EXPECT_EQ(WTERMSIG(*status), SIGTERM);
  // And the child's signal did not turn up as the parent's notice.
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(watcher->requested());
}

// After KeepUntilExit() the signals stay caught once the watcher is gone: a
// SIGTERM while the process winds down (its run over) is dropped, and the
// process exits with the code it chose. A watcher installed later takes them
// over and, destroyed, gives back what was there before the first (SIG_DFL).
TEST_F(PreemptionWatcherTest, KeptSignalsStayCaughtAfterTheWatcherUntilExit) {
  int ready[2];
  int release[2];
  ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(release, O_CLOEXEC), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(ready[0]);
    close(release[1]);
    {
      auto first = PreemptionWatcher::Install();
      if (!first.ok()) _exit(3);
      (*first)->KeepUntilExit();
    }  // the run is over: destroyed
    if (write(ready[1], "r", 1) != 1) _exit(4);
    char byte;
    // The parent's SIGTERM arrives while this blocks; its closing the pipe ends it.
    while (read(release[0], &byte, 1) < 0 && errno == EINTR) {
    }
    {
      auto second = PreemptionWatcher::Install();
      if (!second.ok()) _exit(5);
      if (raise(SIGTERM) != 0) _exit(6);
      const auto give_up = Clock::now() + seconds(10);
      while (!(*second)->requested()) {
        if (Clock::now() > give_up) _exit(7);
        std::this_thread::sleep_for(milliseconds(1));
      }
    }
    struct sigaction current;
    if (sigaction(SIGTERM, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) _exit(8);
    _exit(0);
  }
  close(ready[1]);
  close(release[0]);
  const bool child_ready = ReadByte(ready[0], seconds(10));
  close(ready[0]);
  EXPECT_TRUE(child_ready);
  if (child_ready) {
    EXPECT_EQ(kill(pid, SIGTERM), 0);  // pending on the child once kill() returns
  }
  close(release[1]);
  const std::optional<int> status = WaitForChild(pid, seconds(20));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status)) << "status " << *status;
  EXPECT_EQ(WEXITSTATUS(*status), 0);
}

#ifdef STINT_PREEMPTION_EXAMPLE
// examples/preemption end to end: SIGTERM mid-run, the plan, exit 75.
TEST_F(PreemptionWatcherTest, ExampleExitsWithRequeueOnSigterm) {
  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(out[1], 1);
    execl(STINT_PREEMPTION_EXAMPLE, STINT_PREEMPTION_EXAMPLE, "--step-ms", "5",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string output;
  auto read_until = [&](const std::string& needle) {
    const auto give_up = Clock::now() + seconds(10);
    while (output.find(needle) == std::string::npos && Clock::now() < give_up) {
      struct pollfd p = {out[0], POLLIN, 0};
      if (poll(&p, 1, 100) != 1) continue;
      char buf[512];
      const ssize_t n = read(out[0], buf, sizeof(buf));
      if (n <= 0) break;
      output.append(buf, size_t(n));
    }
    return output.find(needle) != std::string::npos;
  };
  const bool stepping = read_until("step 10\n");
  EXPECT_TRUE(stepping) << output;
  if (stepping) {
    EXPECT_EQ(kill(pid, SIGTERM), 0);
  }
  read_until("(requeue)\n");
  close(out[0]);
  const std::optional<int> status = WaitForChild(pid, seconds(10));
  ASSERT_TRUE(status.has_value()) << output;
  ASSERT_TRUE(WIFEXITED(*status)) << "status " << *status << "\n" << output;
  EXPECT_EQ(WEXITSTATUS(*status), kExitRequeue) << output;
  EXPECT_NE(output.find("notice: signal SIGTERM"), std::string::npos) << output;
  EXPECT_NE(output.find("plan: emergency checkpoint needs"), std::string::npos) << output;
  EXPECT_NE(output.find("emergency checkpoint at step"), std::string::npos) << output;
}
#endif

}  // namespace
}  // namespace stint
