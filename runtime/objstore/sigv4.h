// AWS Signature Version 4 for S3 requests (header-based, "AWS4-HMAC-SHA256"),
// and the digests S3 asks for (SHA-256 hex, Content-MD5). Used by S3Client;
// the canonical-request pieces are exposed so tests can check them against
// AWS's published examples.
// Pure functions, thread-safe. The secret key never leaves Sign().
#ifndef STINT_RUNTIME_OBJSTORE_SIGV4_H_
#define STINT_RUNTIME_OBJSTORE_SIGV4_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "objstore/s3_credentials.h"

namespace stint {
namespace internal {

// The hex SHA-256 of the empty string: the payload hash of a bodiless request.
extern const char kEmptyPayloadSha256[];
// Sent as x-amz-content-sha256 when the body is not hashed (see S3Client).
extern const char kUnsignedPayload[];

// Lower-case hex SHA-256 of `size` bytes at `data`.
std::string Sha256Hex(const char* data, size_t size);
inline std::string Sha256Hex(const std::string& s) { return Sha256Hex(s.data(), s.size()); }
// Base64 of the MD5 of `size` bytes at `data`: S3's Content-MD5 header.
std::string Md5Base64(const char* data, size_t size);

// S3's URI encoding: RFC 3986 unreserved characters (A-Z a-z 0-9 - . _ ~)
// stay, every other byte becomes %XY (upper-case hex); '/' stays when
// `keep_slash` (an object key in the path), else becomes %2F (query values).
// Encoded once: S3 does not double-encode the canonical URI.
std::string S3UriEncode(const std::string& s, bool keep_slash);

// One request as SigV4 sees it.
struct SigV4Request {
  std::string method;         // "GET", "PUT", ...
  std::string canonical_uri;  // the path as sent, already encoded ("/bucket/a%20b")
  // Query parameters, not encoded; a flag parameter ("uploads") has value "".
  std::vector<std::pair<std::string, std::string>> query;
  // Every header to sign (host and x-amz-date at least): any case; values
  // are trimmed and inner runs of spaces folded to one.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string payload_hash;  // hex SHA-256 of the body, or kUnsignedPayload
};

// "name=value&..." with names and values encoded, sorted by name then
// value: the canonical query string, and what S3Client sends after '?'.
std::string CanonicalQueryString(const std::vector<std::pair<std::string, std::string>>& query);

struct SigV4Signature {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;      // lower-case hex
  std::string authorization;  // the Authorization header's value
};

// Signs `request` for service "s3" at `amz_date` ("20130524T000000Z", UTC)
// in `region`. The caller must send exactly the headers it signed.
SigV4Signature SignV4(const SigV4Request& request, const S3Credentials& credentials,
                      const std::string& region, const std::string& amz_date);

}  // namespace internal
}  // namespace stint

#endif  // STINT_RUNTIME_OBJSTORE_SIGV4_H_
