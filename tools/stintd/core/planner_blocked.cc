// Why a pending job that does not start now waits: its BlockReason and a
// one-line detail (reserved for jobs ahead, held by running segments, a
// gang larger than any pool's free GPUs, no window that lasts a minimum
// segment), with its planned start.
#include "stintd/core/planner.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

namespace stint::stintd::internal {
namespace {

std::string Secs(TimeMs ms) { return std::to_string(std::llround(ms / 1000.0)) + " s"; }

std::string PoolPhrase(const Job& job) {
  if (job.pools.empty()) return "any pool";
  return (job.pools.size() == 1 ? "pool " : "pools ") + JoinPoolNames(job.pools);
}

}  // namespace

std::string Planner::StartPhrase(const Fit& fit) const {
  return fit.start == kNever ? "no planned start within the plan"
                             : "planned start in " + Secs(fit.start - now_);
}

// FitAt(j, now_, base_).start == now_, without building the fit: the
// team has room for min_gpus and some group of the job keeps min_gpus free
// over the minimum segment (a window that alone holds a gang is such a
// group too). base_ does not change during Backfill, so each group's sum
// is taken once per segment length.
bool Planner::FitsNowOnBase(const JobCtx& j) {
  const Job& job = *j.job;
  if (job.min_gpus <= 0) return FitAt(j, now_, base_).start == now_;
  const TimeMs t_end = AddMs(now_, j.len);
  int want = job.max_gpus;
  if (j.team->profile >= 0) {
    const int room = base_.teams[j.team->profile].Min(now_, t_end);
    if (room < job.min_gpus) return false;
    want = std::min(want, room);
  }
  if (want < job.min_gpus) return false;
  for (int g : j.groups) {
    auto [it, fresh] = base_group_free_.emplace(std::make_pair(g, j.len), 0);
    if (fresh) {
      for (int slot : groups_[g]) it->second += std::max(0, base_.windows[slot].Min(now_, t_end));
    }
    if (it->second >= job.min_gpus) return true;
  }
  return false;
}

// Kept per (group, length): every window walk is the same for jobs alike.
bool Planner::FitsOnEmptyWindows(const JobCtx& j) {
  const Job& job = *j.job;
  for (int g : j.groups) {
    auto [it, fresh] = empty_group_gpus_.emplace(std::make_pair(g, j.len), 0);
    if (fresh) {
      for (int slot : groups_[g]) {
        const Window& w = *slots_[slot].w;
        if (!w.open_at(now_) || w.end_ms - now_ < j.len) continue;
        it->second += w.gpus;
      }
    }
    if (it->second >= job.min_gpus) return true;  // a gang too may span the pool's windows
  }
  return false;
}

void Planner::Classify(const JobCtx& j, bool preempting, const Fit& fit) {
  const Job& job = *j.job;
  PendingInfo& info = *j.info;
  if (preempting) {
    info.reason = BlockReason::kPreempting;
    info.detail = "segments of a lower priority or service class were notified to make room; " +
                  StartPhrase(fit);
    return;
  }
  if (FitsNowOnBase(j)) {
    info.reason = BlockReason::kPriority;
    info.detail = "fits now, but the GPUs are reserved for jobs ahead; " + StartPhrase(fit);
    return;
  }
  if (FitsOnEmptyWindows(j)) {
    info.reason = BlockReason::kPriority;
    info.detail = "the " + std::to_string(job.min_gpus) +
                  " GPUs it needs are held by running segments; " + StartPhrase(fit);
    return;
  }
  // What is free now in open windows that last a minimum segment.
  int free_sum = 0, pool_free_max = 0, open_windows = 0, capacity_sum = 0;
  int longest_slot = -1;  // the open window that closes last
  for (int g : j.groups) {
    int pool_free = 0;
    for (int slot : groups_[g]) {
      const Window& w = *slots_[slot].w;
      if (!w.open_at(now_)) continue;
      open_windows++;
      if (longest_slot < 0 || w.end_ms > slots_[longest_slot].w->end_ms) longest_slot = slot;
      if (w.end_ms - now_ < j.len) continue;
      capacity_sum += w.gpus;
      pool_free += std::max(0, base_.windows[slot].At(now_));
    }
    free_sum += pool_free;
    pool_free_max = std::max(pool_free_max, pool_free);
  }
  // A gang spans the windows of one pool, never several pools: with enough
  // GPUs only across pools it is blocked by the gang rule.
  if (job.gang && (free_sum >= job.min_gpus || capacity_sum >= job.min_gpus)) {
    info.reason = BlockReason::kGang;
    info.detail = "gang of " + std::to_string(job.min_gpus) + " GPUs: " + std::to_string(free_sum) +
                  " free in total, at most " + std::to_string(pool_free_max) + " in one pool; " +
                  StartPhrase(fit);
    return;
  }
  info.reason = BlockReason::kWindow;
  std::string detail;
  if (open_windows == 0) {
    detail = "no open window in " + PoolPhrase(job);
    if (fit.start != kNever && !fit.parts.empty()) {
      detail += "; window " + std::to_string(slots_[fit.parts[0].slot].w->id) + " opens in " +
                Secs(slots_[fit.parts[0].slot].w->start_ms - now_);
    }
  } else if (longest_slot >= 0 && slots_[longest_slot].w->end_ms - now_ < j.len) {
    const Window& w = *slots_[longest_slot].w;
    detail = "window " + std::to_string(w.id) + " closes in " + Secs(w.end_ms - now_) + "; needs " +
             Secs(j.len);
  } else {
    detail = "needs " + std::to_string(job.min_gpus) + " GPUs; the open windows in " +
             PoolPhrase(job) + " have fewer in total";
  }
  if (fit.start != kNever) detail += "; " + StartPhrase(fit);
  info.detail = std::move(detail);
}

}  // namespace stint::stintd::internal
