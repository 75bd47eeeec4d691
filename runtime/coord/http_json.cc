#include "coord/http_json.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

#include "base/json_fields.h"
#include "base/sigpipe_block.h"

namespace stint {
namespace internal {
namespace {

using Clock = std::chrono::steady_clock;

// httplib's own names ("Connection", "Read") say too little in a log line.
std::string DescribeTransportError(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "connection failed (refused or unreachable)";
    case httplib::Error::ConnectionTimeout:
      return "connection timed out";
    case httplib::Error::Read:
      return "no answer (connection closed, or the read timed out)";
    case httplib::Error::Write:
      return "could not send the request (connection closed)";
    case httplib::Error::Canceled:
      return "cancelled";
    case httplib::Error::SSLConnection:
      return "TLS handshake failed (is the server speaking https?)";
    case httplib::Error::SSLLoadingCerts:
      return "cannot load the CA certificates";
    case httplib::Error::SSLServerVerification:
      return "TLS: the server's certificate was not verified (is its CA the --ca-file / "
             "$STINT_CA_FILE given, and does it name this host?)";
    default:
      return httplib::to_string(e);
  }
}

std::string Shorten(std::string s, size_t max) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  if (s.size() > max) s = s.substr(0, max) + "...";
  return s;
}

}  // namespace

Result<HttpEndpoint> ParseCoordinatorUrl(const std::string& url) {
  return ParseHttpEndpoint(url, "coordinator url", "http");
}

Result<std::vector<HttpEndpoint>> ParseCoordinatorUrls(const std::string& urls) {
  std::vector<HttpEndpoint> out;
  size_t from = 0;
  for (;;) {
    const size_t comma = urls.find(',', from);
    const std::string one = urls.substr(from, comma == std::string::npos ? comma : comma - from);
    STINT_ASSIGN_OR_RETURN(HttpEndpoint e, ParseCoordinatorUrl(one));
    out.push_back(std::move(e));
    if (comma == std::string::npos) return out;
    from = comma + 1;
  }
}

Status StatusFromHttp(int http_status, const std::string& body, const std::string& what) {
  // {"error": {"code": ..., "message": ...}} (API.md); whatever else came
  // back is quoted instead.
  std::string code_name, message;
  const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  const Result<const Json*> error = JsonFields(j, "").OptionalObject("error");
  if (error.ok() && *error != nullptr) {
    const JsonFields e(**error, "error");
    code_name = ValueOr(e.OptionalString("code"), std::string());
    message = ValueOr(e.OptionalString("message"), std::string());
  }
  if (message.empty()) message = body.empty() ? "no error message" : Shorten(body, 200);
  const std::string tail = " (HTTP " + std::to_string(http_status) +
                           (code_name.empty() ? "" : " " + code_name) + " from " + what + ")";
  const std::string text = message + tail;
  switch (http_status) {
    case 400:
      return Status::InvalidArgument(text);
    case 401:
      return Status::Unauthenticated(text);
    case 403:
      return Status::PermissionDenied(text);
    case 404:
      return Status::NotFound(text);
    case 409:
      if (code_name == "ALREADY_EXISTS") return Status::AlreadyExists(text);
      if (code_name == "ABORTED") return Status::Aborted(text);
      return Status::FailedPrecondition(text);
    case 410:
      return Status::Aborted("fenced: " + text);
    case 429:  // a cap of stintd's, e.g. a job's KV (not retried)
      return Status::ResourceExhausted(text);
    case 500:
      return code_name == "IO_ERROR" ? Status::IoError(text) : Status::Internal(text);
    case 502:
    case 503:
    case 504:
      return Status::Unavailable(text);
    default:
      break;
  }
  // A request the server could not take (405, 413, ...): the caller's mistake.
  if (http_status >= 400 && http_status < 500) return Status::InvalidArgument(text);
  return Status::Internal(text);
}

bool ShouldRetry(int http_status, bool connection_failed, bool idempotent) {
  if (http_status == 0) return connection_failed || idempotent;
  return http_status >= 500 && http_status <= 599;
}

std::string UrlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += char(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

struct HttpJsonClient::Attempt {
  bool cancelled = false;
  int status = 0;                  // 0: no answer
  bool connection_failed = false;  // no answer, and the request never left
  bool untrusted = false;          // TLS: the server or the CA file refused; never retried
  std::string transport_error;
  std::string body;
  size_t endpoint = 0;  // of endpoints_
};

Result<std::unique_ptr<HttpJsonClient>> HttpJsonClient::Create(const HttpJsonOptions& options) {
  STINT_ASSIGN_OR_RETURN(std::vector<HttpEndpoint> endpoints, ParseCoordinatorUrls(options.url));
  if (options.retry.deadline.count() < 0 || options.retry.initial_backoff.count() <= 0 ||
      options.retry.max_backoff < options.retry.initial_backoff) {
    return Status::InvalidArgument(
        "RetryPolicy: deadline must be >= 0, 0 < initial_backoff <= max_backoff");
  }
  if (options.connect_timeout.count() <= 0 || options.request_timeout.count() <= 0) {
    return Status::InvalidArgument("connect_timeout and request_timeout must be positive");
  }
  const bool https = std::any_of(endpoints.begin(), endpoints.end(),
                                 [](const HttpEndpoint& e) { return e.scheme == "https"; });
  if (https && !options.ca_file.empty()) {
    // httplib would only say "SSLLoadingCerts" at the first call.
    std::ifstream in(options.ca_file);
    if (!in) return Status::InvalidArgument("CA file " + options.ca_file + ": cannot be opened");
    const std::string pem((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
      return Status::InvalidArgument("CA file " + options.ca_file + ": holds no PEM certificate");
    }
  }
  return std::unique_ptr<HttpJsonClient>(new HttpJsonClient(options, std::move(endpoints)));
}

HttpJsonClient::HttpJsonClient(const HttpJsonOptions& options, std::vector<HttpEndpoint> endpoints)
    : options_(options), endpoints_(std::move(endpoints)) {}

std::string HttpJsonClient::url() const {
  std::lock_guard<std::mutex> lock(mu_);
  return endpoints_[current_].ToString();
}

bool HttpJsonClient::MoveOn(size_t endpoint) {
  if (endpoints_.size() < 2) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (current_ == endpoint) {
    current_ = (endpoint + 1) % endpoints_.size();
    idle_.clear();  // connections to the one left behind
  }
  return true;
}

HttpJsonClient::~HttpJsonClient() {
  ScopedSigpipeBlock no_sigpipe;  // closing a TLS connection writes its close_notify
  idle_.clear();
}

Result<std::pair<httplib::Client*, size_t>> HttpJsonClient::Acquire() {
  Pooled pooled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return Status::Cancelled("coordinator client shut down");
    pooled.endpoint = current_;
    if (!idle_.empty()) {
      pooled = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!pooled.client) {
    const HttpEndpoint& e = endpoints_[pooled.endpoint];
    pooled.client = e.scheme == "http" ? std::make_unique<httplib::Client>(e.host, e.port)
                                       : std::make_unique<httplib::Client>(e.ToString());
    httplib::Client* client = pooled.client.get();
    client->set_keep_alive(true);
    // Requests are written in two pieces (head, body): without TCP_NODELAY
    // the second waits for the server's delayed ACK, 40 ms per call.
    client->set_tcp_nodelay(true);
    client->set_connection_timeout(options_.connect_timeout);
    client->set_write_timeout(options_.request_timeout);
    if (e.scheme == "https") {
      client->enable_server_certificate_verification(true);
      if (!options_.ca_file.empty()) client->set_ca_cert_path(options_.ca_file);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_) return Status::Cancelled("coordinator client shut down");
  const std::pair<httplib::Client*, size_t> got(pooled.client.get(), pooled.endpoint);
  busy_.push_back(std::move(pooled));
  return got;
}

void HttpJsonClient::Release(httplib::Client* client) {
  Pooled done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(busy_.begin(), busy_.end(),
                           [&](const Pooled& p) { return p.client.get() == client; });
    done = std::move(*it);
    busy_.erase(it);
    // A few idle connections cover a session's concurrent calls; more would
    // only hold sockets open on the server.
    if (!shutdown_ && idle_.size() < 4 && done.endpoint == current_) idle_.push_back(std::move(done));
  }
  cv_.notify_all();
}

HttpJsonClient::Attempt HttpJsonClient::Once(const HttpRequest& request, const std::string& body) {
  Attempt a;
  auto acquired = Acquire();
  if (!acquired.ok()) {
    a.cancelled = true;
    return a;
  }
  httplib::Client* client = acquired->first;
  a.endpoint = acquired->second;
  client->set_read_timeout(options_.request_timeout + request.server_wait);
  // Per request, not per connection: a worker's calls carry its own secret
  // and the rest the configured token, over the same pool.
  httplib::Headers headers;
  const std::string& token = request.token.empty() ? options_.token : request.token;
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  auto send = [&]() -> httplib::Result {
    const char* type = "application/json";
    if (request.method == "GET") return client->Get(request.path, headers);
    if (request.method == "POST") return client->Post(request.path, headers, body, type);
    if (request.method == "PUT") return client->Put(request.path, headers, body, type);
    return client->Delete(request.path, headers);
  };
  httplib::Result r = [&] {
    ScopedSigpipeBlock no_sigpipe;
    return send();
  }();
  if (r) {
    a.status = r->status;
    a.body = std::move(r->body);
  } else {
    a.connection_failed =
        r.error() == httplib::Error::Connection || r.error() == httplib::Error::ConnectionTimeout;
    a.untrusted = r.error() == httplib::Error::SSLServerVerification ||
                  r.error() == httplib::Error::SSLLoadingCerts;
    a.transport_error = DescribeTransportError(r.error());
  }
  Release(client);
  // An answer that made it is reported even during shutdown: the server acted on it.
  std::lock_guard<std::mutex> lock(mu_);
  a.cancelled = shutdown_ && a.status == 0;
  return a;
}

Result<HttpReply> HttpJsonClient::Call(const HttpRequest& request) {
  const std::string what = request.method + " " + request.path;
  const std::string body = request.body ? request.body->dump() : std::string();
  const auto start = Clock::now();
  const auto deadline = start + options_.retry.deadline;
  auto pause = options_.retry.initial_backoff;
  thread_local std::minstd_rand jitter(std::random_device{}());
  size_t moved = 0;  // endpoints moved on from
  for (int attempt = 1;; ++attempt) {
    Attempt a = Once(request, body);
    if (a.cancelled) return Status::Cancelled("coordinator client shut down during " + what);
    if (a.status >= 200 && a.status < 300) {
      HttpReply reply;
      reply.status = a.status;
      if (!a.body.empty()) {
        reply.body = Json::parse(a.body, nullptr, /*allow_exceptions=*/false);
        if (reply.body.is_discarded()) {
          return Status::Internal("stintd answered " + what +
                                  " with malformed JSON: " + Shorten(a.body, 200));
        }
      }
      reply.text = std::move(a.body);
      return reply;
    }
    Status error = a.status != 0 ? StatusFromHttp(a.status, a.body, what)
                                 : Status::Unavailable("cannot reach stintd at " +
                                                       endpoints_[a.endpoint].ToString() + " (" +
                                                       what + "): " + a.transport_error);
    if (a.untrusted || !ShouldRetry(a.status, a.connection_failed, request.idempotent))
      return error;
    // No answer, or a stintd that does not lead (503): the next of the list
    // at once, each once per round; the backoff below once all were asked.
    if ((a.status == 0 || a.status == 503) && MoveOn(a.endpoint) &&
        ++moved % endpoints_.size() != 0) {
      if (options_.retry.on_retry) options_.retry.on_retry(attempt, error);
      continue;
    }
    // Uniform in [pause/2, pause].
    std::uniform_int_distribution<int64_t> pick(pause.count() / 2, pause.count());
    const std::chrono::milliseconds wait(pick(jitter));
    if (Clock::now() + wait >= deadline) {
      if (attempt == 1) return error;
      char spent[64];
      std::snprintf(spent, sizeof(spent), "; gave up after %d attempts in %.1f s", attempt,
                    std::chrono::duration<double>(Clock::now() - start).count());
      return Status(error.code(), error.message() + spent);
    }
    if (options_.retry.on_retry) options_.retry.on_retry(attempt, error);
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, wait, [this] { return shutdown_; })) {
        return Status::Cancelled("coordinator client shut down during " + what);
      }
    }
    pause = std::min(pause * 2, options_.retry.max_backoff);
  }
}

void HttpJsonClient::Shutdown() {
  ScopedSigpipeBlock no_sigpipe;  // stop() shuts TLS connections down with a write
  std::unique_lock<std::mutex> lock(mu_);
  shutdown_ = true;
  cv_.notify_all();
  // stop() shuts the socket of a request in flight, which then fails at once.
  // A request that had not connected yet when stop() ran is caught on the
  // next round; so repeat until every borrowed connection came back.
  while (!busy_.empty()) {
    for (auto& p : busy_) p.client->stop();
    cv_.wait_for(lock, std::chrono::milliseconds(10));
  }
  idle_.clear();
}

}  // namespace internal
}  // namespace stint
