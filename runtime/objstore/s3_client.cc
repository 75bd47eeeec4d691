#include "objstore/s3_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string_view>
#include <thread>
#include <utility>

#include "base/sigpipe_block.h"
#include "base/strings.h"
#include "objstore/s3_request.h"
#include "objstore/s3_xml.h"
#include "stint/version.h"

// CURLOPT_AWS_SIGV4 came in 7.75. 7.88 (Debian 12) is what this is tested with.
#if LIBCURL_VERSION_NUM < 0x074b00
#error "runtime/objstore needs libcurl >= 7.75 (CURLOPT_AWS_SIGV4)"
#endif

namespace stint {
namespace {

using Clock = std::chrono::steady_clock;
using Pairs = std::vector<std::pair<std::string, std::string>>;

// Of an error answer's body, what is kept (S3's error documents are small).
constexpr size_t kMaxErrorBody = 64 * 1024;
// DeleteObjects takes at most this many keys a request.
constexpr size_t kMaxDeleteBatch = 1000;
// Idle easy handles (each with its open connections) kept between calls.
constexpr size_t kMaxIdleHandles = 16;

struct CurlEasyCleanup {
  void operator()(CURL* h) const { curl_easy_cleanup(h); }
};
using CurlEasy = std::unique_ptr<CURL, CurlEasyCleanup>;
struct CurlSlistFree {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using CurlHeaderList = std::unique_ptr<curl_slist, CurlSlistFree>;

// curl_global_init is not safe to run while another thread uses libcurl,
// so it runs once, from S3Client::Create, before this process's first
// client can make a handle. Never undone: curl_global_cleanup at exit
// could race with another library's use of curl.
Status InitCurlOnce() {
  static std::once_flag once;
  static CURLcode init = CURLE_OK;
  std::call_once(once, [] { init = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (init != CURLE_OK) {
    return Status::Internal(std::string("curl_global_init: ") + curl_easy_strerror(init));
  }
  if (curl_version_info(CURLVERSION_NOW)->version_num < 0x074b00) {
    return Status::FailedPrecondition(std::string("libcurl ") +
                                      curl_version_info(CURLVERSION_NOW)->version +
                                      " lacks CURLOPT_AWS_SIGV4 (7.75 or later needed)");
  }
  return Status::OK();
}

// Transport failures worth another attempt: the network or the server's
// process, not this request or this machine's TLS setup.
bool RetryableCurl(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:  // connect timeout, or the low-speed limit
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

bool RetryableS3Code(const std::string& code) {
  return code == "SlowDown" || code == "InternalError" || code == "ServiceUnavailable" ||
         code == "RequestTimeout";
}

bool RetryableHttp(int status) {
  return status == 500 || status == 502 || status == 503 || status == 504;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view TrimView(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The first value of header `name` (lower case), "" when absent.
std::string HeaderValue(const Pairs& headers, const char* name) {
  for (const auto& [n, v] : headers) {
    if (n == name) return v;
  }
  return std::string();
}

std::string Shorten(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return s;
}

// "x-amz-meta-<name>: <value>" headers for `metadata` (signed, as every header is).
void AddMetadataHeaders(const S3Metadata& metadata, Pairs* headers) {
  for (const auto& [name, value] : metadata) headers->emplace_back("x-amz-meta-" + name, value);
}

}  // namespace

// One request, before libcurl signs it.
struct S3Client::Exchange {
  std::string op;      // "GetObject": first word of every message
  std::string what;    // "s3://bucket/key part 3": the rest of the message's subject
  std::string method;  // GET HEAD PUT POST DELETE
  std::string key;     // "" for a bucket-level request
  Pairs query;         // not encoded
  Pairs headers;       // extra headers (libcurl signs every header it is given)
  const char* body = nullptr;
  size_t body_size = 0;
  const char* content_type = "application/octet-stream";
  // GET: a 2xx body is written to dest[0, dest_size) instead of Reply::body.
  // dest_offset: where the range starts in the object, for a server that
  // ignores Range and sends the whole object.
  char* dest = nullptr;
  size_t dest_size = 0;
  uint64_t dest_offset = 0;
  // CompleteMultipartUpload and CopyObject may fail after a 200 has begun:
  // the body is then an <Error>.
  bool error_in_200 = false;
};

struct S3Client::Reply {
  int status = 0;
  Pairs headers;  // names in lower case
  std::string body;
  size_t received = 0;        // bytes written to dest
  bool whole_object = false;  // a ranged GET answered 200 without Content-Range
};

struct S3Client::Attempt {
  Reply reply;
  bool answered = false;        // an HTTP status came back
  std::string transport_error;  // when not answered
  bool retryable = false;
  Status fatal;  // a failure that is not the server's answer (an overlong body)
};

// Easy handles kept between calls, so that their connections (keep-alive)
// and TLS sessions are reused. A call takes an idle one or makes one, so
// calls never wait for each other's transfers; at most kMaxIdleHandles stay.
// Thread-safe.
class S3Client::HandlePool {
 public:
  Result<CurlEasy> Take() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        CurlEasy h = std::move(idle_.back());
        idle_.pop_back();
        return h;
      }
    }
    CurlEasy h(curl_easy_init());
    if (!h) return Status::ResourceExhausted("curl_easy_init failed (out of memory?)");
    return h;
  }
  // Back to the pool with its options cleared (curl_easy_reset keeps the
  // open connections and the TLS session cache).
  void Give(CurlEasy h) {
    curl_easy_reset(h.get());
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.size() < kMaxIdleHandles) idle_.push_back(std::move(h));
  }

 private:
  std::mutex mu_;
  std::vector<CurlEasy> idle_;  // Guarded by mu_
};

// One attempt's state, what libcurl's callbacks see. Confined to the
// calling thread (libcurl calls back on the thread in curl_easy_perform).
struct S3Client::Transfer {
  const Exchange& ex;
  Reply& reply;
  size_t sent = 0;             // upload: bytes of ex.body handed to libcurl
  bool body_started = false;   // the first byte of the answer's body came
  uint64_t skip = 0;           // whole-object answer: bytes before the range
  bool overflow = false;       // more bytes than asked for: a fault
  bool stopped_early = false;  // a whole-object answer past the range: stopped

  // CURLOPT_HEADERFUNCTION: one header line at a time. A status line starts
  // a new answer (after "100 Continue"), so the headers collected restart.
  static size_t OnHeader(char* data, size_t size, size_t n, void* user) {
    Transfer* t = static_cast<Transfer*>(user);
    const size_t len = size * n;
    const std::string_view line = TrimView(std::string_view(data, len));
    if (line.compare(0, 5, "HTTP/") == 0) {
      t->reply.headers.clear();
      const size_t sp = line.find(' ');
      uint64_t status = 0;
      if (sp != std::string_view::npos && line.size() >= sp + 4 &&
          ParseDecimalU64(line.substr(sp + 1, 3), &status)) {
        t->reply.status = static_cast<int>(status);
      }
      return len;
    }
    const size_t colon = line.find(':');
    if (colon != std::string_view::npos) {
      t->reply.headers.emplace_back(Lower(TrimView(line.substr(0, colon))),
                                    std::string(TrimView(line.substr(colon + 1))));
    }
    return len;
  }

  // CURLOPT_WRITEFUNCTION. Returning less than `size * n` stops the transfer.
  static size_t OnBody(char* data, size_t size, size_t n, void* user) {
    Transfer* t = static_cast<Transfer*>(user);
    const Exchange& ex = t->ex;
    Reply& r = t->reply;
    size_t len = size * n;
    const bool success = r.status >= 200 && r.status < 300;
    if (!success) {  // an error document: keep its head
      r.body.append(data, std::min(len, kMaxErrorBody - std::min(kMaxErrorBody, r.body.size())));
      return size * n;
    }
    if (ex.dest == nullptr) {  // GetObject, or an XML answer
      r.body.append(data, len);
      return len;
    }
    if (!t->body_started) {
      t->body_started = true;
      // 206 with Content-Range, as S3 answers, or 200 with one, as rclone
      // does: the body is the range. A 200 without one is the whole object
      // (a server that ignores Range): the range is taken from it.
      if (r.status == 200 && HeaderValue(r.headers, "content-range").empty()) {
        r.whole_object = true;
        t->skip = ex.dest_offset;
      }
    }
    if (t->skip > 0) {
      const size_t k = static_cast<size_t>(std::min<uint64_t>(t->skip, len));
      t->skip -= k;
      data += k;
      len -= k;
      if (len == 0) return size * n;
    }
    const size_t room = ex.dest_size - r.received;
    if (len > room) {
      std::memcpy(ex.dest + r.received, data, room);
      r.received += room;
      if (r.whole_object) {
        t->stopped_early = true;  // the range is complete; the rest is not needed
      } else {
        t->overflow = true;
      }
      return 0;
    }
    std::memcpy(ex.dest + r.received, data, len);
    r.received += len;
    return size * n;
  }

  // CURLOPT_READFUNCTION: the PUT body, straight from the caller's buffer.
  static size_t OnRead(char* buf, size_t size, size_t n, void* user) {
    Transfer* t = static_cast<Transfer*>(user);
    const size_t k = std::min(size * n, t->ex.body_size - t->sent);
    if (k > 0) std::memcpy(buf, t->ex.body + t->sent, k);
    t->sent += k;
    return k;
  }

  // CURLOPT_SEEKFUNCTION: libcurl rewinds when it resends the body (a kept
  // connection that turned out closed is retried on a new one).
  static int OnSeek(void* user, curl_off_t offset, int origin) {
    Transfer* t = static_cast<Transfer*>(user);
    if (origin != SEEK_SET || offset < 0 || static_cast<uint64_t>(offset) > t->ex.body_size) {
      return CURL_SEEKFUNC_CANTSEEK;
    }
    t->sent = static_cast<size_t>(offset);
    return CURL_SEEKFUNC_OK;
  }
};

Result<std::unique_ptr<S3Client>> S3Client::Create(const S3Config& config,
                                                   const std::string& bucket) {
  STINT_ASSIGN_OR_RETURN(HttpEndpoint ep, ParseS3Endpoint(config.endpoint));
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
  if (config.region.empty() || config.region.find(':') != std::string::npos) {
    return Status::InvalidArgument("S3Config: region '" + config.region + "' empty or has a ':'");
  }
  STINT_RETURN_IF_ERROR(InitCurlOnce());
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
      path_style_(path_style),
      url_base_(scheme + "://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) +
                ":" + std::to_string(port)),
      endpoint_text_(HttpEndpoint{scheme, host, port}.ToString()),
      handles_(std::make_unique<HandlePool>()) {}

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

// Sets one option; a failure names it and libcurl's reason.
#define STINT_CURL_SETOPT(handle, option, value)                               \
  do {                                                                         \
    const CURLcode setopt_rc = curl_easy_setopt(handle, option, value);        \
    if (setopt_rc != CURLE_OK) {                                               \
      return Status::Internal(std::string("curl_easy_setopt(" #option "): ") + \
                              curl_easy_strerror(setopt_rc));                  \
    }                                                                          \
  } while (0)

Status S3Client::Configure(void* curl, Transfer* t, curl_slist** headers, char* errbuf) const {
  CURL* const h = curl;
  const Exchange& ex = t->ex;
  std::string path = path_style_ ? "/" + bucket_ : "";
  if (!ex.key.empty()) path += "/" + internal::S3UriEncode(ex.key, /*keep_slash=*/true);
  if (path.empty()) path = "/";
  // libcurl 7.88 signs the query string as it is in the URL: it neither
  // sorts it nor writes a flag parameter ("?uploads") as SigV4's
  // "uploads=". S3QueryString gives the canonical form, so what is sent is
  // what is signed, and what the server canonicalises to.
  const std::string query = internal::S3QueryString(ex.query);
  const std::string url = url_base_ + path + (query.empty() ? "" : "?" + query);

  STINT_CURL_SETOPT(h, CURLOPT_ERRORBUFFER, errbuf);
  STINT_CURL_SETOPT(h, CURLOPT_URL, url.c_str());  // libcurl copies strings
  // No signals: this runs on any thread (timeouts then cannot interrupt a
  // DNS lookup in a build with the synchronous resolver; Debian's uses
  // the threaded one).
  STINT_CURL_SETOPT(h, CURLOPT_NOSIGNAL, 1L);
#if LIBCURL_VERSION_NUM >= 0x075500
  STINT_CURL_SETOPT(h, CURLOPT_PROTOCOLS_STR, "http,https");
#else
  STINT_CURL_SETOPT(h, CURLOPT_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
  STINT_CURL_SETOPT(h, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  // The key's path exactly as encoded: no squashing of "." and ".." segments.
  STINT_CURL_SETOPT(h, CURLOPT_PATH_AS_IS, 1L);
  // A redirect (S3's 301/307 to another region) is an answer, not followed:
  // the signature would not hold for another host. Proxies come from
  // libcurl's environment variables (https_proxy, no_proxy), as the AWS
  // CLI's do.
  STINT_CURL_SETOPT(h, CURLOPT_FOLLOWLOCATION, 0L);
  // Error answers are read, not failed on: their body carries S3's <Code>.
  STINT_CURL_SETOPT(h, CURLOPT_FAILONERROR, 0L);
  // request_timeout bounds connecting, and any stall: under 1 byte/s for
  // that long ends the attempt. No total limit: a multi-GiB part may take
  // as long as it takes while it moves.
  const long timeout_ms = static_cast<long>(config_.request_timeout.count());
  STINT_CURL_SETOPT(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
  STINT_CURL_SETOPT(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  STINT_CURL_SETOPT(h, CURLOPT_LOW_SPEED_TIME, std::max(1L, (timeout_ms + 999) / 1000));
  STINT_CURL_SETOPT(h, CURLOPT_TCP_KEEPALIVE, 1L);
  STINT_CURL_SETOPT(h, CURLOPT_USERAGENT, "stint/" STINT_VERSION_STRING);  // in S3's access logs
  if (!config_.ca_file.empty()) STINT_CURL_SETOPT(h, CURLOPT_CAINFO, config_.ca_file.c_str());
  STINT_CURL_SETOPT(h, CURLOPT_HEADERFUNCTION, &Transfer::OnHeader);
  STINT_CURL_SETOPT(h, CURLOPT_HEADERDATA, t);
  STINT_CURL_SETOPT(h, CURLOPT_WRITEFUNCTION, &Transfer::OnBody);
  STINT_CURL_SETOPT(h, CURLOPT_WRITEDATA, t);

  // SigV4 by libcurl. Name and secret set apart (a ':' in either would
  // split CURLOPT_USERPWD wrongly). No credentials: an anonymous request.
  if (!config_.credentials.empty()) {
    const std::string sigv4 = "aws:amz:" + config_.region + ":s3";
    STINT_CURL_SETOPT(h, CURLOPT_USERNAME, config_.credentials.access_key_id.c_str());
    STINT_CURL_SETOPT(h, CURLOPT_PASSWORD, config_.credentials.secret_access_key.c_str());
    STINT_CURL_SETOPT(h, CURLOPT_AWS_SIGV4, sigv4.c_str());
  }

  if (ex.method == "GET") {
    STINT_CURL_SETOPT(h, CURLOPT_HTTPGET, 1L);
  } else if (ex.method == "HEAD") {
    STINT_CURL_SETOPT(h, CURLOPT_NOBODY, 1L);
  } else if (ex.method == "DELETE") {
    STINT_CURL_SETOPT(h, CURLOPT_CUSTOMREQUEST, "DELETE");
  } else if (ex.method == "PUT") {
    // The caller's buffer is streamed, not copied.
    STINT_CURL_SETOPT(h, CURLOPT_UPLOAD, 1L);
    STINT_CURL_SETOPT(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(ex.body_size));
    STINT_CURL_SETOPT(h, CURLOPT_READFUNCTION, &Transfer::OnRead);
    STINT_CURL_SETOPT(h, CURLOPT_READDATA, t);
    STINT_CURL_SETOPT(h, CURLOPT_SEEKFUNCTION, &Transfer::OnSeek);
    STINT_CURL_SETOPT(h, CURLOPT_SEEKDATA, t);
  } else if (ex.method == "POST") {
    // Small XML bodies (or none), pointed to, not copied; the size first,
    // so that libcurl does not take strlen of a body that is not a string.
    STINT_CURL_SETOPT(h, CURLOPT_POST, 1L);
    STINT_CURL_SETOPT(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(ex.body_size));
    STINT_CURL_SETOPT(h, CURLOPT_POSTFIELDS, ex.body != nullptr ? ex.body : "");
  } else {
    return Status::Internal("S3Client: no method " + ex.method);
  }

  // libcurl signs every header in this list (their names go into
  // SignedHeaders), and takes the payload hash from x-amz-content-sha256.
  // curl 7.88 does not add that header itself, and S3 and rclone refuse a
  // request without it. Object data goes unhashed: a SHA-256 pass over a
  // multi-GiB part would cost as much CPU as sending it and delay the first
  // byte; TLS protects it in transit.
  //
  // There is deliberately no "Expect:" line to turn 100-continue off: curl
  // 7.88 would sign an "expect" header it then does not send, and the
  // server's signature would differ (rclone answers SignatureDoesNotMatch).
  // libcurl adds "Expect: 100-continue" to bodies over 1 MiB after signing,
  // unsigned, which S3 accepts; it also means a refused upload (403, 404)
  // is answered before its bytes are sent.
  Pairs lines = {{"x-amz-content-sha256", "UNSIGNED-PAYLOAD"}};
  if (ex.method == "PUT" || ex.method == "POST")
    lines.emplace_back("content-type", ex.content_type);
  if (!config_.credentials.session_token.empty()) {
    lines.emplace_back("x-amz-security-token", config_.credentials.session_token);
  }
  for (const auto& header : ex.headers) lines.push_back(header);
  for (const auto& [name, value] : lines) {
    curl_slist* grown = curl_slist_append(*headers, (name + ": " + value).c_str());
    if (grown == nullptr) return Status::ResourceExhausted("curl_slist_append failed");
    *headers = grown;
  }
  STINT_CURL_SETOPT(h, CURLOPT_HTTPHEADER, *headers);
  return Status::OK();
}

#undef STINT_CURL_SETOPT

S3Client::Attempt S3Client::Once(const Exchange& ex) {
  Attempt a;
  Result<CurlEasy> taken = handles_->Take();
  if (!taken.ok()) {
    a.fatal = taken.status();
    return a;
  }
  CurlEasy handle = std::move(taken).value();
  Reply& reply = a.reply;
  Transfer transfer{ex, reply};
  char errbuf[CURL_ERROR_SIZE];
  errbuf[0] = '\0';
  curl_slist* raw_headers = nullptr;
  const Status configured = Configure(handle.get(), &transfer, &raw_headers, errbuf);
  // Owned from here; it must outlive the transfer, and the handle must not
  // point at it (or at errbuf) once both are gone: curl_easy_reset in Give.
  CurlHeaderList headers(raw_headers);
  if (!configured.ok()) {
    a.fatal = configured;
    handles_->Give(std::move(handle));
    return a;
  }
  CURLcode rc;
  {
    // NOSIGNAL (threads) stops libcurl ignoring SIGPIPE itself, and a TLS
    // close to a peer that went away can still raise it (libcurl's docs).
    ScopedSigpipeBlock no_sigpipe;
    rc = curl_easy_perform(handle.get());
  }
  long status = 0;
  if (rc == CURLE_OK &&
      curl_easy_getinfo(handle.get(), CURLINFO_RESPONSE_CODE, &status) == CURLE_OK) {
    reply.status = static_cast<int>(status);
  }
  handles_->Give(std::move(handle));

  if (transfer.overflow) {
    a.fatal = Status::Internal("the server sent more than the " + std::to_string(ex.dest_size) +
                               " bytes asked for");
    return a;
  }
  if (rc == CURLE_WRITE_ERROR && transfer.stopped_early) {
    a.answered = true;
    return a;
  }
  if (rc != CURLE_OK) {
    // The error buffer says more ("Failed to connect to host port 1 after
    // 0 ms: ..."); libcurl's generic text when it is empty.
    a.transport_error = errbuf[0] != '\0' ? std::string(TrimView(errbuf)) : curl_easy_strerror(rc);
    a.retryable = RetryableCurl(rc);
    // A status may have come before the body failed: not an answer.
    reply.status = 0;
    return a;
  }
  a.answered = true;
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

Status S3Client::PutObject(const std::string& key, const char* data, size_t size,
                           const S3Metadata& metadata) {
  Exchange ex;
  ex.op = "PutObject";
  ex.what = Where(key);
  ex.method = "PUT";
  ex.key = key;
  AddMetadataHeaders(metadata, &ex.headers);
  ex.body = data;
  ex.body_size = size;
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
  ex.dest_offset = offset;
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
  // 206 with Content-Range, as S3 answers; rclone answers 200 with one. A
  // 200 without one was the whole object, which the transfer skipped into.
  if (!r->whole_object) {
    const std::string range = HeaderValue(r->headers, "content-range");
    uint64_t first = 0, end = 0;
    if (!ParseContentRange(range, &first, &end, nullptr) || first != offset) {
      return Status::Internal(subject + ": HTTP " + std::to_string(r->status) +
                              " with Content-Range '" + range + "', not starting at " +
                              std::to_string(offset));
    }
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
  const std::string length = HeaderValue(reply.headers, "content-length");
  if (!ParseDecimalU64(length, &info.size)) {
    return Status::Internal("S3 HeadObject " + Where(key) + ": Content-Length '" + length +
                            "' is not a number");
  }
  info.etag = HeaderValue(reply.headers, "etag");
  constexpr std::string_view kMeta = "x-amz-meta-";
  for (const auto& [name, value] : reply.headers) {
    if (name.size() > kMeta.size() && name.compare(0, kMeta.size(), kMeta) == 0) {
      info.metadata.emplace_back(name.substr(kMeta.size()), value);
    }
  }
  return info;
}

Result<std::vector<S3ObjectInfo>> S3Client::ListObjects(const std::string& prefix,
                                                        size_t max_keys) {
  const size_t page_size = max_keys > 0
                               ? std::min(max_keys, static_cast<size_t>(config_.list_page_size))
                               : static_cast<size_t>(config_.list_page_size);
  std::vector<S3ObjectInfo> out;
  std::string token;
  for (int page = 1;; ++page) {
    Exchange ex;
    ex.op = "ListObjectsV2";
    ex.what = Where("") + " prefix '" + prefix + "' page " + std::to_string(page);
    ex.method = "GET";
    ex.query = {{"list-type", "2"}, {"prefix", prefix}, {"max-keys", std::to_string(page_size)}};
    if (!token.empty()) ex.query.emplace_back("continuation-token", token);
    STINT_ASSIGN_OR_RETURN(Reply reply, Perform(ex));
    Result<internal::S3ListPage> parsed = internal::ParseListObjectsV2(reply.body);
    if (!parsed.ok()) return parsed.status().WithContext("S3 " + ex.op + " " + ex.what);
    for (S3ObjectInfo& o : parsed->objects) out.push_back(std::move(o));
    if (max_keys > 0 && out.size() >= max_keys) {
      out.resize(max_keys);
      break;
    }
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
    ex.query = {{"delete", ""}};  // sent as "?delete=" (see S3QueryString)
    // S3 refuses a DeleteObjects without it (a body checksum, not a signature).
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

Result<std::string> S3Client::CreateMultipartUpload(const std::string& key,
                                                   const S3Metadata& metadata) {
  Exchange ex;
  ex.op = "CreateMultipartUpload";
  ex.what = Where(key);
  ex.method = "POST";
  ex.key = key;
  AddMetadataHeaders(metadata, &ex.headers);
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
  STINT_ASSIGN_OR_RETURN(Reply reply, Perform(ex));
  std::string etag = HeaderValue(reply.headers, "etag");
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
