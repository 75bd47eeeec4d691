// Preemption: notices that this process will lose its GPUs, the deadline
// they imply, and the decision taken at the next step boundary.
//
// Sources: POSIX signals (SIGTERM, and SIGUSR1 for Slurm's --signal; the set
// is configurable), handled by a dedicated watcher thread (the handler only
// writes one byte to a self-pipe: async-signal-safe), with the handlers that
// were installed before chained; and Notify() for every other source (the
// coordinator's notices, a cloud metadata poller).
//
// At each step boundary the training loop asks PlanAt(): if a notice is
// pending it gets either "take an emergency checkpoint now" (it fits in the
// remaining grace, judged from measured checkpoint throughput) or "no time:
// N steps since the last durable checkpoint will be lost". Then the process
// exits with kExitRequeue so the scheduler runs it again.
//
// PreemptionWatcher is thread-safe. At most one is installed per process:
// it is the one piece of process-global state (signal dispositions).
#ifndef STINT_INCLUDE_STINT_PREEMPTION_H_
#define STINT_INCLUDE_STINT_PREEMPTION_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stint/launch_env.h"  // LaunchEnv, once declared here
#include "stint/status.h"

namespace stint {

// Exit codes: documented contract with schedulers and wrappers.
constexpr int kExitRequeue =
    75;  // preempted, state saved or loss reported: run me again (EX_TEMPFAIL)
constexpr int kExitDoNotRequeue =
    76;  // a fatal error a restart cannot fix (bad config, corrupt data)

using SteadyTime = std::chrono::steady_clock::time_point;

struct PreemptionNotice {
  std::string source;  // "signal SIGTERM", "coordinator", ...
  SteadyTime received;
  SteadyTime deadline;  // when the GPUs go away
};

struct PreemptionOptions {
  // Signals that mean "you are being preempted". Duplicates are ignored.
  // REQUIRES: non-empty; no SIGKILL or SIGSTOP. Default: SIGTERM, SIGUSR1.
  std::vector<int> signals = {15, 10};
  // Time between a signal and the hard kill (Slurm GraceTime / KillWait,
  // Kubernetes terminationGracePeriodSeconds). $STINT_GRACE_SECONDS (a
  // positive decimal number of seconds, e.g. "2.5"; empty means unset)
  // overrides it. REQUIRES: positive. Default: 30 s.
  std::chrono::milliseconds grace{std::chrono::seconds(30)};
  // Margin kept free before the deadline. REQUIRES: >= 0. Default: 2 s.
  std::chrono::milliseconds safety{std::chrono::seconds(2)};
};

// What to do at a step boundary.
struct PreemptionPlan {
  bool preempted = false;        // a notice is pending
  bool save = false;             // take an emergency checkpoint now
  double remaining_seconds = 0;  // until deadline - safety
  double estimated_seconds = 0;  // for the emergency checkpoint
  uint64_t steps_lost = 0;       // when !save: steps since the last durable checkpoint
  std::string reason;            // one line for the log
};

// Measured costs the decision is based on.
struct CheckpointCost {
  uint64_t state_bytes = 0;          // of the next checkpoint
  double bytes_per_second = 0;       // measured persist throughput; 0 = unknown
  double fixed_seconds = 0.05;       // snapshot + commit overhead
  uint64_t steps_since_durable = 0;  // steps done after the newest durable checkpoint
};

// Pure: the decision for a notice at time `now`. Unknown throughput means
// "try": losing work is worse than a checkpoint cut short (the previous one
// stays loadable).
PreemptionPlan PlanPreemption(const std::optional<PreemptionNotice>& notice, SteadyTime now,
                              std::chrono::milliseconds safety, const CheckpointCost& cost);

class PreemptionWatcher {
 public:
  // Installs the handlers and starts the watcher thread. A signal's notice
  // has received = when the thread read it and deadline = received + grace.
  // Errors: kAlreadyExists if another watcher is installed in this process;
  // kInvalidArgument for bad options or a malformed $STINT_GRACE_SECONDS
  // (the message names the variable); kIoError if a syscall fails. On error
  // no handler stays installed.
  static Result<std::unique_ptr<PreemptionWatcher>> Install(const PreemptionOptions& options = {});
  // Joins the thread and restores the previous handlers (unless something
  // replaced ours since, or KeepUntilExit() was called). After that another
  // watcher may be installed. A process made by fork() gets the pre-watcher
  // dispositions back at once and must not destroy an inherited watcher
  // (exec or _exit instead).
  virtual ~PreemptionWatcher() = default;

  // The run this watcher served is over (finished, or stopped to be
  // requeued): from now until the process exits, the preemption signals stay
  // caught, also after this watcher is destroyed, so a signal that arrives
  // late (the scheduler's, a launcher shutting its workers down) cannot turn
  // the exit code the run decided on into a kill. Such late signals are
  // dropped; handlers installed before the watcher are still chained. A
  // watcher installed later takes the signals over as usual. Idempotent.
  virtual void KeepUntilExit() = 0;

  // A notice from another source (received = now); the earliest deadline wins.
  virtual void Notify(const std::string& source, SteadyTime deadline) = 0;
  // Cheap (one atomic load): call it every step.
  virtual bool requested() const = 0;
  virtual std::optional<PreemptionNotice> notice() const = 0;
  // PlanPreemption for the pending notice, now.
  virtual PreemptionPlan PlanAt(const CheckpointCost& cost) const = 0;
  // Signals read from the pipe so far (for logs and tests). The kernel merges
  // a standard signal that arrives while one is pending, so a burst of N
  // kill()s may count fewer than N.
  virtual uint64_t signals_received() const = 0;
};

}  // namespace stint

#endif  // STINT_INCLUDE_STINT_PREEMPTION_H_
