// stintd-plan-bench: the time of one MakePlan on a big, busy cluster.
//
//   stintd-plan-bench [--runs 15] [--jobs 10000] [--segments 300] [--depth 256] [--seed 1]
//                     [--nodes N] [--history N]
//
// Builds one ClusterState: --jobs pending jobs (all four levels, eight
// teams with guarantees and borrowing limits, 1 to 64 GPUs, gang and
// non-gang, pinned to a pool or not), ~50 windows in four pools (hard and
// spot, some opening later) and --segments running segments, then times
// MakePlan --runs times and prints the median and p90. stintd plans on every
// tick and on every change, so the target is < 50 ms per plan. A benchmark
// only: nothing here asserts a time (a shared machine would make that flaky).
//
// --nodes N: instead, the shape of stintd-heartbeat-bench --nodes (issue 20):
// N stint-agent node windows of 8 GPUs in one spot pool (no end), 2N running
// segments of 4 GPUs filling them (half until a planned end within 20 h, so
// the free profiles rise), and --jobs pending 4-GPU jobs in that pool. The
// policy pass alone, without stintd's tick around it.
//
// --history N: N finished jobs, each with an ended segment and four released
// workers, as a long-running stintd keeps them (the policy reads none).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "stintd/core/model.h"
#include "stintd/core/policy.h"

namespace stint::stintd {
namespace {

constexpr double kTargetMs = 50;
constexpr TimeMs kHour = 3600 * 1000;

struct Options {
  int runs = 15;
  int jobs = 10000;
  int segments = 300;
  int depth = 256;
  uint64_t seed = 1;
  int nodes = 0;
  int history = 0;
};

bool ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    auto value = [&](long* out) {
      if (i + 1 >= argc) return false;
      char* end = nullptr;
      *out = std::strtol(argv[++i], &end, 10);
      return end != nullptr && *end == '\0' && *out > 0;
    };
    long v = 0;
    if (a == "--runs" && value(&v)) {
      o->runs = static_cast<int>(v);
    } else if (a == "--jobs" && value(&v)) {
      o->jobs = static_cast<int>(v);
    } else if (a == "--segments" && value(&v)) {
      o->segments = static_cast<int>(v);
    } else if (a == "--depth" && value(&v)) {
      o->depth = static_cast<int>(v);
    } else if (a == "--history" && value(&v)) {
      o->history = static_cast<int>(v);
    } else if (a == "--nodes" && value(&v)) {
      o->nodes = static_cast<int>(v);
    } else if (a == "--seed" && value(&v)) {
      o->seed = static_cast<uint64_t>(v);
    } else {
      std::fprintf(
          stderr,
          "usage: stintd-plan-bench [--runs N] [--jobs N] [--segments N] [--depth N] [--seed N] "
          "[--nodes N] [--history N]\n");
      return false;
    }
  }
  return true;
}

ClusterState BuildState(const Options& o, TimeMs now) {
  std::mt19937_64 rng(o.seed);
  auto uniform = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  ClusterState s;
  int64_t next_id = 1;

  const std::vector<std::string> pools = {"a100", "h100", "l40", "spot"};
  for (const std::string& p : pools) s.pools[p] = Pool{p, ""};
  const std::vector<int> sizes = {8, 8, 16, 16, 32, 64};
  for (int i = 0; i < 50; i++) {
    Window w;
    w.id = next_id++;
    w.pool = pools[i % pools.size()];
    w.gpus = sizes[uniform(0, static_cast<int>(sizes.size()) - 1)];
    w.kind = w.pool == "spot" ? WindowKind::kSpot : WindowKind::kHard;
    // One in five opens later; the rest opened up to 12 h ago.
    w.start_ms = i % 5 == 4 ? now + uniform(1, 24) * kHour : now - uniform(0, 12) * kHour;
    if (w.kind == WindowKind::kSpot && i % 3 == 0) {
      w.end_ms = kNever;  // no forecast
      w.notice_lead_ms = 120 * 1000;
    } else {
      w.end_ms = std::max(now, w.start_ms) + uniform(1, 72) * kHour;
    }
    s.windows[w.id] = w;
  }

  const std::vector<std::string> teams = {"vision", "speech",   "nlp", "rl",
                                          "infra",  "research", "ads", "search"};
  for (size_t i = 0; i < teams.size(); i++) {
    Team t;
    t.name = teams[i];
    t.guaranteed_gpus = static_cast<int>(8 * (i % 4));
    t.borrow_limit_gpus = i % 3 == 0 ? -1 : static_cast<int>(32 + 16 * i);
    t.usage_gpu_seconds = 3600.0 * uniform(0, 500);
    s.teams[t.name] = t;
  }

  auto make_job = [&](JobState state) {
    Job j;
    j.id = next_id++;
    j.name = "job-" + std::to_string(j.id);
    j.team = teams[uniform(0, static_cast<int>(teams.size()) - 1)];
    if (uniform(0, 9) >= 3) j.pools = {pools[uniform(0, static_cast<int>(pools.size()) - 1)]};
    const int p = uniform(0, 99);
    j.priority = p < 40   ? Priority::kLow
                 : p < 75 ? Priority::kMedium
                 : p < 95 ? Priority::kHigh
                          : Priority::kCritical;
    const std::vector<int> mins = {1, 1, 1, 2, 2, 4, 4, 8, 8, 16, 32, 64};
    j.min_gpus = mins[uniform(0, static_cast<int>(mins.size()) - 1)];
    j.max_gpus = uniform(0, 3) == 0 ? j.min_gpus * 2 : j.min_gpus;
    j.gang = uniform(0, 9) < 7;
    j.preemptible = uniform(0, 9) < 8;
    j.checkpoint_seconds = uniform(10, 120);
    j.restart_seconds = uniform(20, 300);
    j.checkpoint_interval_seconds = uniform(300, 3600);
    j.remaining_seconds = uniform(0, 1) ? uniform(600, 48 * 3600) : 0;
    j.submit_ms = now - uniform(0, 72 * 3600) * 1000LL;
    j.eligible_ms = j.submit_ms + uniform(0, static_cast<int>((now - j.submit_ms) / 1000)) * 1000LL;
    j.state = state;
    return j;
  };

  // Running segments: packed into the open windows while they have room.
  std::map<int64_t, int> used;
  int placed = 0;
  for (int attempt = 0; placed < o.segments && attempt < o.segments * 20; attempt++) {
    Job j = make_job(JobState::kRunning);
    j.min_gpus = j.max_gpus = std::min(j.min_gpus, 4);
    j.pools.clear();
    std::vector<int64_t> open;
    for (const auto& [id, w] : s.windows) {
      if (w.open_at(now) && w.gpus - used[id] >= j.min_gpus) open.push_back(id);
    }
    if (open.empty()) break;
    const Window& w = s.windows[open[uniform(0, static_cast<int>(open.size()) - 1)]];
    Segment seg;
    seg.id = next_id++;
    seg.job_id = j.id;
    seg.allocs = {Allocation{w.id, j.min_gpus}};
    seg.start_ms = now - uniform(60, 6 * 3600) * 1000LL;
    seg.planned_end_ms =
        uniform(0, 1) ? std::min(w.end_ms, now + uniform(1, 20) * kHour) : w.end_ms;
    seg.last_heartbeat_ms = now - 1000;
    seg.fencing_token = static_cast<uint64_t>(seg.id);
    j.segment_id = seg.id;
    j.checkpoint_ms =
        seg.start_ms + uniform(0, static_cast<int>((now - seg.start_ms) / 1000)) * 1000LL;
    used[w.id] += j.min_gpus;
    s.segments[seg.id] = seg;
    s.jobs[j.id] = j;
    placed++;
  }
  for (int i = 0; i < o.jobs; i++) {
    Job j = make_job(JobState::kPending);
    s.jobs[j.id] = j;
  }
  s.next_id = next_id;
  return s;
}

// stintd-heartbeat-bench's cluster: full 8-GPU nodes and a queue of 4-GPU jobs.
ClusterState BuildNodeState(const Options& o, TimeMs now) {
  std::mt19937_64 rng(o.seed);
  auto uniform = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  ClusterState s;
  int64_t next_id = 1;
  s.pools["bench"] = Pool{"bench", ""};
  auto make_job = [&](JobState state) {
    Job j;
    j.id = next_id++;
    j.name = "job" + std::to_string(j.id);
    j.pools = {"bench"};
    j.min_gpus = j.max_gpus = 4;
    j.submit_ms = j.eligible_ms = now - uniform(0, 3600) * 1000LL;
    j.state = state;
    return j;
  };
  for (int i = 0; i < o.nodes; i++) {
    Window w;
    w.id = next_id++;
    w.pool = "bench";
    w.node = "node-" + std::to_string(i);
    w.node_gpus = {0, 1, 2, 3, 4, 5, 6, 7};
    w.gpus = 8;
    w.kind = WindowKind::kSpot;
    w.start_ms = now - kHour;
    w.end_ms = kNever;
    s.windows[w.id] = w;
    for (int k = 0; k < 2; k++) {
      Job j = make_job(JobState::kRunning);
      Segment seg;
      seg.id = next_id++;
      seg.job_id = j.id;
      seg.allocs = {Allocation{w.id, 4}};
      seg.start_ms = now - uniform(60, 3600) * 1000LL;
      seg.planned_end_ms = uniform(0, 1) ? now + uniform(60, 20 * 3600) * 1000LL : kNever;
      seg.last_heartbeat_ms = now - 1000;
      seg.fencing_token = static_cast<uint64_t>(seg.id);
      j.segment_id = seg.id;
      s.segments[seg.id] = seg;
      s.jobs[j.id] = j;
    }
  }
  for (int i = 0; i < o.jobs; i++) {
    Job j = make_job(JobState::kPending);
    s.jobs[j.id] = j;
  }
  s.next_id = next_id;
  return s;
}

// What a long-running stintd keeps of finished work: done jobs, their ended
// segments and released workers, with ids above everything else.
void AddHistory(int n, TimeMs now, ClusterState* s) {
  for (int i = 0; i < n; i++) {
    Job j;
    j.id = s->next_id++;
    j.name = "done" + std::to_string(j.id);
    j.min_gpus = j.max_gpus = 4;
    j.submit_ms = j.eligible_ms = now - 48 * kHour;
    j.state = JobState::kDone;
    Segment seg;
    seg.id = s->next_id++;
    seg.job_id = j.id;
    seg.state = SegmentState::kCompleted;
    seg.start_ms = now - 47 * kHour;
    seg.ended_ms = now - 46 * kHour;
    j.segment_id = seg.id;
    for (int k = 0; k < 4; k++) {
      Worker w;
      w.id = s->next_id++;
      w.job_id = j.id;
      w.segment_id = seg.id;
      w.released = true;
      s->workers[w.id] = w;
    }
    s->segments[seg.id] = seg;
    s->jobs[j.id] = j;
  }
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(p * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

int Main(int argc, char** argv) {
  Options o;
  if (!ParseArgs(argc, argv, &o)) return 2;
  const TimeMs now = 1767225600000;  // 2026-01-01T00:00:00Z: any fixed instant will do
  ClusterState state = o.nodes > 0 ? BuildNodeState(o, now) : BuildState(o, now);
  AddHistory(o.history, now, &state);
  PolicyConfig config;
  config.plan_depth = o.depth;

  std::vector<double> ms;
  Plan plan;
  for (int r = 0; r < o.runs; r++) {
    const auto t0 = std::chrono::steady_clock::now();
    plan = MakePlan(state, now, config);
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }

  std::map<std::string, int> reasons;
  for (const PendingInfo& p : plan.pending) reasons[BlockReasonName(p.reason)]++;
  int segments = 0;
  for (const auto& [id, seg] : state.segments) segments += SegmentActive(seg.state) ? 1 : 0;
  std::printf("state: %zu windows, %d running segments, %d pending jobs, plan_depth %d\n",
              state.windows.size(), segments, plan.stats.pending_jobs, o.depth);
  std::printf("plan: %zu starts, %zu notices, %zu lost; reasons:", plan.starts.size(),
              plan.notices.size(), plan.lost.size());
  for (const auto& [name, n] : reasons) std::printf(" %s=%d", name.c_str(), n);
  std::printf("\n");
  const double median = Percentile(ms, 0.5);
  const double p90 = Percentile(ms, 0.9);
  std::printf("MakePlan over %d runs: median %.2f ms, p90 %.2f ms (target < %.0f ms: %s)\n", o.runs,
              median, p90, kTargetMs, p90 < kTargetMs ? "met" : "MISSED");
  return 0;
}

}  // namespace
}  // namespace stint::stintd

int main(int argc, char** argv) { return stint::stintd::Main(argc, argv); }
