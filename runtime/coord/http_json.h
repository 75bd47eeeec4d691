// HttpJsonClient: JSON requests to stintd with its error model and the retry
// policy, shared by CoordinatorClient and stintctl. Keeps cpp-httplib out of
// every header: only http_json.cc includes it.
//
// Thread-safe. Each call borrows a keep-alive connection from a small pool
// (creating one when all are busy), so concurrent calls never queue behind a
// long-poll.
#ifndef STINT_RUNTIME_COORD_HTTP_JSON_H_
#define STINT_RUNTIME_COORD_HTTP_JSON_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/http_endpoint.h"
#include "stint/coordinator_client.h"
#include "stint/status.h"

namespace httplib {
class Client;
}

namespace stint {
namespace internal {

using Json = nlohmann::json;

// "[http(s)://]host:port[/]" split (http when no scheme is given);
// kInvalidArgument for anything else. ToString() is what httplib takes.
Result<HttpEndpoint> ParseCoordinatorUrl(const std::string& url);
// A comma-separated list of them (the stintds sharing one database).
Result<std::vector<HttpEndpoint>> ParseCoordinatorUrls(const std::string& urls);

// The Status for a non-2xx answer (the mapping in coordinator_client.h).
// `what` names the request ("POST /v1/pools") and ends the message.
Status StatusFromHttp(int http_status, const std::string& body, const std::string& what);

// Whether an attempt deserves another one. http_status 0 means no answer:
// then `connection_failed` says the request never left (connection refused or
// timed out), else it may have reached the server and only an idempotent
// request is repeated. 5xx means "nothing changed" (API.md): always retried.
bool ShouldRetry(int http_status, bool connection_failed, bool idempotent);

// CoordinatorOptionsFromEnvironment with the environment as a function, so
// tests need no setenv.
Result<CoordinatorOptions> CoordinatorOptionsFromLookup(
    const std::function<std::string(const char*)>& getenv);

// Percent-encodes a path segment or query value (RFC 3986 unreserved kept).
std::string UrlEncode(const std::string& s);

struct HttpJsonOptions {
  // One URL, or several separated by commas: stintds sharing a database, of
  // which one leads. A call that finds no answer, or a 503, at one tries
  // the next at once, and stays with the one that answers.
  std::string url;
  std::string token;  // empty: no Authorization header
  // https only: PEM file of the CA certificates the server's certificate must
  // chain to (a self-signed server certificate given here pins it); the
  // host name must match the certificate too. Empty: the system's CAs.
  // Ignored for http.
  std::string ca_file;
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(2)};
  std::chrono::milliseconds request_timeout{std::chrono::seconds(10)};
  RetryPolicy retry;
};

struct HttpRequest {
  std::string method;  // GET, POST, PUT, DELETE
  std::string path;    // with the query string, already encoded
  std::optional<Json> body;
  // Safe to repeat when the answer was lost after sending.
  bool idempotent = true;
  // Added to request_timeout for the read: the server's long-poll wait.
  std::chrono::milliseconds server_wait{0};
  // The bearer token of this request; empty: HttpJsonOptions::token.
  std::string token;
};

struct HttpReply {
  int status = 0;
  Json body;         // null for an empty body
  std::string text;  // the body as received (stintctl --json prints it unchanged)
};

class HttpJsonClient {
 public:
  static Result<std::unique_ptr<HttpJsonClient>> Create(const HttpJsonOptions& options);
  ~HttpJsonClient();  // REQUIRES: no call in progress
  HttpJsonClient(const HttpJsonClient&) = delete;
  HttpJsonClient& operator=(const HttpJsonClient&) = delete;

  // A 2xx answer, or the error (see coordinator_client.h), after retries.
  Result<HttpReply> Call(const HttpRequest& request);
  // See CoordinatorClient::Shutdown.
  void Shutdown();
  // The URL calls go to now (of the list, the last one that answered).
  std::string url() const;

 private:
  struct Attempt;
  // A keep-alive connection to endpoints_[endpoint].
  struct Pooled {
    std::unique_ptr<httplib::Client> client;
    size_t endpoint = 0;
  };
  HttpJsonClient(const HttpJsonOptions& options, std::vector<HttpEndpoint> endpoints);
  // A connection to the current endpoint, and which endpoint that is.
  Result<std::pair<httplib::Client*, size_t>> Acquire();
  void Release(httplib::Client* client);
  Attempt Once(const HttpRequest& request, const std::string& body);
  // After an attempt at `endpoint` failed: moves on to the next one of the
  // list, unless another call already has. Whether it moved.
  bool MoveOn(size_t endpoint);

  const HttpJsonOptions options_;
  const std::vector<HttpEndpoint> endpoints_;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // shutdown_ set, or a connection released
  // Guarded by mu_.
  bool shutdown_ = false;
  size_t current_ = 0;        // the endpoint calls go to
  std::vector<Pooled> idle_;  // keep-alive connections
  std::vector<Pooled> busy_;  // in a call; Shutdown() stops them
};

}  // namespace internal
}  // namespace stint

#endif  // STINT_RUNTIME_COORD_HTTP_JSON_H_
