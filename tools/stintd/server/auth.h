// Bearer-token rights (API.md, "Credentials"). Who may do what:
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
// Anything else on a job it is not scoped to: 403. Tokens come from files
// (one per line, '#' comments) or the environment; comparison is
// constant-time. http_api.cc applies these rules with stintd's state.
#ifndef STINT_TOOLS_STINTD_SERVER_AUTH_H_
#define STINT_TOOLS_STINTD_SERVER_AUTH_H_

#include <string>
#include <vector>

#include "stint/status.h"
#include "stintd/server/worker_secret.h"

namespace stint::stintd {

// kAgent (stint-agent: the node endpoints, and reads) is beside kWorker,
// not above it: Allows() says which right covers which.
enum class Right : int { kNone = 0, kWorker = 1, kAdmin = 2, kAgent = 3 };

// Whether a caller holding `have` may use an endpoint that needs `need`:
// admin covers everything; a read (kWorker) is open to agents too.
bool Allows(Right have, Right need);

// The token of an "Authorization: Bearer <token>" header value, trimmed; ""
// for any other value.
std::string BearerToken(const std::string& authorization_header);

class TokenAuth {
 public:
  // The admin and worker lists must each hold at least one token of >= 16
  // characters; agent tokens are optional (none: the node endpoints answer
  // 401), >= 16 characters too. No token may be in two lists (a worker must
  // never hold admin rights by accident).
  static Result<TokenAuth> Create(std::vector<std::string> admin, std::vector<std::string> worker,
                                  std::vector<std::string> agent = {});
  // Tokens from `file` (if non-empty) plus `$env_var` (if set and non-empty).
  static Result<std::vector<std::string>> Load(const std::string& file, const char* env_var);

  // The right an "Authorization: Bearer <token>" header value carries.
  // Per-worker secrets (worker_secret.h) carry none here: the worker
  // endpoints check them against the worker they name.
  Right Check(const std::string& authorization_header) const;

  // The job token of `job` (segment 0) or the segment token of `segment` on
  // `node`: a MAC under a key derived from the first admin token, so stintd
  // keeps nothing and a restart answers the same tokens; changing that admin
  // token revokes them all.
  std::string JobToken(int64_t job) const;
  std::string SegmentToken(int64_t segment, const std::string& node) const;
  // Whether the header carries a job or segment token with a valid MAC
  // (then `*out` is it). False for any other token.
  bool CheckScoped(const std::string& authorization_header, ScopedToken* out) const;

 private:
  std::string ScopedMac(const ScopedToken& t) const;

  std::vector<std::string> admin_, worker_, agent_;
  std::string scoped_key_;  // HMAC key of the job and segment tokens
};

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SERVER_AUTH_H_
