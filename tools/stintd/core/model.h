// The coordinator's objects: pools, windows, teams, jobs, segments, workers.
//
// Plain data, no I/O. The policy (policy.h) reads a ClusterState and the
// transitions (transitions.h) change it; stintd persists it (store/) and
// stint-sim replays traces through the very same code. Times are
// milliseconds since the Unix epoch (TimeMs) so windows an admin registers
// with wall-clock times need no conversion; kNever means "no known end".
#ifndef STINT_TOOLS_STINTD_CORE_MODEL_H_
#define STINT_TOOLS_STINTD_CORE_MODEL_H_

#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stint/status.h"

namespace stint::stintd {

using TimeMs = int64_t;
constexpr TimeMs kNever = std::numeric_limits<TimeMs>::max();

inline TimeMs SecondsToMs(double s) {
  return static_cast<TimeMs>(s * 1000.0 + (s >= 0 ? 0.5 : -0.5));
}

// Ordered: a level preempts only strictly lower levels; kCritical is never preempted.
enum class Priority : int { kLow = 0, kMedium = 1, kHigh = 2, kCritical = 3 };
const char* PriorityName(Priority p);                // "LOW", "MEDIUM", "HIGH", "CRITICAL"
Result<Priority> ParsePriority(std::string_view s);  // case-insensitive

// How a pool's GPUs are paid for. A spot pool's capacity may be revoked;
// a job revoked there too often falls back to the others (PriceRule).
enum class PoolPricing : int { kOnDemand = 0, kSpot = 1, kOnPrem = 2 };
const char* PoolPricingName(PoolPricing p);  // "on_demand", "spot", "on_prem"
Result<PoolPricing> ParsePoolPricing(std::string_view s);

// A price an admin (or a spot price feed) set, from at_ms on.
struct PricePoint {
  TimeMs at_ms = 0;
  double price_per_gpu_hour = 0;
};
// The price changes a pool keeps (oldest dropped first).
constexpr size_t kMaxPriceHistory = 1000;

// Pool names joined by commas ("" for none), and split back (empty names
// dropped): how a job's pools are written in the store and on the command
// line (names never hold a comma).
std::string JoinPoolNames(const std::vector<std::string>& pools);
std::vector<std::string> SplitPoolNames(std::string_view text);

struct Pool {
  explicit Pool(std::string name_ = "", std::string description_ = "")
      : name(std::move(name_)), description(std::move(description_)) {}
  std::string name;  // [A-Za-z0-9._-]{1,64}
  std::string description;
  PoolPricing pricing = PoolPricing::kOnDemand;
  // In force now, in the currency budgets are kept in (on-prem: amortised);
  // 0: unpriced, charged nothing. A segment keeps the price in force when
  // it started and is charged at it.
  double price_per_gpu_hour = 0;
  std::vector<PricePoint> price_history;  // oldest first; the last entry is in force
  // Where its nodes read and write checkpoints that outlive them: shared
  // paths and object-store prefixes, as the jobs' workers name them
  // ("/mnt/ckpt", "s3://bucket/runs"). Pools that list the same prefix
  // share that storage (core/storage.h). Empty: not declared, and the pool
  // is taken to reach every location, as when every pool saw one directory.
  std::vector<std::string> storage;
};

// Capacity lent to us for a time. Hard windows have a known close; spot
// windows may be revoked early (Revoke: end = now + notice_lead) and their
// end_ms is only a forecast (kNever when unknown).
enum class WindowKind : int { kHard = 0, kSpot = 1 };
const char* WindowKindName(WindowKind k);  // "hard", "spot"
Result<WindowKind> ParseWindowKind(std::string_view s);

struct Window {
  int64_t id = 0;
  std::string pool;
  int gpus = 0;  // > 0
  TimeMs start_ms = 0;
  TimeMs end_ms = kNever;  // hard: required and > start_ms
  WindowKind kind = WindowKind::kHard;
  TimeMs notice_lead_ms = 0;  // spot: warning the provider gives before revoking
  bool closed_early = false;  // an admin closed or the provider revoked it
  // The node (stint-agent) whose GPUs this window lends, and their indices
  // on it (gpus == node_gpus.size()); empty for an admin-declared window.
  std::string node;
  std::vector<int> node_gpus;
  std::string node_addr;  // host the node's workers reach each other at (MASTER_ADDR)
  // Declared by an admin for a named node (POST /v1/windows "nodes"): the
  // node's agent joins it instead of making its own. node_gpus is empty
  // until the agent joins when the admin gave only a count.
  bool declared = false;
  bool joined = false;  // declared: an agent has joined it
  bool open_at(TimeMs t) const { return start_ms <= t && t < end_ms; }
};

// Guaranteed GPUs (its jobs are ordered first while it is below them) and a
// borrowing limit above the guarantee (-1: unlimited). Usage is GPU-seconds
// decayed with a half-life (Slurm PriorityDecayHalfLife); it orders teams
// at equal priority so a heavy user yields to a light one.
struct Team {
  explicit Team(std::string name_ = "", int guaranteed = 0, int borrow_limit = -1, double usage = 0,
                TimeMs usage_at = 0)
      : name(std::move(name_)),
        guaranteed_gpus(guaranteed),
        borrow_limit_gpus(borrow_limit),
        usage_gpu_seconds(usage),
        usage_at_ms(usage_at) {}
  std::string name;
  int guaranteed_gpus = 0;
  int borrow_limit_gpus = -1;
  double usage_gpu_seconds = 0;
  TimeMs usage_at_ms = 0;  // when usage_gpu_seconds was last decayed
  // A spending limit per period, in the pools' currency (-1: none). While
  // what is left cannot pay a job's minimum segment, its new segments wait
  // (BlockReason::kBudget); once it cannot pay for the running segments to
  // checkpoint and stop, they get a kBudget notice. Periods follow each
  // other from period_start_ms; `spent` is charged within the current one.
  double budget = -1;
  double budget_period_seconds = 30 * 24 * 3600.0;
  TimeMs period_start_ms = 0;
  double spent = 0;
};

struct StepTime {
  double seconds = 0;
  int64_t steps = 0;
  double pace() const { return steps > 0 ? seconds / static_cast<double>(steps) : 0; }
};

// One point of a job's loss curve: the loss at `step`, reported by a
// worker of `segment_id`.
struct LossPoint {
  int64_t step = 0;
  double loss = 0;
  int64_t segment_id = 0;
  TimeMs at_ms = 0;
};
constexpr size_t kMaxLossPoints = 4096;

// The newest committed step of a job at one location (a root or replica
// root, as its workers name it), as they report it.
struct StoredStep {
  int64_t step = -1;
  int tier = 1;  // 1: the job's root (a node's disk or a shared path); 2: its replica root
  uint64_t bytes = 0;
  std::string pool;        // of the segment that reported it ("" if unknown)
  int64_t segment_id = 0;  // that reported it
  TimeMs at_ms = 0;
};
// Locations a job keeps (the one with the oldest step is dropped first).
constexpr size_t kMaxStoredLocations = 16;

enum class JobState : int { kPending = 0, kRunning = 1, kDone = 2, kCancelled = 3, kFailed = 4 };
const char* JobStateName(JobState s);  // "PENDING", "RUNNING", "DONE", "CANCELLED", "FAILED"

struct Job {
  int64_t id = 0;
  std::string name;
  std::string team;
  std::vector<std::string> pools;  // the pools it may run in; empty: any pool
  Priority priority = Priority::kMedium;
  int min_gpus = 1;  // never started with fewer (no partial gangs)
  int max_gpus = 1;  // >= min_gpus
  // true: all GPUs of a segment come from one window (one fabric, one
  // gang). false: the allocation may be assembled from several windows of
  // one pool.
  bool gang = true;
  bool preemptible = true;  // false: only a closing window ends its segments
  // Cost estimates in seconds; the library reports measured checkpoint
  // costs (ReportCheckpoint), which replace the submitted estimate.
  double checkpoint_seconds = 30;
  double restart_seconds = 60;
  double checkpoint_interval_seconds = 600;
  // Work left at max_gpus in seconds; 0 = unknown (a segment then runs
  // until its window or reservation ends).
  double remaining_seconds = 0;

  TimeMs submit_ms = 0;
  TimeMs eligible_ms = 0;  // when it last became pending: aging counts from here
  JobState state = JobState::kPending;
  int64_t segment_id = 0;  // the running segment, 0 when none
  // The newest token issued for the job: its newest segment's at start, then
  // each registered worker's. For display only: commits are checked per
  // worker incarnation (FencingValid). 0 before the first segment.
  uint64_t fencing_token = 0;
  int64_t last_step = 0;
  int64_t checkpoint_step = -1;    // newest durable checkpoint reported, -1 none
  TimeMs checkpoint_ms = 0;        // when it was reported durable
  int segments = 0;                // started so far
  int preemptions = 0;             // segments ended by a priority preemption
  double lost_gpu_seconds = 0;     // work lost by segments that did not checkpoint in time
  double service_gpu_seconds = 0;  // attained service: GPU-seconds its segments have held
  std::string message;             // last failure or cancel reason, for visibility
  // How stint-agent starts its workers: the JSON object of API.md's
  // "launch" ({"command":[...],"env":{},"workdir","gpus_per_worker",
  // "signal"}); "" for a job whose workers are started some other way.
  std::string launch;
  // When its launched workers crashed (exited neither 0, 75 nor 76) within
  // the crash window, oldest first: the crash-loop guard's memory.
  std::vector<TimeMs> crash_ms;
  // When its segments were revoked (spot), oldest first, within the longest
  // spot-fallback window of the price rules: PriceRule's memory.
  std::vector<TimeMs> revoked_ms;
  double cost = 0;      // charged for its segments so far
  int64_t samples = 0;  // the newest sample count its workers reported
  // Its pace at each world size (GPUs of a segment): the time and steps
  // between heartbeats of its segments once their restart was over, summed
  // over every segment of that size. What a continuous run at that size
  // needs per step (FigureJob).
  std::map<int, StepTime> step_time;
  // Its training loss as reported with heartbeats (at most kMaxLossPoints,
  // older ones thinned), for the loss curve across segments.
  std::vector<LossPoint> losses;
  // Evaluation of its checkpoints (EvalTask): the JSON of API.md's "eval"
  // ({"command":[...],"env":{},"workdir","every","gpus"}), opaque here;
  // "" for none. Every eval_every-th durable checkpoint is evaluated, on
  // eval_gpus (0: CPU only, or 1) of a node's leftover capacity.
  std::string eval;
  int eval_every = 0;
  int eval_gpus = 0;
  int64_t checkpoints = 0;  // durable checkpoints reported so far
  // Where its steps are, by location (the planner starts and moves it only
  // where its newest one can be read: core/storage.h).
  std::map<std::string, StoredStep> stored;
};

// An evaluation of one durable checkpoint of a job: a low-priority task a
// stint-agent runs on what its node has left (a CPU slot, or a GPU no
// segment holds), reading the checkpoint read-only. A GPU a segment is
// placed on takes precedence: the evaluation there is stopped and waits
// again. A newer checkpoint supersedes one still waiting.
enum class EvalState : int {
  kPending = 0,     // waiting for a node
  kRunning = 1,     // on `node`
  kDone = 2,        // `result` holds the metrics it printed
  kFailed = 3,      // `message` says why
  kSuperseded = 4,  // a newer checkpoint's evaluation replaced it before it ran
};
const char* EvalStateName(EvalState s);  // "pending", "running", "done", "failed", "superseded"

struct EvalTask {
  int64_t id = 0;
  int64_t job_id = 0;
  int64_t step = 0;  // the checkpoint evaluated
  EvalState state = EvalState::kPending;
  std::string node;  // running: where
  int gpu = -1;      // running: the node's GPU index it holds (-1: CPU only)
  TimeMs created_ms = 0;
  TimeMs started_ms = 0;
  TimeMs ended_ms = 0;
  int attempts = 0;    // starts so far (a stopped one starts again)
  std::string result;  // done: the JSON object it printed last
  std::string message;
};

struct Allocation {
  int64_t window_id = 0;
  int gpus = 0;
};

enum class SegmentState : int {
  kRunning = 0,    // no notice yet
  kNotified = 1,   // notice sent; waiting for the ack until deadline_ms
  kEnded = 2,      // acked: checkpoint durable, GPUs released early
  kCompleted = 3,  // the job finished in this segment
  kLost = 4,       // no ack by the deadline, or every worker's lease expired
  kCancelled = 5,  // the job was cancelled
};
const char* SegmentStateName(SegmentState s);
inline bool SegmentActive(SegmentState s) {
  return s == SegmentState::kRunning || s == SegmentState::kNotified;
}

enum class NoticeReason : int {
  kNone = 0,
  kWindowClose = 1,  // the window (or the planned segment end) is reached
  kRevoked = 2,      // spot revocation or an admin closing the window early
  kPreempted = 3,    // a higher-priority job needs the GPUs
  kCancelled = 4,    // the job was cancelled: checkpoint and stop
  kShrink = 5,       // to the ranks that leave a shrinking segment: checkpoint and exit
  kBudget = 6,       // its team's budget is spent: checkpoint and stop
  kMigrate = 7,      // a cheaper pool has room: checkpoint, the job restarts there
};
const char* NoticeReasonName(NoticeReason r);

// One run of a job in one allocation, from start to its planned end.
// The GPU indices a segment holds on one node's window (stint-agent's
// windows only), chosen by the coordinator when the segment starts.
struct Placement {
  int64_t window_id = 0;
  std::vector<int> gpus;
};

struct Segment {
  int64_t id = 0;
  int64_t job_id = 0;
  std::vector<Allocation> allocs;
  // Drawn when the segment starts: every token of its workers is larger,
  // every token of a later segment larger still. It is no worker's token,
  // so it never passes FencingValid.
  uint64_t fencing_token = 0;
  TimeMs start_ms = 0;
  TimeMs planned_end_ms = kNever;  // window end, a reservation, or the job's estimated finish
  SegmentState state = SegmentState::kRunning;
  NoticeReason notice_reason = NoticeReason::kNone;
  TimeMs notice_ms = 0;       // when the notice was sent (0: not yet)
  TimeMs deadline_ms = 0;     // GPUs are gone at this time; ack before it
  int64_t preempted_for = 0;  // job that caused a kPreempted notice
  TimeMs ended_ms = 0;
  TimeMs last_heartbeat_ms = 0;  // newest heartbeat of any of its workers (soft state)
  std::vector<Placement> placement;  // one per node window of allocs, in allocs' order
  // MASTER_PORT of its workers: unique among the active segments with the
  // same master node, from stintd's --master-ports range; 0 when it has no
  // node placement (or was started before ports were assigned).
  int master_port = 0;
  // A shrink in progress: at shrink_deadline_ms the segment gives up
  // shrink_release (whole node windows, or GPUs of other windows) for job
  // shrink_for; the workers in leaving_workers got a kShrink notice at
  // shrink_notice_ms. Persisted (schema version 9): a restarted stintd
  // goes on with a shrink in flight and releases at its deadline. On
  // stint-agent nodes a shrink releases whole node windows; their agents
  // get the notice for the GPUs that leave (API.md, "Launching").
  std::vector<Allocation> shrink_release;
  std::vector<int64_t> leaving_workers;
  TimeMs shrink_notice_ms = 0;
  TimeMs shrink_deadline_ms = 0;  // 0: no shrink in progress
  int64_t shrink_for = 0;
  // Cost and what it achieved. The price is its pool's when it started.
  double price_per_gpu_hour = 0;
  double cost = 0;
  int64_t start_step = -1;       // the job's durable checkpoint it resumed from (-1: none)
  int64_t checkpoint_step = -1;  // the newest durable checkpoint reported in it
  // Its emergency checkpoint: seconds from the notice to durable and on its
  // replicas, the slowest rank's report (-1: none reported).
  double notice_to_replicas_seconds = -1;
  // Its pace: the first heartbeat past start_step (its restart is over
  // then; 0: not yet) and the newest step reported, with their times.
  int64_t first_step = -1;
  TimeMs first_step_ms = 0;
  int64_t last_step = -1;
  TimeMs last_step_ms = 0;
  double checkpoint_seconds = 0;  // reported checkpoint times in it, summed
  // The id an executor other than stint-agent gave it ("slurm:1234"; ""
  // for none). Persisted (schema version 11): a restarted stintd --slurm
  // knows which segments it submitted even once Slurm forgot their jobs.
  std::string external_id;
  int gpus() const {
    int n = 0;
    for (const Allocation& a : allocs) n += a.gpus;
    return n;
  }
};

// A worker process of a running segment. Its lease lasts lease_ttl from the
// last heartbeat. Each registration is one incarnation with a token of its
// own (FencingValid says while it may commit); a worker that registers
// again is a new incarnation with a new, larger token.
struct Worker {
  int64_t id = 0;
  int64_t job_id = 0;
  int64_t segment_id = 0;
  std::string name;  // host:pid or what the worker calls itself
  // Unique per registration (stores written before schema version 4 may
  // hold one token shared by all workers of a segment).
  uint64_t fencing_token = 0;
  TimeMs registered_ms = 0;
  TimeMs last_heartbeat_ms = 0;  // soft state: not persisted per heartbeat
  bool released = false;         // its segment ended or it left
  // Lowercase hex SHA-256 of the random part of the worker's secret
  // (server/worker_secret.h). Empty for workers registered before schema
  // version 5: they still act with the shared worker token.
  std::string secret_hash;
  // The stint-agent node that launched it ("" for a worker that registered
  // itself): a shrink that releases the node's window releases it.
  std::string node;
};

// A node's own credential (POST /v1/nodes/{name}/token): its bearer token
// acts as that node's agent only. The token is "stn1.<name>.<64 hex>"; the
// store keeps the SHA-256 of the random part.
struct NodeCredential {
  std::string name;
  std::string secret_hash;
  TimeMs issued_ms = 0;
};

// The elastic group of a job: rounds of joining workers, each closing into
// one generation with ranks 0..world_size-1 (see rendezvous.h).
enum class RendezvousPhase : int {
  kJoining = 0,  // a round is open: workers join until it closes
  kFormed = 1,   // the generation is formed; a join or a loss opens the next round
};
const char* RendezvousPhaseName(RendezvousPhase p);  // "joining", "formed"

struct RendezvousMember {
  int64_t worker_id = 0;
  std::string endpoint;  // host:port of the worker's store listener, used when it is rank 0
  int rank = -1;         // set when the round closes
};

struct Rendezvous {
  int64_t job_id = 0;
  uint64_t generation = 0;  // of the open round or the formed group; grows by one per round
  RendezvousPhase phase = RendezvousPhase::kJoining;
  std::vector<RendezvousMember> members;  // joining: in join order; formed: by rank
  std::vector<int64_t> previous;          // worker ids of the last formed generation, by rank
  // While a round is open: the workers of `previous` removed since it opened
  // (lease expired, left, segment ended). Their tokens are stale; the others
  // of `previous` keep theirs until the round forms. Empty once formed.
  std::vector<int64_t> dropped;
  TimeMs opened_ms = 0;
  TimeMs last_call_ms = 0;  // the open round closes by then once it has min workers (0: not yet)
  TimeMs formed_ms = 0;
};

// Totals since the coordinator's state was created, for /metrics and
// stint-sim reports. Persisted with the objects, so a restart keeps them.
struct Counters {
  int64_t segments_started = 0;
  int64_t notices_sent = 0;
  int64_t preemptions = 0;  // notices with reason kPreempted
  int64_t revocations = 0;  // notices with reason kRevoked
  int64_t acks = 0;         // segments ended by a "checkpoint durable" ack
  int64_t segments_lost = 0;
  double lost_gpu_seconds = 0;    // work since the last durable checkpoint of lost segments
  double window_gpu_seconds = 0;  // offered by open windows (advanced by AccountTime)
  double used_gpu_seconds = 0;    // held by active segments (advanced by AccountTime)
  double wait_seconds_sum = 0;    // eligible -> start, over started segments
  // Cumulative counts of waits <= bound, bounds in kWaitBucketsSeconds.
  std::vector<int64_t> wait_buckets;
  TimeMs accounted_ms = 0;  // AccountTime has integrated up to here
};
inline const std::vector<double>& WaitBucketsSeconds() {
  static const std::vector<double> kBounds = {1, 10, 60, 300, 900, 3600, 4 * 3600.0, 24 * 3600.0};
  return kBounds;
}

// What an admin sets per priority level about prices.
struct PriceRule {
  // Pools priced above this are not used (-1: any price).
  double max_price_per_gpu_hour = -1;
  // A job whose segments were revoked this many times within
  // spot_fallback_window_seconds stops using spot pools (0: never).
  int spot_fallback_revocations = 0;
  double spot_fallback_window_seconds = 24 * 3600.0;
};

// Everything the policy sees. Ordered maps keep iteration (and therefore
// every decision) deterministic.
struct ClusterState {
  std::map<std::string, Pool> pools;
  std::map<int64_t, Window> windows;
  std::map<std::string, Team> teams;
  std::map<int64_t, Job> jobs;
  std::map<int64_t, Segment> segments;
  std::map<int64_t, Worker> workers;
  std::map<int64_t, Rendezvous> rendezvous;  // by job id
  std::map<std::string, NodeCredential> node_credentials;  // by node name
  std::map<int64_t, EvalTask> evals;
  Counters counters;
  std::array<PriceRule, 4> price_rules;  // by Priority
  // Counters for ids and fencing tokens; persisted with the objects.
  int64_t next_id = 1;
  uint64_t next_fencing_token = 1;
};

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_CORE_MODEL_H_
