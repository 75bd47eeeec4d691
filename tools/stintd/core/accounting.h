// Prices, budgets and what a job's GPU time achieved.
//
// A pool has a price per GPU-hour; a segment is charged at the price in
// force when it started (kept with it), to its job and its team's budget
// period. Workers report their step, samples and training loss with their
// heartbeats: each segment's pace gives the job's seconds per step at that
// world size, and its figures split the GPU-seconds it held into useful
// work (steps that reached a durable checkpoint, at the measured pace),
// restart, checkpoint and lost work. Pure, like transitions.h: stintd and
// stint-sim share it.
#ifndef STINT_TOOLS_STINTD_CORE_ACCOUNTING_H_
#define STINT_TOOLS_STINTD_CORE_ACCOUNTING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "stintd/core/model.h"
#include "stintd/core/transitions.h"

namespace stint::stintd {

// Sets the pool's price from `now` on (kept in its history). Segments
// already running keep the price they started at.
Status SetPoolPrice(ClusterState& s, const std::string& pool, double price_per_gpu_hour, TimeMs now,
                    Changes* changes);

// Sets what priority level `priority` may pay (PriceRule).
Status SetPriceRule(ClusterState& s, Priority priority, const PriceRule& rule, Changes* changes);

// The pool a segment's GPUs are in (its first allocation's window's), or
// null when that window is gone.
const Pool* SegmentPool(const ClusterState& s, const Segment& seg);

// Charges every active segment for `dt_seconds` at its price, to its job
// and to its team's budget period, which is rolled over first when it
// ended by `now`. Part of AccountTime.
void ChargeSegments(ClusterState& s, double dt_seconds, TimeMs now);

// What a team may still spend in its current period (budget - spent), or
// +infinity for a team without a budget.
double BudgetLeft(const Team& team);

// Records the report in the worker's segment and job: the segment's pace
// (its first step past its start, its newest step), the job's seconds per
// step at the segment's world size, its samples, and a loss point (one per
// step per segment; the curve is thinned beyond kMaxLossPoints).
void RecordProgress(Segment& seg, Job& job, const HeartbeatReport& report, TimeMs now);

// One segment's GPU-seconds, split.
struct SegmentFigures {
  int64_t segment_id = 0;
  int gpus = 0;
  double held_gpu_seconds = 0;        // GPUs x (end or now - start)
  double restart_gpu_seconds = 0;     // start -> first step past the resumed checkpoint
  double checkpoint_gpu_seconds = 0;  // reported checkpoint times x GPUs
  double lost_gpu_seconds = 0;        // steps past its last durable checkpoint, at its pace
  int64_t kept_steps = 0;             // resumed checkpoint -> its last durable checkpoint
  double useful_gpu_seconds = 0;      // kept_steps at the job's pace for its world size
  double efficiency = 0;              // useful / held (0 when nothing was held)
  double cost = 0;
};
// A job's figures: per segment and summed. `efficiency` is the
// fragment-training efficiency: the GPU-seconds a continuous run at the
// same world sizes would need for the kept steps, over those held.
struct JobFigures {
  std::vector<SegmentFigures> segments;
  double held_gpu_seconds = 0;
  double restart_gpu_seconds = 0;
  double checkpoint_gpu_seconds = 0;
  double lost_gpu_seconds = 0;
  double useful_gpu_seconds = 0;
  int64_t kept_steps = 0;
  double efficiency = 0;
  double cost = 0;
  double cost_per_step = 0;  // cost / kept_steps (0 before any kept step)
};
JobFigures FigureJob(const ClusterState& s, const Job& job, TimeMs now);

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_CORE_ACCOUNTING_H_
