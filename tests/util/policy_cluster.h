// A ClusterState built by hand for the policy's tests (policy_test.cc,
// storage_policy_test.cc), and lookups into a plan. Jobs default to MEDIUM,
// 1 GPU, gang, checkpoint 30 s, restart 60 s, interval 600 s: with the
// default 10 s safety a minimum segment is 700 s.
#ifndef STINT_TESTS_UTIL_POLICY_CLUSTER_H_
#define STINT_TESTS_UTIL_POLICY_CLUSTER_H_

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "stintd/core/model.h"
#include "stintd/core/policy.h"

namespace stint::stintd {

constexpr TimeMs kNow = 1'700'000'000'000;  // any fixed instant
constexpr TimeMs Sec(double s) { return static_cast<TimeMs>(s * 1000); }
constexpr TimeMs Hours(double h) { return Sec(h * 3600); }

// Builds a ClusterState (see above).
class Cluster {
 public:
  ClusterState s;

  int64_t Window(const std::string& pool, int gpus, TimeMs start, TimeMs end) {
    s.pools[pool] = Pool{pool, ""};
    stintd::Window w;
    w.id = s.next_id++;
    w.pool = pool;
    w.gpus = gpus;
    w.start_ms = start;
    w.end_ms = end;
    s.windows[w.id] = w;
    return w.id;
  }
  int64_t Window(int gpus, TimeMs end = kNow + Hours(100)) {
    return Window("p", gpus, kNow - Hours(1), end);
  }

  void Team(const std::string& name, int guaranteed, int borrow_limit = -1, double usage = 0) {
    s.teams[name] = stintd::Team{name, guaranteed, borrow_limit, usage, kNow};
  }

  // A pending job; `age` is how long ago it was submitted (and became eligible).
  Job& Pending(int min_gpus, Priority priority = Priority::kMedium, TimeMs age = 0) {
    Job j;
    j.id = s.next_id++;
    j.name = "job" + std::to_string(j.id);
    j.team = "t";
    j.priority = priority;
    j.min_gpus = j.max_gpus = min_gpus;
    j.submit_ms = j.eligible_ms = kNow - age;
    j.state = JobState::kPending;
    return s.jobs[j.id] = j;
  }

  // A job running in a segment started `age` ago; returns the segment.
  Segment& Running(std::vector<Allocation> allocs, Priority priority = Priority::kLow,
                   TimeMs age = Hours(1), TimeMs planned_end = kNever) {
    int gpus = 0;
    for (const Allocation& a : allocs) gpus += a.gpus;
    Job& j = Pending(gpus, priority, age);
    j.state = JobState::kRunning;
    Segment seg;
    seg.id = s.next_id++;
    seg.job_id = j.id;
    seg.allocs = std::move(allocs);
    seg.start_ms = kNow - age;
    seg.planned_end_ms = planned_end;
    seg.fencing_token = s.next_fencing_token++;
    seg.last_heartbeat_ms = kNow;
    j.segment_id = seg.id;
    j.fencing_token = seg.fencing_token;
    return s.segments[seg.id] = seg;
  }
  Job& JobOf(const Segment& seg) { return s.jobs.at(seg.job_id); }

  // Prices the pool (made by Window()) and says how it is paid for.
  void Price(const std::string& pool, double price, PoolPricing pricing = PoolPricing::kOnDemand) {
    s.pools.at(pool).price_per_gpu_hour = price;
    s.pools.at(pool).pricing = pricing;
  }

  // `n` live workers of the segment (ranks of an elastic group).
  void Workers(const Segment& seg, int n) {
    for (int i = 0; i < n; i++) {
      Worker w;
      w.id = s.next_id++;
      w.job_id = seg.job_id;
      w.segment_id = seg.id;
      s.workers[w.id] = w;
    }
  }
};

// Plans at `now` with every active segment's workers heard from just now,
// so that only the tests about leases see a lease expire.
inline Plan PlanAt(ClusterState s, TimeMs now = kNow, const PolicyConfig& config = PolicyConfig()) {
  for (auto& [id, seg] : s.segments) seg.last_heartbeat_ms = now;
  return MakePlan(s, now, config);
}

inline const PendingInfo& Info(const Plan& plan, int64_t job_id) {
  for (const PendingInfo& p : plan.pending) {
    if (p.job_id == job_id) return p;
  }
  ADD_FAILURE() << "job " << job_id << " is not pending in the plan";
  static const PendingInfo kNone;
  return kNone;
}

inline const StartDecision* StartOf(const Plan& plan, int64_t job_id) {
  for (const StartDecision& d : plan.starts) {
    if (d.job_id == job_id) return &d;
  }
  return nullptr;
}

inline const NoticeDecision* NoticeOf(const Plan& plan, int64_t segment_id) {
  for (const NoticeDecision& d : plan.notices) {
    if (d.segment_id == segment_id) return &d;
  }
  return nullptr;
}

}  // namespace stint::stintd

#endif  // STINT_TESTS_UTIL_POLICY_CLUSTER_H_
