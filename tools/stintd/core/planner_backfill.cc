// The walk over the queue (conservative backfill): each pending job within
// plan_depth, in order, gets the earliest start that delays no job ahead of
// it. A job that fits now starts; one its quota blocks, or that would start
// later, may get a shrink or a preemption; the others reserve their planned
// start.
#include "stintd/core/planner.h"

#include <algorithm>
#include <climits>
#include <string>
#include <utility>
#include <vector>

namespace stint::stintd::internal {
namespace {

// Pending jobs (by position) for which a priority preemption is looked for.
// A preemption search walks every window's victims, so it is kept to the
// head of the queue, where a preemption matters; plan_depth bounds the rest.
constexpr int kPreemptScanJobs = 32;

}  // namespace

void Planner::Backfill() {
  const size_t n = order_.size();
  const size_t depth = static_cast<size_t>(std::max(0, c_.plan_depth));
  // Jobs whose victims are already checkpointing go first: the GPUs were
  // taken for them, and letting a job ahead backfill into the hole would
  // make the preemption a loss for everyone.
  std::vector<size_t> walk;
  for (size_t i = 0; i < n; i++) {
    if (preempting_.count(order_[i]->id)) walk.push_back(i);
  }
  for (size_t i = 0; i < std::min(n, depth); i++) {
    if (!preempting_.count(order_[i]->id)) walk.push_back(i);
  }
  std::vector<bool> planned(n, false);
  for (size_t i : walk) {
    planned[i] = true;
    PlanJob(i);
  }
  const std::string beyond =
      "beyond plan depth " + std::to_string(depth) + ": not planned this pass";
  for (size_t i = 0; i < n; i++) {
    if (planned[i]) continue;
    plan_.pending[i].reason = BlockReason::kDepth;
    plan_.pending[i].detail = beyond;
    plan_.pending[i].planned_start_ms = kNever;
  }
}

void Planner::PlanJob(size_t index) {
  JobCtx j = MakeCtx(index);
  const Job& job = *j.job;
  PendingInfo& info = *j.info;
  if (j.excluded != BlockReason::kNone) {
    info.reason = j.excluded;
    info.detail = j.excluded_detail;
    info.planned_start_ms = kNever;
    info.planned_gpus = 0;
    return;
  }
  Fit fit = EarliestFit(j, now_);
  const int room_now = j.team->profile >= 0 ? profiles_.teams[j.team->profile].At(now_) : INT_MAX;
  if (room_now < job.min_gpus && !preempting_.count(job.id)) {
    // Blocked by its quota now. It may take its team's own GPUs back from
    // the team's running jobs it may preempt (a lower level or service
    // class), so that a team's short jobs do not queue behind its long
    // ones; never another team's: that would take the team above its cap.
    Fit assisted;
    if (!preempted_ && j.position <= kPreemptScanJobs &&
        TryPreempt(j, fit.start, &assisted, /*own_team=*/true)) {
      preempted_ = true;
      if (assisted.start != kNever) Reserve(j, assisted);
      info.planned_start_ms = assisted.start;
      info.planned_gpus = assisted.start == kNever ? 0 : assisted.gpus;
      Classify(j, /*preempting=*/true, assisted);
      return;
    }
    // Otherwise it keeps its place for when the team's own segments end.
    if (fit.start != kNever) Reserve(j, fit);
    const Team& t = *j.team->team;
    info.reason = BlockReason::kQuota;
    info.detail = "team " + job.team + " is at " + std::to_string(j.team->limit - room_now) +
                  " of its " + std::to_string(j.team->limit) + " GPUs (guarantee " +
                  std::to_string(t.guaranteed_gpus) + " + borrow " +
                  std::to_string(t.borrow_limit_gpus) + "); needs " + std::to_string(job.min_gpus) +
                  "; " + StartPhrase(fit);
    info.planned_start_ms = fit.start;
    info.planned_gpus = fit.start == kNever ? 0 : fit.gpus;
    return;
  }
  if (fit.start == now_) {
    Reserve(j, fit);
    ChargeStart(j, fit);
    StartDecision d{job.id, {}, fit.end};
    for (const Part& part : fit.parts)
      d.allocs.push_back(Allocation{slots_[part.slot].w->id, part.gpus});
    std::sort(d.allocs.begin(), d.allocs.end(),
              [](const Allocation& a, const Allocation& b) { return a.window_id < b.window_id; });
    plan_.starts.push_back(std::move(d));
    info.reason = BlockReason::kNone;
    info.planned_start_ms = now_;
    info.planned_gpus = fit.gpus;
    return;
  }
  bool preempting = preempting_.count(job.id) > 0;
  if (!preempting && !preempted_ && j.position <= kPreemptScanJobs) {
    Fit assisted;
    if (TryShrink(j, fit.start, &assisted) || TryPreempt(j, fit.start, &assisted)) {
      preempted_ = true;
      preempting = true;
      fit = std::move(assisted);
    }
  }
  if (fit.start != kNever) Reserve(j, fit);
  info.planned_start_ms = fit.start;
  info.planned_gpus = fit.start == kNever ? 0 : fit.gpus;
  Classify(j, preempting, fit);
}

}  // namespace stint::stintd::internal
