// SignalPipe: turns POSIX signals into bytes on a self-pipe, so that a normal
// thread (PreemptionWatcher's) can act on them. The handler only writes the
// signal number as one byte and chains the handler that was installed before.
//
// Process-global: at most one SignalPipe exists per process (signal
// dispositions are process state). Thread-safe; read_fd() is for one reader.
#ifndef STINT_PREEMPT_SIGNAL_PIPE_H_
#define STINT_PREEMPT_SIGNAL_PIPE_H_

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "stint/status.h"

namespace stint {
namespace internal {

// Owns one file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = other.Release();
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership without closing.
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // close() is not retried on EINTR: on Linux the descriptor is gone either
  // way, and a retry could close a descriptor another thread just opened.
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

class SignalPipe {
 public:
  // Creates the pipe and installs the handler (SA_RESTART) for `signals`,
  // remembering the dispositions they replace. Duplicates are ignored.
  // Errors: kInvalidArgument for an empty list, a number outside (0, NSIG) or
  // SIGKILL/SIGSTOP; kAlreadyExists if a SignalPipe exists in this process;
  // kIoError (with errno) if pipe2 or sigaction fails, in which case nothing
  // stays installed.
  static Result<std::unique_ptr<SignalPipe>> Install(const std::vector<int>& signals);

  // Restores the previous dispositions (unless someone replaced ours since,
  // or KeepInstalledUntilExit() was called), then closes the pipe. A forked
  // child must not destroy a SignalPipe it inherited; it should exec or _exit
  // (the fork handler already detached it from the signals, see
  // signal_pipe.cc).
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  // The destructor leaves the handler installed: from then on it drops the
  // signals (there is no pipe) and chains the previous handlers, until the
  // process exits or the next Install() takes the signals over.
  void KeepInstalledUntilExit() { keep_installed_.store(true); }

  // Non-blocking read end: each byte is one delivered signal's number.
  int read_fd() const { return read_fd_.get(); }
  const std::vector<int>& signals() const { return signals_; }

 private:
  SignalPipe(std::vector<int> signals, UniqueFd read_fd, UniqueFd write_fd)
      : signals_(std::move(signals)),
        read_fd_(std::move(read_fd)),
        write_fd_(std::move(write_fd)) {}

  const std::vector<int> signals_;  // installed, in installation order
  UniqueFd read_fd_;
  UniqueFd write_fd_;  // used by the handler through a global (see .cc)
  std::atomic<bool> keep_installed_{false};
};

// "SIGTERM", "SIGUSR1", ...; "SIG42" for a number without a name.
std::string SignalName(int sig);

}  // namespace internal
}  // namespace stint

#endif  // STINT_PREEMPT_SIGNAL_PIPE_H_
