// Who may do what on stintd's HTTP API (API.md, "Credentials"), in one
// place. The tokens themselves (their lists, their MACs) are auth.h's.
//   admin token          everything.
//   shared worker token  registering workers into any job, and the read-only
//                        views (launch.env stripped); never a job's KV or
//                        fencing check (except for a job whose active segment
//                        has a worker registered before per-worker secrets).
//   agent / node token   the node endpoints (a node token: its own node's),
//                        registering workers on a node it names, and reads;
//                        job reads (GET /v1/jobs, /v1/jobs/{id}, logs) only of
//                        jobs with an active segment on its node(s).
//   job token "stj1."    registering into that one job, its KV and its
//                        fencing check (given to the admin at submit).
//   segment token "stg1." the same for one segment on one node, while it is
//                        the job's active segment (stint-agent hands it to a
//                        torchrun launcher: each rank registers with it).
//   worker secret "stw1." /v1/workers/{its id}/*, its job's KV and fencing
//                        check, while the worker is active (410 after).
// Anything else on a job it is not scoped to: 403; no credential, or one
// stintd does not know: 401.
//
// Every route declares its Access (routes.h) and Routes checks it through
// Authorization::Route before the handler runs. The rules that need the
// request's body or the job's state are then called by the handler, once it
// has them: JobScoped (KV, fencing check), Registration (registering a worker) and
// the job readers (which jobs a caller sees, and their launch.env).
#ifndef STINT_TOOLS_STINTD_SERVER_AUTHORIZATION_H_
#define STINT_TOOLS_STINTD_SERVER_AUTHORIZATION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>

#include "stintd/server/auth.h"
#include "stintd/server/coordinator.h"
#include "stintd/server/http_reply.h"

namespace httplib {
struct Request;
}

namespace stint::stintd {

// What a route needs of its caller.
enum class Access {
  kOpen,           // no token: the health check and the dashboard's page (no data)
  kRead,           // the read-only views: admin, shared worker, agent or node token
  kAdmin,          // changing the cluster: an admin token
  kAgent,          // the node endpoints: an agent token, or the node's own token
  kOwnWorker,      // /v1/workers/{wid}/*: Authorization::OwnWorker
  kJobCredential,  // a job's KV and fencing check: the handler calls Authorization::JobScoped
  kRegistrar,      // registering a worker: the handler calls Authorization::Registration
};

// Whether a caller holding `have` may use an endpoint that needs `need`:
// admin covers everything; a read (kWorker) is open to agents too.
bool Allows(Right have, Right need);

// A caller of the job read views (GET /v1/jobs, /v1/jobs/{id}, logs): an
// admin sees everything; every other caller sees no launch.env nor
// eval.env; an agent sees only jobs with an active segment on its node (a
// node token's), or for the shared agent token on a node without a token of
// its own.
struct JobReader {
  bool admin = false;
  bool agent = false;
  std::string node;  // a node token's node
};

bool SeesJob(const ClusterState& s, const JobReader& r, int64_t job);

// The jobs `r` sees, worked out once for the list views (GET /v1/segments,
// /v1/queue, /v1/nodes), which check many jobs.
class SeenJobs {
 public:
  SeenJobs(const ClusterState& s, const JobReader& r);
  bool Has(int64_t job) const { return all_ || jobs_.count(job) > 0; }

 private:
  bool all_;
  std::unordered_set<int64_t> jobs_;
};

// A job's JSON as `r` may see it: launch.env and eval.env only to admins
// (they may hold credentials of the job's own). The node an evaluation is
// handed to gets its env in the heartbeat's answer, to run it.
json JobJsonFor(const JobReader& r, const Job& job);

// The answer to a reader that may not see `job` (SeesJob false).
Reply UnseenJobReply(int64_t job);

// The rules above applied with stintd's state. Each check answers nullopt
// when the caller may go on, else the refusal to send (401, 403, or 410 for
// a credential whose worker or segment is gone).
class Authorization {
 public:
  Authorization(const TokenAuth* auth, Coordinator* coordinator)
      : auth_(*auth), coordinator_(coordinator) {}

  // The check every route goes through before its handler: node tokens act
  // only for their node, then the right `access` needs.
  std::optional<Reply> Route(Access access, const std::string& pattern,
                             const httplib::Request& req) const;

  // /v1/workers/{wid}/* (wid: the path's first match): that worker's own
  // secret while it is active (410 once it left or its segment ended), an
  // admin token, or the shared worker token for a worker registered before
  // per-worker secrets (no secret_hash).
  std::optional<Reply> OwnWorker(const httplib::Request& req) const;

  // The job-scoped calls (KV, fencing check) of job `job`: an admin token,
  // the job's own job or segment token, or the secret of an active worker
  // of that job (a process stint-agent launched holds only its secret). Not
  // the shared worker token (it registers and reads; kept only for a job
  // whose active segment has a worker registered before per-worker
  // secrets), not an agent token.
  std::optional<Reply> JobScoped(const httplib::Request& req, int64_t job) const;

  // Who registers workers into job `job` (POST /v1/jobs/{id}/workers): an
  // admin or the shared worker token; an agent or node token for a node it
  // names (Route checked a node token's name); the job's job token; a
  // segment token of the job's active segment (the worker is then on the
  // token's node, `*node`).
  std::optional<Reply> Registration(const httplib::Request& req, int64_t job,
                                    std::optional<std::string>* node) const;

  // Who is reading the job views.
  JobReader Reader(const httplib::Request& req) const;

 private:
  std::optional<Reply> Scoped(const ScopedToken& t, int64_t job) const;
  std::optional<Reply> NodeCaller(const std::string& pattern, Right need,
                                  const httplib::Request& req, bool* node_token) const;

  const TokenAuth& auth_;
  Coordinator* const coordinator_;
};

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SERVER_AUTHORIZATION_H_
