// The values S3Client's operations return and take: an object's size and
// ETag, a multipart upload, its parts. Plain structs: thread-compatible.
#ifndef STINT_RUNTIME_OBJSTORE_S3_TYPES_H_
#define STINT_RUNTIME_OBJSTORE_S3_TYPES_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace stint {

// User metadata of an object: (name, value) pairs sent as "x-amz-meta-<name>"
// headers when it is written and returned by HeadObject. Names in lower
// case, values printable ASCII (S3 keeps them as sent; 2 KiB in all at most).
using S3Metadata = std::vector<std::pair<std::string, std::string>>;

// One object: from HeadObject or one entry of ListObjects.
struct S3ObjectInfo {
  std::string key;
  uint64_t size = 0;
  std::string etag;  // as the server sent it, quotes included ("\"9b2c...\"")
  S3Metadata metadata;  // HeadObject only: the x-amz-meta-* headers, prefix removed
};

// An upload started and neither completed nor aborted (ListMultipartUploads).
struct S3MultipartUpload {
  std::string key;
  std::string upload_id;
  std::string initiated;  // ISO 8601, as the server sent it
};

// A part: what UploadPart stored (ListParts), or what Complete assembles.
struct S3Part {
  int part_number = 0;  // 1..10000
  std::string etag;     // UploadPart's answer, quotes included
  uint64_t size = 0;    // ListParts only; ignored by CompleteMultipartUpload
};

}  // namespace stint

#endif  // STINT_RUNTIME_OBJSTORE_S3_TYPES_H_
