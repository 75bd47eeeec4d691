// Prices and budgets in a pass: the pools a pending job may use (under its
// priority's price cap, without spot pools once it was revoked too often
// there, and where its team's budget pays a minimum segment), what a pool
// costs per useful GPU-hour, what a start commits of the budget, and
// notices to the running segments of a team that can no longer pay them.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "stintd/core/accounting.h"
#include "stintd/core/planner.h"

namespace stint::stintd::internal {
namespace {

std::string Money(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

}  // namespace

// A team's budget left, less what its active segments will cost at least:
// to the end of their minimum segment (what a start was admitted for) or
// to checkpoint and stop, whichever is later. A team that cannot pay that
// any more has its running segments told to checkpoint and stop.
void Planner::ScanBudgets() {
  for (const auto& [name, t] : s_.teams) {
    if (t.budget >= 0) TeamOf(name).budget_left = BudgetLeft(t);
  }
  std::map<std::string, std::vector<std::pair<const Segment*, const Job*>>> running;
  for (const auto& [id, seg] : s_.segments) {
    if (!SegmentActive(seg.state) || seg.price_per_gpu_hour <= 0) continue;
    auto job = s_.jobs.find(seg.job_id);
    if (job == s_.jobs.end()) continue;
    TeamState& team = TeamOf(job->second.team);
    if (!std::isfinite(team.budget_left)) continue;
    const double stop_s = job->second.checkpoint_seconds + c_.safety_seconds;
    const TimeMs stop_by =
        seg.state == SegmentState::kNotified ? seg.deadline_ms : now_ + SecondsToMs(stop_s);
    const TimeMs committed_end = std::min(
        ReleaseMs(s_, seg), std::max(stop_by, seg.start_ms + MinSegmentMs(job->second, c_)));
    team.budget_left -= seg.gpus() * seg.price_per_gpu_hour / 3600.0 *
                        std::max<TimeMs>(0, committed_end - now_) / 1000.0;
    const bool noticed = std::any_of(plan_.notices.begin(), plan_.notices.end(),
                                     [&](const NoticeDecision& d) { return d.segment_id == id; });
    if (seg.state == SegmentState::kRunning && !noticed)
      running[job->second.team].emplace_back(&seg, &job->second);
  }
  for (const auto& [name, segments] : running) {
    if (TeamOf(name).budget_left >= 0) continue;
    for (const auto& [seg, job] : segments) {
      const double grace =
          std::min(job->checkpoint_seconds + c_.safety_seconds, c_.max_grace_seconds);
      plan_.notices.push_back(
          NoticeDecision{seg->id, std::min(ReleaseMs(s_, *seg), now_ + SecondsToMs(grace)),
                         NoticeReason::kBudget, 0});
    }
  }
}

void Planner::FilterPools(JobCtx* j) {
  const Job& job = *j->job;
  const PriceRule& rule = s_.price_rules[static_cast<size_t>(job.priority)];
  const TimeMs window = SecondsToMs(rule.spot_fallback_window_seconds);
  const int revocations = static_cast<int>(std::count_if(
      job.revoked_ms.begin(), job.revoked_ms.end(), [&](TimeMs t) { return now_ - t < window; }));
  const bool spot_fallback =
      rule.spot_fallback_revocations > 0 && revocations >= rule.spot_fallback_revocations;
  std::vector<int> kept;
  int unaffordable = 0;
  double cheapest = -1;  // of a minimum segment where the budget is what excluded the pool
  for (int g : j->groups) {
    const Pool* pool = group_pool_[g];
    const double price = pool != nullptr ? pool->price_per_gpu_hour : 0;
    if (rule.max_price_per_gpu_hour >= 0 && price > rule.max_price_per_gpu_hour) continue;
    if (spot_fallback && pool != nullptr && pool->pricing == PoolPricing::kSpot) continue;
    const double cost = MinSegmentCost(*j, g, job.min_gpus);
    if (cost > 0 && cost > j->team->budget_left) {
      unaffordable++;
      cheapest = cheapest < 0 ? cost : std::min(cheapest, cost);
      continue;
    }
    kept.push_back(g);
  }
  if (kept.empty() && !j->groups.empty()) {
    if (unaffordable > 0) {
      const Team& t = *j->team->team;
      j->excluded = BlockReason::kBudget;
      j->excluded_detail = "team " + job.team + " has " +
                           Money(std::max(0.0, j->team->budget_left)) + " of its budget " +
                           Money(t.budget) + " left to commit this period (" + Money(t.spent) +
                           " spent); a minimum segment of " + std::to_string(job.min_gpus) +
                           " GPUs costs " + Money(cheapest);
    } else {
      j->excluded = BlockReason::kPrice;
      j->excluded_detail = std::string("every pool with a window it may use is priced above the ") +
                           PriorityName(job.priority) + " cap" +
                           (rule.max_price_per_gpu_hour >= 0
                                ? " of " + Money(rule.max_price_per_gpu_hour) + "/GPU-hour"
                                : std::string()) +
                           (spot_fallback ? " or is spot (revoked " + std::to_string(revocations) +
                                                " times; it falls back to the others)"
                                          : std::string());
    }
  }
  j->groups = std::move(kept);
}

// Price per useful GPU-hour: a spot pool's price is raised by the share of
// its time the job would lose to revocations (each costs a restart, a
// checkpoint and half an interval of work, by the job's own figures), and
// any pool's by reading the checkpoint from an object store first (that
// time is paid and not useful, once per minimum segment).
double Planner::GroupCost(const JobCtx& j, int group) const {
  const Pool* pool = group_pool_[group];
  return CostAt(j, group, pool != nullptr ? pool->price_per_gpu_hour : 0);
}

double Planner::CostAt(const JobCtx& j, int group, double price) const {
  if (price <= 0) return 0;
  const Job& job = *j.job;
  const double per_revocation_s =
      job.restart_seconds + job.checkpoint_seconds + job.checkpoint_interval_seconds / 2;
  const double lost =
      std::min(0.95, group_revocations_per_hour_[group] * per_revocation_s / 3600.0);
  const double len_s = j.len / 1000.0;
  return price / (1.0 - lost) * (len_s + j.TransferSeconds(group)) / len_s;
}

double Planner::MinSegmentCost(const JobCtx& j, int group, int gpus) const {
  const Pool* pool = group_pool_[group];
  const double price = pool != nullptr ? pool->price_per_gpu_hour : 0;
  return gpus * price * (j.len / 3.6e6);
}

int Planner::BudgetGpus(const JobCtx& j, double price) const {
  const double left = j.team->budget_left;
  if (price <= 0 || !std::isfinite(left)) return INT_MAX;
  const double per_gpu = price * (j.len / 3.6e6);
  return left < per_gpu ? 0 : static_cast<int>(std::min<double>(INT_MAX, left / per_gpu));
}

void Planner::ChargeStart(const JobCtx& j, const Fit& fit) {
  if (fit.parts.empty()) return;
  j.team->budget_left -= MinSegmentCost(j, slots_[fit.parts.front().slot].group, fit.gpus);
}

}  // namespace stint::stintd::internal
