// Bearer tokens (API.md, "Credentials"): the admin, shared worker and agent
// token lists, the right each carries, and the job and segment registration
// tokens ("stj1.", "stg1.") stintd derives by MAC. Who may do what with them
// is authorization.h's. Tokens come from files (one per line, '#' comments)
// or the environment; comparison is constant-time.
#ifndef STINT_TOOLS_STINTD_SERVER_AUTH_H_
#define STINT_TOOLS_STINTD_SERVER_AUTH_H_

#include <string>
#include <vector>

#include "stint/status.h"
#include "stintd/server/worker_secret.h"

namespace stint::stintd {

// kAgent (stint-agent: the node endpoints, and reads) is beside kWorker,
// not above it: Allows() (authorization.h) says which right covers which.
enum class Right : int { kNone = 0, kWorker = 1, kAdmin = 2, kAgent = 3 };

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
