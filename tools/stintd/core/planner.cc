// The Planner's pass order (Run) and the state every step shares: the
// open windows grouped by pool, the teams and their quota profiles, the
// context a pending job is planned with, and the plan's stats.
#include "stintd/core/planner.h"

#include <algorithm>
#include <utility>

namespace stint::stintd::internal {

Plan Planner::Run() {
  BuildWindows();
  ScanSegments();
  ScanBudgets();
  OrderPending();
  base_ = profiles_;
  Backfill();
  if (c_.price_migration) Migrate();
  if (c_.grow_elastic) Grow();
  // A segment that moves does not grow where it leaves.
  if (!migrating_.empty()) {
    plan_.grows.erase(std::remove_if(plan_.grows.begin(), plan_.grows.end(),
                                     [this](const GrowDecision& d) {
                                       return std::count(migrating_.begin(), migrating_.end(),
                                                         d.segment_id) > 0;
                                     }),
                      plan_.grows.end());
  }
  ComputeStats();
  return std::move(plan_);
}

void Planner::BuildWindows() {
  std::map<std::string, int> group_of;
  for (const auto& [id, w] : s_.windows) {
    if (w.end_ms <= now_ || w.gpus <= 0) continue;  // closed: no capacity, nothing to plan in it
    auto g = group_of.find(w.pool);
    if (g == group_of.end()) {
      g = group_of.emplace(w.pool, static_cast<int>(groups_.size())).first;
      groups_.emplace_back();
    }
    const int slot = static_cast<int>(slots_.size());
    slots_.push_back(Slot{&w, g->second});
    groups_[g->second].push_back(slot);
    slot_of_[id] = slot;
    profiles_.windows.emplace_back(now_, w.start_ms, w.end_ms, w.gpus);
  }
  for (auto& [pool, g] : group_of) group_by_pool_[pool] = g;
  // Each pool's price and how often its spot windows were revoked so far:
  // revocations per hour of spot window (an estimate a price compares
  // with, not a forecast).
  group_pool_.assign(groups_.size(), nullptr);
  group_revocations_per_hour_.assign(groups_.size(), 0);
  for (auto& [pool, g] : group_of) {
    auto p = s_.pools.find(pool);
    if (p != s_.pools.end()) group_pool_[g] = &p->second;
  }
  std::vector<double> spot_hours(groups_.size(), 0), revoked(groups_.size(), 0);
  for (const auto& [id, w] : s_.windows) {
    auto g = group_of.find(w.pool);
    if (w.kind != WindowKind::kSpot || g == group_of.end() || w.start_ms >= now_) continue;
    spot_hours[g->second] += (std::min(w.end_ms, now_) - w.start_ms) / 3.6e6;
    if (w.closed_early) revoked[g->second]++;
  }
  for (size_t g = 0; g < groups_.size(); g++) {
    if (spot_hours[g] > 0)
      group_revocations_per_hour_[g] = revoked[g] / std::max(1.0, spot_hours[g]);
  }
  for (size_t g = 0; g < groups_.size(); g++) all_groups_.push_back(static_cast<int>(g));
  for (const std::vector<int>& group : groups_) {
    int capacity = 0;
    for (int slot : group) capacity += slots_[slot].w->gpus;
    group_capacity_.push_back(capacity);
  }
}

int Planner::SlotOf(int64_t window_id) const {
  auto it = slot_of_.find(window_id);
  return it == slot_of_.end() ? -1 : it->second;
}

Planner::TeamState& Planner::TeamOf(const std::string& name) {
  auto it = teams_.find(name);
  if (it != teams_.end()) return it->second;
  TeamState& t = teams_[name];
  auto team = s_.teams.find(name);
  if (team == s_.teams.end()) return t;
  t.team = &team->second;
  if (t.team->borrow_limit_gpus >= 0) {
    t.limit = static_cast<int>(std::min<int64_t>(
        INT_MAX, static_cast<int64_t>(t.team->guaranteed_gpus) + t.team->borrow_limit_gpus));
    t.profile = static_cast<int>(profiles_.teams.size());
    profiles_.teams.emplace_back(now_, now_, kNever, t.limit);
  }
  return t;
}

Planner::JobCtx Planner::MakeCtx(size_t index) {
  return ContextFor(*order_[index], &plan_.pending[index], static_cast<int>(index) + 1);
}

Planner::JobCtx Planner::ContextFor(const Job& job, PendingInfo* info, int position) {
  JobCtx j{&job,
           info,
           &TeamOf(job.team),
           position,
           0,
           kNever,
           {},
           BlockReason::kNone,
           {},
           {}};
  if (job.remaining_seconds > 0) {
    j.run = SecondsToMs(job.restart_seconds + job.remaining_seconds + job.checkpoint_seconds +
                        c_.safety_seconds);
  }
  // A job about to finish need not fit a whole checkpoint interval: it
  // only has to fit the rest of its work.
  j.len = std::max<TimeMs>(1, std::min(MinSegmentMs(job, c_), j.run));
  if (job.pools.empty()) {
    j.groups = all_groups_;
  } else {
    for (const std::string& pool : job.pools) {
      auto g = group_by_pool_.find(pool);
      if (g != group_by_pool_.end()) j.groups.push_back(g->second);
    }
  }
  FilterReachable(&j);
  FilterPools(&j);
  return j;
}

void Planner::ComputeStats() {
  PlanStats& st = plan_.stats;
  for (const Slot& slot : slots_) {
    if (slot.w->open_at(now_)) st.open_window_gpus += slot.w->gpus;
  }
  st.allocated_gpus = allocated_now_;
  st.free_gpus = std::max(0, st.open_window_gpus - st.allocated_gpus);
  for (const auto& [id, job] : s_.jobs) {
    if (job.state == JobState::kPending) st.pending_jobs++;
    if (job.state == JobState::kRunning) st.running_jobs++;
  }
  if (order_.empty()) return;
  // Free GPUs the head of the queue could not use even if it were alone.
  const JobCtx head = MakeCtx(0);
  std::vector<bool> usable(slots_.size(), false);
  const TimeMs t_end = AddMs(now_, head.len);
  for (int g : head.groups) {
    int sum = 0;
    for (int slot : groups_[g]) sum += std::max(0, base_.windows[slot].Min(now_, t_end));
    if (sum >= head.job->min_gpus) {
      for (int slot : groups_[g]) usable[slot] = base_.windows[slot].Min(now_, t_end) > 0;
    }
  }
  for (size_t slot = 0; slot < slots_.size(); slot++) {
    if (slots_[slot].w->open_at(now_) && !usable[slot]) {
      st.fragmented_gpus += std::max(0, base_.windows[slot].At(now_));
    }
  }
}

}  // namespace stint::stintd::internal
