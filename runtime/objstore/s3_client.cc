#include "objstore/s3_client.h"

#include <httplib.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <thread>
#include <utility>

#include "base/strings.h"
#include "objstore/s3_xml.h"
#include "objstore/sigv4.h"

namespace stint {
namespace {

using Clock = std::chrono::steady_clock;
using Pairs = std::vector<std::pair<std::string, std::string>>;

// Of an error answer's body, what is kept (S3's error documents are small).
constexpr size_t kMaxErrorBody = 64 * 1024;
// DeleteObjects takes at most this many keys a request.
constexpr size_t kMaxDeleteBatch = 1000;

// Holds SIGPIPE blocked on this thread while it writes to a socket, and
// swallows one raised meanwhile: OpenSSL writes with write(2), not
// send(MSG_NOSIGNAL), so a server closing a TLS connection would otherwise
// kill the process. The same guard as coord/http_json.cc's.
// TODO(s3): move it to base/ and share it with coord/ once both change.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~ScopedSigpipeBlock() {
    if (!sigismember(&old_, SIGPIPE)) {
      const timespec zero{0, 0};
      while (sigtimedwait(&pipe_, nullptr, &zero) == SIGPIPE) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
};

std::string DescribeTransportError(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "connection failed (refused or unreachable)";
    case httplib::Error::ConnectionTimeout:
      return "connection timed out";
    case httplib::Error::Read:
      return "no complete answer (connection closed, or the read timed out)";
    case httplib::Error::Write:
      return "could not send the request (connection closed, or the write timed out)";
    case httplib::Error::SSLConnection:
      return "TLS handshake failed (is the endpoint https?)";
    case httplib::Error::SSLServerVerification:
      return "TLS: the server's certificate was not verified";
    default:
      return httplib::to_string(e);
  }
}

// "20130524T000000Z" for now.
std::string AmzDate() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

bool RetryableS3Code(const std::string& code) {
  return code == "SlowDown" || code == "InternalError" || code == "ServiceUnavailable" ||
         code == "RequestTimeout";
}

bool RetryableHttp(int status) {
  return status == 500 || status == 502 || status == 503 || status == 504;
}

// "bytes a-b/total" (a 206's Content-Range).
bool ParseContentRange(const std::string& v, uint64_t* first, uint64_t* last) {
  constexpr char kUnit[] = "bytes ";
  if (v.compare(0, sizeof(kUnit) - 1, kUnit) != 0) return false;
  const std::string spec = v.substr(sizeof(kUnit) - 1);
  const size_t dash = spec.find('-');
  const size_t slash = spec.find('/');
  if (dash == std::string::npos || slash == std::string::npos || slash < dash) return false;
  return ParseDecimalU64(spec.substr(0, dash), first) &&
         ParseDecimalU64(spec.substr(dash + 1, slash - dash - 1), last);
}

// The first value of header `name` (case-insensitive), "" when absent.
std::string HeaderValue(const httplib::Headers& headers, const char* name) {
  const auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

std::string Shorten(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return s;
}

}  // namespace

// One request, before signing.
struct S3Client::Exchange {
  std::string op;      // "GetObject": first word of every message
  std::string what;    // "s3://bucket/key part 3": the rest of the message's subject
  std::string method;  // GET HEAD PUT POST DELETE
  std::string key;     // "" for a bucket-level request
  Pairs query;         // not encoded
  Pairs headers;       // extra headers, all signed
  const char* body = nullptr;
  size_t body_size = 0;
  const char* content_type = "application/octet-stream";
  // Object data goes unhashed (x-amz-content-sha256: UNSIGNED-PAYLOAD): a
  // SHA-256 pass over a multi-GiB part would cost as much CPU as sending it
  // and delay the first byte; TLS protects it in transit. Small XML bodies
  // are hashed.
  bool hash_body = true;
  // GET: a 2xx body is written to dest[0, dest_size) instead of Reply::body.
  char* dest = nullptr;
  size_t dest_size = 0;
  // CompleteMultipartUpload and CopyObject may fail after a 200 has begun:
  // the body is then an <Error>.
  bool error_in_200 = false;
};

struct S3Client::Reply {
  int status = 0;
  httplib::Headers headers;
  std::string body;
  size_t received = 0;  // bytes written to dest
};

struct S3Client::Attempt {
  Reply reply;
  bool answered = false;        // an HTTP status came back
  std::string transport_error;  // when not answered
  bool retryable = false;
  Status fatal;  // a failure that is not the server's answer (an overlong body)
};

Result<std::unique_ptr<S3Client>> S3Client::Create(const S3Config& config,
                                                   const std::string& bucket) {
  STINT_ASSIGN_OR_RETURN(S3Endpoint ep, ParseS3Endpoint(config.endpoint));
  if (bucket.empty() || bucket.find('/') != std::string::npos) {
    return Status::InvalidArgument("S3 bucket '" + bucket + "': empty or has a '/'");
  }
  if (config.max_retries < 0 || config.initial_backoff.count() <= 0 ||
      config.max_backoff < config.initial_backoff || config.request_timeout.count() <= 0 ||
      config.list_page_size < 1 || config.list_page_size > 1000) {
    return Status::InvalidArgument(
        "S3Config: need max_retries >= 0, 0 < initial_backoff <= max_backoff, "
        "request_timeout > 0, list_page_size in 1..1000");
  }
  if (config.region.empty()) return Status::InvalidArgument("S3Config: empty region");
  // A bucket with a dot does not match a wildcard certificate as a host name.
  const bool path_style = config.path_style || bucket.find('.') != std::string::npos;
  std::string host = path_style ? ep.host : bucket + "." + ep.host;
  return std::unique_ptr<S3Client>(
      new S3Client(config, bucket, std::move(host), ep.port, ep.scheme, path_style));
}

S3Client::S3Client(const S3Config& config, std::string bucket, std::string host, int port,
                   std::string scheme, bool path_style)
    : config_(config),
      bucket_(std::move(bucket)),
      scheme_(std::move(scheme)),
      host_(std::move(host)),
      port_(port),
      path_style_(path_style),
      host_header_(S3Endpoint{scheme_, host_, port_}.HostHeader()),
      endpoint_text_(S3Endpoint{scheme_, host_, port_}.ToString()) {}

S3Client::~S3Client() = default;

std::string S3Client::Where(const std::string& key) const {
  return "s3://" + bucket_ + (key.empty() ? "" : "/" + key);
}

std::string S3Client::Redact(std::string message) const {
  for (const std::string* secret :
       {&config_.credentials.secret_access_key, &config_.credentials.session_token}) {
    if (secret->empty()) continue;
    for (size_t at; (at = message.find(*secret)) != std::string::npos;) {
      message.replace(at, secret->size(), "[redacted]");
    }
  }
  return message;
}

S3Client::Attempt S3Client::Once(const Exchange& ex) {
  Attempt a;
  std::string path = path_style_ ? "/" + bucket_ : "";
  if (!ex.key.empty()) path += "/" + internal::S3UriEncode(ex.key, /*keep_slash=*/true);
  if (path.empty()) path = "/";
  const std::string query = internal::CanonicalQueryString(ex.query);

  internal::SigV4Request sign;
  sign.method = ex.method;
  sign.canonical_uri = path;
  sign.query = ex.query;
  sign.payload_hash = !ex.hash_body       ? internal::kUnsignedPayload
                      : ex.body_size == 0 ? internal::kEmptyPayloadSha256
                                          : internal::Sha256Hex(ex.body, ex.body_size);
  const std::string amz_date = AmzDate();
  sign.headers = ex.headers;
  sign.headers.emplace_back("host", host_header_);
  sign.headers.emplace_back("x-amz-date", amz_date);
  sign.headers.emplace_back("x-amz-content-sha256", sign.payload_hash);
  if (!config_.credentials.session_token.empty()) {
    sign.headers.emplace_back("x-amz-security-token", config_.credentials.session_token);
  }
  httplib::Headers headers;
  for (const auto& [name, value] : sign.headers) headers.emplace(name, value);
  if (!config_.credentials.empty()) {
    headers.emplace(
        "Authorization",
        internal::SignV4(sign, config_.credentials, config_.region, amz_date).authorization);
  }
  const std::string target = query.empty() ? path : path + "?" + query;

  httplib::Client client(scheme_ + "://" +
                         (host_.find(':') != std::string::npos ? "[" + host_ + "]" : host_) + ":" +
                         std::to_string(port_));
  // The path is sent as signed: already encoded, so httplib must not again.
  client.set_url_encode(false);
  client.set_decompress(false);
  client.set_keep_alive(false);
  client.set_tcp_nodelay(true);
  client.set_connection_timeout(config_.request_timeout);
  client.set_read_timeout(config_.request_timeout);
  client.set_write_timeout(config_.request_timeout);
  if (scheme_ == "https") {
    client.enable_server_certificate_verification(true);
    if (!config_.ca_file.empty()) client.set_ca_cert_path(config_.ca_file);
  }

  Reply& reply = a.reply;
  bool overflow = false;
  bool stopped_early = false;
  auto send = [&]() -> httplib::Result {
    if (ex.method == "GET") {
      return client.Get(
          target, headers,
          [&](const httplib::Response& r) {
            reply.status = r.status;
            reply.headers = r.headers;
            return true;
          },
          [&](const char* data, size_t n) {
            const bool to_dest = ex.dest != nullptr && reply.status >= 200 && reply.status < 300;
            if (!to_dest) {
              const size_t room = kMaxErrorBody - std::min(kMaxErrorBody, reply.body.size());
              if (ex.dest == nullptr) {
                reply.body.append(data, n);  // GetObject: the whole object
              } else {
                reply.body.append(data, std::min(n, room));
              }
              return true;
            }
            if (n > ex.dest_size - reply.received) {
              // A 200 without Content-Range is the whole object (a server
              // that ignores Range); GetRange takes its head when the range
              // starts at 0 and stops reading. Any other overrun is a fault.
              if (reply.status == 200 && HeaderValue(reply.headers, "Content-Range").empty()) {
                std::memcpy(ex.dest + reply.received, data, ex.dest_size - reply.received);
                reply.received = ex.dest_size;
                stopped_early = true;
              } else {
                overflow = true;
              }
              return false;
            }
            std::memcpy(ex.dest + reply.received, data, n);
            reply.received += n;
            return true;
          });
    }
    if (ex.method == "HEAD") return client.Head(target, headers);
    if (ex.method == "DELETE") return client.Delete(target, headers);
    if (ex.method == "POST") {
      return client.Post(target, headers, ex.body ? ex.body : "", ex.body_size, ex.content_type);
    }
    // PUT: the caller's buffer is streamed, not copied.
    if (ex.body_size == 0) return client.Put(target, headers, "", 0, ex.content_type);
    return client.Put(
        target, headers, ex.body_size,
        [&](size_t offset, size_t length, httplib::DataSink& sink) {
          const size_t n = std::min<size_t>(length, 1 << 20);
          return sink.write(ex.body + offset, n);
        },
        ex.content_type);
  };
  httplib::Result r = [&] {
    ScopedSigpipeBlock no_sigpipe;
    return send();
  }();
  if (overflow) {
    a.fatal = Status::Internal("the server sent more than the " + std::to_string(ex.dest_size) +
                               " bytes asked for");
    return a;
  }
  if (!r && stopped_early) {
    a.answered = true;
    return a;
  }
  if (!r) {
    a.transport_error = DescribeTransportError(r.error());
    a.retryable = r.error() != httplib::Error::SSLServerVerification &&
                  r.error() != httplib::Error::SSLLoadingCerts;
    // A GET's status came through the handler before the body failed.
    reply.status = 0;
    return a;
  }
  a.answered = true;
  if (ex.method != "GET") {
    reply.status = r->status;
    reply.headers = r->headers;
    reply.body = std::move(r->body);
  }
  const bool ok = reply.status >= 200 && reply.status < 300;
  if (ok && !ex.error_in_200) return a;
  const internal::S3ErrorBody error = internal::ParseS3Error(reply.body);
  if (ok && error.code.empty()) return a;
  a.retryable = RetryableHttp(reply.status) || RetryableS3Code(error.code);
  return a;
}

Result<S3Client::Reply> S3Client::Perform(const Exchange& ex) {
  const std::string subject = "S3 " + ex.op + " " + ex.what;
  const auto start = Clock::now();
  thread_local std::minstd_rand jitter(std::random_device{}());
  for (int attempt = 1;; ++attempt) {
    Attempt a = Once(ex);
    if (!a.fatal.ok()) {
      return Status(a.fatal.code(), Redact(subject + ": " + a.fatal.message()));
    }
    const Reply& reply = a.reply;
    const internal::S3ErrorBody error =
        a.answered ? internal::ParseS3Error(reply.body) : internal::S3ErrorBody{};
    const bool ok = a.answered && reply.status >= 200 && reply.status < 300 &&
                    (!ex.error_in_200 || error.code.empty());
    if (ok) return std::move(a.reply);
    if (a.retryable && attempt <= config_.max_retries) {
      // Full jitter: uniform in [0, min(max, initial * 2^(attempt-1))].
      const int64_t cap =
          std::min<int64_t>(config_.max_backoff.count(), config_.initial_backoff.count()
                                                             << std::min(attempt - 1, 20));
      std::uniform_int_distribution<int64_t> pick(0, cap);
      std::this_thread::sleep_for(std::chrono::milliseconds(pick(jitter)));
      continue;
    }
    std::string tail;
    if (attempt > 1) {
      char spent[96];
      std::snprintf(spent, sizeof(spent), " (gave up after %d attempts in %.1f s)", attempt,
                    std::chrono::duration<double>(Clock::now() - start).count());
      tail = spent;
    }
    if (!a.answered) {
      return Status::Unavailable(
          Redact(subject + ": cannot reach " + endpoint_text_ + ": " + a.transport_error + tail));
    }
    std::string text = subject + ": HTTP " + std::to_string(reply.status);
    if (!error.code.empty()) text += " " + error.code;
    if (!error.message.empty()) {
      text += ": " + error.message;
    } else if (error.code.empty() && !reply.body.empty()) {
      text += ": " + Shorten(reply.body);
    }
    text = Redact(text + tail);
    const std::string& code = error.code;
    switch (reply.status) {
      case 400:
        if (code == "ExpiredToken" || code == "InvalidToken") return Status::Unauthenticated(text);
        return Status::InvalidArgument(text);
      case 401:
        return Status::Unauthenticated(text);
      case 403:
        if (code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" ||
            code == "ExpiredToken" || code == "InvalidToken" || code == "TokenRefreshRequired") {
          return Status::Unauthenticated(text);
        }
        return Status::PermissionDenied(text);
      case 404:
        return Status::NotFound(text);
      case 409:
        if (code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists") {
          return Status::AlreadyExists(text);
        }
        return Status::FailedPrecondition(text);
      case 412:
        return Status::FailedPrecondition(text);
      case 501:
        return Status::Unimplemented(text);
      default:
        break;
    }
    if (RetryableHttp(reply.status) || RetryableS3Code(code)) return Status::Unavailable(text);
    if (reply.status >= 400 && reply.status < 500) return Status::InvalidArgument(text);
    return Status::Internal(text);
  }
}

Status S3Client::CreateBucket() {
  Exchange ex;
  ex.op = "CreateBucket";
  ex.what = Where("");
  ex.method = "PUT";
  Result<Reply> r = Perform(ex);
  if (r.ok() || r.status().code() != Code::kAlreadyExists) return r.status();
  // BucketAlreadyOwnedByYou, or BucketAlreadyExists, which AWS means as
  // someone else's but rclone answers for this caller's own: the bucket is
  // usable when HEAD on it succeeds.
  Exchange head;
  head.op = "HeadBucket";
  head.what = Where("");
  head.method = "HEAD";
  Result<Reply> usable = Perform(head);
  return usable.ok() ? Status::OK() : r.status();
}

Status S3Client::PutObject(const std::string& key, const char* data, size_t size) {
  Exchange ex;
  ex.op = "PutObject";
  ex.what = Where(key);
  ex.method = "PUT";
  ex.key = key;
  ex.body = data;
  ex.body_size = size;
  ex.hash_body = false;
  return Perform(ex).status();
}

Result<std::string> S3Client::GetObject(const std::string& key) {
  Exchange ex;
  ex.op = "GetObject";
  ex.what = Where(key);
  ex.method = "GET";
  ex.key = key;
  STINT_ASSIGN_OR_RETURN(Reply reply, Perform(ex));
  return std::move(reply.body);
}

Status S3Client::GetRange(const std::string& key, uint64_t offset, size_t length, char* dest) {
  if (length == 0) return Status::OK();
  const uint64_t last = offset + length - 1;
  Exchange ex;
  ex.op = "GetRange";
  ex.what = Where(key) + " bytes [" + std::to_string(offset) + ", " +
            std::to_string(offset + length) + ")";
  ex.method = "GET";
  ex.key = key;
  ex.headers.emplace_back("range", "bytes=" + std::to_string(offset) + "-" + std::to_string(last));
  ex.dest = dest;
  ex.dest_size = length;
  Result<Reply> r = Perform(ex);
  const std::string subject = "S3 GetRange " + ex.what;
  if (!r.ok()) {
    // 416: the range starts at or past the end: the object is shorter than
    // the caller (a manifest) says, as with a short body below.
    if (r.status().message().find("HTTP 416") != std::string::npos) {
      return Status::DataLoss(r.status().message() + " (expected " + std::to_string(length) +
                              " bytes, got 0: the object ends before the range)");
    }
    return r.status();
  }
  // 206 with Content-Range, as S3 answers; rclone answers 200 with one.
  const std::string range = HeaderValue(r->headers, "Content-Range");
  if (!range.empty()) {
    uint64_t first = 0, end = 0;
    if (!ParseContentRange(range, &first, &end) || first != offset) {
      return Status::Internal(subject + ": the answer's Content-Range '" + range +
                              "' does not start at " + std::to_string(offset));
    }
  } else if (offset != 0) {
    return Status::Internal(subject + ": HTTP " + std::to_string(r->status) +
                            " without Content-Range: the server ignored the Range");
  }
  if (r->received != length) {
    return Status::DataLoss(subject + ": expected " + std::to_string(length) + " bytes, got " +
                            std::to_string(r->received) + " (the object ends at " +
                            std::to_string(offset + r->received) + ")");
  }
  return Status::OK();
}

Result<S3ObjectInfo> S3Client::HeadObject(const std::string& key) {
  Exchange ex;
  ex.op = "HeadObject";
  ex.what = Where(key);
  ex.method = "HEAD";
  ex.key = key;
  STINT_ASSIGN_OR_RETURN(Reply reply, Perform(ex));
  S3ObjectInfo info;
  info.key = key;
  const std::string length = HeaderValue(reply.headers, "Content-Length");
  if (!ParseDecimalU64(length, &info.size)) {
    return Status::Internal("S3 HeadObject " + Where(key) + ": Content-Length '" + length +
                            "' is not a number");
  }
  info.etag = HeaderValue(reply.headers, "ETag");
  return info;
}

Result<std::vector<S3ObjectInfo>> S3Client::ListObjects(const std::string& prefix) {
  std::vector<S3ObjectInfo> out;
  std::string token;
  for (int page = 1;; ++page) {
    Exchange ex;
    ex.op = "ListObjectsV2";
    ex.what = Where("") + " prefix '" + prefix + "' page " + std::to_string(page);
    ex.method = "GET";
    ex.query = {{"list-type", "2"},
                {"prefix", prefix},
                {"max-keys", std::to_string(config_.list_page_size)}};
    if (!token.empty()) ex.query.emplace_back("continuation-token", token);
    STINT_ASSIGN_OR_RETURN(Reply reply, Perform(ex));
    Result<internal::S3ListPage> parsed = internal::ParseListObjectsV2(reply.body);
    if (!parsed.ok()) return parsed.status().WithContext("S3 " + ex.op + " " + ex.what);
    for (S3ObjectInfo& o : parsed->objects) out.push_back(std::move(o));
    if (!parsed->truncated) break;
    if (parsed->next_continuation_token == token) {
      return Status::Internal("S3 " + ex.op + " " + ex.what +
                              ": the server repeated its continuation token");
    }
    token = parsed->next_continuation_token;
  }
  return out;
}

Status S3Client::DeleteObject(const std::string& key) {
  Exchange ex;
  ex.op = "DeleteObject";
  ex.what = Where(key);
  ex.method = "DELETE";
  ex.key = key;
  return Perform(ex).status();
}

Status S3Client::DeleteObjects(const std::vector<std::string>& keys) {
  std::vector<std::string> failed;
  for (size_t begin = 0; begin < keys.size(); begin += kMaxDeleteBatch) {
    const size_t end = std::min(keys.size(), begin + kMaxDeleteBatch);
    std::string body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Delete><Quiet>true</Quiet>";
    for (size_t i = begin; i < end; ++i) {
      body += "<Object><Key>" + internal::XmlEscape(keys[i]) + "</Key></Object>";
    }
    body += "</Delete>";
    Exchange ex;
    ex.op = "DeleteObjects";
    ex.what = Where("") + " (" + std::to_string(end - begin) + " keys from '" + keys[begin] + "')";
    ex.method = "POST";
    ex.query = {{"delete", ""}};
    // S3 refuses a DeleteObjects without it.
    ex.headers.emplace_back("content-md5", internal::Md5Base64(body.data(), body.size()));
    ex.body = body.data();
    ex.body_size = body.size();
    ex.content_type = "application/xml";
    Result<Reply> r = Perform(ex);
    if (!r.ok() && (r.status().code() == Code::kUnimplemented ||
                    r.status().message().find("HTTP 405") != std::string::npos)) {
      // A server without DeleteObjects: one request per key.
      for (size_t i = begin; i < end; ++i) STINT_RETURN_IF_ERROR(DeleteObject(keys[i]));
      continue;
    }
    if (!r.ok()) return r.status();
    for (std::string& e : internal::ParseDeleteErrors(r->body)) failed.push_back(std::move(e));
  }
  if (failed.empty()) return Status::OK();
  std::string list;
  for (size_t i = 0; i < failed.size() && i < 5; ++i) list += (i ? "; " : "") + failed[i];
  if (failed.size() > 5) list += "; ...";
  return Status::IoError("S3 DeleteObjects " + Where("") + ": " + std::to_string(failed.size()) +
                         " of " + std::to_string(keys.size()) + " keys not deleted: " + list);
}

Status S3Client::CopyObject(const std::string& src_key, const std::string& dst_key) {
  Exchange ex;
  ex.op = "CopyObject";
  ex.what = Where(src_key) + " to " + Where(dst_key);
  ex.method = "PUT";
  ex.key = dst_key;
  ex.headers.emplace_back("x-amz-copy-source",
                          "/" + bucket_ + "/" + internal::S3UriEncode(src_key, true));
  ex.error_in_200 = true;
  return Perform(ex).status();
}

Result<std::string> S3Client::CreateMultipartUpload(const std::string& key) {
  Exchange ex;
  ex.op = "CreateMultipartUpload";
  ex.what = Where(key);
  ex.method = "POST";
  ex.key = key;
  ex.query = {{"uploads", ""}};
  STINT_ASSIGN_OR_RETURN(Reply reply, Perform(ex));
  Result<std::string> id = internal::ParseInitiateMultipartUpload(reply.body);
  if (!id.ok()) return id.status().WithContext("S3 " + ex.op + " " + ex.what);
  return id;
}

Result<std::string> S3Client::UploadPart(const std::string& key, const std::string& upload_id,
                                         int part_number, const char* data, size_t size) {
  Exchange ex;
  ex.op = "UploadPart";
  ex.what = Where(key) + " part " + std::to_string(part_number);
  if (part_number < 1 || part_number > 10000) {
    return Status::InvalidArgument("S3 UploadPart " + ex.what + ": part number not in 1..10000");
  }
  ex.method = "PUT";
  ex.key = key;
  ex.query = {{"partNumber", std::to_string(part_number)}, {"uploadId", upload_id}};
  ex.body = data;
  ex.body_size = size;
  ex.hash_body = false;
  STINT_ASSIGN_OR_RETURN(Reply reply, Perform(ex));
  std::string etag = HeaderValue(reply.headers, "ETag");
  if (etag.empty()) return Status::Internal("S3 UploadPart " + ex.what + ": no ETag in the answer");
  return etag;
}

Status S3Client::CompleteMultipartUpload(const std::string& key, const std::string& upload_id,
                                         const std::vector<S3Part>& parts) {
  std::string body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><CompleteMultipartUpload>";
  for (const S3Part& p : parts) {
    body += "<Part><PartNumber>" + std::to_string(p.part_number) + "</PartNumber><ETag>" +
            internal::XmlEscape(p.etag) + "</ETag></Part>";
  }
  body += "</CompleteMultipartUpload>";
  Exchange ex;
  ex.op = "CompleteMultipartUpload";
  ex.what = Where(key) + " (" + std::to_string(parts.size()) + " parts)";
  ex.method = "POST";
  ex.key = key;
  ex.query = {{"uploadId", upload_id}};
  ex.body = body.data();
  ex.body_size = body.size();
  ex.content_type = "application/xml";
  ex.error_in_200 = true;
  return Perform(ex).status();
}

Status S3Client::AbortMultipartUpload(const std::string& key, const std::string& upload_id) {
  Exchange ex;
  ex.op = "AbortMultipartUpload";
  ex.what = Where(key);
  ex.method = "DELETE";
  ex.key = key;
  ex.query = {{"uploadId", upload_id}};
  return Perform(ex).status();
}

Result<std::vector<S3MultipartUpload>> S3Client::ListMultipartUploads(const std::string& prefix) {
  std::vector<S3MultipartUpload> out;
  std::string key_marker, id_marker;
  for (int page = 1;; ++page) {
    Exchange ex;
    ex.op = "ListMultipartUploads";
    ex.what = Where("") + " prefix '" + prefix + "' page " + std::to_string(page);
    ex.method = "GET";
    ex.query = {{"uploads", ""},
                {"prefix", prefix},
                {"max-uploads", std::to_string(config_.list_page_size)}};
    if (!key_marker.empty()) {
      ex.query.emplace_back("key-marker", key_marker);
      ex.query.emplace_back("upload-id-marker", id_marker);
    }
    STINT_ASSIGN_OR_RETURN(Reply reply, Perform(ex));
    Result<internal::S3UploadsPage> parsed = internal::ParseListMultipartUploads(reply.body);
    if (!parsed.ok()) return parsed.status().WithContext("S3 " + ex.op + " " + ex.what);
    for (S3MultipartUpload& u : parsed->uploads) out.push_back(std::move(u));
    if (!parsed->truncated) break;
    if (parsed->next_key_marker == key_marker && parsed->next_upload_id_marker == id_marker) {
      return Status::Internal("S3 " + ex.op + " " + ex.what + ": the server repeated its marker");
    }
    key_marker = parsed->next_key_marker;
    id_marker = parsed->next_upload_id_marker;
  }
  return out;
}

Result<std::vector<S3Part>> S3Client::ListParts(const std::string& key,
                                                const std::string& upload_id) {
  std::vector<S3Part> out;
  std::string marker;
  for (int page = 1;; ++page) {
    Exchange ex;
    ex.op = "ListParts";
    ex.what = Where(key) + " page " + std::to_string(page);
    ex.method = "GET";
    ex.key = key;
    ex.query = {{"uploadId", upload_id}, {"max-parts", "1000"}};
    if (!marker.empty()) ex.query.emplace_back("part-number-marker", marker);
    STINT_ASSIGN_OR_RETURN(Reply reply, Perform(ex));
    Result<internal::S3PartsPage> parsed = internal::ParseListParts(reply.body);
    if (!parsed.ok()) return parsed.status().WithContext("S3 " + ex.op + " " + ex.what);
    for (S3Part& p : parsed->parts) out.push_back(std::move(p));
    if (!parsed->truncated) break;
    if (parsed->next_part_number_marker == marker) {
      return Status::Internal("S3 " + ex.op + " " + ex.what + ": the server repeated its marker");
    }
    marker = parsed->next_part_number_marker;
  }
  return out;
}

}  // namespace stint
