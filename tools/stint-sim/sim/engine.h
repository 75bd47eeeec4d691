// The discrete-event engine of stint-sim: a virtual clock, the job
// execution model (work, checkpoints, restarts, notices, losses) and the
// capacity timeline, with a Scheduler deciding starts and notices.
//
// The engine plays the cluster and the workers; a Scheduler plays the
// coordinator. stint's own policy is one Scheduler (stint_scheduler.h,
// driving tools/stintd/core), the baselines are others (baselines.h). The
// same Workload and seed give a byte-identical event log. Thread-compatible.
#ifndef STINT_TOOLS_STINT_SIM_SIM_ENGINE_H_
#define STINT_TOOLS_STINT_SIM_SIM_ENGINE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "stintd/core/model.h"
#include "sim/trace.h"

namespace stint::sim {

using stintd::kNever;
using stintd::TimeMs;

inline TimeMs Ms(double s) { return s >= 9e15 / 1000 ? kNever : stintd::SecondsToMs(s); }

struct SimAlloc {
  int window = 0;  // index into Workload::windows
  int gpus = 0;
};

struct StartCmd {
  int64_t job = 0;
  std::vector<SimAlloc> allocs;
};
struct NoticeCmd {
  int64_t job = 0;
  TimeMs deadline = 0;   // the job must be off its GPUs by then
  bool preempt = false;  // for a higher-priority job (counted as a preemption)
};

// An elastic job's running segment moves to `allocs` at `at` (a shrink at
// its leaving ranks' deadline, a grow now); the group re-forms: no step for
// the job's restart_s, nothing lost.
struct ResizeCmd {
  int64_t job = 0;
  std::vector<SimAlloc> allocs;
  TimeMs at = 0;
};

struct Decisions {
  std::vector<StartCmd> starts;
  std::vector<NoticeCmd> notices;
  std::vector<ResizeCmd> resizes;
  std::vector<int64_t> kills;  // the scheduler declares the running segment lost now
  bool empty() const {
    return starts.empty() && notices.empty() && resizes.empty() && kills.empty();
  }
};

// What a scheduler may read about the truth (for assertions and for the
// baselines, which keep no shadow of the workers).
struct JobView {
  bool running = false;
  double progress_s = 0;  // work done, seconds at max_gpus
};

// Why a running segment ended, as the engine reports it.
enum class EndKind { kFinished, kAcked, kLost };

// The coordinator under test. Every call gets the virtual time `now` (ms
// from the start of the replay). Calls come in time order.
class Scheduler {
 public:
  virtual ~Scheduler() = default;
  virtual std::string Name() const = 0;
  // The trace and windows up front (ids are indexes); called once before any event.
  virtual void Init(const Workload& w) = 0;
  virtual void Submit(const SimJob& job, TimeMs now) = 0;
  // The window becomes known to the scheduler (hard windows: at replay
  // start; spot windows: when they open).
  virtual void WindowKnown(int window, TimeMs now) = 0;
  // The provider revokes a spot window: GPUs gone at `gone`.
  virtual void WindowRevoked(int window, TimeMs gone, TimeMs now) = 0;
  // A periodic checkpoint of the running job became durable.
  virtual void CheckpointDurable(int64_t job, double progress_s, double remaining_s,
                                 TimeMs now) = 0;
  // The running segment ended. kLost here means the engine saw the GPUs
  // vanish (window gone); a scheduler-declared kill is not reported back.
  virtual void SegmentEnded(int64_t job, EndKind kind, double remaining_s, TimeMs now) = 0;
  // Decisions for now. May be called several times at one instant.
  virtual Decisions Schedule(TimeMs now) = 0;
  // The next time the scheduler wants Schedule called without an event; kNever: none.
  virtual TimeMs NextWake(TimeMs now) const = 0;
  // What the coordinator itself charged the job so far, at the replay's
  // prices (stint: stintd's Job::cost); -1 where it keeps no such account
  // or charges other prices. Read once at the end, to check the engine's.
  virtual double CoordinatorCost(int64_t job) const {
    (void)job;
    return -1;
  }
};

struct EngineOptions {
  double tick_s = 300;                  // Schedule at least this often while jobs are pending
  bool workers_ignore_notices = false;  // ablation: workers never checkpoint on a notice
  double horizon_s = 0;                 // > 0: stop at this time even with jobs left
  bool keep_log = true;                 // keep the event log text (the hash is always computed)
  // A gang on k windows (nodes) progresses 1 + this x (k - 1) times slower
  // (PolicyConfig::gang_span_slowdown, the planner's view of the same cost).
  double gang_span_slowdown = 0.05;
  // Each team's guarantee (GPUs), for the borrowing figures of TeamUse; a
  // team not named here has team_guarantee_gpus.
  std::map<std::string, int> team_guarantees;
  int team_guarantee_gpus = 0;
};

// GPUs a team's segments held over the replay.
struct TeamUse {
  double gpu_s = 0;           // GPU-seconds held
  double borrowed_gpu_s = 0;  // GPU-seconds held above the team's guarantee
  int peak_gpus = 0;          // the most held at once
};

struct JobResult {
  int64_t id = 0;
  std::string team;
  int gpus = 0;
  double work_s = 0;
  double submit_s = 0;
  double first_start_s = -1;  // -1: never started
  double finish_s = -1;       // -1: not finished
  int segments = 0;
  int interruptions = 0;  // segments that ended without finishing the job
  int preemptions = 0;    // of those, for a higher-priority job
  int resizes = 0;        // shrinks and grows of running segments
  double lost_gpu_s = 0;
  // GPU-seconds its segments held x the price of their pool (the
  // Workload's prices), restarts, checkpoints and lost work included.
  double cost = 0;
  double coordinator_cost = -1;  // Scheduler::CoordinatorCost at the end
};

// What a pool's GPUs were held for, over every job.
struct PoolUse {
  double gpu_s = 0;
  double cost = 0;
};

// Utilisation as a step function: from `t_s` on, `allocated` of `offered` GPUs.
struct UtilPoint {
  double t_s = 0;
  int allocated = 0;
  int offered = 0;
};

struct SimResult {
  std::string policy;
  std::vector<JobResult> jobs;
  std::vector<UtilPoint> util;
  double end_s = 0;          // the last event
  double offered_gpu_s = 0;  // capacity over [0, end)
  double allocated_gpu_s = 0;
  double useful_gpu_s = 0;  // work of finished jobs, GPU-seconds
  double demand_capped_gpu_s =
      0;  // integral of min(offered, GPUs wanted by unfinished submitted jobs)
  double idle_while_waiting_gpu_s = 0;  // free GPUs while some job was pending
  double lost_gpu_s = 0;
  int64_t conservation_violations = 0;  // a window over-allocated, or used while closed
  int64_t schedule_calls = 0;
  std::map<std::string, TeamUse> teams;  // every team with a job
  double cost = 0;                       // the sum of the jobs' cost
  std::map<std::string, PoolUse> pools;  // every pool with a window
  std::string log;        // one line per event (if keep_log)
  uint64_t log_hash = 0;  // FNV-1a 64 of the whole log
};

// Runs `w` through `sched` (Init is called here). REQUIRES: w.jobs sorted
// by submit time with ids 0..n-1 (Normalize).
SimResult Simulate(const Workload& w, Scheduler& sched, const EngineOptions& options);

}  // namespace stint::sim

#endif  // STINT_TOOLS_STINT_SIM_SIM_ENGINE_H_
