// PreemptionWatcher: reads the signal pipe on its own thread and keeps the
// pending notice (the one with the earliest deadline) for the training loop.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "preempt/signal_pipe.h"
#include "stint/preemption.h"

namespace stint {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kGraceEnv[] = "STINT_GRACE_SECONDS";
// A month: far above any real grace period, far below chrono overflow.
constexpr double kMaxGraceSeconds = 30.0 * 24 * 3600;

// $STINT_GRACE_SECONDS is a positive decimal number of seconds ("30", "2.5").
// Parsed by hand rather than with strtod, which also takes "inf", "0x1p4"
// and "1e3" and reads the decimal point from the locale.
Result<std::chrono::milliseconds> ParseGraceSeconds(const std::string& text) {
  auto malformed = [&](const char* why) {
    return Status::InvalidArgument(std::string(kGraceEnv) + "='" + text + "': " + why);
  };
  double seconds = 0;
  double scale = 0;  // 0 before the '.', then 0.1, 0.01, ...
  int digits = 0;
  for (char c : text) {
    if (c == '.') {
      if (scale != 0) return malformed("not a decimal number of seconds");
      scale = 0.1;
    } else if (c >= '0' && c <= '9') {
      if (scale == 0) {
        seconds = seconds * 10 + (c - '0');
      } else {
        seconds += (c - '0') * scale;
        scale /= 10;
      }
      ++digits;
      if (seconds > kMaxGraceSeconds) return malformed("more than 30 days");
    } else {
      return malformed("not a decimal number of seconds");
    }
  }
  if (digits == 0) return malformed("not a decimal number of seconds");
  const auto ms = static_cast<int64_t>(std::llround(seconds * 1000));
  if (ms <= 0) return malformed("must be at least 0.001 seconds");
  return std::chrono::milliseconds(ms);
}

class PreemptionWatcherImpl final : public PreemptionWatcher {
 public:
  PreemptionWatcherImpl(std::chrono::milliseconds grace, std::chrono::milliseconds safety,
                        std::unique_ptr<internal::SignalPipe> pipe, internal::UniqueFd stop_fd)
      : grace_(grace),
        safety_(safety),
        pipe_(std::move(pipe)),
        stop_fd_(std::move(stop_fd)),
        thread_([this] { Run(); }) {}

  ~PreemptionWatcherImpl() override {
    stopping_.store(true);
    const uint64_t one = 1;
    ssize_t rc;
    do {
      rc = ::write(stop_fd_.get(), &one, sizeof(one));
    } while (rc < 0 && errno == EINTR);
    // A failed write (EAGAIN: the counter is already non-zero, so a wakeup is
    // pending) cannot strand the thread: its poll timeout re-checks stopping_.
    thread_.join();
    // pipe_ is destroyed after this body: the handlers go back only once
    // nothing reads the pipe any more.
  }

  void Notify(const std::string& source, SteadyTime deadline) override {
    Offer(PreemptionNotice{source, Clock::now(), deadline});
  }

  bool requested() const override { return requested_.load(std::memory_order_acquire); }

  std::optional<PreemptionNotice> notice() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return notice_;
  }

  PreemptionPlan PlanAt(const CheckpointCost& cost) const override {
    return PlanPreemption(notice(), Clock::now(), safety_, cost);
  }

  uint64_t signals_received() const override { return signals_.load(); }

  void KeepUntilExit() override { pipe_->KeepInstalledUntilExit(); }

 private:
  // The earliest deadline is the one that counts: a later notice cannot give
  // back time an earlier one took away.
  void Offer(PreemptionNotice notice) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!notice_ || notice.deadline < notice_->deadline) notice_ = std::move(notice);
    }
    // Set after notice_ so that requested() == true implies notice() has a value.
    requested_.store(true, std::memory_order_release);
  }

  void Run() {
    struct pollfd fds[2] = {{pipe_->read_fd(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
    while (!stopping_.load()) {
      // The timeout is a backstop only: the destructor's eventfd write is
      // what wakes this thread promptly.
      const int rc = ::poll(fds, 2, /*timeout_ms=*/1000);
      if (rc < 0) {
        if (errno == EINTR) continue;
        // ENOMEM: transient. Back off instead of spinning.
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      if (fds[0].revents & POLLIN) DrainSignals();
      // An invalid descriptor would make poll return at once forever.
      if (fds[0].revents & POLLNVAL) fds[0].fd = -1;
      if (fds[1].revents & POLLNVAL) fds[1].fd = -1;
    }
  }

  void DrainSignals() {
    unsigned char bytes[256];
    for (;;) {
      const ssize_t n = ::read(pipe_->read_fd(), bytes, sizeof(bytes));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // EAGAIN: drained. EOF cannot happen: SignalPipe holds the write end.
      const SteadyTime now = Clock::now();
      for (ssize_t i = 0; i < n; ++i) {
        signals_.fetch_add(1);
        Offer(PreemptionNotice{"signal " + internal::SignalName(bytes[i]), now, now + grace_});
      }
    }
  }

  // Immutable after construction.
  const std::chrono::milliseconds grace_;
  const std::chrono::milliseconds safety_;
  const std::unique_ptr<internal::SignalPipe> pipe_;
  const internal::UniqueFd stop_fd_;

  mutable std::mutex mu_;
  std::optional<PreemptionNotice> notice_;  // guarded by mu_
  std::atomic<bool> requested_{false};
  std::atomic<uint64_t> signals_{0};
  std::atomic<bool> stopping_{false};
  // Last: it starts in the constructor and uses every member above.
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<PreemptionWatcher>> PreemptionWatcher::Install(
    const PreemptionOptions& options) {
  std::chrono::milliseconds grace = options.grace;
  // Read here, once: the scheduler's grace period is known at launch.
  // Empty counts as unset, so `STINT_GRACE_SECONDS= cmd` clears it.
  const char* env = std::getenv(kGraceEnv);
  if (env != nullptr && env[0] != '\0') {
    STINT_ASSIGN_OR_RETURN(grace, ParseGraceSeconds(env));
  }
  if (grace.count() <= 0) {
    return Status::InvalidArgument("PreemptionOptions.grace must be positive, got " +
                                   std::to_string(grace.count()) + " ms");
  }
  if (options.safety.count() < 0) {
    return Status::InvalidArgument("PreemptionOptions.safety must not be negative, got " +
                                   std::to_string(options.safety.count()) + " ms");
  }
  const int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (efd < 0) return StatusFromErrno("eventfd for the preemption watcher", errno);
  internal::UniqueFd stop_fd(efd);
  STINT_ASSIGN_OR_RETURN(std::unique_ptr<internal::SignalPipe> pipe,
                         internal::SignalPipe::Install(options.signals));
  return std::unique_ptr<PreemptionWatcher>(
      new PreemptionWatcherImpl(grace, options.safety, std::move(pipe), std::move(stop_fd)));
}

}  // namespace stint
