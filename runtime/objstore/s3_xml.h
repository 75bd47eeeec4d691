// The few S3 XML answers S3Client reads (ListObjectsV2, errors, multipart,
// DeleteObjects), read by a small scanner instead of an XML library: S3's
// answers are flat, element-only documents with the five predefined
// entities (and numeric references). Not a general XML parser: no CDATA,
// no comments inside the elements read, no namespaces prefixes.
// Pure functions, thread-safe.
#ifndef STINT_RUNTIME_OBJSTORE_S3_XML_H_
#define STINT_RUNTIME_OBJSTORE_S3_XML_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "objstore/s3_types.h"
#include "stint/status.h"

namespace stint {
namespace internal {

// `s` with &amp; &lt; &gt; &quot; &apos; and &#N; / &#xH; (as UTF-8)
// replaced; an unknown or malformed reference stays as it is.
std::string XmlUnescape(std::string_view s);
// `s` with & < > " ' escaped: for keys in the request bodies.
std::string XmlEscape(std::string_view s);

// The raw (still escaped) content of each <tag ...>...</tag> or <tag/> in
// `xml`, in order, at any depth. A tag is matched whole: "Key" does not
// match <KeyMarker>. Elements of the same name must not nest.
std::vector<std::string_view> XmlElements(std::string_view xml, std::string_view tag);
// The unescaped content of the first <tag>, if any.
std::optional<std::string> XmlFirst(std::string_view xml, std::string_view tag);

// S3's <Error><Code>..</Code><Message>..</Message></Error>; empty fields
// when the body is not one (an HTML page from a proxy, nothing at all).
struct S3ErrorBody {
  std::string code;
  std::string message;
};
S3ErrorBody ParseS3Error(std::string_view xml);

// One page of ListObjectsV2 (<ListBucketResult>).
struct S3ListPage {
  std::vector<S3ObjectInfo> objects;
  bool truncated = false;
  std::string next_continuation_token;
};
// kInternal, naming what is wrong, for an answer that is not a
// ListBucketResult, an entry without a key or with a size that is not a
// number, or a truncated page without a continuation token.
Result<S3ListPage> ParseListObjectsV2(std::string_view xml);

// <InitiateMultipartUploadResult><UploadId>.
Result<std::string> ParseInitiateMultipartUpload(std::string_view xml);

// One page of ListMultipartUploads (<ListMultipartUploadsResult>).
struct S3UploadsPage {
  std::vector<S3MultipartUpload> uploads;
  bool truncated = false;
  std::string next_key_marker;
  std::string next_upload_id_marker;
};
Result<S3UploadsPage> ParseListMultipartUploads(std::string_view xml);

// One page of ListParts (<ListPartsResult>).
struct S3PartsPage {
  std::vector<S3Part> parts;
  bool truncated = false;
  std::string next_part_number_marker;
};
Result<S3PartsPage> ParseListParts(std::string_view xml);

// DeleteObjects' <DeleteResult>: the keys that failed, each with its
// <Code> and <Message> ("key: Code: Message").
std::vector<std::string> ParseDeleteErrors(std::string_view xml);

}  // namespace internal
}  // namespace stint

#endif  // STINT_RUNTIME_OBJSTORE_S3_XML_H_
