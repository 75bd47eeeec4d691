#include "stintd/server/authorization.h"

#include <httplib.h>

#include "stintd/server/json_model.h"
#include "stintd/server/request_params.h"
#include "stintd/server/worker_secret.h"

namespace stint::stintd {
namespace {

// What a worker secret (parsed by ParseWorkerSecret) says: whether it is
// the current secret of worker `owner`, that worker's job, whether it is
// still active, and the job of worker `target` (0: none or unknown).
struct SecretHolder {
  bool known = false;
  bool active = false;
  int64_t job = 0;
  int64_t target_job = 0;
};

SecretHolder LookUpSecret(Coordinator* c, int64_t owner, const std::string& random,
                          int64_t target = 0) {
  // Hashed before the lock; compared in constant time.
  const std::string hash = Sha256Hex(random);
  SecretHolder h;
  c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
    auto w = s.workers.find(owner);
    if (w == s.workers.end() || w->second.secret_hash.empty()) return;
    h.known = ConstantTimeEqual(w->second.secret_hash, hash);
    if (!h.known) return;
    h.job = w->second.job_id;
    Result<WorkerView> v = ViewWorker(s, owner);
    h.active = v.ok() && v->active;
    auto t = s.workers.find(target);
    if (t != s.workers.end()) h.target_job = t->second.job_id;
  });
  return h;
}

Reply FencedSecretReply(int64_t owner) {
  return GoneReply("worker " + std::to_string(owner) +
                   " is fenced (it left, or its segment ended): its secret is dead");
}

// The node a node-endpoint request acts for: the path's name, or for
// registration the body's "name", or for a worker registration the body's
// "node". nullopt: the request names no node (not a node endpoint).
std::optional<std::string> NodeActedFor(const std::string& pattern, const httplib::Request& req) {
  if (pattern.rfind("/v1/nodes/(", 0) == 0 && req.matches.size() > 1) return req.matches[1];
  const char* field = pattern == "/v1/nodes"                   ? "name"
                      : pattern == R"(/v1/jobs/(\d+)/workers)" ? "node"
                                                               : nullptr;
  if (field == nullptr || req.method != "POST") return std::nullopt;
  const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  const json v = body.is_object() ? body.value(field, json()) : json();
  return v.is_string() ? v.get<std::string>() : std::string();
}

// The right each Access needs of the bearer token itself; kNone: the
// route's own rule (OwnWorker, JobScoped, Registration) decides.
Right NeededRight(Access access) {
  switch (access) {
    case Access::kRead:
      return Right::kWorker;
    case Access::kAdmin:
      return Right::kAdmin;
    case Access::kAgent:
      return Right::kAgent;
    default:
      return Right::kNone;
  }
}

}  // namespace

bool Allows(Right have, Right need) {
  if (need == Right::kNone || have == Right::kAdmin) return true;
  if (need == Right::kWorker) return have == Right::kWorker || have == Right::kAgent;
  return have == need;
}

std::optional<Reply> Authorization::Route(Access access, const std::string& pattern,
                                          const httplib::Request& req) const {
  const Right need = NeededRight(access);
  bool node_token = false;
  if (std::optional<Reply> refused = NodeCaller(pattern, need, req, &node_token)) return refused;
  const Right have = need == Right::kNone ? Right::kNone
                     : node_token         ? Right::kAgent
                                          : auth_.Check(req.get_header_value("Authorization"));
  if (need != Right::kNone && have == Right::kNone)
    return ErrorReply(Status::Unauthenticated("missing or unknown bearer token"));
  if (!Allows(have, need)) {
    return ErrorReply(Status::PermissionDenied(need == Right::kAgent
                                                   ? "this endpoint needs an agent token"
                                                   : "this endpoint needs an admin token"));
  }
  if (access == Access::kOwnWorker) return OwnWorker(req);
  return std::nullopt;
}

std::optional<Reply> Authorization::OwnWorker(const httplib::Request& req) const {
  const std::string header = req.get_header_value("Authorization");
  const Right right = auth_.Check(header);
  if (right == Right::kAdmin) return std::nullopt;
  Result<int64_t> wid = PathId(req, 1, "worker");
  if (!wid.ok()) return ErrorReply(wid.status());
  const std::string token = BearerToken(header);
  int64_t owner = 0;
  std::string random;
  if (right == Right::kNone && ParseWorkerSecret(token, &owner, &random)) {
    const SecretHolder h = LookUpSecret(coordinator_, owner, random, *wid);
    if (!h.known) return ErrorReply(Status::Unauthenticated("unknown or revoked worker secret"));
    if (owner != *wid) {
      std::string whose =
          "worker " + std::to_string(owner) + " (job " + std::to_string(h.job) + ")";
      std::string target = "worker " + std::to_string(*wid);
      if (h.target_job != 0) target += " (job " + std::to_string(h.target_job) + ")";
      return ErrorReply(Status::PermissionDenied("the secret of " + whose +
                                                 " cannot act for " + target));
    }
    if (!h.active) return FencedSecretReply(owner);
    return std::nullopt;
  }
  if (right == Right::kWorker || right == Right::kAgent) {
    bool legacy = false;
    coordinator_->Read([&](const ClusterState& s, const Plan&, TimeMs) {
      auto w = s.workers.find(*wid);
      legacy = right == Right::kWorker && w != s.workers.end() && w->second.secret_hash.empty();
    });
    if (legacy) return std::nullopt;
    return ErrorReply(Status::PermissionDenied(
        "/v1/workers/" + std::to_string(*wid) +
        "/* needs that worker's own secret (worker_secret from its registration); the shared "
        "worker token only registers and reads"));
  }
  return ErrorReply(Status::Unauthenticated("missing or unknown bearer token"));
}

// A job or segment token (auth.h) acting on job `job`: a job token for
// that job; a segment token while its segment is the job's active one and
// placed on its node.
std::optional<Reply> Authorization::Scoped(const ScopedToken& t, int64_t job) const {
  if (t.segment == 0) {
    if (t.job == job) return std::nullopt;
    return ErrorReply(Status::PermissionDenied("the registration token of job " +
                                               std::to_string(t.job) + " cannot act for job " +
                                               std::to_string(job)));
  }
  int64_t seg_job = 0;
  bool current = false, placed = false;
  coordinator_->Read([&](const ClusterState& s, const Plan&, TimeMs) {
    auto seg = s.segments.find(t.segment);
    if (seg == s.segments.end()) return;
    seg_job = seg->second.job_id;
    auto j = s.jobs.find(seg_job);
    current = j != s.jobs.end() && j->second.segment_id == t.segment &&
              SegmentActive(seg->second.state);
    for (const Placement& p : seg->second.placement) {
      auto w = s.windows.find(p.window_id);
      placed = placed || (w != s.windows.end() && w->second.node == t.node);
    }
  });
  const std::string whose = "the registration token of segment " + std::to_string(t.segment) +
                            " (job " + std::to_string(seg_job) + ") on node " + t.node;
  if (seg_job != job)
    return ErrorReply(Status::PermissionDenied(whose + " cannot act for job " + std::to_string(job)));
  if (!current || !placed)
    return GoneReply(whose + " is dead: that segment ended or left the node");
  return std::nullopt;
}

std::optional<Reply> Authorization::JobScoped(const httplib::Request& req, int64_t job) const {
  const std::string header = req.get_header_value("Authorization");
  const Right right = auth_.Check(header);
  if (right == Right::kAdmin) return std::nullopt;
  if (right == Right::kAgent) {
    return ErrorReply(Status::PermissionDenied(
        "an agent token does not reach job " + std::to_string(job) +
        "'s KV or fencing check: the workers stint-agent launches use their own secret "
        "(STINT_WORKER_SECRET)"));
  }
  if (right == Right::kWorker) {
    bool legacy = false;
    coordinator_->Read([&](const ClusterState& s, const Plan&, TimeMs) {
      auto j = s.jobs.find(job);
      if (j == s.jobs.end() || j->second.segment_id == 0) return;
      for (const auto& [wid, w] : s.workers) {
        legacy = legacy || (w.segment_id == j->second.segment_id && !w.released &&
                            w.secret_hash.empty());
      }
    });
    if (legacy) return std::nullopt;
    return ErrorReply(Status::PermissionDenied(
        "the shared worker token only registers workers and reads: job " + std::to_string(job) +
        "'s KV and fencing check take the job's own credential (a worker's secret, or the job's "
        "registration_token)"));
  }
  if (ScopedToken scoped; auth_.CheckScoped(header, &scoped)) return Scoped(scoped, job);
  int64_t owner = 0;
  std::string random;
  if (right != Right::kNone || !ParseWorkerSecret(BearerToken(header), &owner, &random))
    return ErrorReply(Status::Unauthenticated("missing or unknown bearer token"));
  const SecretHolder h = LookUpSecret(coordinator_, owner, random);
  if (!h.known) return ErrorReply(Status::Unauthenticated("unknown or revoked worker secret"));
  if (h.job != job) {
    return ErrorReply(Status::PermissionDenied("the secret of worker " + std::to_string(owner) +
                                               " (job " + std::to_string(h.job) +
                                               ") cannot act for job " + std::to_string(job)));
  }
  if (!h.active) return FencedSecretReply(owner);
  return std::nullopt;
}

std::optional<Reply> Authorization::Registration(const httplib::Request& req, int64_t job,
                                                 std::optional<std::string>* node) const {
  const std::string header = req.get_header_value("Authorization");
  const Right right = auth_.Check(header);
  if (right == Right::kAdmin || right == Right::kWorker) return std::nullopt;
  std::string own, random;
  if (right == Right::kAgent || ParseNodeToken(BearerToken(header), &own, &random)) {
    // An agent registers workers only where it launches them: the job's
    // active segment must be placed on the node it names.
    if (!*node) {
      return ErrorReply(Status::PermissionDenied(
          "an agent token registers workers only for a node it names (\"node\")"));
    }
    return std::nullopt;
  }
  if (ScopedToken scoped; auth_.CheckScoped(header, &scoped)) {
    if (std::optional<Reply> refused = Scoped(scoped, job)) return refused;
    if (scoped.segment != 0) {
      if (*node && **node != scoped.node) {
        return ErrorReply(Status::PermissionDenied("the registration token of node " +
                                                   scoped.node + " cannot register on node " +
                                                   **node));
      }
      *node = scoped.node;
    }
    return std::nullopt;
  }
  int64_t owner = 0;
  if (ParseWorkerSecret(BearerToken(header), &owner, &random) &&
      LookUpSecret(coordinator_, owner, random).known) {
    return ErrorReply(Status::PermissionDenied(
        "a worker secret does not register workers (worker " + std::to_string(owner) +
        "): registering takes the job's registration_token, or a worker or agent token"));
  }
  return ErrorReply(Status::Unauthenticated("missing or unknown bearer token"));
}

JobReader Authorization::Reader(const httplib::Request& req) const {
  const std::string header = req.get_header_value("Authorization");
  JobReader r;
  std::string random;
  const Right right = auth_.Check(header);
  r.admin = right == Right::kAdmin;
  r.agent = right == Right::kAgent || ParseNodeToken(BearerToken(header), &r.node, &random);
  return r;
}

bool SeesJob(const ClusterState& s, const JobReader& r, int64_t job) {
  return SeenJobs(s, r).Has(job);
}

SeenJobs::SeenJobs(const ClusterState& s, const JobReader& r) : all_(!r.agent) {
  if (all_) return;
  for (const auto& [sid, seg] : s.segments) {
    if (!SegmentActive(seg.state)) continue;
    for (const Placement& p : seg.placement) {
      auto w = s.windows.find(p.window_id);
      if (w == s.windows.end() || w->second.node.empty()) continue;
      if (r.node.empty() ? s.node_credentials.count(w->second.node) == 0 : w->second.node == r.node)
        jobs_.insert(seg.job_id);
    }
  }
}

json JobJsonFor(const JobReader& r, const Job& job) {
  json j = ToJson(job);
  if (r.admin) return j;
  for (const char* spec : {"launch", "eval"}) {
    if (j.contains(spec) && j[spec].is_object()) j[spec].erase("env");
  }
  return j;
}

Reply UnseenJobReply(int64_t job) {
  return ErrorReply(Status::PermissionDenied(
      "job " + std::to_string(job) + " has no active segment on this agent's node"));
}

// Node credentials (API.md, "Credentials"): a node's own token ("stn1.")
// acts only as that node's agent: its node endpoints, registering workers
// on it, and reads; the shared agent token cannot act for a node that has
// a credential of its own. `*node_token` says whether the caller holds a
// node token (its right is then the agent's).
std::optional<Reply> Authorization::NodeCaller(const std::string& pattern, Right need,
                                               const httplib::Request& req,
                                               bool* node_token) const {
  *node_token = false;
  const std::string header = req.get_header_value("Authorization");
  std::string own, random;
  if (ParseNodeToken(BearerToken(header), &own, &random)) {
    if (coordinator_->CheckNodeToken(own, random) != Coordinator::NodeToken::kMatch)
      return ErrorReply(Status::Unauthenticated("unknown or revoked node token"));
    *node_token = true;
    const std::optional<std::string> acted = NodeActedFor(pattern, req);
    const bool read = req.method == "GET" && need == Right::kWorker;
    if (!acted && !read) {
      return ErrorReply(Status::PermissionDenied(
          "the token of node " + own +
          " acts only as that node's agent (its node endpoints, registering workers on it, "
          "reads)"));
    }
    if (acted && *acted != own) {
      return ErrorReply(Status::PermissionDenied("the token of node " + own +
                                                 " cannot act for node \"" + *acted + "\""));
    }
    return std::nullopt;
  }
  if (auth_.Check(header) != Right::kAgent) return std::nullopt;
  const std::optional<std::string> acted = NodeActedFor(pattern, req);
  if (acted && !acted->empty() &&
      coordinator_->CheckNodeToken(*acted, "") != Coordinator::NodeToken::kNoCredential) {
    return ErrorReply(Status::PermissionDenied(
        "node " + *acted +
        " has a credential of its own: the shared agent token cannot act for it"));
  }
  return std::nullopt;
}

}  // namespace stint::stintd
