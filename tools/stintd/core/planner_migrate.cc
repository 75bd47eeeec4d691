// Price migration (PolicyConfig::price_migration): after the queue is
// planned, a running segment moves to a cheaper pool that has room now. A
// job keeps the pool it started in, so one that started on demand while
// the cheaper pools were full would otherwise pay on-demand prices for its
// whole life while they stand free.
#include <algorithm>
#include <string>
#include <utility>

#include "stintd/core/planner.h"

namespace stint::stintd::internal {
namespace {

// Moves per pass, like preemptions: each costs its job a checkpoint and a
// restart, and the next pass sees the GPUs the last one freed.
constexpr int kMaxMigrationsPerPass = 1;

}  // namespace

// The segment that saves the most (net of the move) gets a kMigrate notice
// and its target GPUs are reserved for the rest of the pass. A segment
// qualifies when it is charged a price (one that started unpriced pays
// nothing where it is), its job is preemptible, not CRITICAL, reports at least
// price_migration_min_left_seconds of work left, the segment runs (no
// notice, no shrink) and is older than min_run, and another of the job's
// pools fits it now on the profiles after the backfill reservations
// (GPUs no pending job is planned on) at below price_migration_factor x
// its own pool's cost per useful GPU-hour, for at least
// price_migration_min_left_seconds of work, with the saving over the work
// left (as much as fits there before the fit ends) above the move's cost:
// the new GPUs x (C + R + safety) at the new price plus the old GPUs x C
// at the old one (and a move back where the fit ends first). A target that
// reaches where the segment writes only in an object store adds the
// upload and the download to the move, and the upload to the notice;
// one that does not reach it at all is no target (planner_storage.cc). Ties go to
// the lowest segment id: the same inputs give the same move.
void Planner::Migrate() {
  const TimeMs min_run = SecondsToMs(c_.min_run_seconds);
  auto in_plan = [this](int64_t id) {
    return std::any_of(plan_.notices.begin(), plan_.notices.end(),
                       [id](const NoticeDecision& d) { return d.segment_id == id; }) ||
           std::any_of(plan_.lost.begin(), plan_.lost.end(),
                       [id](const LostDecision& d) { return d.segment_id == id; }) ||
           std::any_of(plan_.shrinks.begin(), plan_.shrinks.end(),
                       [id](const ShrinkDecision& d) { return d.segment_id == id; });
  };
  for (int moves = 0; moves < kMaxMigrationsPerPass; moves++) {
    const Segment* best_seg = nullptr;
    JobCtx best_ctx{};
    Fit best_fit;
    double best_net = 0;
    PendingInfo scratch;  // FitAt and FilterPools do not read a running job's queue info
    for (const auto& [id, seg] : s_.segments) {
      if (seg.state != SegmentState::kRunning || seg.shrink_deadline_ms != 0 ||
          now_ - seg.start_ms < min_run || seg.allocs.empty())
        continue;
      if (std::count(migrating_.begin(), migrating_.end(), id) > 0 || in_plan(id)) continue;
      auto job_it = s_.jobs.find(seg.job_id);
      if (job_it == s_.jobs.end()) continue;
      const Job& job = job_it->second;
      if (!job.preemptible || job.priority == Priority::kCritical || job.remaining_seconds <= 0 ||
          job.remaining_seconds < c_.price_migration_min_left_seconds)
        continue;
      const int slot = SlotOf(seg.allocs.front().window_id);
      if (slot < 0) continue;
      const int here = slots_[slot].group;

      // The job as if pending: the context a start of it is planned with.
      JobCtx j = ContextFor(job, &scratch, 0);
      // What staying costs per useful GPU-hour: the segment is charged at
      // the price in force when it started, whatever its pool's is now. One
      // that started unpriced is charged nothing: no move saves anything.
      if (seg.price_per_gpu_hour <= 0) continue;
      const double cost_here = CostAt(j, here, seg.price_per_gpu_hour);
      const double cap = c_.price_migration_factor * cost_here;
      j.groups.erase(std::remove_if(j.groups.begin(), j.groups.end(),
                                    [&](int g) { return g == here || GroupCost(j, g) >= cap; }),
                     j.groups.end());
      if (j.groups.empty()) continue;

      // Its team's room: the segment gives back what it holds when it moves.
      const TimeMs release = ReleaseMs(s_, seg);
      const int team = j.team->profile;
      if (team >= 0) profiles_.teams[team].Add(now_, release, seg.gpus());
      const Fit fit = FitAt(j, now_, profiles_);
      if (team >= 0) profiles_.teams[team].Add(now_, release, -seg.gpus());
      if (fit.start != now_) continue;
      // Never onto fewer GPUs (or a slower span) than it has.
      if (SpanEffective(job, fit.gpus, fit.parts.size()) <
          SpanEffective(job, seg.gpus(), seg.allocs.size()))
        continue;

      const double c_s = job.checkpoint_seconds;
      const int there = slots_[fit.parts.front().slot].group;
      // Where the pools share no disk the checkpoint goes up to an object
      // store before the ack and comes down before the restart.
      const double transfer_s = j.TransferSeconds(there);
      const double move_s = c_s + 2 * transfer_s + job.restart_seconds + c_.safety_seconds;
      const double cost_there = GroupCost(j, there);
      // The work it can do there: its GPU-seconds left, as many as fit
      // between its restart and a last checkpoint before the fit ends (a
      // pending job's reservation or the window's end). At least
      // price_migration_min_left_seconds of it, else the move is not worth
      // its restarts; a fit that ends first costs a move back at the old
      // price too.
      const double left_gpu_s = job.remaining_seconds * job.max_gpus;
      double there_gpu_s = left_gpu_s;
      if (fit.end < AddMs(now_, SpanRunMs(j, fit.parts.size()))) {
        const double there_s = (fit.end - now_) / 1000.0 - c_s - move_s;
        if (there_s < c_.price_migration_min_left_seconds) continue;
        there_gpu_s = std::min(left_gpu_s, fit.gpus * there_s);
      }
      const double saving = there_gpu_s * (cost_here - cost_there) / 3600.0;
      double move = (fit.gpus * move_s * cost_there + seg.gpus() * c_s * cost_here) / 3600.0;
      if (there_gpu_s < left_gpu_s) move += seg.gpus() * move_s * cost_here / 3600.0;
      const double net = saving - move;
      if (net <= 0 || (best_seg != nullptr && net <= best_net)) continue;
      best_seg = &seg;
      best_ctx = std::move(j);
      best_fit = fit;
      best_net = net;
    }
    if (best_seg == nullptr) return;
    const Job& job = *best_ctx.job;
    const double upload_s = best_ctx.TransferSeconds(slots_[best_fit.parts.front().slot].group);
    const double grace =
        std::min(job.checkpoint_seconds + upload_s + c_.safety_seconds, c_.max_grace_seconds);
    const TimeMs deadline = std::min(ReleaseMs(s_, *best_seg), now_ + SecondsToMs(grace));
    plan_.notices.push_back(NoticeDecision{best_seg->id, deadline, NoticeReason::kMigrate, 0});
    migrating_.push_back(best_seg->id);
    // The target is the job's for the rest of the pass (grow takes it
    // from no one); its team gets back what the old segment holds after
    // the deadline.
    Reserve(best_ctx, best_fit);
    const int team = best_ctx.team->profile;
    const TimeMs release = ReleaseMs(s_, *best_seg);
    if (team >= 0 && deadline < release)
      profiles_.teams[team].Add(deadline, release, best_seg->gpus());
  }
}

}  // namespace stint::stintd::internal
