// S3Config: where an S3Client sends its requests, as whom, and how hard it
// tries; FromEnvironment reads it the way the AWS CLI and SDKs do
// (AWS_ENDPOINT_URL_S3, AWS_REGION, AWS_ACCESS_KEY_ID, ~/.aws/credentials, ...).
// A plain struct: thread-compatible.
#ifndef STINT_RUNTIME_OBJSTORE_S3_CONFIG_H_
#define STINT_RUNTIME_OBJSTORE_S3_CONFIG_H_

#include <chrono>
#include <functional>
#include <string>

#include "base/http_endpoint.h"
#include "objstore/s3_credentials.h"
#include "stint/status.h"

namespace stint {

struct S3Config {
  // "http(s)://host[:port]", no path. Default: https://s3.<region>.amazonaws.com.
  std::string endpoint;
  std::string region = "us-east-1";
  S3Credentials credentials;
  // Path-style addressing (endpoint/bucket/key): what rclone, MinIO and most
  // S3-compatible servers expect. False: virtual-host style
  // (bucket.host/key), which AWS prefers; a bucket with a '.' still goes
  // path-style (its name would not match the certificate).
  bool path_style = true;
  // Retries after the first attempt, for connection errors, HTTP 500, 502,
  // 503, 504 and S3's SlowDown / InternalError. Never for other answers.
  int max_retries = 4;
  // Backoff before retry n: uniform in [0, min(max_backoff, initial_backoff * 2^(n-1))].
  std::chrono::milliseconds initial_backoff{100};
  std::chrono::milliseconds max_backoff{std::chrono::seconds(5)};
  // Of one attempt: the limit on connecting, and on any stall (under one
  // byte a second moving for this long). No limit on a transfer's total
  // time, which a large upload needs.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(30)};
  // https only: PEM CA bundle; empty: the system's.
  std::string ca_file;
  // max-keys of one ListObjectsV2 / ListMultipartUploads page (1..1000).
  int list_page_size = 1000;

  // From the environment, through `getenv` (returns "" for unset), so tests
  // need no setenv:
  //   endpoint:    AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else AWS's
  //                (then path_style is false: virtual-host style)
  //   region:      AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1
  //   credentials: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN),
  //                else profile AWS_PROFILE (else "default") of the file
  //                AWS_SHARED_CREDENTIALS_FILE (else $HOME/.aws/credentials).
  // kInvalidArgument for a half-set key pair or a malformed endpoint, or the
  // credentials file's error; no credentials at all is not an error here
  // (the server answers 403, which names the request).
  static Result<S3Config> FromEnvironment(const std::function<std::string(const char*)>& getenv);
  // The same on the process's environment.
  static Result<S3Config> FromEnvironment();
};

// An S3 endpoint split (base/http_endpoint.h); kInvalidArgument, naming the
// string, for anything but http(s)://host[:port][/].
Result<HttpEndpoint> ParseS3Endpoint(const std::string& endpoint);

}  // namespace stint

#endif  // STINT_RUNTIME_OBJSTORE_S3_CONFIG_H_
