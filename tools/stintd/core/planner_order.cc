// The order of the pending jobs: each job's score (priority level, aging,
// the guarantee bonus, the fair-share penalty, the service-class penalty),
// its service class (attained service or the work left, within the queue
// guard), the starvation guard, and the Planner's sort of the queue by score.
#include "stintd/core/planner.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

namespace stint::stintd {
namespace {

double ScoreParts(const Job& job, TimeMs now, const PolicyConfig& c, int team_held,
                  const Team* team, double usage_sum, PendingInfo* info) {
  const double level = c.level_points * static_cast<int>(job.priority);
  const double hours = std::max<TimeMs>(0, now - job.eligible_ms) / 3.6e6;
  const double aging = std::max(0.0, std::min(c.aging_points_per_hour * hours, c.aging_cap_points));
  const double guarantee =
      team != nullptr && team_held < team->guaranteed_gpus ? c.guarantee_bonus_points : 0.0;
  const double share = team != nullptr && usage_sum > 0 ? team->usage_gpu_seconds / usage_sum : 0.0;
  const double fair_share = -c.fair_share_points * share;
  const int service_class = QueueGuarded(job, now, c) ? 0 : ServiceClass(job, c);
  const double service = -c.service_class_points * service_class;
  const double score = level + aging + guarantee + fair_share + service;
  if (info != nullptr) {
    info->score = score;
    info->score_level = level;
    info->score_aging = aging;
    info->score_guarantee = guarantee;
    info->score_fair_share = fair_share;
    info->score_service = service;
    info->service_class = service_class;
  }
  return score;
}

double UsageSum(const ClusterState& s) {
  double sum = 0;
  for (const auto& [name, t] : s.teams) sum += std::max(0.0, t.usage_gpu_seconds);
  return sum;
}

}  // namespace

bool Starving(const Job& job, TimeMs now, const PolicyConfig& config) {
  if (!config.service_starvation_guard) return false;
  // Run time: attained GPU-seconds at max_gpus; wait: the rest since submit.
  const double run = job.service_gpu_seconds / std::max(1, job.max_gpus);
  if (run <= 0) return false;
  // With the work left known, its slowdown is bounded against its whole
  // work: projected JCT (time so far + left) > (1 + factor) x (run + left).
  // A job with much left may wait longer than one near its end before it is
  // shielded. Without an estimate (left 0) this is wait > factor x run.
  const double left = std::max(0.0, job.remaining_seconds);
  const double elapsed = std::max<TimeMs>(0, now - job.submit_ms) / 1000.0;
  return elapsed + left > (1 + config.service_starvation_factor) * (run + left);
}

bool QueueGuarded(const Job& job, TimeMs now, const PolicyConfig& config) {
  if (!config.service_class_by_remaining || config.service_queue_guard_factor <= 0 ||
      job.service_gpu_seconds > 0 || job.remaining_seconds <= 0)
    return false;
  const double waited = std::max<TimeMs>(0, now - job.submit_ms) / 1000.0;
  return waited > config.service_queue_guard_factor * job.remaining_seconds;
}

int ServiceClass(const Job& job, const PolicyConfig& config) {
  auto class_of = [&](double gpu_seconds) {
    int k = 0;
    double threshold = config.service_class_gpu_hours * 3600.0;
    while (k + 1 < config.service_classes && threshold > 0 && gpu_seconds >= threshold) {
      k++;
      threshold *= std::max(1.0, config.service_class_factor);
    }
    return k;
  };
  const int attained = class_of(job.service_gpu_seconds);
  // The work left where the job reports it (service_class_by_remaining),
  // no more than service_class_remaining_max_drop below the service attained.
  if (!config.service_class_by_remaining || job.remaining_seconds <= 0) return attained;
  return std::max(class_of(job.remaining_seconds * job.max_gpus),
                  attained - std::max(0, config.service_class_remaining_max_drop));
}

double JobScore(const ClusterState& state, const Job& job, TimeMs now, const PolicyConfig& config,
                PendingInfo* info) {
  int held = 0;
  for (const auto& [id, seg] : state.segments) {
    if (!SegmentActive(seg.state)) continue;
    auto j = state.jobs.find(seg.job_id);
    if (j != state.jobs.end() && j->second.team == job.team) held += seg.gpus();
  }
  auto team = state.teams.find(job.team);
  return ScoreParts(job, now, config, held, team == state.teams.end() ? nullptr : &team->second,
                    UsageSum(state), info);
}

namespace internal {

void Planner::OrderPending() {
  const double usage_sum = UsageSum(s_);
  // Scores into the infos first, then sort compact keys: with 10,000
  // pending jobs this is most of a plan's time.
  struct Key {
    double score;
    double left;  // GPU-seconds of work left; unknown: infinity
    TimeMs submit_ms;
    int64_t id;
    size_t index;
  };
  std::vector<PendingInfo> infos;
  std::vector<const Job*> jobs;
  std::vector<Key> keys;
  infos.reserve(s_.jobs.size());
  jobs.reserve(s_.jobs.size());
  keys.reserve(s_.jobs.size());
  for (const auto& [id, job] : s_.jobs) {
    if (job.state != JobState::kPending) continue;
    const TeamState& t = TeamOf(job.team);
    PendingInfo info;
    info.job_id = id;
    ScoreParts(job, now_, c_, t.held_all, t.team, usage_sum, &info);
    const double left = job.remaining_seconds > 0 ? job.remaining_seconds * job.max_gpus
                                                  : std::numeric_limits<double>::infinity();
    keys.push_back(Key{info.score, left, job.submit_ms, id, infos.size()});
    infos.push_back(std::move(info));
    jobs.push_back(&job);
  }
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    if (a.score != b.score) return a.score > b.score;
    // Equal scores (a burst submitted at once): the least work left first
    // (shortest-first minimises their mean JCT), unknown last.
    if (a.left != b.left) return a.left < b.left;
    if (a.submit_ms != b.submit_ms) return a.submit_ms < b.submit_ms;
    return a.id < b.id;
  });
  plan_.pending.reserve(keys.size());
  order_.reserve(keys.size());
  for (const Key& k : keys) {
    plan_.pending.push_back(std::move(infos[k.index]));
    plan_.pending.back().position = static_cast<int>(plan_.pending.size());
    order_.push_back(jobs[k.index]);
  }
}

}  // namespace internal
}  // namespace stint::stintd
