// Per-worker secrets: registration hands each worker incarnation a secret of
// its own, "stw1.<worker id>.<64 hex digits>"; /v1/workers/{wid}/* accepts
// only that worker's secret. stintd keeps the SHA-256 of the random part,
// never the secret. Thread-safe (no state).
#ifndef STINT_TOOLS_STINTD_SERVER_WORKER_SECRET_H_
#define STINT_TOOLS_STINTD_SERVER_WORKER_SECRET_H_

#include <cstdint>
#include <string>

#include "stint/status.h"

namespace stint::stintd {

struct WorkerSecret {
  std::string random;  // 64 hex digits from the kernel's CSPRNG
  std::string hash;    // lowercase hex SHA-256 of `random`: what the store keeps
  // The secret the worker sends: "stw1.<worker_id>.<random>".
  std::string For(int64_t worker_id) const;
};

// A fresh secret; kIoError if the kernel's random source fails.
Result<WorkerSecret> NewWorkerSecret();

// Splits a bearer token of the "stw1." form. False for any other token (an
// admin or shared worker token, garbage).
bool ParseWorkerSecret(const std::string& token, int64_t* worker_id, std::string* random);

// A node's own token (POST /v1/nodes/{name}/token), "stn1.<node>.<random>"
// with `random` from NewWorkerSecret(); the store keeps the same hash.
std::string NodeTokenFor(const std::string& node, const std::string& random);
// Splits a bearer token of the "stn1." form. False for any other token.
bool ParseNodeToken(const std::string& token, std::string* node, std::string* random);

// A registration token (API.md, "Credentials"): "stj1.<job>.<mac>" registers
// into one job and reaches its KV and fencing check; "stg1.<segment>.<node>.
// <mac>" does so for one segment on one node, while that segment is active.
// `mac` is 64 hex digits (TokenAuth::ScopedTokenMac); segment 0: a job token.
struct ScopedToken {
  int64_t job = 0;      // a job token's job
  int64_t segment = 0;  // a segment token's segment
  std::string node;     // a segment token's node
  std::string mac;
  std::string Text() const;  // the token, from the fields above
};
// Splits a bearer token of the "stj1." or "stg1." form (the MAC unchecked).
// False for any other token.
bool ParseScopedToken(const std::string& token, ScopedToken* out);

// Lowercase hex SHA-256 (FIPS 180-4) of `data`.
std::string Sha256Hex(const std::string& data);
// Lowercase hex HMAC-SHA256 (RFC 2104) of `data` under `key`.
std::string HmacSha256Hex(const std::string& key, const std::string& data);

// Compares without letting the time tell how many leading bytes matched.
bool ConstantTimeEqual(const std::string& a, const std::string& b);

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SERVER_WORKER_SECRET_H_
