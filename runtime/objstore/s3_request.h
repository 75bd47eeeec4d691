// The parts of an S3 request that S3Client builds itself: the object key
// encoded into the path, the query string, and the Content-MD5 body
// checksum DeleteObjects needs. Signing is not here: libcurl signs
// (CURLOPT_AWS_SIGV4, see s3_client.cc).
// Pure functions, thread-safe.
#ifndef STINT_RUNTIME_OBJSTORE_S3_REQUEST_H_
#define STINT_RUNTIME_OBJSTORE_S3_REQUEST_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace stint {
namespace internal {

// S3's URI encoding: RFC 3986 unreserved characters (A-Z a-z 0-9 - . _ ~)
// stay, every other byte becomes %XY (upper-case hex); '/' stays when
// `keep_slash` (an object key in the path), else becomes %2F (query values).
// Encoded once: S3 does not double-encode the path.
std::string S3UriEncode(const std::string& s, bool keep_slash);

// "name=value&..." with names and values encoded as above and sorted by
// encoded name, then value; a flag parameter ("uploads", value "") is
// written "uploads=". This is the form SigV4's canonical query string
// takes, and S3Client sends it exactly so: libcurl 7.88 signs the query as
// it is in the URL, without sorting or normalising it.
std::string S3QueryString(const std::vector<std::pair<std::string, std::string>>& query);

// Base64 of the MD5 of `size` bytes at `data`: S3's Content-MD5 header (a
// body checksum DeleteObjects requires, not a signature).
std::string Md5Base64(const char* data, size_t size);

}  // namespace internal
}  // namespace stint

#endif  // STINT_RUNTIME_OBJSTORE_S3_REQUEST_H_
