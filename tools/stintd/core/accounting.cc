#include "stintd/core/accounting.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace stint::stintd {
namespace {

Status CheckPrice(const char* field, double v) {
  if (!std::isfinite(v) || v < 0) {
    return Status::InvalidArgument(std::string(field) + " must be a number >= 0 (got " +
                                   std::to_string(v) + ")");
  }
  return Status::OK();
}

// Seconds per step of the segment since its restart ended, or 0 before two
// steps were seen.
double SegmentPace(const Segment& seg) {
  if (seg.first_step_ms == 0 || seg.last_step <= seg.first_step) return 0;
  return (seg.last_step_ms - seg.first_step_ms) / 1000.0 /
         static_cast<double>(seg.last_step - seg.first_step);
}

// Keeps the newest points and thins the older half to every other one, so
// a long run keeps its whole curve at a coarser resolution. A segment's
// first point is never dropped: it marks where the segment began.
void ThinLosses(std::vector<LossPoint>* losses) {
  if (losses->size() <= kMaxLossPoints) return;
  const size_t old = losses->size() / 2;
  std::vector<LossPoint> kept;
  kept.reserve(losses->size());
  for (size_t i = 0; i < losses->size(); i++) {
    const bool first_of_segment = i == 0 || (*losses)[i - 1].segment_id != (*losses)[i].segment_id;
    if (i >= old || i % 2 == 0 || first_of_segment) kept.push_back((*losses)[i]);
  }
  *losses = std::move(kept);
}

}  // namespace

Status SetPoolPrice(ClusterState& s, const std::string& pool, double price_per_gpu_hour, TimeMs now,
                    Changes* changes) {
  auto it = s.pools.find(pool);
  if (it == s.pools.end()) return Status::NotFound("pool \"" + pool + "\" does not exist");
  STINT_RETURN_IF_ERROR(CheckPrice("price_per_gpu_hour", price_per_gpu_hour));
  Pool& p = it->second;
  p.price_per_gpu_hour = price_per_gpu_hour;
  p.price_history.push_back(PricePoint{now, price_per_gpu_hour});
  if (p.price_history.size() > kMaxPriceHistory) {
    p.price_history.erase(p.price_history.begin(),
                          p.price_history.end() - static_cast<std::ptrdiff_t>(kMaxPriceHistory));
  }
  changes->pools.insert(pool);
  return Status::OK();
}

Status SetPriceRule(ClusterState& s, Priority priority, const PriceRule& rule, Changes* changes) {
  if (!std::isfinite(rule.max_price_per_gpu_hour) ||
      (rule.max_price_per_gpu_hour < 0 && rule.max_price_per_gpu_hour != -1)) {
    return Status::InvalidArgument(
        "max_price_per_gpu_hour must be >= 0, or -1 for any price (got " +
        std::to_string(rule.max_price_per_gpu_hour) + ")");
  }
  if (rule.spot_fallback_revocations < 0)
    return Status::InvalidArgument("spot_fallback_revocations must be >= 0 (0: never)");
  if (!std::isfinite(rule.spot_fallback_window_seconds) || rule.spot_fallback_window_seconds <= 0)
    return Status::InvalidArgument("spot_fallback_window_seconds must be > 0");
  s.price_rules[static_cast<size_t>(priority)] = rule;
  changes->counters = true;  // the rules are kept in the meta row
  return Status::OK();
}

const Pool* SegmentPool(const ClusterState& s, const Segment& seg) {
  if (seg.allocs.empty()) return nullptr;
  auto w = s.windows.find(seg.allocs.front().window_id);
  if (w == s.windows.end()) return nullptr;
  auto p = s.pools.find(w->second.pool);
  return p == s.pools.end() ? nullptr : &p->second;
}

void ChargeSegments(ClusterState& s, double dt_seconds, TimeMs now) {
  for (auto& [name, t] : s.teams) {
    if (t.budget_period_seconds <= 0) continue;
    const TimeMs period = SecondsToMs(t.budget_period_seconds);
    if (t.period_start_ms == 0) t.period_start_ms = now;
    if (now - t.period_start_ms >= period) {
      t.period_start_ms += (now - t.period_start_ms) / period * period;
      t.spent = 0;
    }
  }
  for (auto& [id, seg] : s.segments) {
    if (!SegmentActive(seg.state) || seg.price_per_gpu_hour <= 0) continue;
    const double charge = seg.gpus() * dt_seconds * seg.price_per_gpu_hour / 3600.0;
    seg.cost += charge;
    auto job = s.jobs.find(seg.job_id);
    if (job == s.jobs.end()) continue;
    job->second.cost += charge;
    auto team = s.teams.find(job->second.team);
    if (team != s.teams.end()) team->second.spent += charge;
  }
}

double BudgetLeft(const Team& team) {
  if (team.budget < 0) return std::numeric_limits<double>::infinity();
  return team.budget - team.spent;
}

void RecordProgress(Segment& seg, Job& job, const HeartbeatReport& report, TimeMs now) {
  if (report.samples && *report.samples > job.samples) job.samples = *report.samples;
  if (report.step > seg.last_step) {
    const int64_t resumed = std::max<int64_t>(0, seg.start_step);
    if (seg.first_step_ms != 0) {
      // Steps since the segment's last report, past its restart: its pace.
      StepTime& t = job.step_time[seg.gpus()];
      t.seconds += std::max<TimeMs>(0, now - seg.last_step_ms) / 1000.0;
      t.steps += report.step - seg.last_step;
    } else if (report.step > resumed) {
      seg.first_step = report.step;
      seg.first_step_ms = now;
    }
    seg.last_step = report.step;
    seg.last_step_ms = now;
  }
  if (report.loss && std::isfinite(*report.loss)) {
    const int64_t step = report.loss_step.value_or(report.step);
    const bool fresh = job.losses.empty() || job.losses.back().segment_id != seg.id ||
                       step > job.losses.back().step;
    if (fresh) {
      job.losses.push_back(LossPoint{step, *report.loss, seg.id, now});
      ThinLosses(&job.losses);
    }
  }
}

JobFigures FigureJob(const ClusterState& s, const Job& job, TimeMs now) {
  JobFigures f;
  for (const auto& [id, seg] : s.segments) {
    if (seg.job_id != job.id) continue;
    SegmentFigures g;
    g.segment_id = seg.id;
    g.gpus = seg.gpus();
    const TimeMs end = SegmentActive(seg.state) ? now : seg.ended_ms;
    const double held_seconds = std::max<TimeMs>(0, end - seg.start_ms) / 1000.0;
    g.held_gpu_seconds = g.gpus * held_seconds;
    const TimeMs restart_end = seg.first_step_ms != 0 ? seg.first_step_ms : end;
    g.restart_gpu_seconds = g.gpus * std::max<TimeMs>(0, restart_end - seg.start_ms) / 1000.0;
    g.checkpoint_gpu_seconds = g.gpus * seg.checkpoint_seconds;
    auto measured = job.step_time.find(g.gpus);
    const double pace = measured != job.step_time.end() && measured->second.steps > 0
                            ? measured->second.pace()
                            : SegmentPace(seg);
    const int64_t resumed = std::max<int64_t>(0, seg.start_step);
    if (seg.checkpoint_step > resumed) g.kept_steps = seg.checkpoint_step - resumed;
    g.useful_gpu_seconds = g.gpus * pace * static_cast<double>(g.kept_steps);
    if (!SegmentActive(seg.state) && seg.last_step > std::max(resumed, seg.checkpoint_step)) {
      g.lost_gpu_seconds =
          g.gpus * pace *
          static_cast<double>(seg.last_step - std::max(resumed, seg.checkpoint_step));
    }
    g.efficiency = g.held_gpu_seconds > 0 ? g.useful_gpu_seconds / g.held_gpu_seconds : 0;
    g.cost = seg.cost;
    f.held_gpu_seconds += g.held_gpu_seconds;
    f.restart_gpu_seconds += g.restart_gpu_seconds;
    f.checkpoint_gpu_seconds += g.checkpoint_gpu_seconds;
    f.lost_gpu_seconds += g.lost_gpu_seconds;
    f.useful_gpu_seconds += g.useful_gpu_seconds;
    f.kept_steps += g.kept_steps;
    f.segments.push_back(g);
  }
  f.efficiency = f.held_gpu_seconds > 0 ? f.useful_gpu_seconds / f.held_gpu_seconds : 0;
  f.cost = job.cost;
  f.cost_per_step = f.kept_steps > 0 ? f.cost / static_cast<double>(f.kept_steps) : 0;
  return f;
}

}  // namespace stint::stintd
