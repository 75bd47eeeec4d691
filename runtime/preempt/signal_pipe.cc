// The signal handler and the process-global state it needs.
//
// This file writes to a pipe directly instead of going through Env: a signal
// handler may only make async-signal-safe calls, and write(2) on a
// non-blocking pipe is one of the few that are.
#include "preempt/signal_pipe.h"

#include <fcntl.h>
#include <pthread.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>

namespace stint {
namespace internal {
namespace {

// The byte written per signal carries its number.
static_assert(NSIG <= 256, "signal numbers must fit in one byte");

// The write end of the pipe, or -1. A handler may run on any thread at any
// moment, so it can only find the pipe through a lock-free global.
std::atomic<int> g_write_fd{-1};
// Handlers between "loaded g_write_fd" and "done writing". The destructor
// waits for zero before closing the pipe, so a late handler never writes its
// byte into a descriptor number that has since been reused for a file.
std::atomic<int> g_handlers_writing{0};
// One SignalPipe per process.
std::atomic<bool> g_installed{false};
// What each signal did before we took it over. Written only while our
// handler is not installed for that signal (before sigaction() installs it;
// the kernel orders that against delivery), so handlers read it unlocked.
struct sigaction g_previous[NSIG];
// Which signals carry our handler, for the fork handler: those of the
// installed SignalPipe and those a destroyed one kept (KeepInstalledUntilExit).
std::atomic<bool> g_ours[NSIG];

static_assert(std::atomic<int>::is_always_lock_free, "the handler needs lock-free atomics");
static_assert(std::atomic<bool>::is_always_lock_free, "the handler needs lock-free atomics");

void OnSignal(int sig, siginfo_t* info, void* ucontext) {
  const int saved_errno = errno;
  // g_previous is copied while counted: once the destructor has seen the
  // count at zero, a new Install may overwrite it.
  g_handlers_writing.fetch_add(1, std::memory_order_seq_cst);
  const struct sigaction previous = g_previous[sig];
  const int fd = g_write_fd.load(std::memory_order_seq_cst);
  if (fd >= 0) {
    const unsigned char byte = static_cast<unsigned char>(sig);
    ssize_t rc;
    do {
      rc = ::write(fd, &byte, 1);
    } while (rc < 0 && errno == EINTR);
    // EAGAIN means 64 KiB of unread signal bytes: the watcher has plenty to
    // act on already, so the byte is dropped rather than blocking here.
  }
  g_handlers_writing.fetch_sub(1, std::memory_order_seq_cst);

  // Chain: a handler installed before us (a profiler, a framework's own
  // SIGTERM logic) keeps working. SIG_DFL is not chained: replacing the
  // default action (death) is the point; SIG_IGN means there is nothing to run.
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction != nullptr) previous.sa_sigaction(sig, info, ucontext);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
  }
  errno = saved_errno;
}

bool IsOurs(const struct sigaction& action) {
  return (action.sa_flags & SA_SIGINFO) && action.sa_sigaction == &OnSignal;
}

// In a child made by fork() (a DataLoader worker, a helper process) the
// watcher thread does not exist, yet the child would still write its signals
// into the parent's pipe and never die of SIGTERM. So the child gets back the
// dispositions the parent had before the watcher. Only async-signal-safe
// calls here: the parent may have had other threads at fork time.
void DetachAfterFork() {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (!g_ours[sig].load()) continue;
    struct sigaction current;
    if (::sigaction(sig, nullptr, &current) == 0 && IsOurs(current)) {
      ::sigaction(sig, &g_previous[sig], nullptr);
    }
    g_ours[sig].store(false);
  }
  g_write_fd.store(-1);
  // The child may install a watcher of its own.
  g_installed.store(false);
}

// Puts back what `signals` had before; the inverse of the install loop.
void Restore(const std::vector<int>& signals) {
  for (auto it = signals.rbegin(); it != signals.rend(); ++it) {
    const int sig = *it;
    struct sigaction current;
    // sigaction only fails for an invalid number, and these were validated.
    // Someone who replaced our handler since then keeps theirs: putting the
    // old one back would silently drop their handler.
    if (::sigaction(sig, nullptr, &current) == 0 && IsOurs(current)) {
      ::sigaction(sig, &g_previous[sig], nullptr);
    }
    g_ours[sig].store(false);
  }
}

}  // namespace

Result<std::unique_ptr<SignalPipe>> SignalPipe::Install(const std::vector<int>& signals) {
  if (signals.empty()) return Status::InvalidArgument("no preemption signals configured");
  std::vector<int> unique;
  for (int sig : signals) {
    if (sig <= 0 || sig >= NSIG) {
      return Status::InvalidArgument("preemption signal " + std::to_string(sig) +
                                     " is not a signal number");
    }
    if (sig == SIGKILL || sig == SIGSTOP) {
      return Status::InvalidArgument("preemption signal " + SignalName(sig) + " cannot be caught");
    }
    // Installing twice would save our own handler as "previous" and chain it
    // to itself forever.
    if (std::find(unique.begin(), unique.end(), sig) == unique.end()) unique.push_back(sig);
  }

  bool expected = false;
  if (!g_installed.compare_exchange_strong(expected, true)) {
    return Status::AlreadyExists(
        "a PreemptionWatcher is already installed in this process (there can be only one)");
  }
  // From here on every failure must give the guard back.
  static const int atfork_rc = ::pthread_atfork(nullptr, nullptr, &DetachAfterFork);
  if (atfork_rc != 0) {
    g_installed.store(false);
    return StatusFromErrno("pthread_atfork", atfork_rc);
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int err = errno;
    g_installed.store(false);
    return StatusFromErrno("pipe2 for the signal watcher", err);
  }
  UniqueFd read_fd(fds[0]);
  UniqueFd write_fd(fds[1]);
  g_write_fd.store(write_fd.get());

  std::vector<int> installed;
  for (int sig : unique) {
    // Saved before ours goes in: a signal delivered right after the install
    // must already find the handler to chain.
    struct sigaction current;
    if (::sigaction(sig, nullptr, &current) != 0) {
      const int err = errno;
      Restore(installed);
      g_write_fd.store(-1);
      g_installed.store(false);
      return StatusFromErrno("sigaction(" + SignalName(sig) + ") query", err);
    }
    // Ours, kept by an earlier SignalPipe: g_previous still holds what was
    // there before it (and handlers may be reading it right now).
    if (!(g_ours[sig].load() && IsOurs(current))) g_previous[sig] = current;
    struct sigaction ours = {};
    ours.sa_sigaction = &OnSignal;
    // The chained handler runs with the mask and alternate stack it asked for.
    ours.sa_mask = g_previous[sig].sa_mask;
    ours.sa_flags = SA_SIGINFO | SA_RESTART | (g_previous[sig].sa_flags & SA_ONSTACK);
    g_ours[sig].store(true);
    if (::sigaction(sig, &ours, nullptr) != 0) {
      const int err = errno;
      g_ours[sig].store(false);
      Restore(installed);
      g_write_fd.store(-1);
      g_installed.store(false);
      return StatusFromErrno("sigaction(" + SignalName(sig) + ")", err);
    }
    installed.push_back(sig);
  }
  return std::unique_ptr<SignalPipe>(
      new SignalPipe(std::move(installed), std::move(read_fd), std::move(write_fd)));
}

SignalPipe::~SignalPipe() {
  if (!keep_installed_.load()) Restore(signals_);
  // seq_cst on both sides: either a handler sees -1, or we see it counted.
  g_write_fd.store(-1, std::memory_order_seq_cst);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (g_handlers_writing.load(std::memory_order_seq_cst) != 0) {
    if (std::chrono::steady_clock::now() > give_up) {
      // A handler stuck mid-write (a stopped thread): leaking one descriptor
      // is better than letting its byte land in whatever reuses the number.
      write_fd_.Release();
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  write_fd_.Reset();
  read_fd_.Reset();
  g_installed.store(false);
}

std::string SignalName(int sig) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  if (const char* abbrev = ::sigabbrev_np(sig)) return std::string("SIG") + abbrev;
#else
  switch (sig) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGALRM:
      return "SIGALRM";
    case SIGTERM:
      return "SIGTERM";
    case SIGXCPU:
      return "SIGXCPU";
    case SIGKILL:
      return "SIGKILL";
    case SIGSTOP:
      return "SIGSTOP";
    default:
      break;
  }
#endif
  return "SIG" + std::to_string(sig);
}

}  // namespace internal
}  // namespace stint
