// stintd's route table (API.md). Each resource's file installs its routes
// through Routes::Add, which declares what the route needs of its caller
// (Access) and makes every request go through Authorization::Route before
// the handler; a handler parses its request strictly, calls the Coordinator
// and answers a Reply (http_reply.h).
#ifndef STINT_TOOLS_STINTD_SERVER_ROUTES_H_
#define STINT_TOOLS_STINTD_SERVER_ROUTES_H_

#include <functional>

#include "stintd/server/auth.h"
#include "stintd/server/authorization.h"
#include "stintd/server/coordinator.h"
#include "stintd/server/http_reply.h"
#include "stintd/store/leader_lease.h"
#include "stintd/server/log_tails.h"

namespace httplib {
class Server;
struct Request;
}  // namespace httplib

namespace stint::stintd {

enum class Method { kGet, kPost, kPut, kDelete };
using Handler = std::function<Reply(const httplib::Request&)>;

// Borrows everything it is given; what Add installs keeps pointers to the
// authorization (not to the Routes), which must outlive the server.
class Routes {
 public:
  Routes(httplib::Server* server, const Authorization* authorization, Coordinator* coordinator,
         const TokenAuth* tokens, double max_wait_seconds)
      : server_(server),
        authorization_(authorization),
        coordinator_(coordinator),
        tokens_(tokens),
        max_wait_seconds_(max_wait_seconds) {}

  // Serves `method` on `pattern` (a cpp-httplib regex) with `handler`, for
  // the callers `access` admits. A handler that throws (never expected:
  // every parse is checked) is answered 500 instead of taking the server
  // down.
  void Add(Method method, const char* pattern, Access access, Handler handler);

  Coordinator* coordinator() const { return coordinator_; }
  const Authorization* authorization() const { return authorization_; }
  // Issues the job and segment registration tokens handed out in answers.
  const TokenAuth* tokens() const { return tokens_; }
  double max_wait_seconds() const { return max_wait_seconds_; }  // cap on long-poll waits

 private:
  httplib::Server* const server_;
  const Authorization* const authorization_;
  Coordinator* const coordinator_;
  const TokenAuth* const tokens_;
  const double max_wait_seconds_;
};

// Each resource's routes, one file each (<resource>_routes.cc).
// A segment as the routes answer it: ToJson(seg) with, for a segment an
// executor other than stint-agent runs, its "external_id" (stintd --slurm:
// "slurm:1234").
nlohmann::json SegmentJson(const Segment& seg);

void InstallMetricsRoutes(Routes* routes);  // /healthz, /dashboard, /metrics
void InstallWindowRoutes(Routes* routes);   // pools, windows, teams
void InstallJobRoutes(Routes* routes);      // jobs, the queue
void InstallSegmentRoutes(Routes* routes);  // /v1/segments
// Nodes and their agents: registration, node tokens, the heartbeat that
// takes the workers' output into `logs` and answers the agent's
// assignments (calling `prune_logs_if_due` first).
void InstallNodeRoutes(Routes* routes, LogTails* logs, std::function<void()> prune_logs_if_due);
// Workers (registration, /v1/workers/*, rendezvous), the fencing check and
// the jobs' KV.
void InstallWorkerRoutes(Routes* routes);
void InstallLogRoutes(Routes* routes, LogTails* logs);  // GET /v1/jobs/{id}/logs
// GET /v1/leader, from `view` (empty: this stintd is alone on its store).
void InstallLeaderRoutes(Routes* routes, std::function<Result<LeaderView>()> view);

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SERVER_ROUTES_H_
