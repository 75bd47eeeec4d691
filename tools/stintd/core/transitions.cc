#include "stintd/core/transitions.h"

#include <algorithm>
#include <cmath>

#include "stintd/core/accounting.h"
#include "stintd/core/evals.h"
#include "stintd/core/rendezvous.h"
#include "stintd/core/storage.h"

namespace stint::stintd {
namespace {

// [A-Za-z0-9._-]{1,64}: safe in URLs, file names and metric labels.
bool ValidName(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

Status CheckFinite(const char* field, double v, double min) {
  if (!std::isfinite(v) || v < min) {
    return Status::InvalidArgument(
        std::string(field) + " must be a number >= " + std::to_string(static_cast<int64_t>(min)) +
        " (got " + std::to_string(v) + ")");
  }
  return Status::OK();
}

Result<Job*> FindJob(ClusterState& s, int64_t job_id) {
  auto it = s.jobs.find(job_id);
  if (it == s.jobs.end())
    return Status::NotFound("job " + std::to_string(job_id) + " does not exist");
  return &it->second;
}

// The worker and its active segment, or why the worker may not act.
struct WorkerContext {
  Worker* worker;
  Segment* segment;
  Job* job;
};
Result<WorkerContext> FindActiveWorker(ClusterState& s, int64_t worker_id) {
  auto w = s.workers.find(worker_id);
  if (w == s.workers.end()) {
    return Status::NotFound("worker " + std::to_string(worker_id) + " is not registered");
  }
  auto seg = s.segments.find(w->second.segment_id);
  auto job = s.jobs.find(w->second.job_id);
  if (w->second.released || seg == s.segments.end() || job == s.jobs.end() ||
      !SegmentActive(seg->second.state) || job->second.segment_id != w->second.segment_id) {
    return Status::Aborted("worker " + std::to_string(worker_id) + " is fenced: segment " +
                           std::to_string(w->second.segment_id) + " of job " +
                           std::to_string(w->second.job_id) + " is no longer active");
  }
  return WorkerContext{&w->second, &seg->second, &job->second};
}

void ReleaseSegmentWorkers(ClusterState& s, int64_t segment_id, Changes* changes) {
  for (auto& [id, w] : s.workers) {
    if (w.segment_id == segment_id && !w.released) {
      w.released = true;
      changes->workers.insert(id);
    }
  }
}

// A job that completed kept every step its last segment ran.
void KeepFinalSteps(Segment& seg, Job& job) {
  seg.checkpoint_step = std::max({seg.checkpoint_step, seg.last_step, job.last_step});
}

// Remembers a revocation of the job's segment for the spot fallback
// (PriceRule), forgetting those older than every rule's window.
void RememberRevocation(const ClusterState& s, Job& job, TimeMs now) {
  double window_seconds = 0;
  for (const PriceRule& r : s.price_rules)
    window_seconds = std::max(window_seconds, r.spot_fallback_window_seconds);
  const TimeMs window = SecondsToMs(window_seconds);
  job.revoked_ms.erase(std::remove_if(job.revoked_ms.begin(), job.revoked_ms.end(),
                                      [&](TimeMs t) { return now - t >= window; }),
                       job.revoked_ms.end());
  job.revoked_ms.push_back(now);
}

// Ends an active segment; the job becomes pending again unless `job_state`
// says otherwise.
void EndSegment(ClusterState& s, Segment& seg, SegmentState end_state, JobState job_state,
                TimeMs now, Changes* changes) {
  seg.state = end_state;
  seg.ended_ms = now;
  changes->segments.insert(seg.id);
  ReleaseSegmentWorkers(s, seg.id, changes);
  auto job = s.jobs.find(seg.job_id);
  if (job == s.jobs.end()) return;
  Job& j = job->second;
  if (j.segment_id == seg.id) j.segment_id = 0;
  j.state = job_state;
  if (job_state == JobState::kPending) j.eligible_ms = now;
  changes->jobs.insert(j.id);
}

// The segment's workers, highest rank first: by rank in the job's formed
// rendezvous generation where they took part in one, then the rest, newest
// registration first. The ranks of the trailing allocations (the parts a
// shrink gives up) are the highest, so these leave first.
std::vector<int64_t> WorkersByRankDescending(const ClusterState& s, const Segment& seg) {
  std::vector<int64_t> ranked, rest;
  auto r = s.rendezvous.find(seg.job_id);
  if (r != s.rendezvous.end()) {
    const std::vector<int64_t>& by_rank = r->second.previous;
    for (auto it = by_rank.rbegin(); it != by_rank.rend(); ++it) {
      auto w = s.workers.find(*it);
      if (w != s.workers.end() && w->second.segment_id == seg.id && !w->second.released)
        ranked.push_back(*it);
    }
  }
  for (auto it = s.workers.rbegin(); it != s.workers.rend(); ++it) {
    const Worker& w = it->second;
    if (w.segment_id != seg.id || w.released) continue;
    if (std::find(ranked.begin(), ranked.end(), w.id) == ranked.end()) rest.push_back(w.id);
  }
  ranked.insert(ranked.end(), rest.begin(), rest.end());
  return ranked;
}

// Starts a shrink: the workers holding the released share of the GPUs
// (rounded down: the last worker never leaves) get the notice. On
// stint-agent nodes (released whole) those are the workers the agents
// launched on the released windows' nodes.
void StartShrink(ClusterState& s, Segment& seg, const ShrinkDecision& d, TimeMs now) {
  int released = 0;
  for (const Allocation& a : d.release) released += a.gpus;
  const std::vector<int64_t> workers = WorkersByRankDescending(s, seg);
  std::set<std::string> nodes;
  for (const Allocation& a : d.release) {
    auto w = s.windows.find(a.window_id);
    if (w != s.windows.end() && !w->second.node.empty()) nodes.insert(w->second.node);
  }
  const bool launched = std::any_of(workers.begin(), workers.end(),
                                    [&](int64_t id) { return !s.workers.at(id).node.empty(); });
  seg.leaving_workers.clear();
  if (!nodes.empty() && launched) {
    for (int64_t id : workers) {
      if (nodes.count(s.workers.at(id).node)) seg.leaving_workers.push_back(id);
    }
  } else {
    const size_t stays = workers.empty() ? 0 : 1;
    const size_t leaving =
        std::min(workers.size() - stays,
                 seg.gpus() > 0 ? workers.size() * static_cast<size_t>(released) / seg.gpus() : 0);
    seg.leaving_workers.assign(workers.begin(),
                               workers.begin() + static_cast<std::ptrdiff_t>(leaving));
  }
  seg.shrink_release = d.release;
  seg.shrink_notice_ms = now;
  seg.shrink_deadline_ms = d.deadline_ms;
  seg.shrink_for = d.for_job_id;
}

// The shrink's deadline passed: the released GPUs leave the segment's
// allocation (and placement: the node windows it no longer holds), its
// leaving workers are released, so the rendezvous re-forms without them.
void FinishShrink(ClusterState& s, Segment& seg, Changes* changes) {
  for (const Allocation& r : seg.shrink_release) {
    for (Allocation& a : seg.allocs) {
      if (a.window_id == r.window_id) a.gpus -= std::min(a.gpus, r.gpus);
    }
  }
  seg.allocs.erase(std::remove_if(seg.allocs.begin(), seg.allocs.end(),
                                  [](const Allocation& a) { return a.gpus <= 0; }),
                   seg.allocs.end());
  seg.placement.erase(
      std::remove_if(seg.placement.begin(), seg.placement.end(),
                     [&](const Placement& p) {
                       return std::none_of(seg.allocs.begin(), seg.allocs.end(),
                                           [&](const Allocation& a) {
                                             return a.window_id == p.window_id;
                                           });
                     }),
      seg.placement.end());
  for (int64_t id : seg.leaving_workers) {
    auto w = s.workers.find(id);
    if (w == s.workers.end() || w->second.released) continue;
    w->second.released = true;
    changes->workers.insert(id);
  }
  seg.shrink_release.clear();
  seg.leaving_workers.clear();
  seg.shrink_notice_ms = seg.shrink_deadline_ms = 0;
  seg.shrink_for = 0;
  changes->segments.insert(seg.id);
}

}  // namespace

void Changes::Merge(const Changes& o) {
  pools.insert(o.pools.begin(), o.pools.end());
  windows.insert(o.windows.begin(), o.windows.end());
  teams.insert(o.teams.begin(), o.teams.end());
  jobs.insert(o.jobs.begin(), o.jobs.end());
  segments.insert(o.segments.begin(), o.segments.end());
  workers.insert(o.workers.begin(), o.workers.end());
  rendezvous.insert(o.rendezvous.begin(), o.rendezvous.end());
  node_credentials.insert(o.node_credentials.begin(), o.node_credentials.end());
  evals.insert(o.evals.begin(), o.evals.end());
  counters = counters || o.counters;
}

Status AddPool(ClusterState& s, Pool pool, TimeMs now, Changes* changes) {
  if (!ValidName(pool.name)) {
    return Status::InvalidArgument("pool name must match [A-Za-z0-9._-]{1,64} (got \"" + pool.name +
                                   "\")");
  }
  if (s.pools.count(pool.name))
    return Status::AlreadyExists("pool " + pool.name + " already exists");
  STINT_RETURN_IF_ERROR(CheckFinite("price_per_gpu_hour", pool.price_per_gpu_hour, 0));
  STINT_ASSIGN_OR_RETURN(pool.storage, NormalizeStorage(pool.storage));
  pool.price_history.clear();
  if (pool.price_per_gpu_hour > 0)
    pool.price_history.push_back(PricePoint{now, pool.price_per_gpu_hour});
  s.pools[pool.name] = pool;
  changes->pools.insert(pool.name);
  return Status::OK();
}

Status SetPoolStorage(ClusterState& s, const std::string& pool,
                      const std::vector<std::string>& storage, Changes* changes) {
  auto it = s.pools.find(pool);
  if (it == s.pools.end()) return Status::NotFound("pool \"" + pool + "\" does not exist");
  STINT_ASSIGN_OR_RETURN(it->second.storage, NormalizeStorage(storage));
  changes->pools.insert(pool);
  return Status::OK();
}

Result<int64_t> AddWindow(ClusterState& s, Window w, TimeMs now, Changes* changes) {
  if (!s.pools.count(w.pool)) return Status::NotFound("pool \"" + w.pool + "\" does not exist");
  if (w.gpus <= 0)
    return Status::InvalidArgument("gpus must be >= 1 (got " + std::to_string(w.gpus) + ")");
  if (w.kind == WindowKind::kHard && w.end_ms == kNever) {
    return Status::InvalidArgument("end_ms is required for a hard window");
  }
  if (w.end_ms <= w.start_ms) return Status::InvalidArgument("end_ms must be after start_ms");
  if (w.end_ms <= now) return Status::InvalidArgument("end_ms is in the past");
  if (w.notice_lead_ms < 0) return Status::InvalidArgument("notice_lead_seconds must be >= 0");
  w.id = s.next_id++;
  w.closed_early = false;
  s.windows[w.id] = w;
  changes->windows.insert(w.id);
  changes->counters = true;
  return w.id;
}

Status CloseWindow(ClusterState& s, int64_t window_id, TimeMs lead_ms, TimeMs now,
                   Changes* changes) {
  auto it = s.windows.find(window_id);
  if (it == s.windows.end())
    return Status::NotFound("window " + std::to_string(window_id) + " does not exist");
  if (lead_ms < 0) return Status::InvalidArgument("lead_seconds must be >= 0");
  Window& w = it->second;
  if (w.end_ms <= now)
    return Status::FailedPrecondition("window " + std::to_string(window_id) + " is already closed");
  // A future window closed before it opens becomes empty (end = start).
  w.end_ms = std::max(w.start_ms, std::max(now, std::min(w.end_ms, now + lead_ms)));
  w.closed_early = true;
  changes->windows.insert(window_id);
  return Status::OK();
}

Status PutTeam(ClusterState& s, const Team& team, TimeMs now, Changes* changes) {
  if (!ValidName(team.name)) {
    return Status::InvalidArgument("team name must match [A-Za-z0-9._-]{1,64} (got \"" + team.name +
                                   "\")");
  }
  if (team.guaranteed_gpus < 0) return Status::InvalidArgument("guaranteed_gpus must be >= 0");
  if (team.borrow_limit_gpus < -1)
    return Status::InvalidArgument("borrow_limit_gpus must be >= -1 (-1: unlimited)");
  if (!std::isfinite(team.budget) || (team.budget < 0 && team.budget != -1))
    return Status::InvalidArgument("budget must be >= 0, or -1 for none (got " +
                                   std::to_string(team.budget) + ")");
  if (!std::isfinite(team.budget_period_seconds) || team.budget_period_seconds < 3600)
    return Status::InvalidArgument("budget_period_seconds must be >= 3600 (got " +
                                   std::to_string(team.budget_period_seconds) + ")");
  const bool fresh = !s.teams.count(team.name);
  Team& t = s.teams[team.name];
  t.name = team.name;
  t.guaranteed_gpus = team.guaranteed_gpus;
  t.borrow_limit_gpus = team.borrow_limit_gpus;
  t.budget = team.budget;
  t.budget_period_seconds = team.budget_period_seconds;
  if (fresh || t.period_start_ms == 0) t.period_start_ms = now;
  changes->teams.insert(team.name);
  return Status::OK();
}

Result<int64_t> SubmitJob(ClusterState& s, Job j, TimeMs now, Changes* changes) {
  if (j.name.empty() || j.name.size() > 128)
    return Status::InvalidArgument("name must be 1 to 128 characters");
  if (j.team.empty()) j.team = kDefaultTeam;
  if (!ValidName(j.team))
    return Status::InvalidArgument("team name must match [A-Za-z0-9._-]{1,64}");
  if (j.team != kDefaultTeam && !s.teams.count(j.team)) {
    return Status::NotFound("team \"" + j.team +
                            "\" does not exist (create it with PUT /v1/teams/" + j.team + ")");
  }
  std::sort(j.pools.begin(), j.pools.end());
  j.pools.erase(std::unique(j.pools.begin(), j.pools.end()), j.pools.end());
  for (const std::string& pool : j.pools) {
    if (!s.pools.count(pool)) return Status::NotFound("pool \"" + pool + "\" does not exist");
  }
  if (j.min_gpus < 1)
    return Status::InvalidArgument("min_gpus must be >= 1 (got " + std::to_string(j.min_gpus) +
                                   ")");
  if (j.max_gpus < j.min_gpus) {
    return Status::InvalidArgument("max_gpus must be >= min_gpus (got " +
                                   std::to_string(j.max_gpus) + " < " + std::to_string(j.min_gpus) +
                                   ")");
  }
  STINT_RETURN_IF_ERROR(CheckFinite("checkpoint_seconds", j.checkpoint_seconds, 0));
  STINT_RETURN_IF_ERROR(CheckFinite("restart_seconds", j.restart_seconds, 0));
  STINT_RETURN_IF_ERROR(
      CheckFinite("checkpoint_interval_seconds", j.checkpoint_interval_seconds, 0));
  STINT_RETURN_IF_ERROR(CheckFinite("remaining_seconds", j.remaining_seconds, 0));
  if (!j.eval.empty() && j.eval_every < 1)
    return Status::InvalidArgument("eval.every must be >= 1 (got " + std::to_string(j.eval_every) +
                                   ")");
  if (j.eval_gpus < 0 || j.eval_gpus > 1)
    return Status::InvalidArgument("eval.gpus must be 0 or 1 (got " + std::to_string(j.eval_gpus) +
                                   ")");
  if (j.team == kDefaultTeam && !s.teams.count(kDefaultTeam)) {
    s.teams[kDefaultTeam] = Team{kDefaultTeam, 0, -1, 0, now};
    changes->teams.insert(kDefaultTeam);
  }
  j.id = s.next_id++;
  j.submit_ms = now;
  j.eligible_ms = now;
  j.state = JobState::kPending;
  j.segment_id = 0;
  j.fencing_token = 0;
  j.last_step = 0;
  j.checkpoint_step = -1;
  j.checkpoint_ms = 0;
  j.segments = 0;
  j.preemptions = 0;
  j.lost_gpu_seconds = 0;
  j.service_gpu_seconds = 0;
  j.message.clear();
  s.jobs[j.id] = j;
  changes->jobs.insert(j.id);
  changes->counters = true;
  return j.id;
}

Status CancelJob(ClusterState& s, int64_t job_id, const std::string& reason, TimeMs now,
                 Changes* changes) {
  STINT_ASSIGN_OR_RETURN(Job * j, FindJob(s, job_id));
  if (j->state != JobState::kPending && j->state != JobState::kRunning) {
    return Status::FailedPrecondition("job " + std::to_string(job_id) + " is already " +
                                      JobStateName(j->state));
  }
  if (j->segment_id != 0) {
    auto seg = s.segments.find(j->segment_id);
    if (seg != s.segments.end() && SegmentActive(seg->second.state)) {
      EndSegment(s, seg->second, SegmentState::kCancelled, JobState::kCancelled, now, changes);
    }
  }
  j->state = JobState::kCancelled;
  j->segment_id = 0;
  j->message = reason.empty() ? "cancelled" : "cancelled: " + reason;
  changes->jobs.insert(job_id);
  return Status::OK();
}

Status SetPriority(ClusterState& s, int64_t job_id, Priority priority, Changes* changes) {
  STINT_ASSIGN_OR_RETURN(Job * j, FindJob(s, job_id));
  if (j->state != JobState::kPending && j->state != JobState::kRunning) {
    return Status::FailedPrecondition("job " + std::to_string(job_id) + " is already " +
                                      JobStateName(j->state));
  }
  j->priority = priority;
  changes->jobs.insert(job_id);
  return Status::OK();
}

void ApplyPlan(ClusterState& s, const Plan& plan, TimeMs now, Changes* changes) {
  Counters& c = s.counters;
  if (c.wait_buckets.size() != WaitBucketsSeconds().size())
    c.wait_buckets.assign(WaitBucketsSeconds().size(), 0);
  // Shrinks whose leaving ranks' time is up complete first: the plan
  // counted those GPUs free from the deadline on.
  for (auto& [id, seg] : s.segments) {
    if (SegmentActive(seg.state) && seg.shrink_deadline_ms != 0 && now >= seg.shrink_deadline_ms)
      FinishShrink(s, seg, changes);
  }
  // Losses and notices first: they are decisions about the present segments.
  for (const LostDecision& d : plan.lost) {
    auto seg = s.segments.find(d.segment_id);
    if (seg == s.segments.end() || !SegmentActive(seg->second.state)) continue;
    Segment& sg = seg->second;
    auto job = s.jobs.find(sg.job_id);
    if (job != s.jobs.end()) {
      // Everything since the newest durable checkpoint of this segment is lost.
      const TimeMs since = std::max(sg.start_ms, job->second.checkpoint_ms);
      const double lost = sg.gpus() * std::max<TimeMs>(0, now - since) / 1000.0;
      job->second.lost_gpu_seconds += lost;
      job->second.message = "segment " + std::to_string(sg.id) + " lost: " + d.reason;
      c.lost_gpu_seconds += lost;
    }
    c.segments_lost++;
    EndSegment(s, sg, SegmentState::kLost, JobState::kPending, now, changes);
    changes->counters = true;
  }
  for (const NoticeDecision& d : plan.notices) {
    auto seg = s.segments.find(d.segment_id);
    if (seg == s.segments.end() || seg->second.state != SegmentState::kRunning) continue;
    Segment& sg = seg->second;
    sg.state = SegmentState::kNotified;
    sg.notice_reason = d.reason;
    sg.notice_ms = now;
    sg.deadline_ms = d.deadline_ms;
    sg.preempted_for = d.for_job_id;
    changes->segments.insert(sg.id);
    c.notices_sent++;
    if (d.reason == NoticeReason::kPreempted) c.preemptions++;
    if (d.reason == NoticeReason::kRevoked) {
      c.revocations++;
      auto job = s.jobs.find(sg.job_id);
      if (job != s.jobs.end()) {
        RememberRevocation(s, job->second, now);
        changes->jobs.insert(sg.job_id);
      }
    }
    changes->counters = true;
  }
  for (const ShrinkDecision& d : plan.shrinks) {
    auto seg = s.segments.find(d.segment_id);
    if (seg == s.segments.end() || seg->second.state != SegmentState::kRunning ||
        seg->second.shrink_deadline_ms != 0)
      continue;
    StartShrink(s, seg->second, d, now);
    changes->segments.insert(d.segment_id);
    c.notices_sent++;
    changes->counters = true;
  }
  for (const GrowDecision& d : plan.grows) {
    auto seg = s.segments.find(d.segment_id);
    if (seg == s.segments.end() || seg->second.state != SegmentState::kRunning ||
        seg->second.shrink_deadline_ms != 0)
      continue;
    for (const Allocation& add : d.add) {
      auto a = std::find_if(seg->second.allocs.begin(), seg->second.allocs.end(),
                            [&](const Allocation& x) { return x.window_id == add.window_id; });
      if (a != seg->second.allocs.end()) {
        a->gpus += add.gpus;
      } else {
        seg->second.allocs.push_back(add);
      }
    }
    changes->segments.insert(d.segment_id);
  }
  for (const StartDecision& d : plan.starts) {
    auto job = s.jobs.find(d.job_id);
    if (job == s.jobs.end() || job->second.state != JobState::kPending) continue;
    Job& j = job->second;
    Segment sg;
    sg.id = s.next_id++;
    sg.job_id = j.id;
    sg.allocs = d.allocs;
    sg.fencing_token = s.next_fencing_token++;
    sg.start_ms = now;
    sg.planned_end_ms = d.planned_end_ms;
    sg.state = SegmentState::kRunning;
    sg.start_step = j.checkpoint_step;
    if (const Pool* pool = SegmentPool(s, sg)) sg.price_per_gpu_hour = pool->price_per_gpu_hour;
    s.segments[sg.id] = sg;
    const double wait = std::max<TimeMs>(0, now - j.eligible_ms) / 1000.0;
    c.wait_seconds_sum += wait;
    for (size_t i = 0; i < WaitBucketsSeconds().size(); i++) {
      if (wait <= WaitBucketsSeconds()[i]) c.wait_buckets[i]++;
    }
    c.segments_started++;
    j.state = JobState::kRunning;
    j.segment_id = sg.id;
    j.fencing_token = sg.fencing_token;
    j.segments++;
    j.message.clear();
    changes->jobs.insert(j.id);
    changes->segments.insert(sg.id);
    changes->counters = true;
  }
}

Result<Worker> RegisterWorker(ClusterState& s, int64_t job_id, const std::string& name, TimeMs now,
                              Changes* changes) {
  STINT_ASSIGN_OR_RETURN(Job * j, FindJob(s, job_id));
  if (name.empty() || name.size() > 256)
    return Status::InvalidArgument("worker name must be 1 to 256 characters");
  auto seg = s.segments.find(j->segment_id);
  if (j->state != JobState::kRunning || seg == s.segments.end() ||
      !SegmentActive(seg->second.state)) {
    return Status::FailedPrecondition("job " + std::to_string(job_id) +
                                      " has no running segment (state " + JobStateName(j->state) +
                                      ")");
  }
  Worker w;
  w.id = s.next_id++;
  w.job_id = job_id;
  w.segment_id = seg->second.id;
  w.name = name;
  // One token per incarnation, from the counter segments draw theirs from:
  // a rank dropped from the group can then be refused while the others of
  // its segment go on committing.
  w.fencing_token = s.next_fencing_token++;
  j->fencing_token = w.fencing_token;
  changes->jobs.insert(job_id);
  w.registered_ms = now;
  w.last_heartbeat_ms = now;
  seg->second.last_heartbeat_ms = std::max(seg->second.last_heartbeat_ms, now);
  s.workers[w.id] = w;
  changes->workers.insert(w.id);
  changes->counters = true;
  return w;
}

Result<WorkerView> ViewWorker(const ClusterState& s, int64_t worker_id) {
  auto w = s.workers.find(worker_id);
  if (w == s.workers.end())
    return Status::NotFound("worker " + std::to_string(worker_id) + " is not registered");
  WorkerView v;
  v.segment_id = w->second.segment_id;
  v.fencing_token = w->second.fencing_token;
  auto seg = s.segments.find(w->second.segment_id);
  auto job = s.jobs.find(w->second.job_id);
  if (seg != s.segments.end()) {
    v.segment_state = seg->second.state;
    v.notice_reason = seg->second.notice_reason;
    v.notice_ms = seg->second.notice_ms;
    v.deadline_ms = seg->second.deadline_ms;
    const std::vector<int64_t>& leaving = seg->second.leaving_workers;
    if (seg->second.state == SegmentState::kRunning &&
        std::find(leaving.begin(), leaving.end(), worker_id) != leaving.end()) {
      // Only the ranks that leave a shrinking segment see its notice.
      v.notice_reason = NoticeReason::kShrink;
      v.notice_ms = seg->second.shrink_notice_ms;
      v.deadline_ms = seg->second.shrink_deadline_ms;
    }
  }
  v.active = !w->second.released && seg != s.segments.end() && SegmentActive(seg->second.state) &&
             job != s.jobs.end() && job->second.segment_id == w->second.segment_id;
  return v;
}

Result<WorkerView> Heartbeat(ClusterState& s, int64_t worker_id, const HeartbeatReport& report,
                             TimeMs now) {
  STINT_ASSIGN_OR_RETURN(WorkerView v, ViewWorker(s, worker_id));
  if (!v.active) return v;
  Worker& w = s.workers[worker_id];
  w.last_heartbeat_ms = now;
  Segment& seg = s.segments[w.segment_id];
  seg.last_heartbeat_ms = std::max(seg.last_heartbeat_ms, now);
  Job& j = s.jobs[w.job_id];
  if (report.step > j.last_step) j.last_step = report.step;
  RecordProgress(seg, j, report, now);
  return v;
}

Status ReportCheckpoint(ClusterState& s, int64_t worker_id, int64_t step, double seconds,
                        uint64_t bytes, TimeMs now, Changes* changes,
                        std::optional<double> notice_to_replicas_seconds) {
  STINT_RETURN_IF_ERROR(CheckFinite("seconds", seconds, 0));
  if (notice_to_replicas_seconds) {
    STINT_RETURN_IF_ERROR(
        CheckFinite("notice_to_replicas_seconds", *notice_to_replicas_seconds, 0));
  }
  if (step < 0) return Status::InvalidArgument("step must be >= 0");
  STINT_ASSIGN_OR_RETURN(WorkerContext ctx, FindActiveWorker(s, worker_id));
  Job& j = *ctx.job;
  // Every rank reports the checkpoint it took part in, and a report may be
  // repeated: only a step past the newest durable one is a new checkpoint
  // (what the job's evaluations count).
  const bool new_checkpoint = step > j.checkpoint_step;
  if (step >= j.checkpoint_step) {
    j.checkpoint_step = step;
    j.checkpoint_ms = now;
  }
  if (step > j.last_step) j.last_step = step;
  // A moving average that leans on the newest measurement: a checkpoint
  // that grew slower must shift notices earlier quickly.
  j.checkpoint_seconds = 0.3 * j.checkpoint_seconds + 0.7 * seconds;
  changes->jobs.insert(j.id);
  Segment& seg = *ctx.segment;
  seg.checkpoint_step = std::max(seg.checkpoint_step, step);
  seg.checkpoint_seconds += seconds;
  if (notice_to_replicas_seconds) {
    // Safe from the notice once every rank's part is: the slowest rank.
    seg.notice_to_replicas_seconds =
        std::max(seg.notice_to_replicas_seconds, *notice_to_replicas_seconds);
  }
  changes->segments.insert(seg.id);
  if (new_checkpoint) QueueEvaluation(s, j, step, now, changes);
  return Status::OK();
}

Status ReportStored(ClusterState& s, int64_t worker_id, const std::string& location, int tier,
                    int64_t step, uint64_t bytes, TimeMs now, Changes* changes) {
  STINT_ASSIGN_OR_RETURN(std::string where, NormalizeLocation("location", location));
  if (tier != 1 && tier != 2) return Status::InvalidArgument("tier must be 1 or 2");
  if (step < 0) return Status::InvalidArgument("step must be >= 0");
  STINT_ASSIGN_OR_RETURN(WorkerContext ctx, FindActiveWorker(s, worker_id));
  Job& j = *ctx.job;
  auto old = j.stored.find(where);
  if (old != j.stored.end() && old->second.step > step) return Status::OK();
  std::string pool;
  if (!ctx.segment->allocs.empty()) {
    auto w = s.windows.find(ctx.segment->allocs.front().window_id);
    if (w != s.windows.end()) pool = w->second.pool;
  }
  j.stored[where] = StoredStep{step, tier, bytes, pool, ctx.segment->id, now};
  while (j.stored.size() > kMaxStoredLocations) {
    auto oldest = std::min_element(j.stored.begin(), j.stored.end(), [](const auto& a, const auto& b) {
      return a.second.step < b.second.step;
    });
    j.stored.erase(oldest);
  }
  changes->jobs.insert(j.id);
  return Status::OK();
}

Status ReportProgress(ClusterState& s, int64_t worker_id, int64_t step, double remaining_seconds,
                      TimeMs now, Changes* changes) {
  STINT_RETURN_IF_ERROR(CheckFinite("remaining_seconds", remaining_seconds, 0));
  STINT_ASSIGN_OR_RETURN(WorkerContext ctx, FindActiveWorker(s, worker_id));
  Job& j = *ctx.job;
  if (step > j.last_step) j.last_step = step;
  j.remaining_seconds = remaining_seconds;
  changes->jobs.insert(j.id);
  return Status::OK();
}

Status AckSegment(ClusterState& s, int64_t worker_id, int64_t step, TimeMs now, Changes* changes) {
  STINT_ASSIGN_OR_RETURN(WorkerContext ctx, FindActiveWorker(s, worker_id));
  Job& j = *ctx.job;
  if (step > j.last_step) j.last_step = step;
  if (step >= 0 && step >= j.checkpoint_step) {
    j.checkpoint_step = step;
    j.checkpoint_ms = now;
  }
  ctx.segment->checkpoint_step = std::max(ctx.segment->checkpoint_step, step);
  if (ctx.segment->notice_reason == NoticeReason::kPreempted) j.preemptions++;
  s.counters.acks++;
  changes->counters = true;
  EndSegment(s, *ctx.segment, SegmentState::kEnded, JobState::kPending, now, changes);
  return Status::OK();
}

Status FinishJob(ClusterState& s, int64_t worker_id, TimeMs now, Changes* changes) {
  STINT_ASSIGN_OR_RETURN(WorkerContext ctx, FindActiveWorker(s, worker_id));
  ctx.job->remaining_seconds = 0;
  KeepFinalSteps(*ctx.segment, *ctx.job);
  EndSegment(s, *ctx.segment, SegmentState::kCompleted, JobState::kDone, now, changes);
  return Status::OK();
}

Status ReleaseWorker(ClusterState& s, int64_t worker_id, TimeMs now, Changes* changes) {
  auto w = s.workers.find(worker_id);
  if (w == s.workers.end())
    return Status::NotFound("worker " + std::to_string(worker_id) + " is not registered");
  if (!w->second.released) {
    w->second.released = true;
    changes->workers.insert(worker_id);
  }
  return Status::OK();
}

namespace {

// The segment `segment_id` while it is active: what its workers report on.
Result<Segment*> ActiveSegment(ClusterState& s, int64_t segment_id) {
  auto it = s.segments.find(segment_id);
  if (it == s.segments.end())
    return Status::NotFound("segment " + std::to_string(segment_id) + " does not exist");
  if (!SegmentActive(it->second.state)) {
    return Status::FailedPrecondition("segment " + std::to_string(segment_id) + " already ended");
  }
  return &it->second;
}

// Records a crash of `j` now, forgetting those older than the window; true
// (and the job's message says so) when that makes crash_limit crashes in it.
bool CrashLoop(Job& j, const std::string& what, int crash_limit, TimeMs crash_window_ms,
               TimeMs now) {
  std::vector<TimeMs> recent;
  for (TimeMs t : j.crash_ms) {
    if (now - t < crash_window_ms) recent.push_back(t);
  }
  recent.push_back(now);
  j.crash_ms = std::move(recent);
  if (crash_limit <= 0 || static_cast<int>(j.crash_ms.size()) < crash_limit) return false;
  j.message = "crash loop: " + std::to_string(j.crash_ms.size()) + " crashes within " +
              std::to_string(crash_window_ms / 1000) + " s; last: " + what;
  return true;
}

}  // namespace

Status ReportSegmentExit(ClusterState& s, int64_t segment_id, int exit_code, bool all_nodes_done,
                         const std::string& message, int crash_limit, TimeMs crash_window_ms,
                         TimeMs now, Changes* changes) {
  STINT_ASSIGN_OR_RETURN(Segment* active, ActiveSegment(s, segment_id));
  Segment& seg = *active;
  auto job = s.jobs.find(seg.job_id);
  const std::string what = "workers exited " + std::to_string(exit_code) +
                           (message.empty() ? std::string() : ": " + message);
  switch (exit_code) {
    case 0:
      if (!all_nodes_done) return Status::OK();
      if (job != s.jobs.end()) {
        job->second.remaining_seconds = 0;
        KeepFinalSteps(seg, job->second);
      }
      EndSegment(s, seg, SegmentState::kCompleted, JobState::kDone, now, changes);
      break;
    case 75:  // EX_TEMPFAIL: checkpointed, run me again
      if (seg.notice_reason == NoticeReason::kPreempted && job != s.jobs.end())
        job->second.preemptions++;
      EndSegment(s, seg, SegmentState::kEnded, JobState::kPending, now, changes);
      break;
    case 76:  // EX_PROTOCOL: the job failed for good
      if (job != s.jobs.end()) job->second.message = what;
      EndSegment(s, seg, SegmentState::kEnded, JobState::kFailed, now, changes);
      break;
    default: {
      JobState next = JobState::kPending;
      if (job != s.jobs.end()) {
        job->second.message = what;
        if (CrashLoop(job->second, what, crash_limit, crash_window_ms, now)) next = JobState::kFailed;
      }
      EndSegment(s, seg, SegmentState::kLost, next, now, changes);
      break;
    }
  }
  return Status::OK();
}

Status ReportWorkerCrash(ClusterState& s, int64_t segment_id, int exit_code,
                         const std::string& message, int crash_limit, TimeMs crash_window_ms,
                         TimeMs now, Changes* changes, bool* relaunch) {
  *relaunch = false;
  STINT_ASSIGN_OR_RETURN(Segment* active, ActiveSegment(s, segment_id));
  Segment& seg = *active;
  auto job = s.jobs.find(seg.job_id);
  if (job == s.jobs.end()) return Status::OK();
  Job& j = job->second;
  const std::string what = "a worker exited " + std::to_string(exit_code) +
                           (message.empty() ? std::string() : ": " + message);
  j.message = what + " (started again)";
  changes->jobs.insert(j.id);
  if (CrashLoop(j, what, crash_limit, crash_window_ms, now)) {
    EndSegment(s, seg, SegmentState::kLost, JobState::kFailed, now, changes);
    return Status::OK();
  }
  *relaunch = true;
  return Status::OK();
}

bool FencingValid(const ClusterState& s, int64_t job_id, uint64_t token, TimeMs now,
                  TimeMs* valid_until_ms, std::string* why) {
  *valid_until_ms = kNever;
  std::string ignored;
  if (why == nullptr) why = &ignored;
  const std::string what =
      "fencing token " + std::to_string(token) + " of job " + std::to_string(job_id);
  auto job = s.jobs.find(job_id);
  if (job == s.jobs.end()) {
    *why = "job " + std::to_string(job_id) + " does not exist";
    return false;
  }
  if (token == 0) {
    *why = "fencing token 0 is never issued";
    return false;
  }
  auto seg = s.segments.find(job->second.segment_id);
  if (seg == s.segments.end() || !SegmentActive(seg->second.state)) {
    *why = what + ": the job has no active segment";
    return false;
  }
  const Segment& sg = seg->second;
  if (sg.state == SegmentState::kNotified && now >= sg.deadline_ms) {
    *why = what + ": segment " + std::to_string(sg.id) + " is past its deadline";
    return false;
  }
  // Only a worker of the active segment can hold a valid token, and it
  // registered after the segment started, so its id (same counter) is
  // larger: the scan skips every older worker.
  bool held = false;
  for (auto it = s.workers.upper_bound(sg.id); it != s.workers.end(); ++it) {
    const Worker& w = it->second;
    if (w.fencing_token != token || w.segment_id != sg.id) continue;
    held = true;
    if (w.released) {
      *why = what + ": worker " + std::to_string(w.id) + " left or was released";
      continue;
    }
    std::string dropped;
    if (!RendezvousKeeps(s, w, &dropped)) {
      *why = what + ": " + dropped;
      continue;
    }
    if (sg.state == SegmentState::kNotified) *valid_until_ms = sg.deadline_ms;
    return true;
  }
  if (!held) {
    *why = what + ": no worker of the active segment " + std::to_string(sg.id) +
           " holds it (an earlier incarnation's, or never issued)";
  }
  return false;
}

void AccountTime(ClusterState& s, TimeMs now, const PolicyConfig& config, Changes* changes) {
  Counters& c = s.counters;
  if (c.accounted_ms == 0 || now <= c.accounted_ms) {
    if (c.accounted_ms == 0) {
      c.accounted_ms = now;
      changes->counters = true;
    }
    return;
  }
  const double dt = (now - c.accounted_ms) / 1000.0;
  // Capacity offered and held over [accounted, now): windows and segments
  // are taken as they are now, which is exact when called every tick.
  int64_t offered = 0;
  for (const auto& [id, w] : s.windows) {
    if (w.open_at(c.accounted_ms)) offered += w.gpus;
  }
  std::map<std::string, int64_t> team_gpus;
  int64_t used = 0;
  for (const auto& [id, seg] : s.segments) {
    if (!SegmentActive(seg.state)) continue;
    used += seg.gpus();
    auto job = s.jobs.find(seg.job_id);
    if (job == s.jobs.end()) continue;
    team_gpus[job->second.team] += seg.gpus();
    job->second.service_gpu_seconds += seg.gpus() * dt;
  }
  c.window_gpu_seconds += offered * dt;
  c.used_gpu_seconds += used * dt;
  ChargeSegments(s, dt, now);
  c.accounted_ms = now;
  changes->counters = true;
  const double half_life = std::max(1.0, config.usage_half_life_seconds);
  for (auto& [name, t] : s.teams) {
    // Over the same interval as the counters, so usage and used_gpu_seconds agree.
    const auto g = team_gpus.find(name);
    const double gpus = g == team_gpus.end() ? 0.0 : static_cast<double>(g->second);
    t.usage_gpu_seconds = t.usage_gpu_seconds * std::exp2(-dt / half_life) + gpus * dt;
    t.usage_at_ms = now;
  }
  // Team usage and job service are soft between ticks; they are written
  // with the teams and jobs when those change, and the server flushes them
  // periodically.
}

}  // namespace stint::stintd
