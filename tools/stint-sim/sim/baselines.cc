// The baselines: FIFO, FIFO + EASY backfill, and a Slurm-like multifactor
// scheduler. Small, separate implementations (they share nothing with
// tools/stintd/core), each producing the engine's StartCmd/NoticeCmd.
#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <set>

#include "sim/schedulers.h"

namespace stint::sim {

std::unique_ptr<Scheduler> MakeStintScheduler(const PolicySpec& spec,
                                              const SchedulerOptions& options);

namespace {

struct Running {
  std::vector<SimAlloc> allocs;
  TimeMs start = 0;
  TimeMs est_end = 0;  // start + restart + estimated remaining (the time limit)
  bool noticed = false;
};

// What every baseline keeps: the windows as the cluster shows them, the
// queue, the running jobs and each job's remaining-work estimate.
class QueueScheduler : public Scheduler {
 public:
  QueueScheduler(std::string name, const SchedulerOptions& o) : name_(std::move(name)), opt_(o) {}
  std::string Name() const override { return name_; }

  void Init(const Workload& w) override {
    w_ = &w;
    used_.assign(w.windows.size(), 0);
    known_.assign(w.windows.size(), false);
    remaining_.assign(w.jobs.size(), 0);
    segments_.assign(w.jobs.size(), 0);
  }
  void Submit(const SimJob& j, TimeMs) override {
    pending_.insert(j.id);
    remaining_[j.id] = j.work_s;
  }
  void WindowKnown(int window, TimeMs) override { known_[window] = true; }
  void WindowRevoked(int, TimeMs, TimeMs) override {}
  void CheckpointDurable(int64_t job, double, double remaining_s, TimeMs) override {
    remaining_[job] = remaining_s;
  }
  void SegmentEnded(int64_t job, EndKind kind, double remaining_s, TimeMs) override {
    auto it = running_.find(job);
    if (it == running_.end()) return;
    for (const SimAlloc& a : it->second.allocs) used_[a.window] -= a.gpus;
    running_.erase(it);
    remaining_[job] = remaining_s;
    if (kind != EndKind::kFinished) pending_.insert(job);
  }
  TimeMs NextWake(TimeMs) const override { return kNever; }

 protected:
  // A window the cluster offers now (its GPUs exist; whether it will close
  // is not the baseline's business unless it asks WindowEnd).
  bool Open(int w, TimeMs now) const {
    const SimWindow& win = w_->windows[w];
    return known_[w] && Ms(win.start_s) <= now && now < Ms(win.gone_s());
  }
  int Free(int w) const { return w_->windows[w].gpus - used_[w]; }

  double RunSeconds(int64_t job) const {
    const SimJob& j = w_->jobs[job];
    return (segments_[job] > 0 ? j.restart_s : 0) + remaining_[job] * opt_.estimate_factor;
  }

  // Places `job` at max_gpus now: a gang on the tightest window with room
  // if one has it, otherwise (a gang spanning nodes, or a non-gang job) the
  // biggest holes of one pool first. `ok(w)` filters windows.
  template <typename Ok>
  std::vector<SimAlloc> Place(int64_t job, TimeMs now, const std::vector<int>& free, Ok ok) const {
    const SimJob& j = w_->jobs[job];
    const int need = j.max_gpus;
    if (j.gang) {
      int best = -1;
      for (size_t w = 0; w < free.size(); w++) {
        if (!Open(static_cast<int>(w), now) || free[w] < need || !ok(static_cast<int>(w))) continue;
        if (best < 0 || free[w] < free[best]) best = static_cast<int>(w);
      }
      if (best >= 0) return {SimAlloc{best, need}};
    }
    std::map<std::string, std::vector<std::pair<int, int>>> by_pool;  // pool -> (free, window)
    for (size_t w = 0; w < free.size(); w++) {
      if (!Open(static_cast<int>(w), now) || free[w] <= 0 || !ok(static_cast<int>(w))) continue;
      by_pool[w_->windows[w].pool].emplace_back(free[w], static_cast<int>(w));
    }
    for (auto& [pool, v] : by_pool) {
      int sum = 0;
      for (const auto& p : v) sum += p.first;
      if (sum < need) continue;
      std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
      });
      std::vector<SimAlloc> out;
      int left = need;
      for (const auto& [f, w] : v) {
        if (left == 0) break;
        const int take = std::min(f, left);
        out.push_back(SimAlloc{w, take});
        left -= take;
      }
      std::sort(out.begin(), out.end(),
                [](const SimAlloc& a, const SimAlloc& b) { return a.window < b.window; });
      return out;
    }
    return {};
  }

  std::vector<int> FreeNow() const {
    std::vector<int> f(used_.size());
    for (size_t w = 0; w < f.size(); w++) f[w] = Free(static_cast<int>(w));
    return f;
  }

  void Launch(int64_t job, std::vector<SimAlloc> allocs, TimeMs now, std::vector<int>* free,
              Decisions* d) {
    Running r;
    r.allocs = allocs;
    r.start = now;
    r.est_end = now + Ms(RunSeconds(job));
    for (const SimAlloc& a : allocs) {
      used_[a.window] += a.gpus;
      (*free)[a.window] -= a.gpus;
    }
    segments_[job]++;
    running_[job] = r;
    pending_.erase(job);
    d->starts.push_back(StartCmd{job, std::move(allocs)});
  }

  // EASY: the head's reservation. For each pool (a gang may span its
  // windows) the GPUs running jobs return at their time limits are
  // added in order until the head fits: the shadow time, and the GPUs
  // left over at it (extra). The earliest group wins.
  struct Reservation {
    bool valid = false;
    TimeMs shadow = kNever;
    std::set<int> windows;
    int extra = 0;
  };
  Reservation Reserve(int64_t head, TimeMs now, const std::vector<int>& free) const {
    const SimJob& j = w_->jobs[head];
    std::map<std::string, std::vector<int>> groups;
    for (size_t w = 0; w < free.size(); w++) {
      if (!Open(static_cast<int>(w), now)) continue;
      groups[w_->windows[w].pool].push_back(static_cast<int>(w));
    }
    Reservation best;
    for (const auto& [key, ws] : groups) {
      int have = 0, capacity = 0;
      std::set<int> in(ws.begin(), ws.end());
      for (int w : ws) {
        have += free[w];
        capacity += w_->windows[w].gpus;
      }
      if (capacity < j.max_gpus) continue;
      std::vector<std::pair<TimeMs, int>> releases;
      for (const auto& [id, r] : running_) {
        int g = 0;
        for (const SimAlloc& a : r.allocs) g += in.count(a.window) ? a.gpus : 0;
        if (g > 0) releases.emplace_back(std::max(now + 1, r.est_end), g);
      }
      std::sort(releases.begin(), releases.end());
      TimeMs shadow = have >= j.max_gpus ? now : kNever;
      for (size_t i = 0; i < releases.size() && shadow == kNever; i++) {
        have += releases[i].second;
        // All releases at the same instant count together.
        while (i + 1 < releases.size() && releases[i + 1].first == releases[i].first)
          have += releases[++i].second;
        if (have >= j.max_gpus) shadow = releases[i].first;
      }
      if (shadow == kNever) continue;
      if (!best.valid || shadow < best.shadow) {
        best.valid = true;
        best.shadow = shadow;
        best.windows = in;
        best.extra = have - j.max_gpus;
      }
    }
    return best;
  }

  // Starts what fits of `order` (queue order) with EASY backfill behind
  // the first job that does not fit. `ok(job, w)` filters windows; a job
  // `held(job)` says may not start now is passed over (neither started nor
  // reserved for, as Slurm does with a job over its association's limit).
  template <typename Ok, typename Held>
  void EasyPass(const std::vector<int64_t>& order, TimeMs now, Decisions* d, bool backfill, Ok ok,
                Held held) {
    std::vector<int> free = FreeNow();
    Reservation res;
    bool blocked = false;
    size_t scanned = 0;
    for (int64_t job : order) {
      if (++scanned > 4096) break;
      if (held(job)) continue;
      auto allocs = Place(job, now, free, [&](int w) { return ok(job, w); });
      if (!blocked) {
        if (!allocs.empty()) {
          Launch(job, std::move(allocs), now, &free, d);
          continue;
        }
        blocked = true;
        blocked_head_ = job;
        if (!backfill) return;
        res = Reserve(job, now, free);
        continue;
      }
      if (allocs.empty()) continue;
      int in_res = 0;
      for (const SimAlloc& a : allocs) in_res += res.windows.count(a.window) ? a.gpus : 0;
      const TimeMs end = now + Ms(RunSeconds(job));
      if (!res.valid || in_res == 0 || end <= res.shadow) {
        Launch(job, std::move(allocs), now, &free, d);
      } else if (in_res <= res.extra) {
        res.extra -= in_res;
        Launch(job, std::move(allocs), now, &free, d);
      }
    }
  }

  const std::string name_;
  const SchedulerOptions opt_;
  const Workload* w_ = nullptr;
  std::vector<int> used_;
  std::vector<bool> known_;
  std::vector<double> remaining_;
  std::vector<int> segments_;
  std::set<int64_t> pending_;  // by id = submit order
  std::map<int64_t, Running> running_;
  int64_t blocked_head_ = -1;
};

class FifoScheduler : public QueueScheduler {
 public:
  FifoScheduler(std::string name, const SchedulerOptions& o, bool backfill)
      : QueueScheduler(std::move(name), o), backfill_(backfill) {}
  Decisions Schedule(TimeMs now) override {
    Decisions d;
    std::vector<int64_t> order(pending_.begin(), pending_.end());
    EasyPass(
        order, now, &d, backfill_, [](int64_t, int) { return true; },
        [](int64_t) { return false; });
    return d;
  }

 private:
  const bool backfill_;
};

// Slurm-like: priority/multifactor (PriorityWeightQOS dominates, then age
// up to PriorityMaxAge and the fair-share factor 2^(-U/S) over usage
// decayed with PriorityDecayHalfLife), sched/backfill (EASY here: Slurm
// reserves for every job in bf_window, we reserve for the top one),
// PreemptType=qos with PreemptMode=REQUEUE, GraceTime = C + safety and
// PreemptExemptTime = min_run; reservations (windows) end known, and a
// job's limit is shortened to the window (--time-min = one minimum
// segment) with the GraceTime signal before the end.
//
// With team_limits (policy `slurm-limits`), each team is an association
// with GrpTRES=gres/gpu = its guarantee + its borrowing limit (the same
// caps stint gets from --team-borrow-factor): a job that would take its
// team above the cap stays pending (reason AssocGrpGRES) and is neither
// started nor reserved for; teams without a limit are unlimited.
class SlurmScheduler : public QueueScheduler {
 public:
  SlurmScheduler(std::string name, const SchedulerOptions& o, bool team_limits)
      : QueueScheduler(std::move(name), o) {
    if (team_limits) {
      for (const auto& [team, limit] : o.team_borrow_limits)
        team_cap_[team] = TeamGuarantee(o, team) + limit;
    }
  }

  void Init(const Workload& w) override {
    QueueScheduler::Init(w);
    for (const SimJob& j : w.jobs) usage_[j.team] = 0;
  }

  Decisions Schedule(TimeMs now) override {
    Decay(now);
    Decisions d;
    // GraceTime signal before a window's known end.
    for (auto& [job, r] : running_) {
      if (r.noticed) continue;
      const SimJob& j = w_->jobs[job];
      TimeMs end = kNever;
      for (const SimAlloc& a : r.allocs) end = std::min(end, WindowEnd(a.window));
      if (end != kNever && now >= end - Ms(j.checkpoint_s + opt_.stint.safety_seconds)) {
        r.noticed = true;
        d.notices.push_back(NoticeCmd{job, end, false});
      }
    }
    std::vector<int64_t> order(pending_.begin(), pending_.end());
    std::vector<double> prio(w_->jobs.size(), 0);
    for (int64_t job : order) prio[job] = Priority(job, now);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return prio[a] > prio[b]; });
    blocked_head_ = -1;
    // GPUs each limited team holds: the running jobs, then every start of
    // this pass (d.starts grows as EasyPass launches).
    std::map<std::string, int> team_held;
    size_t counted = 0;
    if (!team_cap_.empty()) {
      for (const auto& [job, r] : running_)
        for (const SimAlloc& a : r.allocs) team_held[w_->jobs[job].team] += a.gpus;
      counted = d.starts.size();
    }
    auto over_cap = [&](int64_t job) {
      if (team_cap_.empty()) return false;
      for (; counted < d.starts.size(); counted++)
        for (const SimAlloc& a : d.starts[counted].allocs)
          team_held[w_->jobs[d.starts[counted].job].team] += a.gpus;
      const SimJob& j = w_->jobs[job];
      auto cap = team_cap_.find(j.team);
      return cap != team_cap_.end() && team_held[j.team] + j.max_gpus > cap->second;
    };
    EasyPass(
        order, now, &d, true, [&](int64_t job, int w) { return FitsWindow(job, w, now); },
        over_cap);
    if (blocked_head_ >= 0) Preempt(blocked_head_, now, &d);
    return d;
  }

  TimeMs NextWake(TimeMs now) const override {
    TimeMs next = kNever;
    for (const auto& [job, r] : running_) {
      if (r.noticed) continue;
      TimeMs end = kNever;
      for (const SimAlloc& a : r.allocs) end = std::min(end, WindowEnd(a.window));
      if (end == kNever) continue;
      const TimeMs at = end - Ms(w_->jobs[job].checkpoint_s + opt_.stint.safety_seconds);
      if (at > now) next = std::min(next, at);
    }
    return next;
  }

 private:
  TimeMs WindowEnd(int w) const {
    const SimWindow& win = w_->windows[w];
    return win.kind == stintd::WindowKind::kHard ? Ms(win.end_s) : kNever;
  }

  // --time-min: a window is usable if one minimum segment fits before its end.
  bool FitsWindow(int64_t job, int w, TimeMs now) const {
    const TimeMs end = WindowEnd(w);
    if (end == kNever) return true;
    const SimJob& j = w_->jobs[job];
    const double min_seg =
        std::min(j.restart_s + j.interval_s + j.checkpoint_s + opt_.stint.safety_seconds,
                 RunSeconds(job) + j.checkpoint_s + opt_.stint.safety_seconds);
    return end - now >= Ms(min_seg);
  }

  void Decay(TimeMs now) {
    if (now <= usage_at_) return;
    const double dt = (now - usage_at_) / 1000.0;
    const double f = std::exp2(-dt / std::max(1.0, opt_.stint.usage_half_life_seconds));
    std::map<std::string, int> held;
    for (const auto& [job, r] : running_) {
      for (const SimAlloc& a : r.allocs) held[w_->jobs[job].team] += a.gpus;
    }
    for (auto& [team, u] : usage_) u = u * f + held[team] * dt;
    usage_at_ = now;
  }

  double Priority(int64_t job, TimeMs now) const {
    const SimJob& j = w_->jobs[job];
    double total = 0;
    for (const auto& [t, u] : usage_) total += u;
    const double shares = 1.0 / std::max<size_t>(1, usage_.size());
    const double u = total > 0 ? usage_.at(j.team) / total : 0;
    const double fairshare = std::exp2(-u / shares);
    const double age = std::min(1.0, (now - Ms(j.submit_s)) / 1000.0 / opt_.slurm_age_max_s);
    return 10000.0 * static_cast<int>(j.priority) + 1000.0 * age + 1000.0 * fairshare;
  }

  // QOS preemption for the blocked top job: the fewest lower-QOS victims
  // (lowest QOS, then youngest) in one pool whose release lets it fit.
  void Preempt(int64_t head, TimeMs now, Decisions* d) {
    const SimJob& h = w_->jobs[head];
    if (h.priority == stintd::Priority::kLow) return;
    if (now < preempt_until_) return;  // a preemption is in flight: wait for it
    std::vector<int> free = FreeNow();
    std::map<std::string, std::vector<int>> groups;
    for (size_t w = 0; w < free.size(); w++) {
      if (!Open(static_cast<int>(w), now) || !FitsWindow(head, static_cast<int>(w), now)) continue;
      groups[w_->windows[w].pool].push_back(static_cast<int>(w));
    }
    const TimeMs exempt = Ms(opt_.stint.min_run_seconds);
    for (const auto& [key, ws] : groups) {
      std::set<int> in(ws.begin(), ws.end());
      int have = 0, capacity = 0;
      for (int w : ws) {
        have += free[w];
        capacity += w_->windows[w].gpus;
      }
      if (capacity < h.max_gpus) continue;
      std::vector<std::pair<int64_t, int>> cands;  // (job, gpus in group)
      for (const auto& [job, r] : running_) {
        const SimJob& v = w_->jobs[job];
        if (r.noticed || !v.preemptible || v.priority >= h.priority || now - r.start < exempt)
          continue;
        int g = 0;
        for (const SimAlloc& a : r.allocs) g += in.count(a.window) ? a.gpus : 0;
        if (g > 0) cands.emplace_back(job, g);
      }
      std::sort(cands.begin(), cands.end(), [&](const auto& a, const auto& b) {
        const SimJob& x = w_->jobs[a.first];
        const SimJob& y = w_->jobs[b.first];
        if (x.priority != y.priority) return x.priority < y.priority;
        return running_.at(a.first).start > running_.at(b.first).start;
      });
      std::vector<int64_t> chosen;
      for (const auto& [job, g] : cands) {
        if (have >= h.max_gpus) break;
        chosen.push_back(job);
        have += g;
      }
      if (have < h.max_gpus) continue;
      for (int64_t job : chosen) {
        Running& r = running_[job];
        r.noticed = true;
        const SimJob& v = w_->jobs[job];
        const TimeMs deadline = now + Ms(std::min(v.checkpoint_s + opt_.stint.safety_seconds,
                                                  opt_.stint.max_grace_seconds));
        r.est_end = deadline;  // the reservation sees the GPUs come back then
        NoticeCmd n{job, deadline, true};
        d->notices.push_back(n);
        preempt_until_ = std::max(preempt_until_, deadline);
      }
      return;
    }
  }

  std::map<std::string, double> usage_;
  std::map<std::string, int> team_cap_;  // GrpTRES gres/gpu per team (slurm-limits)
  TimeMs usage_at_ = 0;
  TimeMs preempt_until_ = 0;
};

}  // namespace

int TeamGuarantee(const SchedulerOptions& o, const std::string& team) {
  auto g = o.team_guarantees.find(team);
  return g != o.team_guarantees.end() ? g->second : o.team_guarantee_gpus;
}

std::map<std::string, int> TeamBorrowLimits(const SchedulerOptions& o,
                                            const std::vector<SimJob>& jobs, double factor) {
  std::map<std::string, int> largest;
  for (const SimJob& j : jobs) largest[j.team] = std::max(largest[j.team], j.min_gpus);
  std::map<std::string, int> out;
  for (const auto& [team, gpus] : largest) {
    const int guarantee = TeamGuarantee(o, team);
    out[team] = std::max(static_cast<int>(std::ceil(factor * guarantee)), gpus - guarantee);
  }
  return out;
}

std::vector<std::string> AllPolicyNames() {
  return {"fifo",
          "easy",
          "slurm",
          "slurm-limits",
          "stint",
          "stint-no-backfill",
          "stint-no-aging",
          "stint-no-fairshare",
          "stint-no-service",
          "stint-no-service-preemption",
          "stint-no-shrink",
          "stint-no-starvation-guard",
          "stint-las",
          "stint-no-queue-guard",
          "stint-no-preemption",
          "stint-no-notices",
          "stint-no-estimates",
          "stint-no-migration",
          "stint-first-fit",
          "stint-cheapest-only"};
}

Result<PolicySpec> ParsePolicy(const std::string& name, const SchedulerOptions& o) {
  PolicySpec p;
  p.name = name;
  p.stint = o.stint;
  if (name == "fifo") {
    p.kind = PolicyKind::kFifo;
  } else if (name == "easy") {
    p.kind = PolicyKind::kEasy;
  } else if (name == "slurm" || name == "slurm-limits") {
    p.kind = PolicyKind::kSlurm;
    p.team_limits = name == "slurm-limits";
  } else if (name.rfind("stint", 0) == 0) {
    p.kind = PolicyKind::kStint;
    if (name == "stint") {
    } else if (name == "stint-no-backfill") {
      p.stint.plan_depth = 1;
    } else if (name == "stint-no-aging") {
      p.stint.aging_points_per_hour = 0;
    } else if (name == "stint-no-fairshare") {
      p.stint.fair_share_points = 0;
      p.stint.guarantee_bonus_points = 0;
    } else if (name == "stint-no-preemption") {
      p.stint.min_run_seconds = 1e12;
    } else if (name == "stint-no-service") {
      p.stint.service_class_points = 0;
      p.stint.service_preempt_classes = 0;
    } else if (name == "stint-no-service-preemption") {
      p.stint.service_preempt_classes = 0;
    } else if (name == "stint-no-shrink") {
      p.stint.shrink_before_preempt = false;
      p.stint.grow_elastic = false;
    } else if (name == "stint-no-queue-guard") {
      p.stint.service_queue_guard_factor = 0;
    } else if (name == "stint-las") {
      p.stint.service_class_by_remaining = false;
    } else if (name == "stint-no-starvation-guard") {
      p.stint.service_starvation_guard = false;
    } else if (name == "stint-no-notices") {
      p.workers_ignore_notices = true;
    } else if (name == "stint-no-estimates") {
      p.runtime_estimates = false;
    } else if (name == "stint-no-migration") {
      p.stint.price_migration = false;
    } else if (name == "stint-first-fit") {
      // Routing baselines: a job stays where it started (no price migration).
      p.routing = Routing::kFirstFit;
      p.stint.price_migration = false;
    } else if (name == "stint-cheapest-only") {
      p.routing = Routing::kCheapestOnly;
      p.stint.price_migration = false;
    } else {
      return Status::InvalidArgument("unknown policy \"" + name + "\"");
    }
  } else {
    return Status::InvalidArgument("unknown policy \"" + name +
                                   "\" (known: fifo, easy, slurm, slurm-limits, stint, stint-no-*, "
                                   "stint-las, stint-first-fit, stint-cheapest-only)");
  }
  return p;
}

std::unique_ptr<Scheduler> MakeScheduler(const PolicySpec& spec, const SchedulerOptions& options) {
  switch (spec.kind) {
    case PolicyKind::kFifo:
      return std::make_unique<FifoScheduler>(spec.name, options, false);
    case PolicyKind::kEasy:
      return std::make_unique<FifoScheduler>(spec.name, options, true);
    case PolicyKind::kSlurm:
      return std::make_unique<SlurmScheduler>(spec.name, options, spec.team_limits);
    case PolicyKind::kStint:
      return MakeStintScheduler(spec, options);
  }
  return nullptr;
}

}  // namespace stint::sim
