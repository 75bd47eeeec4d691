// stint's own policy under the virtual clock: every decision comes from
// tools/stintd/core (MakePlan + ApplyPlan), every worker report goes through
// its transitions, exactly as stintd would receive them over HTTP.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "stintd/core/policy.h"
#include "stintd/core/transitions.h"
#include "sim/schedulers.h"

namespace stint::sim {
namespace {

// The core's clock is wall-clock ms; replay time 0 maps here (2020-09-13).
// Not 0: AccountTime treats accounted_ms == 0 as "never accounted".
constexpr TimeMs kEpochMs = 1'600'000'000'000;

class StintScheduler : public Scheduler {
 public:
  StintScheduler(const PolicySpec& spec, const SchedulerOptions& o)
      : spec_(spec), opt_(o), cfg_(spec.stint) {}

  std::string Name() const override { return spec_.name; }

  void Init(const Workload& w) override {
    w_ = &w;
    stintd::Changes ch;
    std::set<std::string> teams;
    for (const SimJob& j : w.jobs) teams.insert(j.team);
    pool_order_ = PoolOrder(w);
    for (size_t rank = 0; rank < pool_order_.size(); rank++) {
      const std::string& name = pool_order_[rank];
      stintd::Pool pool{name, ""};
      if (const PoolPrice* price = w.prices.Find(name)) {
        pool.pricing = price->pricing;
        pool.price_per_gpu_hour = price->per_gpu_hour;
      }
      // First-fit: prices that rank the pools in order and nothing else.
      if (spec_.routing == Routing::kFirstFit) pool.price_per_gpu_hour = std::pow(100.0, rank);
      Check(stintd::AddPool(s_, pool, kEpochMs, &ch));
    }
    for (const std::string& t : teams) {
      stintd::Team team;
      team.name = t;
      team.guaranteed_gpus = TeamGuarantee(opt_, t);
      auto b = opt_.team_borrow_limits.find(t);
      team.borrow_limit_gpus = b != opt_.team_borrow_limits.end() ? b->second : -1;
      Check(stintd::PutTeam(s_, team, 0, &ch));
    }
    s_.counters.accounted_ms = kEpochMs;
  }

  void Submit(const SimJob& sj, TimeMs now) override {
    stintd::Job j;
    j.name = sj.name.empty() ? "job" : sj.name.substr(0, 128);
    j.team = sj.team;
    j.priority = sj.priority;
    j.min_gpus = sj.min_gpus;
    j.max_gpus = sj.max_gpus;
    j.gang = sj.gang;
    j.preemptible = sj.preemptible;
    j.checkpoint_seconds = sj.checkpoint_s;
    j.restart_seconds = sj.restart_s;
    j.checkpoint_interval_seconds = sj.interval_s;
    j.remaining_seconds = Estimate(sj.work_s);
    if (spec_.routing == Routing::kCheapestOnly) j.pools = {CheapestPoolFor(sj.min_gpus)};
    stintd::Changes ch;
    auto id = stintd::SubmitJob(s_, j, kEpochMs + now, &ch);
    if (!id.ok()) {
      errors_++;
      return;
    }
    sim_of_job_[id.value()] = sj.id;
    job_of_sim_[sj.id] = id.value();
  }

  void WindowKnown(int window, TimeMs now) override {
    const SimWindow& sw = w_->windows[window];
    stintd::Window win;
    win.pool = sw.pool;
    win.gpus = sw.gpus;
    win.start_ms = kEpochMs + Ms(sw.start_s);
    win.kind = sw.kind;
    win.end_ms = sw.kind == stintd::WindowKind::kSpot ? stintd::kNever : kEpochMs + Ms(sw.end_s);
    win.notice_lead_ms = Ms(sw.notice_lead_s);
    stintd::Changes ch;
    auto id = stintd::AddWindow(s_, win, kEpochMs + now, &ch);
    if (!id.ok()) {
      errors_++;
      return;
    }
    window_of_[id.value()] = window;
    id_of_window_[window] = id.value();
  }

  void WindowRevoked(int window, TimeMs gone, TimeMs now) override {
    auto it = id_of_window_.find(window);
    if (it == id_of_window_.end()) return;
    stintd::Changes ch;
    Check(
        stintd::CloseWindow(s_, it->second, std::max<TimeMs>(0, gone - now), kEpochMs + now, &ch));
  }

  void CheckpointDurable(int64_t job, double progress_s, double remaining_s, TimeMs now) override {
    auto w = worker_of_.find(job);
    if (w == worker_of_.end()) return;
    const SimJob& sj = w_->jobs[job];
    stintd::Changes ch;
    const int64_t step = Ms(progress_s);
    Check(stintd::ReportCheckpoint(s_, w->second, step, sj.checkpoint_s, 0, kEpochMs + now, &ch));
    if (spec_.runtime_estimates) {
      Check(
          stintd::ReportProgress(s_, w->second, step, Estimate(remaining_s), kEpochMs + now, &ch));
    }
  }

  void SegmentEnded(int64_t job, EndKind kind, double remaining_s, TimeMs now) override {
    auto w = worker_of_.find(job);
    if (w == worker_of_.end()) return;
    const int64_t worker = w->second;
    worker_of_.erase(w);
    stintd::Changes ch;
    const TimeMs t = kEpochMs + now;
    const int64_t step = Ms(w_->jobs[job].work_s - remaining_s);
    // stintd accounts every tick (a second), so a segment's charge and
    // attained service run up to its end; the sim plans only at events, so
    // it accounts here first (else the time since the last plan is lost).
    stintd::AccountTime(s_, t, cfg_, &ch);
    switch (kind) {
      case EndKind::kFinished:
        Check(stintd::FinishJob(s_, worker, t, &ch));
        break;
      case EndKind::kAcked:
        if (spec_.runtime_estimates)
          Check(stintd::ReportProgress(s_, worker, step, Estimate(remaining_s), t, &ch));
        Check(stintd::AckSegment(s_, worker, step, t, &ch));
        break;
      case EndKind::kLost:
        // The workers died with their GPUs: they stop heartbeating, and
        // the next plan declares the segment lost (deadline or lease).
        break;
    }
  }

  Decisions Schedule(TimeMs now) override {
    const TimeMs t = kEpochMs + now;
    stintd::Changes ch;
    Forget();
    for (const auto& [job, worker] : worker_of_) {
      auto hb = stintd::Heartbeat(s_, worker, {}, t);
      if (!hb.ok()) errors_++;
    }
    stintd::AccountTime(s_, t, cfg_, &ch);
    const stintd::Plan plan = stintd::MakePlan(s_, t, cfg_);
    stintd::ApplyPlan(s_, plan, t, &ch);
    Decisions d;
    for (const stintd::LostDecision& l : plan.lost) {
      auto seg = s_.segments.find(l.segment_id);
      if (seg == s_.segments.end()) continue;
      const int64_t sim = sim_of_job_[seg->second.job_id];
      worker_of_.erase(sim);
      d.kills.push_back(sim);
    }
    for (const stintd::NoticeDecision& n : plan.notices) {
      auto seg = s_.segments.find(n.segment_id);
      if (seg == s_.segments.end()) continue;
      d.notices.push_back(NoticeCmd{sim_of_job_[seg->second.job_id], n.deadline_ms - kEpochMs,
                                    n.reason == stintd::NoticeReason::kPreempted});
    }
    // A shrink moves the engine's segment at its deadline, when ApplyPlan
    // takes the GPUs off the core's; a grow moves both now.
    for (const stintd::ShrinkDecision& sh : plan.shrinks) {
      auto seg = s_.segments.find(sh.segment_id);
      if (seg == s_.segments.end() || seg->second.shrink_deadline_ms == 0) continue;
      std::vector<stintd::Allocation> after = seg->second.allocs;
      for (const stintd::Allocation& r : sh.release) {
        for (stintd::Allocation& a : after) {
          if (a.window_id == r.window_id) a.gpus -= r.gpus;
        }
      }
      d.resizes.push_back(
          ResizeCmd{sim_of_job_[seg->second.job_id], SimAllocs(after), sh.deadline_ms - kEpochMs});
    }
    for (const stintd::GrowDecision& g : plan.grows) {
      auto seg = s_.segments.find(g.segment_id);
      if (seg == s_.segments.end()) continue;
      d.resizes.push_back(
          ResizeCmd{sim_of_job_[seg->second.job_id], SimAllocs(seg->second.allocs), now});
    }
    for (const stintd::StartDecision& st : plan.starts) {
      const stintd::Job& j = s_.jobs[st.job_id];
      if (j.state != stintd::JobState::kRunning) continue;
      StartCmd cmd;
      cmd.job = sim_of_job_[st.job_id];
      cmd.allocs = SimAllocs(st.allocs);
      // The sim plays the job's workers: one registers for the gang.
      auto w = stintd::RegisterWorker(s_, st.job_id, "sim-" + std::to_string(cmd.job), t, &ch);
      if (!w.ok()) {
        errors_++;
        continue;
      }
      worker_of_[cmd.job] = w.value().id;
      d.starts.push_back(std::move(cmd));
    }
    next_planned_ = stintd::kNever;
    for (const stintd::PendingInfo& p : plan.pending) {
      if (p.planned_start_ms > t)
        next_planned_ = std::min(next_planned_, p.planned_start_ms - kEpochMs);
    }
    pending_ = plan.stats.pending_jobs;
    return d;
  }

  TimeMs NextWake(TimeMs now) const override {
    TimeMs next = next_planned_;
    const TimeMs t = kEpochMs + now;
    const TimeMs min_run = stintd::SecondsToMs(cfg_.min_run_seconds);
    for (const auto& [id, seg] : s_.segments) {
      if (!stintd::SegmentActive(seg.state)) continue;
      if (seg.state == stintd::SegmentState::kNotified) {
        next = std::min(next, seg.deadline_ms - kEpochMs);
        continue;
      }
      if (seg.shrink_deadline_ms > t) next = std::min(next, seg.shrink_deadline_ms - kEpochMs);
      // The notice time of a segment's planned end: release - (C + safety).
      TimeMs release = seg.planned_end_ms;
      for (const stintd::Allocation& a : seg.allocs) {
        auto w = s_.windows.find(a.window_id);
        if (w != s_.windows.end()) release = std::min(release, w->second.end_ms);
      }
      auto job = s_.jobs.find(seg.job_id);
      if (release != stintd::kNever && job != s_.jobs.end()) {
        const TimeMs at =
            release - stintd::SecondsToMs(job->second.checkpoint_seconds + cfg_.safety_seconds);
        if (at > t) next = std::min(next, at - kEpochMs);
      }
      // A segment becomes preemptible after min_run.
      if (pending_ > 0 && seg.start_ms + min_run > t && min_run < stintd::SecondsToMs(1e9)) {
        next = std::min(next, seg.start_ms + min_run - kEpochMs);
      }
    }
    return next;
  }

  double CoordinatorCost(int64_t job) const override {
    // First-fit's planner prices only rank the pools: no money.
    if (spec_.routing == Routing::kFirstFit) return -1;
    auto done = cost_of_done_.find(job);
    if (done != cost_of_done_.end()) return done->second;
    auto id = job_of_sim_.find(job);
    if (id == job_of_sim_.end()) return -1;
    auto j = s_.jobs.find(id->second);
    return j != s_.jobs.end() ? j->second.cost : -1;
  }

  int64_t errors() const { return errors_; }

 private:
  // The price table's pools in its order, then any other pool by name.
  static std::vector<std::string> PoolOrder(const Workload& w) {
    std::vector<std::string> order;
    for (const PoolPrice& p : w.prices.pools) order.push_back(p.pool);
    std::set<std::string> rest;
    for (const SimWindow& win : w.windows) {
      if (w.prices.Find(win.pool) == nullptr) rest.insert(win.pool);
    }
    order.insert(order.end(), rest.begin(), rest.end());
    return order;
  }

  // Cheapest-only: the pool with the lowest listed price (ties: the
  // table's order) that ever has `gpus` open at once; the first such pool
  // when none does (DropUnplaceable leaves no such job).
  std::string CheapestPoolFor(int gpus) {
    if (pool_peak_.empty()) {
      std::map<std::string, std::vector<std::pair<double, int>>> changes;
      for (const SimWindow& win : w_->windows) {
        changes[win.pool].emplace_back(win.start_s, win.gpus);
        changes[win.pool].emplace_back(win.gone_s(), -win.gpus);
      }
      for (auto& [pool, deltas] : changes) {
        std::sort(deltas.begin(), deltas.end());
        int open = 0, peak = 0;
        for (const auto& [t, d] : deltas) peak = std::max(peak, open += d);
        pool_peak_[pool] = peak;
      }
    }
    const std::string* best = nullptr;
    for (const std::string& pool : pool_order_) {
      if (pool_peak_[pool] < gpus) continue;
      if (best == nullptr || w_->prices.PriceOf(pool) < w_->prices.PriceOf(*best)) best = &pool;
    }
    return best != nullptr ? *best : pool_order_.front();
  }

  // Drops what no decision reads again: ended segments, released workers,
  // finished jobs. stintd keeps them (its API and store show them); the
  // sim would otherwise walk every segment and worker ever created on each
  // plan, and the replay's cost would grow with its length squared. The
  // maps are ordered by id, so what is left is walked in the same order
  // and every plan is the same (the event log hash does not change).
  void Forget() {
    for (auto it = s_.segments.begin(); it != s_.segments.end();) {
      it = stintd::SegmentActive(it->second.state) ? std::next(it) : s_.segments.erase(it);
    }
    for (auto it = s_.workers.begin(); it != s_.workers.end();) {
      it = it->second.released ? s_.workers.erase(it) : std::next(it);
    }
    for (auto it = s_.jobs.begin(); it != s_.jobs.end();) {
      const stintd::JobState st = it->second.state;
      if (st == stintd::JobState::kPending || st == stintd::JobState::kRunning) {
        ++it;
        continue;
      }
      s_.rendezvous.erase(it->first);
      cost_of_done_[sim_of_job_[it->first]] = it->second.cost;
      job_of_sim_.erase(sim_of_job_[it->first]);
      sim_of_job_.erase(it->first);
      it = s_.jobs.erase(it);
    }
  }

  // The engine's allocations for the core's (empty parts left out).
  std::vector<SimAlloc> SimAllocs(const std::vector<stintd::Allocation>& allocs) {
    std::vector<SimAlloc> out;
    for (const stintd::Allocation& a : allocs) {
      if (a.gpus > 0) out.push_back(SimAlloc{window_of_[a.window_id], a.gpus});
    }
    return out;
  }
  double Estimate(double remaining_s) const {
    return spec_.runtime_estimates ? std::max(0.0, remaining_s * opt_.estimate_factor) : 0.0;
  }
  void Check(const Status& s) {
    if (!s.ok()) errors_++;
  }

  const PolicySpec spec_;
  const SchedulerOptions opt_;
  const stintd::PolicyConfig cfg_;
  const Workload* w_ = nullptr;
  stintd::ClusterState s_;
  std::map<int64_t, int64_t> sim_of_job_, job_of_sim_;  // core job id <-> sim job id
  std::map<int64_t, int> window_of_;                    // core window id -> sim window index
  std::map<int, int64_t> id_of_window_;
  std::map<int64_t, int64_t> worker_of_;  // sim job -> its live worker
  std::vector<std::string> pool_order_;   // first-fit's order (PoolOrder)
  std::map<std::string, int> pool_peak_;  // the most GPUs each pool has open at once
  std::map<int64_t, double> cost_of_done_;  // sim job -> stintd's Job::cost when it was forgotten
  TimeMs next_planned_ = stintd::kNever;
  int pending_ = 0;
  int64_t errors_ = 0;
};

}  // namespace

std::unique_ptr<Scheduler> MakeStintScheduler(const PolicySpec& spec,
                                              const SchedulerOptions& options) {
  return std::make_unique<StintScheduler>(spec, options);
}

}  // namespace stint::sim
