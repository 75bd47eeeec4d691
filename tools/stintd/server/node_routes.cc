// The node routes (API.md, "Nodes"): stint-agent registers its node, then
// heartbeats it; the heartbeat reports the node's running and exited
// segments and the workers' output, and answers (a long poll) what the
// node's agent runs: its assignments, the agent protocol. An admin issues
// and revokes a node's own token.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/launch_spec.h"
#include "stintd/core/evals.h"
#include "stintd/server/json_model.h"
#include "stintd/server/request_params.h"
#include "stintd/server/routes.h"

namespace stint::stintd {
namespace {

// What a node's agent runs (API.md, "Launching"): each active segment with
// GPUs on `window`, with its ranks and the job's launch spec.
// `placed`: the active segments placed on the window (PlacementIndex).
// A torchrun launch also gets the segment's registration token for this
// node (auth.h), with which the launcher reaches the job's KV and each of
// its ranks registers itself.
json Assignments(const ClusterState& s, const Window& window, const std::set<int64_t>& placed,
                 const TokenAuth& auth) {
  json out = json::array();
  for (int64_t sid : placed) {
    auto seg_it = s.segments.find(sid);
    if (seg_it == s.segments.end()) continue;
    const Segment& seg = seg_it->second;
    if (!SegmentActive(seg.state) || seg.placement.empty()) continue;
    auto job = s.jobs.find(seg.job_id);
    if (job == s.jobs.end() || job->second.launch.empty()) continue;
    const json launch = json::parse(job->second.launch, nullptr, /*allow_exceptions=*/false);
    const Result<tools::LaunchSpec> spec = tools::LaunchSpec::FromJson(launch);
    if (!spec.ok()) continue;
    const int gpw = spec->GpusPerWorker();
    int world = 0, rank_base = -1;
    std::vector<int> gpus;
    std::string master;
    for (const Placement& p : seg.placement) {
      auto w = s.windows.find(p.window_id);
      if (master.empty() && w != s.windows.end()) {
        master = w->second.node_addr.empty() ? w->second.node : w->second.node_addr;
      }
      if (p.window_id == window.id) {
        rank_base = world;
        gpus = p.gpus;
      }
      world += static_cast<int>(p.gpus.size()) / gpw;
    }
    if (rank_base < 0) continue;
    json a = {{"segment_id", sid},
              {"job_id", seg.job_id},
              {"job_name", job->second.name},
              {"state", SegmentStateName(seg.state)},
              {"fencing_token", seg.fencing_token},
              {"gpus", gpus},
              {"rank_base", rank_base},
              {"world_size", world},
              {"nodes", seg.placement.size()},
              {"master_addr", master},
              // Chosen when the segment started (ChooseMasterPort); a
              // segment started before that keeps the port it was given.
              {"master_port", seg.master_port != 0 ? seg.master_port : 20000 + sid % 20000},
              {"launch", launch},
              {"notice", nullptr}};
    if (spec->ThroughTorchrun()) a["registration_token"] = auth.SegmentToken(sid, window.node);
    if (seg.state == SegmentState::kNotified) {
      a["notice"] = {{"reason", NoticeReasonName(seg.notice_reason)},
                     {"deadline_ms", seg.deadline_ms},
                     {"notice_ms", seg.notice_ms}};
    } else if (seg.shrink_deadline_ms != 0) {
      // A shrink giving up GPUs here: the notice names the ones that leave
      // (the node's highest local ranks); the others run on.
      int leaving = 0;
      for (const Allocation& r : seg.shrink_release)
        leaving += r.window_id == window.id ? r.gpus : 0;
      leaving = std::min(leaving, static_cast<int>(gpus.size()));
      if (leaving > 0) {
        a["notice"] = {{"reason", NoticeReasonName(NoticeReason::kShrink)},
                       {"deadline_ms", seg.shrink_deadline_ms},
                       {"notice_ms", seg.shrink_notice_ms},
                       {"gpus", std::vector<int>(gpus.end() - leaving, gpus.end())}};
      }
    }
    out.push_back(std::move(a));
  }
  return out;
}

// POST /v1/nodes: an agent registers its node (or joins the admin window
// naming it).
void AddNodeRegistrationRoute(Routes* routes) {
  Coordinator* c = routes->coordinator();
  routes->Add(Method::kPost, "/v1/nodes", Access::kAgent, [c](const httplib::Request& req) {
    RequestBody b =
        STINT_HTTP_TRY(RequestBody::Parse(req.body, {"name", "pool", "gpus", "end_ms", "kind",
                                                     "notice_lead_seconds", "addr", "join"}));
    Window spec;
    spec.node = STINT_HTTP_TRY(b.String("name"));
    spec.node_addr = STINT_HTTP_TRY(b.OptionalString("addr")).value_or("");
    if (spec.node_addr.size() > 255) return ErrorReply(Status::InvalidArgument("addr is too long"));
    // "join": the node joins the admin window naming it; it lends none of
    // its own, so pool is optional and end, kind and lead are refused.
    const bool join = STINT_HTTP_TRY(b.OptionalBool("join")).value_or(false);
    if (join && (b.Find("end_ms") || b.Find("kind") || b.Find("notice_lead_seconds"))) {
      return ErrorReply(Status::InvalidArgument(
          "join takes the admin window's end, kind and lead: give none of end_ms, kind, "
          "notice_lead_seconds"));
    }
    spec.pool = join ? STINT_HTTP_TRY(b.OptionalString("pool")).value_or("")
                     : STINT_HTTP_TRY(b.String("pool"));
    const json* gpus = STINT_HTTP_TRY(b.Array("gpus"));
    for (const json& g : *gpus) {
      if (!g.is_number_integer() || g.get<int64_t>() < 0 || g.get<int64_t>() > 1000000)
        return ErrorReply(Status::InvalidArgument("gpus must be an array of GPU indices >= 0"));
      spec.node_gpus.push_back(g.get<int>());
    }
    std::optional<int64_t> end = STINT_HTTP_TRY(b.OptionalInt64("end_ms"));
    std::optional<std::string> kind = STINT_HTTP_TRY(b.OptionalString("kind"));
    std::optional<double> lead = STINT_HTTP_TRY(b.OptionalNumber("notice_lead_seconds"));
    spec.end_ms = end.value_or(kNever);
    if (kind) spec.kind = STINT_HTTP_TRY(ParseWindowKind(*kind));
    if (lead && !(*lead >= 0 && *lead < 1e9))
      return ErrorReply(Status::InvalidArgument("notice_lead_seconds must be >= 0"));
    spec.notice_lead_ms = lead ? SecondsToMs(*lead) : 0;
    bool created = false;
    Window w = STINT_HTTP_TRY(c->RegisterNode(spec, &created, join));
    Reply r{created ? 201 : 200, {}, {}, {}};
    c->Read([&](const ClusterState& s, const Plan&, TimeMs now) {
      r.body = {{"name", w.node}, {"window", ToJson(s, w, now)}};
    });
    return r;
  });
}

// A node's own credential (API.md, "Credentials"): issued (or replaced)
// by an admin, shown once; or revoked.
void AddNodeTokenRoutes(Routes* routes) {
  Coordinator* c = routes->coordinator();
  routes->Add(
      Method::kPost, R"(/v1/nodes/([A-Za-z0-9._-]+)/token)", Access::kAdmin,
      [c](const httplib::Request& req) {
        STINT_HTTP_TRY(RequestBody::Parse(req.body.empty() ? "{}" : req.body, {}));
        std::string token;
        NodeCredential n = STINT_HTTP_TRY(c->IssueNodeToken(req.matches[1], &token));
        return Reply{201, {{"name", n.name}, {"token", token}, {"issued_ms", n.issued_ms}}, {}, {}};
      });
  routes->Add(Method::kDelete, R"(/v1/nodes/([A-Za-z0-9._-]+)/token)", Access::kAdmin,
              [c](const httplib::Request& req) {
                Status s = c->RevokeNodeToken(req.matches[1]);
                return s.ok() ? Reply{200, {{"ok", true}}, {}, {}} : ErrorReply(s);
              });
}

// GET /v1/nodes: each node once, with its newest window and what runs on it.
void AddNodeListRoute(Routes* routes) {
  Coordinator* c = routes->coordinator();
  const Authorization* authz = routes->authorization();
  routes->Add(Method::kGet, "/v1/nodes", Access::kRead, [c, authz](const httplib::Request& req) {
    const JobReader reader = authz->Reader(req);
    // Each node once, with its newest window.
    json nodes = json::array();
    c->Read([&](const ClusterState& s, const Plan&, TimeMs now) {
      const SeenJobs seen(s, reader);
      std::map<std::string, const Window*> newest;
      for (const auto& [id, w] : s.windows) {
        if (w.node.empty()) continue;
        const Window*& n = newest[w.node];
        if (n == nullptr || w.id > n->id) n = &w;
      }
      for (const auto& [name, w] : newest) {
        const TimeMs beat = c->NodeLastHeartbeat(w->id);
        // The active segments placed on it: the workers it runs.
        json running = json::array();
        for (const auto& [sid, seg] : s.segments) {
          if (!SegmentActive(seg.state)) continue;
          for (const Placement& p : seg.placement) {
            if (p.window_id != w->id) continue;
            // An agent sees the GPUs other nodes' segments hold, not whose.
            json entry = {{"segment_id", sid}, {"gpus", p.gpus}};
            if (seen.Has(seg.job_id)) {
              auto job = s.jobs.find(seg.job_id);
              entry["job_id"] = seg.job_id;
              entry["job_name"] = job != s.jobs.end() ? job->second.name : "";
            }
            if (!seg.external_id.empty()) entry["external_id"] = seg.external_id;
            running.push_back(entry);
          }
        }
        const std::string executor = c->NodeLabel(name);
        nodes.push_back({{"name", name},
                         {"executor", executor.empty() ? "stint-agent" : executor},
                         {"own_token", s.node_credentials.count(name) > 0},
                         {"pool", w->pool},
                         {"gpus", w->node_gpus},
                         {"open", w->open_at(now)},
                         {"last_heartbeat_ms", beat == 0 ? json(nullptr) : json(beat)},
                         {"window", ToJson(s, *w, now)},
                         {"running", running}});
      }
    });
    return Reply{200, {{"nodes", nodes}}, {}, {}};
  });
}

// The segments that ended on a node, as its heartbeat reports them in
// `field` ("exited" or "crashed").
Result<std::vector<Coordinator::NodeExit>> ParseNodeExits(const RequestBody& b,
                                                          const char* field) {
  std::vector<Coordinator::NodeExit> exits;
  STINT_ASSIGN_OR_RETURN(const json* e, b.OptionalArray(field));
  for (const json& x : e != nullptr ? *e : json::array()) {
    if (!x.is_object() || !x.value("segment_id", json()).is_number_integer() ||
        !x.value("exit_code", json()).is_number_integer() ||
        !x.value("message", json("")).is_string()) {
      return Status::InvalidArgument(
          std::string(field) +
          " must be an array of {\"segment_id\",\"exit_code\",\"message\"?}");
    }
    exits.push_back({x["segment_id"].get<int64_t>(), x["exit_code"].get<int>(),
                     x.value("message", "")});
  }
  return exits;
}

// The evaluations a heartbeat reports ended ("eval_exits").
Result<std::vector<Coordinator::EvalExit>> ParseEvalExits(const RequestBody& b) {
  std::vector<Coordinator::EvalExit> exits;
  STINT_ASSIGN_OR_RETURN(const json* e, b.OptionalArray("eval_exits"));
  for (const json& x : e != nullptr ? *e : json::array()) {
    if (!x.is_object() || !x.value("id", json()).is_number_integer() ||
        !x.value("exit_code", json()).is_number_integer() ||
        !x.value("message", json("")).is_string() ||
        !(x.value("result", json()).is_null() || x.value("result", json()).is_object())) {
      return Status::InvalidArgument(
          "eval_exits must be an array of {\"id\",\"exit_code\",\"result\"?:{...},\"message\"?}");
    }
    const json result = x.value("result", json());
    exits.push_back({x["id"].get<int64_t>(), x["exit_code"].get<int>(),
                     result.is_object() ? result.dump().substr(0, 65536) : std::string(),
                     x.value("message", "")});
  }
  return exits;
}

// The evaluations `ids` as the agent runs them: the job's "eval" spec, the
// step, and the GPU; those on a GPU a segment is placed on now are left
// out (the agent stops them before it starts that segment's workers).
json EvalsJson(const ClusterState& s, const Window& w, const std::set<int64_t>& placed,
               const std::vector<int64_t>& ids) {
  const std::vector<int> held = HeldGpus(s, w, &placed);
  json out = json::array();
  for (int64_t id : ids) {
    auto e = s.evals.find(id);
    if (e == s.evals.end() || e->second.state != EvalState::kRunning) continue;
    if (e->second.gpu >= 0 && std::count(held.begin(), held.end(), e->second.gpu) > 0) continue;
    auto job = s.jobs.find(e->second.job_id);
    if (job == s.jobs.end()) continue;
    const json spec = json::parse(job->second.eval, nullptr, /*allow_exceptions=*/false);
    out.push_back({{"id", id},
                   {"job_id", e->second.job_id},
                   {"step", e->second.step},
                   {"gpu", e->second.gpu < 0 ? json(nullptr) : json(e->second.gpu)},
                   {"eval", spec.is_discarded() ? json(nullptr) : spec}});
  }
  return out;
}

// The workers' output a heartbeat carries ("logs"), each entry checked.
Result<const json*> ParseNodeLogs(const RequestBody& b) {
  STINT_ASSIGN_OR_RETURN(const json* l, b.OptionalArray("logs"));
  for (const json& x : l != nullptr ? *l : json::array()) {
    auto integer = [&](const char* k) { return x.value(k, json()).is_number_integer(); };
    if (!x.is_object() || !integer("segment_id") || !integer("rank") || !integer("offset") ||
        !integer("size") || !x.value("text", json()).is_string() ||
        x["offset"].get<int64_t>() < 0 || x["size"].get<int64_t>() < 0) {
      return Status::InvalidArgument(
          "logs must be an array of {\"segment_id\",\"rank\",\"offset\",\"size\","
          "\"text\"}");
    }
  }
  return l;
}

// Appends the output `l` (ParseNodeLogs) of segments with GPUs on `node` to
// `logs`; returns the jobs of the segments in `exits`, whose followers look
// again once the exits are in.
std::set<int64_t> TakeNodeLogs(Coordinator* c, LogTails* logs, const std::string& node,
                               const json* l, const std::vector<Coordinator::NodeExit>& exits) {
  std::set<int64_t> exit_jobs;
  // (job, index into logs) of the entries taken: appended after the
  // read, so the file writes never hold the coordinator's lock.
  std::vector<std::pair<int64_t, size_t>> taken;
  c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
    for (const Coordinator::NodeExit& x : exits) {
      auto seg = s.segments.find(x.segment_id);
      if (seg != s.segments.end()) exit_jobs.insert(seg->second.job_id);
    }
    for (size_t i = 0; l != nullptr && i < l->size(); i++) {
      const json& x = (*l)[i];
      auto seg = s.segments.find(x["segment_id"].get<int64_t>());
      if (seg == s.segments.end()) continue;
      bool here = false;
      for (const Allocation& a : seg->second.allocs) {
        auto win = s.windows.find(a.window_id);
        here = here || (win != s.windows.end() && win->second.node == node);
      }
      if (here) taken.emplace_back(seg->second.job_id, i);
    }
  });
  for (const auto& [job, i] : taken) {
    const json& x = (*l)[i];
    logs->Append(job, x["segment_id"].get<int64_t>(), x["rank"].get<int>(),
                 x["offset"].get<uint64_t>(), x["size"].get<uint64_t>(),
                 x["text"].get<std::string>());
  }
  return exit_jobs;
}

// The answer to a heartbeat of node window `w`: its assignments, once they
// differ from the tag `known` (the agent's last answer; "": at once), or at
// `until`.
Reply AnswerAssignments(Coordinator* c, const TokenAuth& tokens, const Window& w,
                        const std::string& known, std::chrono::steady_clock::time_point until,
                        const std::optional<std::vector<int64_t>>& evals) {
  Reply reply;
  for (;;) {
    const uint64_t seen = c->EventSeq();
    std::string tag;
    c->ReadPlacedOn(w.id, [&](const ClusterState& s, const std::set<int64_t>& placed,
                              TimeMs now) {
      json assignments = Assignments(s, w, placed, tokens);
      char hex[17];
      std::snprintf(hex, sizeof(hex), "%016zx", std::hash<std::string>()(assignments.dump()));
      tag = hex;
      auto win = s.windows.find(w.id);
      reply.body = {{"name", w.node},
                    {"window", ToJson(s, win != s.windows.end() ? win->second : w, now)},
                    {"assignments", std::move(assignments)},
                    {"assignments_tag", tag}};
      if (evals) reply.body["evals"] = EvalsJson(s, w, placed, *evals);
    });
    if (known.empty() || tag != known || !c->WaitEvent(seen, until)) break;
  }
  return reply;
}

// A node's heartbeat (its assignments' long poll) and its close.
void AddNodeHeartbeatRoutes(Routes* routes, LogTails* logs,
                            std::function<void()> prune_logs_if_due) {
  Coordinator* c = routes->coordinator();
  const TokenAuth* tokens = routes->tokens();
  const double max_wait = routes->max_wait_seconds();
  routes->Add(
      Method::kPost, R"(/v1/nodes/([A-Za-z0-9._-]+)/heartbeat)", Access::kAgent,
      [c, logs, max_wait, prune_logs_if_due, tokens](const httplib::Request& req) {
        prune_logs_if_due();
        RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(
            req.body, {"running", "exited", "logs", "crashed", "eval_slots", "eval_exits"}));
        std::vector<int64_t> running;
        const json* r = STINT_HTTP_TRY(b.OptionalArray("running"));
        for (const json& id : r != nullptr ? *r : json::array()) {
          if (!id.is_number_integer())
            return ErrorReply(Status::InvalidArgument("running must be an array of segment ids"));
          running.push_back(id.get<int64_t>());
        }
        const std::vector<Coordinator::NodeExit> exits =
            STINT_HTTP_TRY(ParseNodeExits(b, "exited"));
        const std::vector<Coordinator::NodeExit> crashes =
            STINT_HTTP_TRY(ParseNodeExits(b, "crashed"));
        const json* l = STINT_HTTP_TRY(ParseNodeLogs(b));
        const std::optional<int64_t> eval_slots = STINT_HTTP_TRY(b.OptionalInt64("eval_slots"));
        if (eval_slots && (*eval_slots < 0 || *eval_slots > 1024))
          return ErrorReply(Status::InvalidArgument("eval_slots must be 0..1024"));
        const std::vector<Coordinator::EvalExit> eval_exits = STINT_HTTP_TRY(ParseEvalExits(b));
        // The output first, then the exits: whoever sees the job end
        // finds all of it (stintctl logs --follow). Only output of
        // segments with GPUs on this node is taken.
        const std::string node = req.matches[1];
        const std::set<int64_t> exit_jobs = TakeNodeLogs(c, logs, node, l, exits);
        // A long poll (API.md, "Nodes"): with `wait_seconds` and `known`
        // (the assignments_tag of the agent's last answer) it answers
        // once the node's assignments differ from those, or after the wait.
        const double wait = STINT_HTTP_TRY(QuerySeconds(req, "wait_seconds", 0, max_wait));
        const std::string known = req.has_param("known") ? req.get_param_value("known") : "";
        const auto until = std::chrono::steady_clock::now() + c->NodePollLimit(Millis(wait));
        Result<Window> w = c->NodeHeartbeat(node, running, exits, crashes);
        for (int64_t job : exit_jobs) logs->Wake(job);
        if (!w.ok()) return WorkerErrorReply(w.status());
        // An agent that runs evaluations says how many at once (API.md,
        // "Evaluation"); one that does not is given none.
        std::optional<std::vector<int64_t>> evals;
        if (eval_slots) {
          evals =
              STINT_HTTP_TRY(c->NodeEvaluations(node, static_cast<int>(*eval_slots), eval_exits));
        }
        return AnswerAssignments(c, *tokens, *w, known, until, evals);
      });
  routes->Add(Method::kPost, R"(/v1/nodes/([A-Za-z0-9._-]+)/close)", Access::kAgent,
              [c](const httplib::Request& req) {
                STINT_HTTP_TRY(RequestBody::Parse(req.body, {}));
                Window w = STINT_HTTP_TRY(c->CloseNode(req.matches[1]));
                Reply r;
                c->Read([&](const ClusterState& s, const Plan&, TimeMs now) {
                  r.body = {{"name", w.node}, {"window", ToJson(s, w, now)}};
                });
                return r;
              });
}

}  // namespace

void InstallNodeRoutes(Routes* routes, LogTails* logs, std::function<void()> prune_logs_if_due) {
  AddNodeRegistrationRoute(routes);
  AddNodeTokenRoutes(routes);
  AddNodeListRoute(routes);
  AddNodeHeartbeatRoutes(routes, logs, std::move(prune_logs_if_due));
}

}  // namespace stint::stintd
