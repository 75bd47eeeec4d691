// The scheduling policy: a pure function of (ClusterState, now, config).
//
// MakePlan() decides, for one instant:
//   * which pending jobs start now, on which windows, until when (segment
//     fitting: restart + one checkpoint interval + checkpoint + safety must
//     fit before the window closes or the GPUs are reserved for another job);
//   * which elastic segments running above their job's min_gpus shrink now
//     (a shrink notice to the ranks that leave; the rest re-form smaller)
//     to let a job ahead start: tried before any whole-segment preemption;
//     and (grow_elastic) which grow into GPUs nothing else is planned on;
//   * which running segments get a notice now: at planned_end - (checkpoint
//     estimate + safety) for a closing window or reservation, immediately for
//     a revoked window, and for priority preemption (victims chosen
//     checkpoint-aware, gang-aware and minimal, never CRITICAL, never a
//     higher level, the same level only from a job in a lower service
//     class, never a segment younger than min_run);
//   * (price_migration) which running segment moves to a cheaper pool
//     that has room now: a kMigrate notice, its job restarts there;
//   * which notified segments are lost (no ack by the deadline) and which
//     segments are lost because every worker's lease expired;
//   * for each pending job its position, blocking reason and planned start,
//     taken from the same backfill plan that makes the decisions.
//
// Ordering: base level (1000 points per priority level) + aging (points per
// hour of waiting since the job became eligible, capped) + a bonus while the
// job's team is below its guarantee - a fair-share penalty from the team's
// decayed usage - a penalty per attained-service class. Planning is conservative backfill over a
// per-window free-GPU profile: every job within plan_depth gets the earliest start that delays no
// job ahead of it, so backfill never delays the head reservation. Gangs are admitted atomically: a
// job gets >= min_gpus at once or nothing, and nothing is held for a partial gang. A gang may
// span several windows (nodes) of one pool; the planner prefers fewer windows and sizes a
// spanning segment with gang_span_slowdown per extra window.
//
// No I/O, no clock, no randomness: the same inputs give the same plan, which
// is what lets stint-sim replay traces through this exact code.
#ifndef STINT_TOOLS_STINTD_CORE_POLICY_H_
#define STINT_TOOLS_STINTD_CORE_POLICY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "stintd/core/model.h"

namespace stint::stintd {

struct PolicyConfig {
  double level_points = 1000;           // per priority level
  double aging_points_per_hour = 100;   // a LOW job overtakes fresh MEDIUM ones after 10 h
  double aging_cap_points = 1500;       // aging lifts at most 1.5 levels (never above CRITICAL)
  double guarantee_bonus_points = 500;  // while the team is below its guarantee
  double fair_share_points = 200;       // x the team's share of all decayed usage
  double usage_half_life_seconds = 7 * 24 * 3600.0;
  double safety_seconds = 10;        // margin added to the checkpoint estimate for notices
  double max_grace_seconds = 600;    // bound on a preemption notice's grace
  double min_run_seconds = 600;      // a segment younger than this is not preempted for priority
  double lease_ttl_seconds = 30;     // a worker not heard from for this long has left
  double start_grace_seconds = 120;  // a new segment's workers have this long to register
  // Crash-loop guard: a job whose launched workers crash this many times
  // within crash_window_seconds is FAILED instead of queued again.
  int crash_limit = 3;
  double crash_window_seconds = 600;
  // Attained-service classes (Tiresias' discretised least-attained-service,
  // no runtime estimate needed): a job's class is the number of thresholds
  // its service_gpu_seconds has passed, the first at service_class_gpu_hours,
  // each next one service_class_factor times the last, at most
  // service_classes - 1. Each class costs service_class_points, so at one
  // level short and new jobs go first and a job that has had a lot of GPU
  // time yields. The deepest class (900 points) stays above the next level
  // down, and aging (capped at 1500) lifts a long waiter back. 0 points:
  // classes do not order the queue.
  double service_class_points = 300;
  // Where a job reports its remaining work (remaining_seconds > 0), its
  // class counts the GPU-seconds it has left (remaining_seconds x max_gpus)
  // instead of those it has attained: discretised shortest-remaining-first.
  // A job near its end is then not preempted or queued behind new work, so
  // long jobs are not the ones that finish last by hours (the p99 JCT of
  // attained-service classes was 1.4-1.6 x EASY's on heavy Philly replays,
  // 1.13-1.15 x with this; METHOD.md). Jobs without an estimate keep
  // attained service. false: attained service for every job.
  bool service_class_by_remaining = true;
  // The work left is the job's own word: it may put the job at most this
  // many classes below its attained-service class, so a job that
  // under-reports it gains at most that over attained service (and cannot
  // preempt its peers on the strength of the report). service_classes or
  // more: no bound.
  int service_class_remaining_max_drop = 1;
  double service_class_gpu_hours = 1;
  double service_class_factor = 10;
  int service_classes = 4;
  // A pending job may preempt a running segment of its own priority level
  // (never CRITICAL, not younger than min_run) whose job is at least this
  // many classes above its own and, when both report remaining work, has
  // more GPU-seconds left: a checkpointed preemption costs C + R, so a new
  // short job need not queue behind long ones. 0: only a higher level
  // preempts.
  int service_preempt_classes = 1;
  // Starvation guard: a running job that has waited (time since submit
  // not spent running) longer than service_starvation_factor x its run
  // time is not preempted for service class (only by a higher level) while
  // so; with its remaining work known, once time since submit + remaining
  // exceeds (1 + factor) x (run time + remaining), its projected slowdown.
  // Under LAS alone such a job restarts at the head (aging lifts it)
  // and is preempted again by every new job after min_run: it never ends
  // while new ones keep coming. The guard lets it run until its run time
  // catches up. false: preemption follows attained service alone.
  bool service_starvation_guard = true;
  double service_starvation_factor = 4;
  // Queue guard (classes by the work left only): a pending job that has
  // never run and has waited (since submit) longer than
  // service_queue_guard_factor x its remaining_seconds is in class 0, as a
  // new job is by attained service: in the queue order and for preempting
  // a running job of its level (one class above, more work left). Counting the work left, a long
  // job that never started sits in a deep class until the shorter work
  // clears, so it is the one whose first start comes last (p99 queue delay
  // up to 0.87 x EASY's on Philly replays; METHOD.md). 0: off.
  double service_queue_guard_factor = 0.4;
  // A gang spanning k windows (nodes) of a pool runs 1 + slowdown x (k - 1)
  // times slower (collectives across nodes): the planner sizes its segment
  // with it and takes the fit with the most GPUs after it, so one window
  // wins over several with as many GPUs. 0: spanning is free.
  double gang_span_slowdown = 0.05;
  // Shrink before preempt: a job running above its min_gpus gives GPUs back
  // (a notice to the ranks that leave, deadline C + safety) before any
  // segment is preempted whole.
  bool shrink_before_preempt = true;
  // Only segments with at least this many live workers shrink: the notice
  // goes to the ranks that leave and the last worker never leaves, so a
  // segment whose GPUs one process holds cannot give part of them back.
  int shrink_min_workers = 2;
  // Grow: an elastic segment below max_gpus takes GPUs that are free for as
  // long as it runs, if it has at least grow_min_seconds of work left (each
  // resize costs the group a re-form, about restart_seconds). Off by
  // default here. stintd turns it on (--grow-elastic) and keeps only the
  // grows stint-agent can launch (segments on its nodes with a launch
  // spec); stint-sim, which plays the workers, turns it on too.
  bool grow_elastic = false;
  double grow_min_seconds = 1800;
  // Price migration: after the queue is planned, a running segment of a
  // preemptible job (not CRITICAL, older than min_run, not shrinking) that
  // reports at least price_migration_min_left_seconds of work left gets a
  // kMigrate notice (deadline C + safety, not counted as a preemption) when
  // another of its pools fits it now, on GPUs no pending job is planned
  // on (for at least price_migration_min_left_seconds of work), at below
  // price_migration_factor x what its pool costs per useful GPU-hour, and
  // the saving over the work left (as much as fits there) pays for the
  // move: its GPUs x (C + R + safety) at the new price plus the checkpoint
  // at the old one. The target GPUs are reserved for the rest of the pass;
  // the job, pending again after its ack, starts there as the cheapest fit
  // at the soonest start. One move per pass. Off by default here; stintd
  // turns it on with --price-migration, stint-sim for "stint" (METHOD.md,
  // "Prices").
  bool price_migration = false;
  double price_migration_factor = 0.7;
  double price_migration_min_left_seconds = 3600;
  // What a segment reads from an object store before it resumes, when its
  // pool reaches the job's newest checkpoint only there (core/storage.h),
  // at this rate: added to its restart, so to what a pool costs per useful
  // GPU-hour, and to a move's cost and notice (the checkpoint goes up first).
  double object_store_gbps = 0.5;
  int plan_depth = 256;  // pending jobs planned (and given a planned start) per pass
  // A rendezvous round with at least min workers closes this long after it
  // reached min, or at once when it reaches the segment's size.
  double rendezvous_last_call_seconds = 3;
};

// Why a pending job does not start now.
enum class BlockReason : int {
  kNone = 0,        // starts now
  kQuota = 1,       // its team is at guarantee + borrowing limit
  kWindow = 2,      // no open window can fit a minimum segment (none open, or closes too soon)
  kGang = 3,        // enough free GPUs in total, but not min_gpus in one window
  kPriority = 4,    // the GPUs are used by, or reserved for, jobs ordered ahead
  kPreempting = 5,  // victims were notified; it starts when they release
  kDepth = 6,       // beyond plan_depth: not planned this pass
  kBudget = 7,      // its team's budget cannot pay a minimum segment in any pool it may use
  kPrice = 8,       // every pool it may use is priced above its priority's cap
  kStorage = 9,     // no pool it may use with a window reaches its newest checkpoint
};
// "none", "quota", "window", "gang", "priority", "preempting", "depth", "budget", "price",
// "storage"
const char* BlockReasonName(BlockReason r);

struct PendingInfo {
  int64_t job_id = 0;
  int position = 0;  // 1-based, in scheduling order
  double score = 0;  // the ordering score (sprio-style breakdown below)
  double score_level = 0, score_aging = 0, score_guarantee = 0, score_fair_share = 0,
         score_service = 0;
  int service_class = 0;  // see PolicyConfig::service_class_points
  BlockReason reason = BlockReason::kNone;
  std::string detail;                // one line, e.g. "window 3 closes in 120 s; needs 700 s"
  TimeMs planned_start_ms = kNever;  // from the backfill plan; kNever: not within the plan
  int planned_gpus = 0;
};

struct StartDecision {
  int64_t job_id = 0;
  std::vector<Allocation> allocs;
  TimeMs planned_end_ms = kNever;
};

struct NoticeDecision {
  int64_t segment_id = 0;
  TimeMs deadline_ms = 0;
  NoticeReason reason = NoticeReason::kNone;
  int64_t for_job_id = 0;  // kPreempted: the job the GPUs go to
};

// The segment gives up `release` (whole parts of node windows, any GPUs of
// other windows) at `deadline_ms`: the ranks on them get a "shrink" notice
// now, the group re-forms on what is left, which is >= its job's min_gpus.
struct ShrinkDecision {
  int64_t segment_id = 0;
  std::vector<Allocation> release;
  TimeMs deadline_ms = 0;
  int64_t for_job_id = 0;  // the job the GPUs go to
};

// The segment adds `add` now (GPUs nothing else is planned on until its end).
struct GrowDecision {
  int64_t segment_id = 0;
  std::vector<Allocation> add;
};

struct LostDecision {
  int64_t segment_id = 0;
  std::string reason;  // "no ack by the deadline", "all worker leases expired"
};

struct PlanStats {
  int open_window_gpus = 0;  // capacity of the windows open now
  int allocated_gpus = 0;    // held by active segments
  int free_gpus = 0;
  int fragmented_gpus = 0;  // free, but in windows where the head pending job cannot start
  int pending_jobs = 0;
  int running_jobs = 0;
};

struct Plan {
  std::vector<StartDecision> starts;
  std::vector<NoticeDecision> notices;
  std::vector<ShrinkDecision> shrinks;
  std::vector<GrowDecision> grows;
  std::vector<LostDecision> lost;
  std::vector<PendingInfo> pending;  // every pending job, by position
  PlanStats stats;
};

// The ordering score of a pending job at `now` (fills the breakdown fields
// of `info`, which may be null).
double JobScore(const ClusterState& state, const Job& job, TimeMs now, const PolicyConfig& config,
                PendingInfo* info);

// The job's service class, 0 .. service_classes - 1: from its remaining
// GPU-seconds where it reports them and service_class_by_remaining (but no
// more than service_class_remaining_max_drop below the attained class),
// else from its attained GPU-seconds.
int ServiceClass(const Job& job, const PolicyConfig& config);

// Whether the starvation guard shields the job at `now`: its time since
// submit plus its remaining_seconds exceeds (1 + service_starvation_factor)
// x its whole work (run time + remaining_seconds; run time = attained
// GPU-seconds / max_gpus). Without an estimate (remaining 0): it has waited
// longer than service_starvation_factor x its run time.
bool Starving(const Job& job, TimeMs now, const PolicyConfig& config);

// Whether the queue guard lifts the pending job to class 0 at `now`:
// service_class_by_remaining, the job has never run (no attained service),
// reports its remaining work and has waited since submit longer than
// service_queue_guard_factor x remaining_seconds.
bool QueueGuarded(const Job& job, TimeMs now, const PolicyConfig& config);

// Minimum useful segment of a job: restart + one interval + checkpoint + safety.
TimeMs MinSegmentMs(const Job& job, const PolicyConfig& config);

Plan MakePlan(const ClusterState& state, TimeMs now, const PolicyConfig& config);

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_CORE_POLICY_H_
