// S3Client: the object-store operations a checkpoint tier needs (upload a
// file after each commit, ranged loads straight into destination buffers,
// retention deletes, resumable multipart uploads) against AWS S3 or any
// S3-compatible server (rclone serve s3, MinIO). libcurl carries the
// requests and signs them (SigV4, CURLOPT_AWS_SIGV4).
//
// Thread-safe: any number of threads may call one client at once. A call
// takes a libcurl handle from the client's pool of idle ones (their
// connections are kept alive and reused) or makes a new one, so calls never
// wait on one another's transfers.
//
// Every call returns a Status naming the operation, the s3://bucket/key, the
// HTTP status and S3's <Code> and <Message>. Codes: kNotFound (no such key,
// bucket or upload), kUnauthenticated (unknown key id, bad signature,
// expired token), kPermissionDenied (403 otherwise), kInvalidArgument
// (another 4xx), kUnimplemented (501: the server lacks the operation),
// kDataLoss (an object shorter than a requested range), kUnavailable (5xx
// or no connection, after the retries in S3Config). The secret key and the
// session token never appear in a message.
#ifndef STINT_RUNTIME_OBJSTORE_S3_CLIENT_H_
#define STINT_RUNTIME_OBJSTORE_S3_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "objstore/s3_config.h"
#include "objstore/s3_types.h"
#include "stint/status.h"

struct curl_slist;  // <curl/curl.h>, which only s3_client.cc includes

namespace stint {

class S3Client {
 public:
  // A client for `bucket` at config.endpoint. kInvalidArgument for a
  // malformed endpoint, an empty bucket, or retry/timeout settings out of
  // range. Nothing is sent until the first call.
  static Result<std::unique_ptr<S3Client>> Create(const S3Config& config,
                                                  const std::string& bucket);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  const std::string& bucket() const { return bucket_; }
  // scheme://host:port, what messages name.
  const std::string& endpoint() const { return endpoint_text_; }

  // PUT /bucket. OK also when the bucket exists and this caller can use it
  // (HEAD on it succeeds).
  Status CreateBucket();

  // Stores `size` bytes at `data` under `key`, replacing any object there.
  // `data` is read (possibly more than once, on retries) until the call
  // returns; it is not copied. `metadata` is stored with it.
  Status PutObject(const std::string& key, const char* data, size_t size,
                   const S3Metadata& metadata = {});
  // The whole object.
  Result<std::string> GetObject(const std::string& key);
  // Bytes [offset, offset + length) of the object, written straight into
  // dest[0, length) as they arrive (no whole-object copy). `dest` must hold
  // `length` bytes; on error its contents are unspecified. kDataLoss naming
  // the bytes expected and got when the object ends before offset + length.
  Status GetRange(const std::string& key, uint64_t offset, size_t length, char* dest);
  // The object's size, ETag and user metadata; kNotFound when there is no such key.
  Result<S3ObjectInfo> HeadObject(const std::string& key);
  // Every object whose key starts with `prefix`, in key order, following
  // ListObjectsV2's continuation tokens (S3Config::list_page_size a page).
  // With `max_keys` > 0: the first max_keys of them at most, from one page
  // of that size (or list_page_size, if smaller), for "is anything there?".
  Result<std::vector<S3ObjectInfo>> ListObjects(const std::string& prefix, size_t max_keys = 0);

  // Removes `key`; OK when there was none (S3's semantics).
  Status DeleteObject(const std::string& key);
  // Removes `keys` with DeleteObjects (POST ?delete, up to 1000 a request),
  // or one by one when the server does not implement it. kIoError naming
  // the first keys that could not be removed.
  Status DeleteObjects(const std::vector<std::string>& keys);

  // Server-side copy of `src_key` to `dst_key` in this bucket (objects up
  // to 5 GiB, S3's limit for one CopyObject).
  Status CopyObject(const std::string& src_key, const std::string& dst_key);

  // Multipart upload: Create, then UploadPart for parts 1..N (every part but
  // the last at least 5 MiB on AWS), then Complete with their ETags, or
  // Abort. An uploader that restarts finds its upload with
  // ListMultipartUploads and what it already sent with ListParts.
  // Returns the upload id. `metadata` is the completed object's.
  Result<std::string> CreateMultipartUpload(const std::string& key,
                                            const S3Metadata& metadata = {});
  // Returns the part's ETag (quotes included). `data` as in PutObject.
  Result<std::string> UploadPart(const std::string& key, const std::string& upload_id,
                                 int part_number, const char* data, size_t size);
  // `parts` in ascending part_number order; their etag fields are used.
  Status CompleteMultipartUpload(const std::string& key, const std::string& upload_id,
                                 const std::vector<S3Part>& parts);
  Status AbortMultipartUpload(const std::string& key, const std::string& upload_id);
  // Uploads in progress under `prefix`. kUnimplemented when the server lacks it.
  Result<std::vector<S3MultipartUpload>> ListMultipartUploads(const std::string& prefix);
  // The parts stored so far, by part number. kUnimplemented when the server lacks it.
  Result<std::vector<S3Part>> ListParts(const std::string& key, const std::string& upload_id);

 private:
  struct Exchange;
  struct Reply;
  struct Attempt;
  struct Transfer;
  class HandlePool;

  S3Client(const S3Config& config, std::string bucket, std::string host, int port,
           std::string scheme, bool path_style);

  // Sends `ex` with the retry policy; the 2xx reply, or the error Status.
  Result<Reply> Perform(const Exchange& ex);
  Attempt Once(const Exchange& ex);
  // Sets every option of one attempt on `curl` (a CURL*; libcurl's CURL is
  // void) for `transfer`; the header list it builds goes to *headers, which
  // the caller frees after the transfer. `errbuf` holds CURL_ERROR_SIZE bytes.
  Status Configure(void* curl, Transfer* transfer, curl_slist** headers, char* errbuf) const;
  // "s3://bucket/key" (the key only when not empty).
  std::string Where(const std::string& key) const;
  // `message` with the secret and the session token replaced.
  std::string Redact(std::string message) const;

  // Immutable after construction.
  const S3Config config_;
  const std::string bucket_;
  const bool path_style_;
  // scheme://host:port of every request's URL (host is bucket.host when
  // virtual-host style; an IPv6 address in brackets).
  const std::string url_base_;
  const std::string endpoint_text_;

  // Thread-safe itself.
  const std::unique_ptr<HandlePool> handles_;
};

}  // namespace stint

#endif  // STINT_RUNTIME_OBJSTORE_S3_CLIENT_H_
