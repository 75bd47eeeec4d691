// Bearer-token rights: admin (everything) and worker (worker endpoints,
// KV, read-only views). Tokens come from files (one per line, '#' comments)
// or the environment; comparison is constant-time.
#ifndef STINT_TOOLS_STINTD_SERVER_AUTH_H_
#define STINT_TOOLS_STINTD_SERVER_AUTH_H_

#include <string>
#include <vector>

#include "stint/status.h"

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

 private:
  std::vector<std::string> admin_, worker_, agent_;
};

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SERVER_AUTH_H_
