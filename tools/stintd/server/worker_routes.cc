// The worker routes (API.md, "Workers", "Rendezvous", "Fencing", "KV"):
// registering a worker into a job; what a registered worker does with its
// own secret (heartbeat, notice, progress, checkpoint, ack, finish, leave,
// rendezvous); and the job-scoped calls its job's credentials reach, the
// fencing check, the steps retention must keep, and the job's KV.
#include <httplib.h>

#include <optional>
#include <set>
#include <string>

#include "stintd/core/evals.h"
#include "stintd/server/json_model.h"
#include "stintd/server/request_params.h"
#include "stintd/server/routes.h"

namespace stint::stintd {
namespace {

// POST /v1/jobs/{id}/workers.
void AddRegistrationRoute(Routes* routes) {
  Coordinator* c = routes->coordinator();
  const Authorization* authz = routes->authorization();
  const double hb_interval = c->options().heartbeat_interval_seconds;
  const double ttl = c->options().policy.lease_ttl_seconds;
  routes->Add(Method::kPost, R"(/v1/jobs/(\d+)/workers)", Access::kRegistrar,
              [c, hb_interval, ttl, authz](const httplib::Request& req) {
                const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "job"));
                RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"name", "node"}));
                const std::string name = STINT_HTTP_TRY(b.String("name"));
                std::optional<std::string> node = STINT_HTTP_TRY(b.OptionalString("node"));
                if (std::optional<Reply> refused = authz->Registration(req, id, &node))
                  return *refused;
                if (node) {
                  bool placed = false;
                  c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
                    auto job = s.jobs.find(id);
                    if (job == s.jobs.end()) return;
                    auto seg = s.segments.find(job->second.segment_id);
                    if (seg == s.segments.end() || !SegmentActive(seg->second.state)) return;
                    for (const Placement& p : seg->second.placement) {
                      auto win = s.windows.find(p.window_id);
                      placed = placed || (win != s.windows.end() && win->second.node == *node);
                    }
                  });
                  if (!placed) {
                    return ErrorReply(Status::PermissionDenied(
                        "job " + std::to_string(id) + " has no active segment on node " + *node));
                  }
                }
                std::string secret;
                Worker w = STINT_HTTP_TRY(c->RegisterWorker(id, name, &secret, node.value_or("")));
                // A segment token's segment may have ended meanwhile and the
                // worker landed in the next one: it must not stay there.
                if (std::optional<Reply> late = authz->Registration(req, id, &node)) {
                  Status left = c->Leave(w.id);
                  if (!left.ok()) return ErrorReply(left);
                  return *late;
                }
                return Reply{201,
                             {{"worker_id", w.id},
                              {"worker_secret", secret},
                              {"job_id", w.job_id},
                              {"segment_id", w.segment_id},
                              {"fencing_token", w.fencing_token},
                              {"lease_ttl_seconds", ttl},
                              {"heartbeat_interval_seconds", hb_interval}},
                             {},
                             {}};
              });
}

// /v1/workers/{wid}/*, each for that worker's own secret: its lease, the
// notice, what it reports, and its end.
void AddOwnWorkerRoutes(Routes* routes) {
  Coordinator* c = routes->coordinator();
  const double max_wait = routes->max_wait_seconds();
  auto view_reply = [](const Result<WorkerView>& v) {
    if (!v.ok()) return WorkerErrorReply(v.status());
    if (!v->active) {
      Reply r = GoneReply("segment " + std::to_string(v->segment_id) + " is " +
                          SegmentStateName(v->segment_state) + ": this worker is fenced");
      r.body["view"] = ToJson(*v);
      return r;
    }
    return Reply{200, ToJson(*v), {}, {}};
  };
  routes->Add(Method::kPost, R"(/v1/workers/(\d+)/heartbeat)", Access::kOwnWorker,
              [c, view_reply](const httplib::Request& req) {
                const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "worker"));
                RequestBody b = STINT_HTTP_TRY(
                    RequestBody::Parse(req.body, {"step", "samples", "loss", "loss_step"}));
                HeartbeatReport report;
                report.step = STINT_HTTP_TRY(b.OptionalInt64("step")).value_or(0);
                if (report.step < 0)
                  return ErrorReply(Status::InvalidArgument("step must be >= 0"));
                report.samples = STINT_HTTP_TRY(b.OptionalInt64("samples"));
                if (report.samples && *report.samples < 0)
                  return ErrorReply(Status::InvalidArgument("samples must be >= 0"));
                report.loss = STINT_HTTP_TRY(b.OptionalNumber("loss"));
                report.loss_step = STINT_HTTP_TRY(b.OptionalInt64("loss_step"));
                if (report.loss_step && *report.loss_step < 0)
                  return ErrorReply(Status::InvalidArgument("loss_step must be >= 0"));
                return view_reply(c->Heartbeat(id, report));
              });
  routes->Add(Method::kGet, R"(/v1/workers/(\d+)/notice)", Access::kOwnWorker,
              [c, view_reply, max_wait](const httplib::Request& req) {
                const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "worker"));
                const double wait = STINT_HTTP_TRY(QuerySeconds(req, "wait_seconds", 30, max_wait));
                return view_reply(c->WaitNotice(id, Millis(wait)));
              });
  auto worker_status = [](const Status& s) {
    return s.ok() ? Reply{200, {{"ok", true}}, {}, {}} : WorkerErrorReply(s);
  };
  routes->Add(
      Method::kPost, R"(/v1/workers/(\d+)/progress)", Access::kOwnWorker,
      [c, worker_status](const httplib::Request& req) {
        const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "worker"));
        RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"step", "remaining_seconds"}));
        const int64_t step = STINT_HTTP_TRY(b.Int64("step"));
        if (step < 0) return ErrorReply(Status::InvalidArgument("step must be >= 0"));
        std::optional<double> remaining = STINT_HTTP_TRY(OptionalSeconds(b, "remaining_seconds"));
        double keep = 0;
        if (!remaining) {
          c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
            auto w = s.workers.find(id);
            if (w == s.workers.end()) return;
            auto j = s.jobs.find(w->second.job_id);
            if (j != s.jobs.end()) keep = j->second.remaining_seconds;
          });
        }
        return worker_status(c->ReportProgress(id, step, remaining.value_or(keep)));
      });
  routes->Add(
      Method::kPost, R"(/v1/workers/(\d+)/checkpoint)", Access::kOwnWorker,
      [c, worker_status](const httplib::Request& req) {
        const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "worker"));
        RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(
            req.body, {"step", "seconds", "bytes", "notice_to_replicas_seconds"}));
        const int64_t step = STINT_HTTP_TRY(b.Int64("step"));
        std::optional<double> seconds = STINT_HTTP_TRY(OptionalSeconds(b, "seconds"));
        std::optional<double> notice_to_replicas =
            STINT_HTTP_TRY(OptionalSeconds(b, "notice_to_replicas_seconds"));
        std::optional<int64_t> bytes = STINT_HTTP_TRY(b.OptionalInt64("bytes"));
        if (!seconds) return ErrorReply(Status::InvalidArgument("seconds is required"));
        if (bytes && *bytes < 0) return ErrorReply(Status::InvalidArgument("bytes must be >= 0"));
        return worker_status(
            c->ReportCheckpoint(id, step, *seconds, static_cast<uint64_t>(bytes.value_or(0)),
                                notice_to_replicas));
      });
  routes->Add(Method::kPost, R"(/v1/workers/(\d+)/stored)", Access::kOwnWorker,
              [c, worker_status](const httplib::Request& req) {
                const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "worker"));
                RequestBody b = STINT_HTTP_TRY(
                    RequestBody::Parse(req.body, {"location", "tier", "step", "bytes"}));
                const std::string location = STINT_HTTP_TRY(b.String("location"));
                const int64_t tier = STINT_HTTP_TRY(b.OptionalInt64("tier")).value_or(1);
                const int64_t step = STINT_HTTP_TRY(b.Int64("step"));
                const std::optional<int64_t> bytes = STINT_HTTP_TRY(b.OptionalInt64("bytes"));
                if (bytes && *bytes < 0)
                  return ErrorReply(Status::InvalidArgument("bytes must be >= 0"));
                if (tier != 1 && tier != 2)
                  return ErrorReply(Status::InvalidArgument("tier must be 1 or 2"));
                return worker_status(c->ReportStored(id, location, static_cast<int>(tier), step,
                                                     static_cast<uint64_t>(bytes.value_or(0))));
              });
  routes->Add(Method::kPost, R"(/v1/workers/(\d+)/ack)", Access::kOwnWorker,
              [c, worker_status](const httplib::Request& req) {
                const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "worker"));
                RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"step"}));
                const int64_t step = STINT_HTTP_TRY(b.OptionalInt64("step")).value_or(-1);
                return worker_status(c->Ack(id, step));
              });
  routes->Add(Method::kPost, R"(/v1/workers/(\d+)/finished)", Access::kOwnWorker,
              [c, worker_status](const httplib::Request& req) {
                const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "worker"));
                STINT_HTTP_TRY(RequestBody::Parse(req.body, {}));
                return worker_status(c->Finish(id));
              });
  routes->Add(Method::kPost, R"(/v1/workers/(\d+)/leave)", Access::kOwnWorker,
              [c, worker_status](const httplib::Request& req) {
                const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "worker"));
                STINT_HTTP_TRY(RequestBody::Parse(req.body, {}));
                return worker_status(c->Leave(id));
              });
}

// The rendezvous of a worker's segment, for that worker's own secret.
void AddRendezvousRoutes(Routes* routes) {
  Coordinator* c = routes->coordinator();
  const double max_wait = routes->max_wait_seconds();
  auto rendezvous_reply = [](const Result<RendezvousView>& v) {
    return v.ok() ? Reply{200, ToJson(*v), {}, {}} : WorkerErrorReply(v.status());
  };
  routes->Add(Method::kPost, R"(/v1/workers/(\d+)/rendezvous/join)", Access::kOwnWorker,
              [c, rendezvous_reply, max_wait](const httplib::Request& req) {
                const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "worker"));
                RequestBody b = STINT_HTTP_TRY(
                    RequestBody::Parse(req.body, {"endpoint", "known_generation", "wait_seconds"}));
                const std::string endpoint = STINT_HTTP_TRY(b.String("endpoint"));
                const int64_t known =
                    STINT_HTTP_TRY(b.OptionalInt64("known_generation")).value_or(0);
                const double wait = STINT_HTTP_TRY(b.OptionalNumber("wait_seconds")).value_or(30);
                if (known < 0)
                  return ErrorReply(Status::InvalidArgument("known_generation must be >= 0"));
                if (!(wait >= 0 && wait <= max_wait)) {
                  return ErrorReply(Status::InvalidArgument("wait_seconds must be in [0, " +
                                                            std::to_string(max_wait) + "]"));
                }
                return rendezvous_reply(
                    c->JoinRendezvous(id, endpoint, static_cast<uint64_t>(known), Millis(wait)));
              });
  routes->Add(
      Method::kGet, R"(/v1/workers/(\d+)/rendezvous)", Access::kOwnWorker,
      [c, rendezvous_reply, max_wait](const httplib::Request& req) {
        const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "worker"));
        const double wait = STINT_HTTP_TRY(QuerySeconds(req, "wait_seconds", 0, max_wait));
        const int64_t known = STINT_HTTP_TRY(QueryInt(req, "known_generation", 0, 0));
        return rendezvous_reply(c->WaitRendezvous(id, static_cast<uint64_t>(known), Millis(wait)));
      });
}

// The fencing check and the job's KV.
void AddJobScopedRoutes(Routes* routes) {
  Coordinator* c = routes->coordinator();
  const Authorization* authz = routes->authorization();
  const double max_wait = routes->max_wait_seconds();
  routes->Add(
      Method::kPost, "/v1/fencing/check", Access::kJobCredential,
      [c, authz](const httplib::Request& req) {
        RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"job_id", "fencing_token"}));
        const int64_t job = STINT_HTTP_TRY(b.Int64("job_id"));
        if (std::optional<Reply> refused = authz->JobScoped(req, job)) return *refused;
        const int64_t token = STINT_HTTP_TRY(b.Int64("fencing_token"));
        if (token < 0) return ErrorReply(Status::InvalidArgument("fencing_token must be >= 0"));
        TimeMs until = kNever;
        std::string why;
        const bool valid = c->CheckFencing(job, static_cast<uint64_t>(token), &until, &why);
        json answer = {{"valid", valid},
                       {"valid_until_ms", valid ? TimeJson(until) : json(nullptr)}};
        // Why a token is stale, for the worker's error message (API.md).
        if (!valid) answer["reason"] = why;
        return Reply{200, std::move(answer), {}, {}};
      });

  // The steps the job's checkpoint retention must keep (API.md, "Evaluation").
  routes->Add(
      Method::kGet, R"(/v1/jobs/(\d+)/pinned_steps)", Access::kJobCredential,
      [c, authz](const httplib::Request& req) {
        const int64_t job = STINT_HTTP_TRY(PathId(req, 1, "job"));
        if (std::optional<Reply> refused = authz->JobScoped(req, job)) return *refused;
        bool found = false;
        std::set<int64_t> steps;
        c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
          found = s.jobs.count(job) != 0;
          steps = PinnedSteps(s, job);
        });
        if (!found) {
          return ErrorReply(Status::NotFound("job " + std::to_string(job) + " does not exist"));
        }
        return Reply{200, {{"job_id", job}, {"steps", steps}}, {}, {}};
      });

  // --- KV ---
  routes->Add(
      Method::kPut, R"(/v1/jobs/(\d+)/kv/([A-Za-z0-9._/-]+))", Access::kJobCredential,
      [c, authz](const httplib::Request& req) {
        const int64_t job = STINT_HTTP_TRY(PathId(req, 1, "job"));
        if (std::optional<Reply> refused = authz->JobScoped(req, job)) return *refused;
        RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"value", "if_version"}));
        const std::string value = STINT_HTTP_TRY(b.String("value"));
        std::optional<int64_t> if_version = STINT_HTTP_TRY(b.OptionalInt64("if_version"));
        // A value past the limit is 413; a job past its caps is 429 (API.md, "KV").
        if (value.size() > kKvMaxValueBytes) {
          return Reply{
              413,
              ErrorBody("PAYLOAD_TOO_LARGE", "kv value is " + std::to_string(value.size()) +
                                                 " bytes; the limit is 1 MiB"),
              {},
              {}};
        }
        const int64_t version = STINT_HTTP_TRY(c->PutKv(job, req.matches[2], value, if_version));
        return Reply{200, {{"version", version}}, {}, {}};
      });
  // A counter: many ranks add at once, each in one write (no compare-and-set rounds).
  routes->Add(Method::kPost, R"(/v1/jobs/(\d+)/kv/([A-Za-z0-9._/-]+))", Access::kJobCredential,
              [c, authz](const httplib::Request& req) {
                const int64_t job = STINT_HTTP_TRY(PathId(req, 1, "job"));
                if (std::optional<Reply> refused = authz->JobScoped(req, job)) return *refused;
                RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"add"}));
                const int64_t delta = STINT_HTTP_TRY(b.Int64("add"));
                KvRecord e = STINT_HTTP_TRY(c->AddKv(job, req.matches[2], delta));
                return Reply{200, ToJson(e), {}, {}};
              });
  routes->Add(Method::kGet, R"(/v1/jobs/(\d+)/kv/([A-Za-z0-9._/-]+))", Access::kJobCredential,
              [c, authz, max_wait](const httplib::Request& req) {
                const int64_t job = STINT_HTTP_TRY(PathId(req, 1, "job"));
                if (std::optional<Reply> refused = authz->JobScoped(req, job)) return *refused;
                const double wait = STINT_HTTP_TRY(QuerySeconds(req, "wait_seconds", 0, max_wait));
                const int64_t min_version = STINT_HTTP_TRY(QueryInt(req, "min_version", 1, 1));
                KvRecord e =
                    STINT_HTTP_TRY(c->GetKv(job, req.matches[2], min_version, Millis(wait)));
                return Reply{200, ToJson(e), {}, {}};
              });
  routes->Add(Method::kDelete, R"(/v1/jobs/(\d+)/kv/([A-Za-z0-9._/-]+))", Access::kJobCredential,
              [c, authz](const httplib::Request& req) {
                const int64_t job = STINT_HTTP_TRY(PathId(req, 1, "job"));
                if (std::optional<Reply> refused = authz->JobScoped(req, job)) return *refused;
                Status s = c->DeleteKv(job, req.matches[2]);
                return s.ok() ? Reply{200, {{"ok", true}}, {}, {}} : ErrorReply(s);
              });
}

}  // namespace

void InstallWorkerRoutes(Routes* routes) {
  AddRegistrationRoute(routes);
  AddOwnWorkerRoutes(routes);
  AddRendezvousRoutes(routes);
  AddJobScopedRoutes(routes);
}

}  // namespace stint::stintd
