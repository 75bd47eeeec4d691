// Bearer-token rights: admin (everything) and worker (worker endpoints,
// KV, read-only views). Tokens come from files (one per line, '#' comments)
// or the environment; comparison is constant-time.
#ifndef STINT_TOOLS_STINTD_SERVER_AUTH_H_
#define STINT_TOOLS_STINTD_SERVER_AUTH_H_

#include <string>
#include <vector>

#include "stint/status.h"

namespace stint::stintd {

enum class Right : int { kNone = 0, kWorker = 1, kAdmin = 2 };

// The token of an "Authorization: Bearer <token>" header value, trimmed; ""
// for any other value.
std::string BearerToken(const std::string& authorization_header);

class TokenAuth {
 public:
  // Each list must hold at least one token of >= 16 characters, and no
  // token may be in both (a worker must never hold admin rights by accident).
  static Result<TokenAuth> Create(std::vector<std::string> admin, std::vector<std::string> worker);
  // Tokens from `file` (if non-empty) plus `$env_var` (if set and non-empty).
  static Result<std::vector<std::string>> Load(const std::string& file, const char* env_var);

  // The right an "Authorization: Bearer <token>" header value carries.
  // Per-worker secrets (worker_secret.h) carry none here: the worker
  // endpoints check them against the worker they name.
  Right Check(const std::string& authorization_header) const;

 private:
  std::vector<std::string> admin_, worker_;
};

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SERVER_AUTH_H_
