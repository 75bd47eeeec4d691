#include "sim/engine.h"

#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cmath>
#include <cstdio>
#include <set>

namespace stint::sim {
namespace {

constexpr double kEps = 1e-6;

// Seconds -> ms rounded up, so that advancing to the returned time always
// reaches the state the time was computed for.
TimeMs CeilMs(double s) {
  if (!std::isfinite(s) || s > 9e12) return kNever;
  return static_cast<TimeMs>(std::ceil(s * 1000.0 - 1e-6));
}

enum class EventType : int {
  kWindowGone = 0,
  kWindowKnown = 1,
  kWindowOpen = 2,
  kRevoke = 3,
  kSubmit = 4
};

struct Event {
  TimeMs t;
  EventType type;
  int64_t index;
};

enum class Phase { kUnsubmitted, kPending, kRunning, kDone };

struct JobRun {
  const SimJob* job = nullptr;
  Phase phase = Phase::kUnsubmitted;
  double progress = 0;  // seconds of work at max_gpus
  double durable = 0;   // progress in the newest durable checkpoint
  std::vector<SimAlloc> allocs;
  int gpus = 0;
  TimeMs compute_from = 0;  // restart done: training steps from here
  TimeMs last = 0;          // progress accounted up to here
  double since_ckpt = 0;    // compute seconds since the last periodic checkpoint began
  bool ckpt_inflight = false;
  double ckpt_progress = 0;
  TimeMs ckpt_done = 0;
  bool stopping = false;  // checkpointing on a notice; no progress
  TimeMs stop_done = 0;
  bool noticed = false;
  bool notice_preempt = false;
  TimeMs deadline = kNever;
  std::vector<SimAlloc> resize_to;  // a shrink due at resize_at
  TimeMs resize_at = kNever;
  double span_slowdown = 0;  // EngineOptions::gang_span_slowdown for a gang, 0 otherwise
  JobResult result;

  double rate() const {
    const double windows = static_cast<double>(std::max<size_t>(1, allocs.size()));
    return static_cast<double>(gpus) / job->max_gpus / (1.0 + span_slowdown * (windows - 1));
  }
};

class Engine {
 public:
  Engine(const Workload& w, Scheduler& s, const EngineOptions& o) : w_(w), sched_(s), opt_(o) {}

  SimResult Execute() {
    result_.policy = sched_.Name();
    runs_.resize(w_.jobs.size());
    for (size_t i = 0; i < w_.jobs.size(); i++) {
      runs_[i].job = &w_.jobs[i];
      runs_[i].span_slowdown = w_.jobs[i].gang ? opt_.gang_span_slowdown : 0;
      JobResult& r = runs_[i].result;
      r.id = w_.jobs[i].id;
      r.team = w_.jobs[i].team;
      r.gpus = w_.jobs[i].max_gpus;
      r.work_s = w_.jobs[i].work_s;
      r.submit_s = w_.jobs[i].submit_s;
      team_held_[r.team] = 0;
      result_.teams[r.team];
    }
    usage_.assign(w_.windows.size(), 0);
    open_.assign(w_.windows.size(), false);
    price_.assign(w_.windows.size(), 0);
    for (size_t i = 0; i < w_.windows.size(); i++) {
      price_[i] = w_.prices.PriceOf(w_.windows[i].pool) / 3600.0;
      result_.pools[w_.windows[i].pool];
    }
    BuildEvents();
    sched_.Init(w_);
    TimeMs now = 0;
    size_t next_event = 0;
    const TimeMs horizon = opt_.horizon_s > 0 ? Ms(opt_.horizon_s) : kNever;
    while (true) {
      // Internal job events first: an ack or a finish exactly at a window's
      // end is in time.
      for (int pass = 0; pass < 8; pass++) {
        if (!ProcessJobs(now)) break;
      }
      while (next_event < events_.size() && events_[next_event].t <= now)
        ProcessEvent(events_[next_event++], now);
      // The scheduler runs when something it decides on changed (a submit,
      // a window, a segment ending or noticed) or when its wake or the tick
      // is due; a periodic checkpoint alone does not call it.
      const bool due = dirty_ || now >= wake_at_;
      dirty_ = false;
      for (int pass = 0; pass < 5 && due; pass++) {
        Decisions d = sched_.Schedule(now);
        result_.schedule_calls++;
        if (d.empty()) break;
        Apply(d, now);
        for (int p2 = 0; p2 < 8; p2++) {
          if (!ProcessJobs(now)) break;
        }
      }
      RecordUtil(now);
      if (done_ == runs_.size()) break;
      TimeMs next = next_event < events_.size() ? events_[next_event].t : kNever;
      for (int64_t id : running_) next = std::min(next, NextInternal(runs_[id], now));
      if (due) {
        wake_at_ = kNever;
        const TimeMs wake = sched_.NextWake(now);
        if (wake > now) wake_at_ = wake;
        if (pending_ > 0 && opt_.tick_s > 0) wake_at_ = std::min(wake_at_, now + Ms(opt_.tick_s));
      }
      next = std::min(next, wake_at_);
      if (next == kNever || next > horizon) break;
      next = std::max(next, now + 1);
      Integrate(now, next);
      for (int64_t id : running_) Advance(runs_[id], next);
      now = next;
    }
    result_.end_s = now / 1000.0;
    for (auto& r : runs_) {
      r.result.coordinator_cost = sched_.CoordinatorCost(r.job->id);
      result_.cost += r.result.cost;
      result_.jobs.push_back(r.result);
      if (r.phase == Phase::kDone) result_.useful_gpu_s += r.job->work_s * r.job->max_gpus;
    }
    return std::move(result_);
  }

 private:
  void Log(TimeMs t, const char* fmt, ...) __attribute__((format(printf, 3, 4))) {
    char buf[512];
    int n = std::snprintf(buf, sizeof(buf), "%" PRId64 ".%03" PRId64 " ", t / 1000, t % 1000);
    va_list ap;
    va_start(ap, fmt);
    n += std::vsnprintf(buf + n, sizeof(buf) - n, fmt, ap);
    va_end(ap);
    n = std::min<int>(n, sizeof(buf) - 2);
    buf[n++] = '\n';
    buf[n] = '\0';
    for (int i = 0; i < n; i++) {
      hash_ ^= static_cast<unsigned char>(buf[i]);
      hash_ *= 1099511628211ull;
    }
    result_.log_hash = hash_;
    if (opt_.keep_log) result_.log.append(buf, n);
  }

  void BuildEvents() {
    for (size_t i = 0; i < w_.windows.size(); i++) {
      const SimWindow& win = w_.windows[i];
      const auto idx = static_cast<int64_t>(i);
      const TimeMs start = Ms(win.start_s);
      const bool spot = win.kind == stintd::WindowKind::kSpot;
      events_.push_back(Event{spot ? start : 0, EventType::kWindowKnown, idx});
      events_.push_back(Event{start, EventType::kWindowOpen, idx});
      const TimeMs gone = Ms(win.gone_s());
      if (gone != kNever) events_.push_back(Event{gone, EventType::kWindowGone, idx});
      if (spot && gone != kNever) {
        events_.push_back(
            Event{std::max(start, gone - Ms(win.notice_lead_s)), EventType::kRevoke, idx});
      }
    }
    for (const SimJob& j : w_.jobs)
      events_.push_back(Event{Ms(j.submit_s), EventType::kSubmit, j.id});
    std::stable_sort(events_.begin(), events_.end(), [](const Event& a, const Event& b) {
      if (a.t != b.t) return a.t < b.t;
      if (a.type != b.type) return a.type < b.type;
      return a.index < b.index;
    });
  }

  void ProcessEvent(const Event& e, TimeMs now) {
    dirty_ = true;
    switch (e.type) {
      case EventType::kWindowKnown:
        sched_.WindowKnown(static_cast<int>(e.index), now);
        break;
      case EventType::kWindowOpen:
        open_[e.index] = true;
        offered_ += w_.windows[e.index].gpus;
        Log(now, "window %" PRId64 " open gpus=%d kind=%s", e.index, w_.windows[e.index].gpus,
            stintd::WindowKindName(w_.windows[e.index].kind));
        break;
      case EventType::kRevoke: {
        const TimeMs gone = Ms(w_.windows[e.index].gone_s());
        Log(now, "window %" PRId64 " revoked gone_at=%" PRId64, e.index, gone);
        sched_.WindowRevoked(static_cast<int>(e.index), gone, now);
        // The provider's notice reaches the jobs on it directly (a signal
        // the runtime's PreemptionWatcher handles), whatever the scheduler.
        for (int64_t id : std::vector<int64_t>(running_.begin(), running_.end())) {
          JobRun& r = runs_[id];
          for (const SimAlloc& a : r.allocs) {
            if (a.window == e.index) {
              Notice(r, gone, false, now);
              break;
            }
          }
        }
        break;
      }
      case EventType::kWindowGone: {
        if (open_[e.index]) offered_ -= w_.windows[e.index].gpus;
        open_[e.index] = false;
        Log(now, "window %" PRId64 " gone", e.index);
        for (int64_t id : std::vector<int64_t>(running_.begin(), running_.end())) {
          JobRun& r = runs_[id];
          for (const SimAlloc& a : r.allocs) {
            if (a.window == e.index) {
              Kill(r, now, "window gone", true);
              break;
            }
          }
        }
        break;
      }
      case EventType::kSubmit: {
        JobRun& r = runs_[e.index];
        r.phase = Phase::kPending;
        pending_++;
        demand_ += r.job->max_gpus;
        Log(now, "submit job=%" PRId64 " gpus=%d work=%.0f team=%s", e.index, r.job->max_gpus,
            r.job->work_s, r.job->team.c_str());
        sched_.Submit(*r.job, now);
        break;
      }
    }
  }

  void Apply(const Decisions& d, TimeMs now) {
    for (int64_t id : d.kills) {
      if (id < 0 || id >= static_cast<int64_t>(runs_.size())) continue;
      if (runs_[id].phase == Phase::kRunning)
        Kill(runs_[id], now, "declared lost by the scheduler", false);
    }
    for (const NoticeCmd& n : d.notices) {
      if (n.job < 0 || n.job >= static_cast<int64_t>(runs_.size())) continue;
      if (runs_[n.job].phase == Phase::kRunning) Notice(runs_[n.job], n.deadline, n.preempt, now);
    }
    for (const StartCmd& s : d.starts) Start(s, now);
    for (const ResizeCmd& c : d.resizes) {
      if (c.job < 0 || c.job >= static_cast<int64_t>(runs_.size())) continue;
      JobRun& r = runs_[c.job];
      if (r.phase != Phase::kRunning) continue;
      if (c.at <= now) {
        Resize(r, c.allocs, now);
      } else {
        r.resize_to = c.allocs;
        r.resize_at = c.at;
      }
    }
  }

  // The group re-forms on `allocs`: GPUs it gives up are free from now,
  // GPUs it adds are checked like a start's; no step for restart_s.
  void Resize(JobRun& r, const std::vector<SimAlloc>& allocs, TimeMs now) {
    dirty_ = true;
    r.resize_to.clear();
    r.resize_at = kNever;
    for (const SimAlloc& a : r.allocs) {
      usage_[a.window] -= a.gpus;
      allocated_ -= a.gpus;
    }
    int gpus = 0;
    for (const SimAlloc& a : allocs) {
      gpus += a.gpus;
      CheckAlloc(r.job->id, a, now);
      if (a.window >= 0 && a.window < static_cast<int>(usage_.size())) usage_[a.window] += a.gpus;
      allocated_ += a.gpus;
    }
    CheckShape(*r.job, allocs, gpus, now);
    r.allocs = allocs;
    r.gpus = std::max(1, gpus);
    r.compute_from = std::max(now, r.compute_from) + Ms(r.job->restart_s);
    r.last = now;
    r.result.resizes++;
    Log(now, "resize job=%" PRId64 " gpus=%d progress=%.3f%s", r.job->id, gpus, r.progress,
        Where(allocs).c_str());
  }

  // A window open and not over-allocated by adding `a`.
  void CheckAlloc(int64_t job, const SimAlloc& a, TimeMs now) {
    const bool bad_window = a.window < 0 || a.window >= static_cast<int>(w_.windows.size());
    if (bad_window || !open_[a.window] || usage_[a.window] + a.gpus > w_.windows[a.window].gpus ||
        a.gpus <= 0) {
      result_.conservation_violations++;
      Log(now, "violation job %" PRId64 " window %d gpus %d (used %d of %d, open %d)", job,
          a.window, a.gpus, bad_window ? -1 : usage_[a.window],
          bad_window ? 0 : w_.windows[a.window].gpus,
          bad_window ? 0 : static_cast<int>(open_[a.window]));
    }
  }

  // The job's GPU range, and all of a segment's windows in one pool.
  void CheckShape(const SimJob& job, const std::vector<SimAlloc>& allocs, int gpus, TimeMs now) {
    bool one_pool = true;
    for (const SimAlloc& a : allocs) {
      one_pool = one_pool && a.window >= 0 && a.window < static_cast<int>(w_.windows.size()) &&
                 w_.windows[a.window].pool == w_.windows[allocs[0].window].pool;
    }
    if (gpus < job.min_gpus || gpus > job.max_gpus || !one_pool) {
      result_.conservation_violations++;
      Log(now, "violation job %" PRId64 " with %d GPUs in %zu windows", job.id, gpus, allocs.size());
    }
  }

  static std::string Where(const std::vector<SimAlloc>& allocs) {
    std::string where;
    for (const SimAlloc& a : allocs)
      where += " w" + std::to_string(a.window) + ":" + std::to_string(a.gpus);
    return where;
  }

  void Start(const StartCmd& s, TimeMs now) {
    if (s.job < 0 || s.job >= static_cast<int64_t>(runs_.size()) ||
        runs_[s.job].phase != Phase::kPending) {
      result_.conservation_violations++;
      Log(now, "violation start of job %" PRId64 " that is not pending", s.job);
      return;
    }
    JobRun& r = runs_[s.job];
    int gpus = 0;
    for (const SimAlloc& a : s.allocs) {
      gpus += a.gpus;
      CheckAlloc(s.job, a, now);
      if (a.window >= 0 && a.window < static_cast<int>(usage_.size())) usage_[a.window] += a.gpus;
    }
    CheckShape(*r.job, s.allocs, gpus, now);
    r.phase = Phase::kRunning;
    pending_--;
    running_.insert(s.job);
    r.allocs = s.allocs;
    r.gpus = std::max(1, gpus);
    allocated_ += gpus;
    const bool resume = r.result.segments > 0;
    r.compute_from = now + (resume ? Ms(r.job->restart_s) : 0);
    r.last = now;
    r.since_ckpt = 0;
    r.ckpt_inflight = false;
    r.stopping = false;
    r.noticed = false;
    r.notice_preempt = false;
    r.deadline = kNever;
    r.result.segments++;
    if (r.result.first_start_s < 0) r.result.first_start_s = now / 1000.0;
    Log(now, "start job=%" PRId64 " gpus=%d progress=%.3f%s", s.job, gpus, r.progress,
        Where(s.allocs).c_str());
  }

  void Notice(JobRun& r, TimeMs deadline, bool preempt, TimeMs now) {
    if (r.stopping) return;
    if (r.noticed && deadline >= r.deadline) return;
    r.noticed = true;
    dirty_ = true;
    r.deadline = deadline;
    r.notice_preempt = r.notice_preempt || preempt;
    Log(now, "notice job=%" PRId64 " deadline=%" PRId64 "%s", r.job->id, deadline,
        preempt ? " preempt" : "");
    if (opt_.workers_ignore_notices) return;
    // A job that finishes before the deadline just runs on.
    const TimeMs base = std::max(now, r.compute_from);
    const TimeMs finish = base + CeilMs((r.job->work_s - r.progress) / r.rate());
    if (finish <= deadline) return;
    if (deadline - now >= Ms(r.job->checkpoint_s)) {
      r.stopping = true;
      r.stop_done = now + Ms(r.job->checkpoint_s);
    }
    // Otherwise the checkpoint cannot be durable in time: it runs on and
    // loses the work since its last checkpoint at the deadline.
  }

  void Kill(JobRun& r, TimeMs now, const char* why, bool report) {
    const double lost = std::max(0.0, r.progress - r.durable) * r.job->max_gpus;
    r.result.lost_gpu_s += lost;
    result_.lost_gpu_s += lost;
    r.progress = r.durable;
    Log(now, "lost job=%" PRId64 " lost_gpu_s=%.3f (%s)", r.job->id, lost, why);
    Release(r, EndKind::kLost, now, report);
  }

  void Release(JobRun& r, EndKind kind, TimeMs now, bool report) {
    dirty_ = true;
    for (const SimAlloc& a : r.allocs) {
      if (a.window >= 0 && a.window < static_cast<int>(usage_.size())) usage_[a.window] -= a.gpus;
      allocated_ -= a.gpus;
    }
    r.allocs.clear();
    r.resize_to.clear();
    r.resize_at = kNever;
    running_.erase(r.job->id);
    if (kind == EndKind::kFinished) {
      r.phase = Phase::kDone;
      r.result.finish_s = now / 1000.0;
      done_++;
      demand_ -= r.job->max_gpus;
    } else {
      r.phase = Phase::kPending;
      pending_++;
      r.result.interruptions++;
      if (r.notice_preempt) r.result.preemptions++;
    }
    r.stopping = false;
    r.ckpt_inflight = false;
    if (report)
      sched_.SegmentEnded(r.job->id, kind, std::max(0.0, r.job->work_s - r.progress), now);
  }

  TimeMs NextInternal(const JobRun& r, TimeMs now) const {
    if (r.stopping) return std::min(r.stop_done, r.resize_at);
    TimeMs next = std::min(r.deadline, r.resize_at);  // GPUs taken at the deadline if still on them
    const TimeMs base = std::max(now, r.compute_from);
    next = std::min(next, base + CeilMs((r.job->work_s - r.progress) / r.rate()));
    if (r.job->interval_s > 0)
      next = std::min(next, base + CeilMs(r.job->interval_s - r.since_ckpt));
    if (r.ckpt_inflight) next = std::min(next, r.ckpt_done);
    return std::max(next, now);
  }

  void Advance(JobRun& r, TimeMs t) {
    if (r.phase != Phase::kRunning) return;
    if (!r.stopping) {
      const TimeMs from = std::max(r.last, r.compute_from);
      if (t > from) {
        const double dt = (t - from) / 1000.0;
        r.progress = std::min(r.job->work_s, r.progress + dt * r.rate());
        r.since_ckpt += dt;
      }
    }
    r.last = t;
  }

  // Handles everything due at `now`; true if anything happened.
  bool ProcessJobs(TimeMs now) {
    bool any = false;
    for (int64_t id : std::vector<int64_t>(running_.begin(), running_.end())) {
      JobRun& r = runs_[id];
      if (r.phase != Phase::kRunning) continue;
      // A shrink's leaving ranks go at its deadline even while the whole
      // segment checkpoints on a notice: the coordinator gives their GPUs
      // away then.
      if (now >= r.resize_at) {
        Resize(r, std::vector<SimAlloc>(r.resize_to), now);
        any = true;
      }
      if (r.stopping) {
        if (now >= r.stop_done) {
          r.durable = r.progress;
          Log(now, "ack job=%" PRId64 " progress=%.3f", id, r.progress);
          Release(r, EndKind::kAcked, now, true);
          any = true;
        }
        continue;
      }
      if (r.ckpt_inflight && now >= r.ckpt_done) {
        r.ckpt_inflight = false;
        r.durable = std::max(r.durable, r.ckpt_progress);
        sched_.CheckpointDurable(id, r.ckpt_progress, r.job->work_s - r.progress, now);
        any = true;
      }
      if (r.progress >= r.job->work_s - kEps) {
        Log(now, "finish job=%" PRId64, id);
        Release(r, EndKind::kFinished, now, true);
        any = true;
        continue;
      }
      if (now >= r.deadline) {
        Kill(r, now, "deadline passed", true);
        any = true;
        continue;
      }
      if (r.job->interval_s > 0 && r.since_ckpt >= r.job->interval_s - kEps &&
          now >= r.compute_from) {
        r.since_ckpt = 0;
        if (!r.ckpt_inflight) {
          r.ckpt_inflight = true;
          r.ckpt_progress = r.progress;
          r.ckpt_done = now + Ms(r.job->checkpoint_s);
        }
        any = true;
      }
    }
    return any;
  }

  int Offered() const { return offered_; }

  void Integrate(TimeMs from, TimeMs to) {
    const double dt = (to - from) / 1000.0;
    const int offered = Offered();
    result_.offered_gpu_s += offered * dt;
    result_.allocated_gpu_s += allocated_ * dt;
    result_.demand_capped_gpu_s += std::min<int64_t>(offered, demand_) * dt;
    if (pending_ > 0) result_.idle_while_waiting_gpu_s += std::max(0, offered - allocated_) * dt;
    IntegrateTeams(dt);
    IntegrateCost(dt);
  }

  // Every GPU held is charged at its window's pool's price, whatever the
  // segment does with it (restart, checkpoint, work later lost).
  void IntegrateCost(double dt) {
    for (int64_t id : running_) {
      JobRun& r = runs_[id];
      for (const SimAlloc& a : r.allocs) {
        if (a.window < 0 || a.window >= static_cast<int>(price_.size())) continue;
        const double charge = a.gpus * dt * price_[a.window];
        r.result.cost += charge;
        PoolUse& use = result_.pools[w_.windows[a.window].pool];
        use.gpu_s += a.gpus * dt;
        use.cost += charge;
      }
    }
  }

  // What each team's segments hold, and above its guarantee.
  void IntegrateTeams(double dt) {
    for (auto& [team, held] : team_held_) held = 0;
    for (int64_t id : running_) {
      for (const SimAlloc& a : runs_[id].allocs) team_held_[runs_[id].job->team] += a.gpus;
    }
    for (const auto& [team, held] : team_held_) {
      auto g = opt_.team_guarantees.find(team);
      const int guarantee = g != opt_.team_guarantees.end() ? g->second : opt_.team_guarantee_gpus;
      TeamUse& use = result_.teams[team];
      use.gpu_s += held * dt;
      use.borrowed_gpu_s += std::max(0, held - guarantee) * dt;
      use.peak_gpus = std::max(use.peak_gpus, held);
    }
  }

  void RecordUtil(TimeMs now) {
    const int offered = Offered();
    if (!result_.util.empty() && result_.util.back().allocated == allocated_ &&
        result_.util.back().offered == offered) {
      return;
    }
    if (!result_.util.empty() && result_.util.back().t_s == now / 1000.0) result_.util.pop_back();
    result_.util.push_back(UtilPoint{now / 1000.0, allocated_, offered});
  }

  const Workload& w_;
  Scheduler& sched_;
  const EngineOptions opt_;
  SimResult result_;
  std::vector<Event> events_;
  std::vector<JobRun> runs_;
  std::set<int64_t> running_;
  std::vector<int> usage_;
  std::vector<bool> open_;
  std::vector<double> price_;  // per window: its pool's price per GPU-second
  int offered_ = 0;            // GPUs of the open windows
  size_t done_ = 0;
  int64_t pending_ = 0;
  int64_t demand_ = 0;
  int allocated_ = 0;
  std::map<std::string, int> team_held_;  // GPUs held now, by team (scratch of IntegrateTeams)
  uint64_t hash_ = 1469598103934665603ull;
  bool dirty_ = true;        // something the scheduler decides on changed
  TimeMs wake_at_ = kNever;  // the scheduler's wake or the tick, whichever first
};

}  // namespace

SimResult Simulate(const Workload& w, Scheduler& sched, const EngineOptions& options) {
  return Engine(w, sched, options).Execute();
}

}  // namespace stint::sim
