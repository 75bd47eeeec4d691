// The Coordinator's node requests (stint-agent): node windows declared by
// an admin, a node's registration or join, its heartbeats (the segments it
// runs, their exits and crashes), its close, its credential, and the tick's
// closing of nodes gone silent. The rest of the Coordinator is in
// coordinator.cc.
#include "stintd/server/coordinator.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "base/strings.h"
#include "stintd/core/evals.h"
#include "stintd/server/worker_secret.h"

namespace stint::stintd {

namespace {

// The node's newest window that has not ended (nullptr: none).
const Window* NodeWindow(const ClusterState& s, const std::string& node, TimeMs now) {
  const Window* found = nullptr;
  for (const auto& [id, w] : s.windows) {
    if (w.node == node && now < w.end_ms && (found == nullptr || w.id > found->id)) found = &w;
  }
  return found;
}

const Window* NewestNodeWindow(const ClusterState& s, const std::string& node) {
  const Window* found = nullptr;
  for (const auto& [id, w] : s.windows) {
    if (w.node == node && (found == nullptr || w.id > found->id)) found = &w;
  }
  return found;
}

// A message a node reports (a worker's last line, a Slurm command's
// output) as the state keeps it: at most 4 KiB, cut on a character
// boundary, valid UTF-8, since every reply that shows the job carries it.
std::string StoredMessage(const std::string& message) { return ValidUtf8Prefix(message, 4096); }

bool ValidNodeName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (unsigned char c : name) {
    if (!(std::isalnum(c) || c == '.' || c == '_' || c == '-')) return false;
  }
  return true;
}

}  // namespace

Result<std::vector<Window>> Coordinator::AddNodeWindows(const Window& spec,
                                                        const std::vector<DeclaredNode>& nodes) {
  if (nodes.empty()) return Status::InvalidArgument("nodes must name at least one node");
  std::set<std::string> names;
  for (const DeclaredNode& n : nodes) {
    if (!ValidNodeName(n.name)) {
      return Status::InvalidArgument("node name must match [A-Za-z0-9._-]{1,128} (got \"" + n.name +
                                     "\")");
    }
    if (!names.insert(n.name).second)
      return Status::InvalidArgument("nodes names " + n.name + " twice");
    std::vector<int> sorted = n.gpus;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      return Status::InvalidArgument("node " + n.name + "'s gpus list an index twice");
    if (n.gpus.empty() && spec.gpus < 1) {
      return Status::InvalidArgument("node " + n.name +
                                     " has no GPU indices: give them, or gpus (a count per node)");
    }
  }
  std::vector<int64_t> ids;
  STINT_RETURN_IF_ERROR(Mutate([&](ClusterState& s, TimeMs now, Changes* c) -> Status {
    for (const DeclaredNode& n : nodes) {
      if (const Window* open = NodeWindow(s, n.name, now)) {
        return Status::AlreadyExists("node " + n.name + " has window " + std::to_string(open->id) +
                                     " until it ends; close it first");
      }
    }
    for (const DeclaredNode& n : nodes) {
      Window w = spec;
      w.node = n.name;
      w.node_gpus = n.gpus;
      w.gpus = n.gpus.empty() ? spec.gpus : static_cast<int>(n.gpus.size());
      w.declared = true;
      w.joined = false;
      STINT_ASSIGN_OR_RETURN(int64_t id, stintd::AddWindow(s, w, now, c));
      ids.push_back(id);
    }
    return Status::OK();
  }));
  std::vector<Window> out;
  std::shared_lock<std::shared_mutex> lock(mu_);
  for (int64_t id : ids) out.push_back(state_.windows.at(id));
  return out;
}

Result<Window> Coordinator::RegisterNode(const Window& spec, bool* created, bool join) {
  if (!ValidNodeName(spec.node)) {
    return Status::InvalidArgument("node name must match [A-Za-z0-9._-]{1,128} (got \"" +
                                   spec.node + "\")");
  }
  if (spec.node_gpus.empty()) return Status::InvalidArgument("gpus must list at least one index");
  std::vector<int> sorted = spec.node_gpus;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    return Status::InvalidArgument("gpus lists an index twice");
  int64_t id = 0;
  *created = false;
  STINT_RETURN_IF_ERROR(Mutate([&](ClusterState& s, TimeMs now, Changes* c) -> Status {
    if (join) {
      const Window* open = NodeWindow(s, spec.node, now);
      if (open == nullptr || !open->declared) {
        return Status::NotFound(
            "no admin window names node " + spec.node +
            (open != nullptr ? " (it lends window " + std::to_string(open->id) + " of its own)"
                             : "") +
            ": give --for, --until or --spot to lend it yourself");
      }
      if (open->closed_early) {
        return Status::AlreadyExists("node " + spec.node + "'s window " + std::to_string(open->id) +
                                     " is closing");
      }
      if (!spec.pool.empty() && spec.pool != open->pool) {
        return Status::AlreadyExists("node " + spec.node + "'s admin window " +
                                     std::to_string(open->id) + " is in pool " + open->pool +
                                     ", not " + spec.pool);
      }
      Window& w = s.windows.at(open->id);
      id = w.id;
      *created = !w.joined;
      if (!w.node_gpus.empty()) {
        for (int g : w.node_gpus) {
          if (std::find(spec.node_gpus.begin(), spec.node_gpus.end(), g) == spec.node_gpus.end()) {
            return Status::FailedPrecondition(
                "admin window " + std::to_string(w.id) + " lends GPU " + std::to_string(g) +
                " of node " + spec.node + ", which its agent does not list (--gpus)");
          }
        }
      } else {
        if (static_cast<int>(spec.node_gpus.size()) < w.gpus) {
          return Status::FailedPrecondition("admin window " + std::to_string(w.id) + " lends " +
                                            std::to_string(w.gpus) + " GPUs of node " + spec.node +
                                            "; its agent lists only " +
                                            std::to_string(spec.node_gpus.size()));
        }
        w.node_gpus.assign(spec.node_gpus.begin(), spec.node_gpus.begin() + w.gpus);
        // Segments placed before the GPUs were known get theirs now, in
        // start order.
        std::set<int> used;
        for (auto& [sid, seg] : s.segments) {
          if (!SegmentActive(seg.state)) continue;
          for (size_t i = 0; i < seg.placement.size() && i < seg.allocs.size(); i++) {
            Placement& p = seg.placement[i];
            if (p.window_id != w.id) continue;
            for (int g : w.node_gpus) {
              if (static_cast<int>(p.gpus.size()) >= seg.allocs[i].gpus) break;
              if (used.insert(g).second) p.gpus.push_back(g);
            }
            c->segments.insert(sid);
          }
        }
      }
      if (!w.joined || (!spec.node_addr.empty() && spec.node_addr != w.node_addr)) {
        w.joined = true;
        if (!spec.node_addr.empty()) w.node_addr = spec.node_addr;
        c->windows.insert(w.id);
      }
      return Status::OK();
    }
    if (const Window* open = NodeWindow(s, spec.node, now)) {
      if (open->declared) {
        return Status::AlreadyExists("node " + spec.node + " is covered by admin window " +
                                     std::to_string(open->id) +
                                     ": join it (stint-agent without --for, --until or --spot)");
      }
      if (open->closed_early) {
        return Status::AlreadyExists("node " + spec.node + "'s window " +
                                     std::to_string(open->id) + " is closing");
      }
      if (open->pool != spec.pool || open->node_gpus != spec.node_gpus) {
        return Status::AlreadyExists("node " + spec.node + " is registered with window " +
                                     std::to_string(open->id) + " in pool " + open->pool +
                                     " and other GPUs; close it first");
      }
      id = open->id;  // an agent restarted: the same node, the same window
      return Status::OK();
    }
    Window w = spec;
    w.gpus = static_cast<int>(spec.node_gpus.size());
    w.start_ms = now;
    STINT_ASSIGN_OR_RETURN(id, stintd::AddWindow(s, w, now, c));
    *created = true;
    return Status::OK();
  }));
  {
    std::lock_guard<std::mutex> lock(beats_mu_);
    node_beats_[id] = options_.clock();
  }
  std::shared_lock<std::shared_mutex> lock(mu_);
  return state_.windows.at(id);
}

namespace {
// Whether segment `seg` has GPUs placed on a window of `node`.
bool PlacedOnNode(const ClusterState& s, const Segment& seg, const std::string& node) {
  for (const Placement& p : seg.placement) {
    auto w = s.windows.find(p.window_id);
    if (w != s.windows.end() && w->second.node == node) return true;
  }
  return false;
}
}  // namespace

Result<Window> Coordinator::NodeHeartbeat(const std::string& node,
                                          const std::vector<int64_t>& running,
                                          const std::vector<NodeExit>& exits,
                                          const std::vector<NodeExit>& crashes) {
  Window w;
  // Only the segments placed on this node count as its workers' beat:
  // another node's report must not keep a segment alive.
  std::vector<int64_t> beating;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    const Window* newest = NewestNodeWindow(state_, node);
    if (newest == nullptr) return Status::NotFound("node " + node + " is not registered");
    w = *newest;
    for (int64_t sid : running) {
      auto seg = state_.segments.find(sid);
      if (seg != state_.segments.end() && PlacedOnNode(state_, seg->second, node))
        beating.push_back(sid);
    }
  }
  const TimeMs now = options_.clock();
  {
    std::lock_guard<std::mutex> lock(beats_mu_);
    if (now < w.end_ms) node_beats_[w.id] = now;
    for (int64_t sid : beating) segment_beats_[sid] = now;
  }
  if (!crashes.empty()) {
    STINT_RETURN_IF_ERROR(Mutate([&](ClusterState& s, TimeMs t, Changes* c) -> Status {
      std::set<int64_t> counted;
      for (const NodeExit& e : crashes) {
        auto seg = s.segments.find(e.segment_id);
        if (seg == s.segments.end() || !SegmentActive(seg->second.state)) continue;
        if (!PlacedOnNode(s, seg->second, node) || !counted.insert(e.segment_id).second) continue;
        bool relaunch = false;
        STINT_RETURN_IF_ERROR(ReportWorkerCrash(
            s, e.segment_id, e.exit_code, StoredMessage(e.message), options_.policy.crash_limit,
            SecondsToMs(options_.policy.crash_window_seconds), t, c, &relaunch));
      }
      return Status::OK();
    }));
  }
  if (!exits.empty()) {
    STINT_RETURN_IF_ERROR(Mutate([&](ClusterState& s, TimeMs t, Changes* c) -> Status {
      for (const NodeExit& e : exits) {
        auto seg = s.segments.find(e.segment_id);
        if (seg == s.segments.end() || !SegmentActive(seg->second.state)) continue;
        // Not this node's to report: ignored, not refused, so that one odd
        // report cannot stop the heartbeat that keeps the node's window.
        if (!PlacedOnNode(s, seg->second, node)) continue;
        // Workers of a node a shrink releases: whatever their exit, they
        // left; the segment goes on elsewhere and gives the GPUs up at the
        // shrink's deadline.
        bool leaving = false;
        for (const Allocation& r : seg->second.shrink_release) {
          auto rw = s.windows.find(r.window_id);
          leaving = leaving || (rw != s.windows.end() && rw->second.node == node);
        }
        if (leaving) continue;
        bool all_done = false;
        if (e.exit_code == 0) {
          std::set<int64_t>& done = exited_ok_[e.segment_id];
          for (const Placement& p : seg->second.placement) {
            auto pw = s.windows.find(p.window_id);
            if (pw != s.windows.end() && pw->second.node == node) done.insert(p.window_id);
          }
          all_done = done.size() >= seg->second.placement.size();
        }
        STINT_RETURN_IF_ERROR(ReportSegmentExit(
            s, e.segment_id, e.exit_code, all_done, StoredMessage(e.message),
            options_.policy.crash_limit, SecondsToMs(options_.policy.crash_window_seconds), t, c));
        if (!SegmentActive(seg->second.state)) exited_ok_.erase(e.segment_id);
      }
      return Status::OK();
    }));
  }
  if (now >= w.end_ms) {
    return Status::Aborted("node " + node + "'s window " + std::to_string(w.id) +
                           " has closed: register again");
  }
  return w;
}

Result<std::vector<int64_t>> Coordinator::NodeEvaluations(const std::string& node, int slots,
                                                          const std::vector<EvalExit>& exits) {
  std::vector<int64_t> run;
  // Most heartbeats have nothing to report and no evaluation to place or
  // stop: they need not take the writer's lock.
  if (exits.empty()) {
    bool active = false;
    Read([&](const ClusterState& s, const Plan&, TimeMs) {
      active = std::any_of(s.evals.begin(), s.evals.end(), [](const auto& e) {
        return e.second.state == EvalState::kPending || e.second.state == EvalState::kRunning;
      });
    });
    if (!active) return run;
  }
  STINT_RETURN_IF_ERROR(Mutate([&](ClusterState& s, TimeMs now, Changes* c) -> Status {
    for (const EvalExit& e : exits) {
      Status reported = ReportEvaluation(s, node, e.eval_id, e.exit_code, e.result,
                                         StoredMessage(e.message), now, c);
      // An evaluation gone from the state (stopped, superseded and deleted
      // while the agent ran it) is not this heartbeat's failure.
      if (!reported.ok() && reported.code() != Code::kNotFound) return reported;
    }
    const Window* open = NodeWindow(s, node, now);
    if (open != nullptr) run = PlaceEvaluations(s, *open, slots, now, c);
    return Status::OK();
  }));
  return run;
}

Result<Window> Coordinator::CloseNode(const std::string& node) {
  int64_t id = 0;
  STINT_RETURN_IF_ERROR(Mutate([&](ClusterState& s, TimeMs now, Changes* c) -> Status {
    const Window* open = NodeWindow(s, node, now);
    if (open == nullptr) {
      const Window* newest = NewestNodeWindow(s, node);
      if (newest == nullptr) return Status::NotFound("node " + node + " is not registered");
      id = newest->id;  // closed already: closing again changes nothing
      return Status::OK();
    }
    id = open->id;
    if (open->closed_early) return Status::OK();
    return stintd::CloseWindow(s, id, open->notice_lead_ms, now, c);
  }));
  std::shared_lock<std::shared_mutex> lock(mu_);
  return state_.windows.at(id);
}

void Coordinator::LabelNode(const std::string& node, const std::string& executor) {
  std::lock_guard<std::mutex> lock(labels_mu_);
  node_labels_[node] = executor;
}

Status Coordinator::LabelSegment(int64_t segment_id, const std::string& external_id) {
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto seg = state_.segments.find(segment_id);
    if (seg != state_.segments.end() && seg->second.external_id == external_id)
      return Status::OK();  // the usual case: no write
  }
  return Mutate([&](ClusterState& s, TimeMs, Changes* c) -> Status {
    auto seg = s.segments.find(segment_id);
    if (seg == s.segments.end())
      return Status::NotFound("segment " + std::to_string(segment_id) + " does not exist");
    seg->second.external_id = external_id;
    c->segments.insert(segment_id);
    return Status::OK();
  });
}

std::string Coordinator::NodeLabel(const std::string& node) const {
  std::lock_guard<std::mutex> lock(labels_mu_);
  auto it = node_labels_.find(node);
  return it == node_labels_.end() ? std::string() : it->second;
}

TimeMs Coordinator::NodeLastHeartbeat(int64_t window_id) const {
  std::lock_guard<std::mutex> lock(beats_mu_);
  auto it = node_beats_.find(window_id);
  return it == node_beats_.end() ? 0 : it->second;
}

Result<NodeCredential> Coordinator::IssueNodeToken(const std::string& name, std::string* token) {
  if (!ValidNodeName(name)) {
    return Status::InvalidArgument("node name must match [A-Za-z0-9._-]{1,128} (got \"" + name +
                                   "\")");
  }
  STINT_ASSIGN_OR_RETURN(WorkerSecret fresh, NewWorkerSecret());
  NodeCredential cred;
  STINT_RETURN_IF_ERROR(Mutate([&](ClusterState& s, TimeMs now, Changes* c) -> Status {
    cred = NodeCredential{name, fresh.hash, now};
    s.node_credentials[name] = cred;
    c->node_credentials.insert(name);
    return Status::OK();
  }));
  *token = NodeTokenFor(name, fresh.random);
  return cred;
}

Status Coordinator::RevokeNodeToken(const std::string& name) {
  return Mutate([&](ClusterState& s, TimeMs, Changes* c) -> Status {
    if (s.node_credentials.erase(name) == 0)
      return Status::NotFound("node " + name + " has no credential of its own");
    c->node_credentials.insert(name);
    return Status::OK();
  });
}

Coordinator::NodeToken Coordinator::CheckNodeToken(const std::string& name,
                                                   const std::string& random) const {
  const std::string hash = random.empty() ? std::string() : Sha256Hex(random);
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = state_.node_credentials.find(name);
  if (it == state_.node_credentials.end()) return NodeToken::kNoCredential;
  return !hash.empty() && ConstantTimeEqual(it->second.secret_hash, hash) ? NodeToken::kMatch
                                                                          : NodeToken::kMismatch;
}

bool Coordinator::CloseSilentNodes(TimeMs now, Changes* changes) {
  const TimeMs ttl = SecondsToMs(options_.node_ttl_seconds);
  bool closed = false;
  std::lock_guard<std::mutex> lock(beats_mu_);
  for (auto& [id, w] : state_.windows) {
    if (w.node.empty() || w.closed_early || now >= w.end_ms || now < w.start_ms) continue;
    auto [beat, fresh] = node_beats_.emplace(id, now);
    if (fresh || now - beat->second < ttl) continue;
    std::fprintf(stderr, "stintd: node %s silent for %.1f s: closing its window %lld\n",
                 w.node.c_str(), double(now - beat->second) / 1000, static_cast<long long>(id));
    if (stintd::CloseWindow(state_, id, w.notice_lead_ms, now, changes).ok()) closed = true;
  }
  return closed;
}

}  // namespace stint::stintd
