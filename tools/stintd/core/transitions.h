// Every change to a ClusterState: admin requests, worker reports, and the
// application of a Plan. Pure (no I/O, time passed in), shared by stintd
// and stint-sim. Each validates its input first and changes nothing when it
// returns an error (kInvalidArgument naming the field, kNotFound naming the
// object, kFailedPrecondition for a request the object's state refuses).
// Each records what it touched in `changes` so stintd writes exactly those
// rows in the same SQLite transaction before it answers.
#ifndef STINT_TOOLS_STINTD_CORE_TRANSITIONS_H_
#define STINT_TOOLS_STINTD_CORE_TRANSITIONS_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "stintd/core/model.h"
#include "stintd/core/policy.h"

namespace stint::stintd {

struct Changes {
  std::set<std::string> pools;
  std::set<int64_t> windows;
  std::set<std::string> teams;
  std::set<int64_t> jobs;
  std::set<int64_t> segments;
  std::set<int64_t> workers;
  std::set<int64_t> rendezvous;  // by job id
  std::set<std::string> node_credentials;
  std::set<int64_t> evals;
  bool counters = false;         // next_id / next_fencing_token / Counters
  bool empty() const {
    return pools.empty() && windows.empty() && teams.empty() && jobs.empty() && segments.empty() &&
           workers.empty() && rendezvous.empty() && node_credentials.empty() && evals.empty() &&
           !counters;
  }
  void Merge(const Changes& other);
};

// The team a job without one belongs to; created on first use.
constexpr const char* kDefaultTeam = "default";

// Validates the name, pricing, price and storage prefixes (normalized,
// core/storage.h); a price > 0 starts its history at `now`.
Status AddPool(ClusterState& s, Pool pool, TimeMs now, Changes* changes);

// Replaces what storage the pool's nodes reach (empty: undeclared, every
// location). kNotFound for an unknown pool.
Status SetPoolStorage(ClusterState& s, const std::string& pool,
                      const std::vector<std::string>& storage, Changes* changes);

// Returns the new window's id. Validates pool, gpus > 0, start < end, a
// hard window's finite end, notice lead >= 0.
Result<int64_t> AddWindow(ClusterState& s, Window window, TimeMs now, Changes* changes);

// Ends a window early: end = max(now, min(end, now + lead_ms)). Its
// segments get their notices from the next plan (deadline = the new end).
Status CloseWindow(ClusterState& s, int64_t window_id, TimeMs lead_ms, TimeMs now,
                   Changes* changes);

// Creates or updates a team's guarantee, borrowing limit, budget and
// budget period (usage and what it spent kept; a new team's first period
// starts at `now`).
Status PutTeam(ClusterState& s, const Team& team, TimeMs now, Changes* changes);

// Returns the new job's id. `spec` gives name, team, pool, priority, GPU
// range, gang, preemptible, cost estimates; the rest is set here.
Result<int64_t> SubmitJob(ClusterState& s, Job spec, TimeMs now, Changes* changes);

// Pending: cancelled at once. Running: its segment ends (kCancelled) and its
// workers are released; they learn it from their next heartbeat.
Status CancelJob(ClusterState& s, int64_t job_id, const std::string& reason, TimeMs now,
                 Changes* changes);

Status SetPriority(ClusterState& s, int64_t job_id, Priority priority, Changes* changes);

// Starts, notices and losses of `plan` (made from this same state at `now`).
void ApplyPlan(ClusterState& s, const Plan& plan, TimeMs now, Changes* changes);

// A worker joins the job's running segment as a new incarnation with a
// fencing token of its own, the next of s.next_fencing_token (so larger
// than its segment's and every earlier token); the job's fencing_token
// becomes it. kFailedPrecondition when the job has no active segment.
Result<Worker> RegisterWorker(ClusterState& s, int64_t job_id, const std::string& name, TimeMs now,
                              Changes* changes);

// What a worker learns from a heartbeat.
struct WorkerView {
  // false: it left, or its segment ended: stop. A worker dropped from the
  // rendezvous stays active (it may re-join), but FencingValid refuses its
  // token until a generation forms with it.
  bool active = false;
  uint64_t fencing_token = 0;  // the worker's own (what it got at registration)
  int64_t segment_id = 0;
  SegmentState segment_state = SegmentState::kRunning;
  NoticeReason notice_reason = NoticeReason::kNone;
  TimeMs notice_ms = 0;    // when the notice was sent
  TimeMs deadline_ms = 0;  // set once a notice was sent
};
Result<WorkerView> ViewWorker(const ClusterState& s, int64_t worker_id);

// What a heartbeat reports besides the lease: the newest finished step,
// and optionally the samples seen so far and the training loss at
// loss_step (`step` when not given).
struct HeartbeatReport {
  int64_t step = 0;
  std::optional<int64_t> samples;
  std::optional<double> loss;
  std::optional<int64_t> loss_step;
};
// Renews the lease (soft state: changes nothing persisted) and records the
// step, samples and loss (RecordProgress in accounting.h). kNotFound for an
// unknown worker.
Result<WorkerView> Heartbeat(ClusterState& s, int64_t worker_id, const HeartbeatReport& report,
                             TimeMs now);

// A checkpoint of `step` is durable; it took `seconds` (replaces the job's
// estimate by a moving average) and holds `bytes`. For an emergency
// checkpoint, `notice_to_replicas_seconds`: the seconds from the notice to
// durable and on its replicas (the segment keeps the slowest rank's).
Status ReportCheckpoint(ClusterState& s, int64_t worker_id, int64_t step, double seconds,
                        uint64_t bytes, TimeMs now, Changes* changes,
                        std::optional<double> notice_to_replicas_seconds = std::nullopt);

// `step` of the worker's job is committed at `location` (tier 1: its root,
// 2: its replica root), holding `bytes`. Kept as the newest step there
// (an older report changes nothing); a job keeps kMaxStoredLocations
// locations, dropping the one with the oldest step.
Status ReportStored(ClusterState& s, int64_t worker_id, const std::string& location, int tier,
                    int64_t step, uint64_t bytes, TimeMs now, Changes* changes);

// Remaining work estimate (seconds at max_gpus) and the step reached.
Status ReportProgress(ClusterState& s, int64_t worker_id, int64_t step, double remaining_seconds,
                      TimeMs now, Changes* changes);

// "Checkpoint durable, releasing the GPUs": the segment ends now (kEnded),
// the job is pending again. Accepted from a worker of the active segment.
Status AckSegment(ClusterState& s, int64_t worker_id, int64_t step, TimeMs now, Changes* changes);

// The job is complete: segment kCompleted, job kDone.
Status FinishJob(ClusterState& s, int64_t worker_id, TimeMs now, Changes* changes);

// A worker leaves its segment (its lease is released); the segment goes on.
Status ReleaseWorker(ClusterState& s, int64_t worker_id, TimeMs now, Changes* changes);

// stint-agent reports how the workers it launched for a segment exited
// (API.md, "Launching"): 75 ends the segment and queues the job again, 76
// fails it (FAILED, `message` kept), 0 completes it once every node of the
// segment reported 0 (`all_nodes_done`), any other code is a crash: the
// segment is lost and the job queued again with `message`, unless it is the
// job's `crash_limit`-th crash within `crash_window_ms`: then it FAILED
// ("crash loop"). kNotFound for an unknown segment; kFailedPrecondition for
// one that already ended (a repeated report is answered OK by the caller).
Status ReportSegmentExit(ClusterState& s, int64_t segment_id, int exit_code, bool all_nodes_done,
                         const std::string& message, int crash_limit, TimeMs crash_window_ms,
                         TimeMs now, Changes* changes);

// stint-agent reports that a worker of an active segment crashed (exited
// neither 0, 75 nor 76) while the segment goes on; the agent starts it
// again (API.md, "Launching"). The crash counts for the crash-loop guard as
// ReportSegmentExit's do: the job's `crash_limit`-th within
// `crash_window_ms` fails it ("crash loop", the segment lost) and
// *relaunch is false; otherwise *relaunch is true and nothing else changes.
// kNotFound / kFailedPrecondition as ReportSegmentExit.
Status ReportWorkerCrash(ClusterState& s, int64_t segment_id, int exit_code,
                         const std::string& message, int crash_limit, TimeMs crash_window_ms,
                         TimeMs now, Changes* changes, bool* relaunch);

// True iff `token` belongs to a worker incarnation of the job that may
// still commit: the worker is registered in the job's active segment and
// not released, the segment's deadline (if noticed) has not passed, and
// the job's rendezvous, if the segment uses it, still counts the worker in
// its group (RendezvousKeeps in rendezvous.h). A segment's own token is no
// worker's and never valid. `valid_until_ms` gets the segment's deadline or
// kNever. When false and `why` is not null, *why says why.
// Stores from before schema version 4 hold one token for all workers of a
// segment: such a token is valid while any of its holders is.
bool FencingValid(const ClusterState& s, int64_t job_id, uint64_t token, TimeMs now,
                  TimeMs* valid_until_ms, std::string* why = nullptr);

// Integrates team usage (with half-life decay), each running job's attained
// service, the window/used GPU-second counters and the segments' charges
// (ChargeSegments) from counters.accounted_ms up to `now`.
void AccountTime(ClusterState& s, TimeMs now, const PolicyConfig& config, Changes* changes);

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_CORE_TRANSITIONS_H_
