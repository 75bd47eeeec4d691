// GET /v1/jobs/{id}/logs (API.md, "Logs"): the workers' output the agents'
// heartbeats brought in (LogTails), a long poll from a sequence number on.
#include <httplib.h>

#include <string>

#include "stintd/server/json_model.h"
#include "stintd/server/request_params.h"
#include "stintd/server/routes.h"

namespace stint::stintd {

void InstallLogRoutes(Routes* routes, LogTails* logs) {
  Coordinator* c = routes->coordinator();
  const Authorization* authz = routes->authorization();
  const double max_wait = routes->max_wait_seconds();
  routes->Add(Method::kGet, R"(/v1/jobs/(\d+)/logs)", Access::kRead,
              [c, logs, max_wait, authz](const httplib::Request& req) {
                const int64_t job = STINT_HTTP_TRY(PathId(req, 1, "job"));
                const JobReader reader = authz->Reader(req);
                bool known = false, seen = false;
                c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
                  known = s.jobs.count(job) > 0;
                  seen = SeesJob(s, reader, job);
                });
                if (!known) return ErrorReply(Status::NotFound("no job " + std::to_string(job)));
                if (!seen) return UnseenJobReply(job);
                const int64_t after = STINT_HTTP_TRY(QueryInt(req, "after", 0, 0));
                const double wait = STINT_HTTP_TRY(QuerySeconds(req, "wait_seconds", 0, max_wait));
                LogTails::Tail tail = logs->Read(job, after, Millis(wait));
                std::string state;
                c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
                  state = JobStateName(s.jobs.at(job).state);
                });
                json chunks = json::array();
                for (const LogChunk& ch : tail.chunks) {
                  chunks.push_back({{"seq", ch.seq},
                                    {"segment_id", ch.segment_id},
                                    {"rank", ch.rank},
                                    {"text", ch.text}});
                }
                return Reply{200,
                             {{"job_id", job},
                              {"state", state},
                              {"chunks", chunks},
                              {"next", tail.next},
                              {"dropped", tail.dropped}},
                             {},
                             {}};
              });
}

}  // namespace stint::stintd
