#include "stintd/core/rendezvous.h"

#include <algorithm>

namespace stint::stintd {
namespace {

struct Limits {
  int min = 1;
  int max = 1;
};

// min: the job's minimum gang; max: the GPUs its running segment holds.
Limits LimitsOf(const ClusterState& s, int64_t job_id) {
  Limits l;
  auto job = s.jobs.find(job_id);
  if (job == s.jobs.end()) return l;
  l.min = std::max(1, job->second.min_gpus);
  l.max = std::max(l.min, job->second.max_gpus);
  auto seg = s.segments.find(job->second.segment_id);
  if (seg != s.segments.end() && SegmentActive(seg->second.state))
    l.max = std::max(l.min, seg->second.gpus());
  return l;
}

bool Contains(const std::vector<int64_t>& ids, int64_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

int MemberIndex(const Rendezvous& r, int64_t worker_id) {
  for (size_t i = 0; i < r.members.size(); ++i) {
    if (r.members[i].worker_id == worker_id) return static_cast<int>(i);
  }
  return -1;
}

// The formed generation is over: the next round opens with nobody in it.
void OpenRound(Rendezvous& r, TimeMs now) {
  if (r.phase == RendezvousPhase::kFormed) {
    r.previous.clear();
    for (const RendezvousMember& m : r.members) r.previous.push_back(m.worker_id);
  }
  r.generation++;
  r.phase = RendezvousPhase::kJoining;
  r.members.clear();
  r.dropped.clear();
  r.opened_ms = now;
  r.last_call_ms = 0;
  r.formed_ms = 0;
}

void Form(Rendezvous& r, TimeMs now) {
  auto old_rank = [&](int64_t worker_id) {
    auto it = std::find(r.previous.begin(), r.previous.end(), worker_id);
    return it == r.previous.end() ? r.previous.size()
                                  : static_cast<size_t>(it - r.previous.begin());
  };
  // Stable: new workers (all "after the previous generation") keep join order.
  std::stable_sort(r.members.begin(), r.members.end(),
                   [&](const RendezvousMember& a, const RendezvousMember& b) {
                     return old_rank(a.worker_id) < old_rank(b.worker_id);
                   });
  for (size_t i = 0; i < r.members.size(); ++i) r.members[i].rank = static_cast<int>(i);
  r.phase = RendezvousPhase::kFormed;
  r.formed_ms = now;
  r.last_call_ms = 0;
  // Membership alone decides now: whoever of `previous` is not a member is
  // stale anyway.
  r.dropped.clear();
}

// Closes an open round that is full, or has min workers and its last call passed.
void MaybeClose(Rendezvous& r, const Limits& l, TimeMs now, const PolicyConfig& config) {
  if (r.phase != RendezvousPhase::kJoining) return;
  const int n = static_cast<int>(r.members.size());
  if (n < l.min) {
    r.last_call_ms = 0;
    return;
  }
  if (n >= l.max) {
    Form(r, now);
    return;
  }
  if (r.last_call_ms == 0) r.last_call_ms = now + SecondsToMs(config.rendezvous_last_call_seconds);
  if (now >= r.last_call_ms) Form(r, now);
}

RendezvousView MakeView(const Rendezvous& r, const Limits& l, int64_t worker_id) {
  RendezvousView v;
  v.job_id = r.job_id;
  v.generation = r.generation;
  v.phase = r.phase;
  v.min_workers = l.min;
  v.max_workers = l.max;
  v.members = r.members;
  v.previous = r.previous;
  v.last_call_ms = r.last_call_ms;
  v.formed_ms = r.formed_ms;
  v.world_size = static_cast<int>(r.members.size());
  const int i = MemberIndex(r, worker_id);
  v.member = i >= 0;
  if (r.phase == RendezvousPhase::kFormed) {
    if (v.member) v.rank = r.members[i].rank;
    if (!r.members.empty()) v.master_endpoint = r.members[0].endpoint;
    v.standby = !v.member && v.world_size >= l.max;
  }
  return v;
}

bool Changed(const Rendezvous& a, const Rendezvous& b) {
  if (a.generation != b.generation || a.phase != b.phase || a.last_call_ms != b.last_call_ms ||
      a.members.size() != b.members.size() || a.dropped != b.dropped) {
    return true;
  }
  for (size_t i = 0; i < a.members.size(); ++i) {
    if (a.members[i].worker_id != b.members[i].worker_id ||
        a.members[i].endpoint != b.members[i].endpoint)
      return true;
  }
  return false;
}

bool WorkerGone(const ClusterState& s, int64_t worker_id, TimeMs now, TimeMs ttl) {
  auto w = s.workers.find(worker_id);
  if (w == s.workers.end()) return true;
  Result<WorkerView> v = ViewWorker(s, worker_id);
  return !v.ok() || !v->active || now - w->second.last_heartbeat_ms > ttl;
}

bool MemberGone(const ClusterState& s, const RendezvousMember& m, TimeMs now, TimeMs ttl) {
  return WorkerGone(s, m.worker_id, now, ttl);
}

// While a round is open the previous generation's workers keep their tokens
// (a grow or a failure report must not fence a survivor in the middle of a
// save), except those gone since: they are dropped for good, which a later
// return does not undo until a generation forms with them.
void DropGonePrevious(const ClusterState& s, Rendezvous& r, TimeMs now, TimeMs ttl) {
  if (r.phase != RendezvousPhase::kJoining) return;
  for (int64_t id : r.previous) {
    if (!Contains(r.dropped, id) && WorkerGone(s, id, now, ttl)) r.dropped.push_back(id);
  }
}

// True when a worker of `segment_id` is in the round, the group or the
// generation before: the rendezvous then governs that segment's fencing.
bool SegmentTookPart(const ClusterState& s, const Rendezvous& r, int64_t segment_id) {
  auto of_segment = [&](int64_t worker_id) {
    auto w = s.workers.find(worker_id);
    return w != s.workers.end() && w->second.segment_id == segment_id;
  };
  return std::any_of(r.members.begin(), r.members.end(),
                     [&](const RendezvousMember& m) { return of_segment(m.worker_id); }) ||
         std::any_of(r.previous.begin(), r.previous.end(), of_segment);
}

}  // namespace

Result<RendezvousView> JoinRendezvous(ClusterState& s, int64_t worker_id,
                                      const std::string& endpoint, uint64_t known_generation,
                                      TimeMs now, const PolicyConfig& config, Changes* changes) {
  if (endpoint.empty() || endpoint.size() > 256 || endpoint.find(':') == std::string::npos) {
    return Status::InvalidArgument("endpoint must be host:port, 1 to 256 characters (got \"" +
                                   endpoint + "\")");
  }
  STINT_ASSIGN_OR_RETURN(WorkerView wv, ViewWorker(s, worker_id));
  if (!wv.active) {
    return Status::Aborted("worker " + std::to_string(worker_id) + " is fenced: segment " +
                           std::to_string(wv.segment_id) +
                           " is no longer active; it cannot join the rendezvous");
  }
  const int64_t job_id = s.workers.at(worker_id).job_id;
  const Limits l = LimitsOf(s, job_id);
  Rendezvous& r = s.rendezvous[job_id];
  const Rendezvous before = r;
  if (r.generation == 0) {
    r.job_id = job_id;
    OpenRound(r, now);
  }
  int i = MemberIndex(r, worker_id);
  if (r.phase == RendezvousPhase::kFormed) {
    const bool answered = i >= 0 && r.generation > known_generation;
    const bool full = i < 0 && static_cast<int>(r.members.size()) >= l.max;
    if (!answered && !full) {
      OpenRound(r, now);
      i = -1;
    }
  }
  if (r.phase == RendezvousPhase::kJoining) {
    if (i < 0) {
      r.members.push_back(RendezvousMember{worker_id, endpoint, -1});
    } else {
      r.members[i].endpoint = endpoint;
    }
    MaybeClose(r, l, now, config);
  }
  if (Changed(before, r)) changes->rendezvous.insert(job_id);
  return MakeView(r, l, worker_id);
}

Result<RendezvousView> ViewRendezvous(const ClusterState& s, int64_t worker_id) {
  auto w = s.workers.find(worker_id);
  if (w == s.workers.end())
    return Status::NotFound("worker " + std::to_string(worker_id) + " is not registered");
  const int64_t job_id = w->second.job_id;
  const Limits l = LimitsOf(s, job_id);
  auto r = s.rendezvous.find(job_id);
  if (r == s.rendezvous.end()) {
    Rendezvous none;
    none.job_id = job_id;
    return MakeView(none, l, worker_id);
  }
  return MakeView(r->second, l, worker_id);
}

void AdvanceRendezvous(ClusterState& s, TimeMs now, const PolicyConfig& config, Changes* changes) {
  const TimeMs ttl = SecondsToMs(config.lease_ttl_seconds);
  for (auto& [job_id, r] : s.rendezvous) {
    const Rendezvous before = r;
    const bool lost_member =
        std::any_of(r.members.begin(), r.members.end(),
                    [&](const RendezvousMember& m) { return MemberGone(s, m, now, ttl); });
    if (lost_member && r.phase == RendezvousPhase::kFormed) {
      OpenRound(r, now);
    } else if (lost_member) {
      r.members.erase(
          std::remove_if(r.members.begin(), r.members.end(),
                         [&](const RendezvousMember& m) { return MemberGone(s, m, now, ttl); }),
          r.members.end());
    }
    DropGonePrevious(s, r, now, ttl);
    MaybeClose(r, LimitsOf(s, job_id), now, config);
    if (Changed(before, r)) changes->rendezvous.insert(job_id);
  }
}

bool RendezvousKeeps(const ClusterState& s, const Worker& w, std::string* why) {
  auto it = s.rendezvous.find(w.job_id);
  if (it == s.rendezvous.end()) return true;
  const Rendezvous& r = it->second;
  if (!SegmentTookPart(s, r, w.segment_id)) return true;
  std::string reason;
  if (r.phase == RendezvousPhase::kFormed) {
    if (MemberIndex(r, w.id) >= 0) return true;
    reason = "is not a member of rendezvous generation " + std::to_string(r.generation) +
             " (a standby, or left out when it formed)";
  } else if (Contains(r.previous, w.id)) {
    if (!Contains(r.dropped, w.id)) return true;
    reason = "was dropped from rendezvous generation " + std::to_string(r.generation - 1) +
             " (lease expired, or it left)";
  } else {
    // A standby or a newcomer: it holds none of the group's state yet.
    reason = "is not yet a member of a formed rendezvous generation (round " +
             std::to_string(r.generation) + " is open)";
  }
  if (why != nullptr) *why = "worker " + std::to_string(w.id) + " " + reason;
  return false;
}

TimeMs NextRendezvousDeadline(const ClusterState& s) {
  TimeMs next = kNever;
  for (const auto& [job_id, r] : s.rendezvous) {
    if (r.phase == RendezvousPhase::kJoining && r.last_call_ms != 0)
      next = std::min(next, r.last_call_ms);
  }
  return next;
}

}  // namespace stint::stintd
