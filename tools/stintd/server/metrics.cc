#include "stintd/server/metrics.h"

#include "stintd/core/accounting.h"

#include <cstdio>
#include <map>
#include <sstream>

namespace stint::stintd {
namespace {

class Exposition {
 public:
  void Family(const char* name, const char* type, const char* help) {
    out_ << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  }
  void Sample(const std::string& name, double value, const std::string& labels = "") {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", value);
    out_ << name;
    if (!labels.empty()) out_ << '{' << labels << '}';
    out_ << ' ' << buf << '\n';
  }
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

// Names are [A-Za-z0-9._-] (validated on creation), so no escaping is needed.
std::string Label(const char* key, const std::string& value) {
  return std::string(key) + "=\"" + value + "\"";
}

}  // namespace

std::string RenderMetrics(const ClusterState& s, const Plan& plan, TimeMs now,
                          const ServerCounters& server) {
  Exposition e;
  const Counters& c = s.counters;

  std::map<JobState, int> by_state;
  for (JobState st : {JobState::kPending, JobState::kRunning, JobState::kDone, JobState::kCancelled,
                      JobState::kFailed}) {
    by_state[st] = 0;
  }
  std::map<Priority, int> pending_by_priority;
  for (Priority p : {Priority::kLow, Priority::kMedium, Priority::kHigh, Priority::kCritical})
    pending_by_priority[p] = 0;
  double oldest_wait = 0;
  for (const auto& [id, j] : s.jobs) {
    by_state[j.state]++;
    if (j.state == JobState::kPending) {
      pending_by_priority[j.priority]++;
      oldest_wait = std::max(oldest_wait, std::max<TimeMs>(0, now - j.eligible_ms) / 1000.0);
    }
  }
  e.Family("stintd_jobs", "gauge", "Jobs by state.");
  for (const auto& [st, n] : by_state) e.Sample("stintd_jobs", n, Label("state", JobStateName(st)));
  e.Family("stintd_queue_length", "gauge", "Pending jobs by priority.");
  for (const auto& [p, n] : pending_by_priority)
    e.Sample("stintd_queue_length", n, Label("priority", PriorityName(p)));
  std::map<BlockReason, int> by_reason;
  for (BlockReason r :
       {BlockReason::kQuota, BlockReason::kWindow, BlockReason::kGang, BlockReason::kPriority,
        BlockReason::kPreempting, BlockReason::kDepth, BlockReason::kBudget, BlockReason::kPrice,
        BlockReason::kStorage}) {
    by_reason[r] = 0;
  }
  for (const PendingInfo& p : plan.pending) {
    if (p.reason != BlockReason::kNone) by_reason[p.reason]++;
  }
  e.Family("stintd_queue_blocked", "gauge", "Pending jobs by blocking reason (last plan).");
  for (const auto& [r, n] : by_reason)
    e.Sample("stintd_queue_blocked", n, Label("reason", BlockReasonName(r)));
  e.Family("stintd_oldest_pending_wait_seconds", "gauge",
           "Wait of the longest-waiting pending job.");
  e.Sample("stintd_oldest_pending_wait_seconds", oldest_wait);

  e.Family("stintd_gpus", "gauge", "GPUs of the windows open now, by state (last plan).");
  e.Sample("stintd_gpus", plan.stats.open_window_gpus, Label("state", "open"));
  e.Sample("stintd_gpus", plan.stats.allocated_gpus, Label("state", "allocated"));
  e.Sample("stintd_gpus", plan.stats.free_gpus, Label("state", "free"));
  e.Sample("stintd_gpus", plan.stats.fragmented_gpus, Label("state", "fragmented"));
  int open_windows = 0;
  for (const auto& [id, w] : s.windows) open_windows += w.open_at(now) ? 1 : 0;
  e.Family("stintd_windows_open", "gauge", "Windows open now.");
  e.Sample("stintd_windows_open", open_windows);
  e.Family("stintd_window_gpu_seconds_total", "counter", "GPU-seconds offered by open windows.");
  e.Sample("stintd_window_gpu_seconds_total", c.window_gpu_seconds);
  e.Family("stintd_used_gpu_seconds_total", "counter", "GPU-seconds held by segments.");
  e.Sample("stintd_used_gpu_seconds_total", c.used_gpu_seconds);
  e.Family("stintd_window_utilization", "gauge",
           "Used / offered GPU-seconds since the state was created.");
  e.Sample("stintd_window_utilization",
           c.window_gpu_seconds > 0 ? c.used_gpu_seconds / c.window_gpu_seconds : 0);

  e.Family("stintd_wait_seconds", "histogram", "Wait from eligible to segment start.");
  for (size_t i = 0; i < WaitBucketsSeconds().size(); i++) {
    const int64_t n = i < c.wait_buckets.size() ? c.wait_buckets[i] : 0;
    char le[32];
    std::snprintf(le, sizeof(le), "%g", WaitBucketsSeconds()[i]);
    e.Sample("stintd_wait_seconds_bucket", static_cast<double>(n), Label("le", le));
  }
  e.Sample("stintd_wait_seconds_bucket", static_cast<double>(c.segments_started),
           Label("le", "+Inf"));
  e.Sample("stintd_wait_seconds_sum", c.wait_seconds_sum);
  e.Sample("stintd_wait_seconds_count", static_cast<double>(c.segments_started));

  const struct {
    const char* name;
    const char* help;
    double value;
  } counters[] = {
      {"stintd_segments_started_total", "Segments started.",
       static_cast<double>(c.segments_started)},
      {"stintd_notices_total", "Notices sent to segments.", static_cast<double>(c.notices_sent)},
      {"stintd_preemptions_total", "Priority preemption notices.",
       static_cast<double>(c.preemptions)},
      {"stintd_revocations_total", "Notices for revoked or early-closed windows.",
       static_cast<double>(c.revocations)},
      {"stintd_acks_total", "Segments ended by a checkpoint-durable ack.",
       static_cast<double>(c.acks)},
      {"stintd_segments_lost_total", "Segments lost (no ack by the deadline, or leases expired).",
       static_cast<double>(c.segments_lost)},
      {"stintd_lost_work_gpu_seconds_total",
       "GPU-seconds of work lost since the last durable checkpoint.", c.lost_gpu_seconds},
      {"stintd_heartbeats_total", "Heartbeats served since stintd started.",
       static_cast<double>(server.heartbeats)},
      {"stintd_plans_total", "Policy passes since stintd started.",
       static_cast<double>(server.plans)},
      {"stintd_store_errors_total", "SQLite writes refused since stintd started.",
       static_cast<double>(server.store_errors)},
  };
  for (const auto& m : counters) {
    e.Family(m.name, "counter", m.help);
    e.Sample(m.name, m.value);
  }
  e.Family("stintd_plan_seconds", "gauge", "Duration of a policy pass.");
  e.Sample("stintd_plan_seconds", server.last_plan_seconds, Label("stat", "last"));
  e.Sample("stintd_plan_seconds", server.max_plan_seconds, Label("stat", "max"));

  std::map<std::string, int> team_alloc;
  for (const auto& [id, seg] : s.segments) {
    if (!SegmentActive(seg.state)) continue;
    auto job = s.jobs.find(seg.job_id);
    if (job != s.jobs.end()) team_alloc[job->second.team] += seg.gpus();
  }
  e.Family("stintd_team_allocated_gpus", "gauge", "GPUs held by a team's segments.");
  for (const auto& [name, t] : s.teams)
    e.Sample("stintd_team_allocated_gpus", team_alloc[name], Label("team", name));
  e.Family("stintd_team_guaranteed_gpus", "gauge", "A team's guarantee.");
  for (const auto& [name, t] : s.teams)
    e.Sample("stintd_team_guaranteed_gpus", t.guaranteed_gpus, Label("team", name));
  e.Family("stintd_team_usage_gpu_seconds", "gauge", "A team's decayed usage.");
  for (const auto& [name, t] : s.teams)
    e.Sample("stintd_team_usage_gpu_seconds", t.usage_gpu_seconds, Label("team", name));
  e.Family("stintd_team_spent", "gauge", "What a team's segments were charged this budget period.");
  for (const auto& [name, t] : s.teams) e.Sample("stintd_team_spent", t.spent, Label("team", name));
  e.Family("stintd_team_budget", "gauge", "A team's budget per period (teams with one).");
  for (const auto& [name, t] : s.teams) {
    if (t.budget >= 0) e.Sample("stintd_team_budget", t.budget, Label("team", name));
  }
  e.Family("stintd_pool_price_per_gpu_hour", "gauge", "A pool's price in force.");
  for (const auto& [name, p] : s.pools)
    e.Sample("stintd_pool_price_per_gpu_hour", p.price_per_gpu_hour, Label("pool", name));
  // Per running job: its cost and fragment-training efficiency
  // (accounting.h), so a dashboard can follow them while it runs.
  e.Family("stintd_job_cost", "gauge", "What a job's segments were charged.");
  e.Family("stintd_job_efficiency", "gauge",
           "Useful GPU-seconds (kept steps at the job's measured pace) / GPU-seconds held.");
  e.Family("stintd_job_useful_gpu_seconds", "gauge", "A job's useful GPU-seconds.");
  e.Family("stintd_job_held_gpu_seconds", "gauge", "GPU-seconds a job's segments held.");
  for (const auto& [id, j] : s.jobs) {
    if (j.state != JobState::kRunning) continue;
    const std::string label = Label("job", std::to_string(id));
    const JobFigures f = FigureJob(s, j, now);
    e.Sample("stintd_job_cost", j.cost, label);
    e.Sample("stintd_job_efficiency", f.efficiency, label);
    e.Sample("stintd_job_useful_gpu_seconds", f.useful_gpu_seconds, label);
    e.Sample("stintd_job_held_gpu_seconds", f.held_gpu_seconds, label);
  }
  return e.str();
}

}  // namespace stint::stintd
