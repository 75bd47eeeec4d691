// The job routes (API.md, "Jobs", "Launching", "Queue"): submitting a job
// with its launch spec, the job views (as each reader may see them), cancel,
// priority, and the queue with why each pending job waits.
#include <httplib.h>

#include <optional>
#include <string>
#include <utility>

#include "common/launch_spec.h"
#include "stintd/server/json_model.h"
#include "stintd/server/request_params.h"
#include "stintd/server/routes.h"

namespace stint::stintd {
namespace {

Result<Job> ParseJobSpec(const RequestBody& b) {
  Job j;
  STINT_ASSIGN_OR_RETURN(j.name, b.String("name"));
  STINT_ASSIGN_OR_RETURN(std::optional<std::string> team, b.OptionalString("team"));
  STINT_ASSIGN_OR_RETURN(std::optional<std::string> pool, b.OptionalString("pool"));
  STINT_ASSIGN_OR_RETURN(const json* pools, b.OptionalArray("pools"));
  STINT_ASSIGN_OR_RETURN(std::optional<std::string> prio, b.OptionalString("priority"));
  STINT_ASSIGN_OR_RETURN(int64_t min_gpus, b.Int64("min_gpus"));
  STINT_ASSIGN_OR_RETURN(std::optional<int64_t> max_gpus, b.OptionalInt64("max_gpus"));
  STINT_ASSIGN_OR_RETURN(std::optional<bool> gang, b.OptionalBool("gang"));
  STINT_ASSIGN_OR_RETURN(std::optional<bool> preemptible, b.OptionalBool("preemptible"));
  STINT_ASSIGN_OR_RETURN(std::optional<double> ckpt, OptionalSeconds(b, "checkpoint_seconds"));
  STINT_ASSIGN_OR_RETURN(std::optional<double> restart, OptionalSeconds(b, "restart_seconds"));
  STINT_ASSIGN_OR_RETURN(std::optional<double> interval,
                         OptionalSeconds(b, "checkpoint_interval_seconds"));
  STINT_ASSIGN_OR_RETURN(std::optional<double> remaining, OptionalSeconds(b, "remaining_seconds"));
  if (min_gpus < 1 || min_gpus > 1000000) {
    return Status::InvalidArgument("min_gpus must be between 1 and 1000000 (got " +
                                   std::to_string(min_gpus) + ")");
  }
  if (max_gpus && (*max_gpus < 1 || *max_gpus > 1000000)) {
    return Status::InvalidArgument("max_gpus must be between 1 and 1000000 (got " +
                                   std::to_string(*max_gpus) + ")");
  }
  j.team = team.value_or("");
  // "pool": one name or several joined by commas; "pools": an array. Both
  // empty or absent: any pool.
  if (pool && pools != nullptr) return Status::InvalidArgument("give pool or pools, not both");
  if (pool) j.pools = SplitPoolNames(*pool);
  if (pools != nullptr) {
    for (const json& p : *pools) {
      if (!p.is_string() || p.get<std::string>().empty())
        return Status::InvalidArgument("pools must be an array of pool names");
      j.pools.push_back(p.get<std::string>());
    }
  }
  if (prio) {
    STINT_ASSIGN_OR_RETURN(j.priority, ParsePriority(*prio));
  }
  j.min_gpus = static_cast<int>(min_gpus);
  j.max_gpus = static_cast<int>(max_gpus.value_or(min_gpus));
  j.gang = gang.value_or(true);
  j.preemptible = preemptible.value_or(true);
  if (ckpt) j.checkpoint_seconds = *ckpt;
  if (restart) j.restart_seconds = *restart;
  if (interval) j.checkpoint_interval_seconds = *interval;
  if (remaining) j.remaining_seconds = *remaining;
  return j;
}

// The job's "eval" (API.md, "Evaluation"): {"command":[string],"env"?:{K:V},
// "workdir"?, "every"?(1), "gpus"?(0), "timeout_seconds"?(3600)}.
Status ParseEvalSpec(const json& spec, Job* j) {
  if (!spec.is_object()) return Status::InvalidArgument("eval must be an object");
  for (const auto& item : spec.items()) {
    const std::string& k = item.key();
    if (k != "command" && k != "env" && k != "workdir" && k != "every" && k != "gpus" &&
        k != "timeout_seconds")
      return Status::InvalidArgument(
          "eval: unknown field \"" + k +
          "\" (allowed: command, env, workdir, every, gpus, timeout_seconds)");
  }
  const json command = spec.value("command", json());
  if (!command.is_array() || command.empty())
    return Status::InvalidArgument("eval.command must be a non-empty array of strings");
  for (const json& arg : command) {
    if (!arg.is_string()) return Status::InvalidArgument("eval.command must hold strings only");
  }
  const json env = spec.value("env", json::object());
  if (!env.is_object()) return Status::InvalidArgument("eval.env must be an object of strings");
  for (const auto& kv : env.items()) {
    if (!kv.value().is_string() || kv.key().empty() || kv.key().find('=') != std::string::npos)
      return Status::InvalidArgument("eval.env must map names (no '=') to strings");
  }
  if (!spec.value("workdir", json("")).is_string())
    return Status::InvalidArgument("eval.workdir must be a string");
  const json every = spec.value("every", json(1));
  const json gpus = spec.value("gpus", json(0));
  if (!every.is_number_integer() || every.get<int64_t>() < 1 || every.get<int64_t>() > 1000000)
    return Status::InvalidArgument("eval.every must be an integer 1..1000000");
  if (!gpus.is_number_integer() || gpus.get<int64_t>() < 0 || gpus.get<int64_t>() > 1)
    return Status::InvalidArgument("eval.gpus must be 0 (CPU only) or 1");
  // The agent kills an evaluation past it (default 3600, API.md).
  const json timeout = spec.value("timeout_seconds", json(3600));
  if (!timeout.is_number() || !(timeout.get<double>() > 0 && timeout.get<double>() <= 604800))
    return Status::InvalidArgument("eval.timeout_seconds must be a number in (0, 604800]");
  j->eval = spec.dump();
  j->eval_every = every.get<int>();
  j->eval_gpus = gpus.get<int>();
  return Status::OK();
}

// POST /v1/jobs: the job, with its registration token.
void AddSubmitRoute(Routes* routes) {
  Coordinator* c = routes->coordinator();
  const TokenAuth* tokens = routes->tokens();  // each job's registration token (auth.h)
  routes->Add(Method::kPost, "/v1/jobs", Access::kAdmin, [c, tokens](const httplib::Request& req) {
    RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(
        req.body, {"name", "team", "pool", "pools", "priority", "min_gpus", "max_gpus", "gang",
                   "preemptible", "checkpoint_seconds", "restart_seconds",
                   "checkpoint_interval_seconds", "remaining_seconds", "launch", "eval"}));
    Job spec = STINT_HTTP_TRY(ParseJobSpec(b));
    const json* launch = STINT_HTTP_TRY(b.OptionalObject("launch"));
    if (launch != nullptr) {
      const auto checked = tools::LaunchSpec::ForJob(*launch, spec.min_gpus, spec.max_gpus);
      if (!checked.ok()) return ErrorReply(checked.status());
      spec.launch = launch->dump();
    }
    const json* eval = STINT_HTTP_TRY(b.OptionalObject("eval"));
    if (eval != nullptr) {
      const Status parsed = ParseEvalSpec(*eval, &spec);
      if (!parsed.ok()) return ErrorReply(parsed);
    }
    Job j = STINT_HTTP_TRY(c->SubmitJob(spec));
    // The job's own credential for workers started by hand (auth.h).
    json answer = ToJson(j);
    answer["registration_token"] = tokens->JobToken(j.id);
    return Reply{201, std::move(answer), {}, {}};
  });
}

// GET /v1/jobs and /v1/jobs/{id}, as each reader may see them.
void AddJobViewRoutes(Routes* routes) {
  Coordinator* c = routes->coordinator();
  const Authorization* authz = routes->authorization();
  const TokenAuth* tokens = routes->tokens();
  routes->Add(Method::kGet, "/v1/jobs", Access::kRead, [c, authz](const httplib::Request& req) {
    const JobReader reader = authz->Reader(req);
    std::optional<JobState> filter;
    if (req.has_param("state")) {
      const std::string want = req.get_param_value("state");
      for (JobState st : {JobState::kPending, JobState::kRunning, JobState::kDone,
                          JobState::kCancelled, JobState::kFailed}) {
        if (want == JobStateName(st)) filter = st;
      }
      if (!filter) {
        return ErrorReply(
            Status::InvalidArgument("state must be PENDING, RUNNING, DONE, CANCELLED or FAILED"));
      }
    }
    json jobs = json::array();
    c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
      for (const auto& [id, j] : s.jobs) {
        if ((!filter || j.state == *filter) && SeesJob(s, reader, id))
          jobs.push_back(JobJsonFor(reader, j));
      }
    });
    return Reply{200, {{"jobs", jobs}}, {}, {}};
  });
  routes->Add(
      Method::kGet, R"(/v1/jobs/(\d+))", Access::kRead,
      [c, authz, tokens](const httplib::Request& req) {
        const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "job"));
        const JobReader reader = authz->Reader(req);
        Reply r;
        c->Read([&](const ClusterState& s, const Plan& plan, TimeMs now) {
          auto it = s.jobs.find(id);
          if (it == s.jobs.end()) {
            r = ErrorReply(Status::NotFound("job " + std::to_string(id) + " does not exist"));
            return;
          }
          if (!SeesJob(s, reader, id)) {
            r = UnseenJobReply(id);
            return;
          }
          r.body = JobJsonFor(reader, it->second);
          r.body["figures"] = ToJson(FigureJob(s, it->second, now));
          r.body["evaluations"] = EvalsOf(s, it->second);
          if (reader.admin) r.body["registration_token"] = tokens->JobToken(id);
          json segments = json::array();
          for (const auto& [sid, seg] : s.segments) {
            if (seg.job_id == id) segments.push_back(SegmentJson(seg));
          }
          r.body["segments"] = segments;
          auto rdzv = s.rendezvous.find(id);
          if (rdzv != s.rendezvous.end()) r.body["rendezvous"] = ToJson(rdzv->second);
          for (const PendingInfo& p : plan.pending) {
            if (p.job_id == id) r.body["pending"] = ToJson(s, p, now);
          }
        });
        return r;
      });
  routes->Add(
      Method::kGet, R"(/v1/jobs/(\d+)/losses)", Access::kRead,
      [c, authz](const httplib::Request& req) {
        const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "job"));
        const JobReader reader = authz->Reader(req);
        Reply r;
        c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
          auto it = s.jobs.find(id);
          if (it == s.jobs.end()) {
            r = ErrorReply(Status::NotFound("job " + std::to_string(id) + " does not exist"));
          } else if (!SeesJob(s, reader, id)) {
            r = UnseenJobReply(id);
          } else {
            r.body = LossCurveJson(s, it->second);
          }
        });
        return r;
      });
}

// Cancelling a job and changing its priority.
void AddJobControlRoutes(Routes* routes) {
  Coordinator* c = routes->coordinator();
  routes->Add(Method::kPost, R"(/v1/jobs/(\d+)/cancel)", Access::kAdmin,
              [c](const httplib::Request& req) {
                const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "job"));
                RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"reason"}));
                const std::string reason = STINT_HTTP_TRY(b.OptionalString("reason")).value_or("");
                Job j = STINT_HTTP_TRY(c->CancelJob(id, reason));
                return Reply{200, ToJson(j), {}, {}};
              });
  routes->Add(Method::kPost, R"(/v1/jobs/(\d+)/priority)", Access::kAdmin,
              [c](const httplib::Request& req) {
                const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "job"));
                RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"priority"}));
                const Priority p =
                    STINT_HTTP_TRY(ParsePriority(STINT_HTTP_TRY(b.String("priority"))));
                Job j = STINT_HTTP_TRY(c->SetPriority(id, p));
                return Reply{200, ToJson(j), {}, {}};
              });
}

// GET /v1/queue: the pending jobs with why each waits, and the running ones.
void AddQueueRoute(Routes* routes) {
  Coordinator* c = routes->coordinator();
  const Authorization* authz = routes->authorization();
  routes->Add(Method::kGet, "/v1/queue", Access::kRead, [c, authz](const httplib::Request& req) {
    const JobReader reader = authz->Reader(req);
    Reply r;
    c->Read([&](const ClusterState& s, const Plan& plan, TimeMs now) {
      const SeenJobs seen(s, reader);  // an agent: only its node's jobs (stats are counts)
      json pending = json::array();
      for (const PendingInfo& p : plan.pending) {
        auto job = s.jobs.find(p.job_id);
        // A job cancelled or started since the plan is no longer pending.
        if (job != s.jobs.end() && job->second.state == JobState::kPending && seen.Has(p.job_id))
          pending.push_back(ToJson(s, p, now));
      }
      json running = json::array();
      for (const auto& [id, j] : s.jobs) {
        if (j.state != JobState::kRunning || !seen.Has(id)) continue;
        auto seg = s.segments.find(j.segment_id);
        running.push_back(
            {{"job_id", id},
             {"name", j.name},
             {"team", j.team},
             {"priority", PriorityName(j.priority)},
             {"segment", seg == s.segments.end() ? json(nullptr) : SegmentJson(seg->second)}});
      }
      r.body = {{"now_ms", now},
                {"pending", pending},
                {"running", running},
                {"stats", ToJson(plan.stats)}};
    });
    return r;
  });
}

}  // namespace

void InstallJobRoutes(Routes* routes) {
  AddSubmitRoute(routes);
  AddJobViewRoutes(routes);
  AddJobControlRoutes(routes);
  AddQueueRoute(routes);
}

}  // namespace stint::stintd
