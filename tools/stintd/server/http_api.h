// The HTTP/JSON front of the Coordinator (routes in API.md): the server, its
// threads and its stop. The routes are installed by one file per resource
// (routes.h); who may call them is authorization.h's.
#ifndef STINT_TOOLS_STINTD_SERVER_HTTP_API_H_
#define STINT_TOOLS_STINTD_SERVER_HTTP_API_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "stintd/server/auth.h"
#include "stintd/server/authorization.h"
#include "stintd/server/coordinator.h"
#include "stintd/server/log_tails.h"
#include "stintd/store/leader_lease.h"

namespace httplib {
class Server;
}

namespace stint::stintd {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 7077;               // 0: any free port (see port())
  // Connections served at once, one thread each (a long-poll holds its
  // connection's); one past them is answered 503 and closed.
  int threads = 128;
  // An idle connection is closed after this long (a long-poll is not idle:
  // its wait is part of its request), so idle keep-alive connections give
  // their threads back quickly.
  int keep_alive_seconds = 2;
  double max_wait_seconds = 60;  // cap on long-poll waits
  // PEM certificate (chain) and private key: serve https. Both or neither;
  // empty: plain HTTP.
  std::string tls_cert;
  std::string tls_key;
  // Where the workers' output is kept across restarts (LogTails::Persist);
  // "": in memory only. The output of a job that ended (or is gone) goes
  // once it is this old; looked at on start and then hourly.
  std::string logs_dir;
  double log_retention_hours = 72;
  // Nice value of the HTTP threads that answer requests (0..19), so that
  // the tick thread's policy pass is not starved by a flood of requests.
  int thread_nice = 5;
  // With a store several stintds share (leadership.h): whether this stintd
  // may still act (false: every request is answered 503), and the lease's
  // view for GET /v1/leader. Empty: this stintd is the only one.
  std::function<bool()> leading;
  std::function<Result<LeaderView>()> leader_view;
};

class HttpApi {
 public:
  // Loads the TLS certificate and key (when given) and binds the socket, so
  // a bad certificate or address fails here, before serving.
  static Result<std::unique_ptr<HttpApi>> Bind(Coordinator* coordinator, TokenAuth auth,
                                               HttpOptions options);
  ~HttpApi();

  int port() const { return port_; }
  // Serves until Stop(); returns an error if the server failed.
  Status Serve();
  // Thread-safe, from any thread, before, during or after Serve(): a
  // Serve() not yet started returns at once. Answers long-polls, closes
  // idle connections and returns once a running Serve() has returned.
  void Stop();

 private:
  HttpApi(Coordinator* coordinator, TokenAuth auth, HttpOptions options);
  void InstallRoutes();
  // Refuses connections past the thread cap and tracks the requests being
  // answered (see Stop()); answers unknown routes in JSON.
  void InstallConnectionHooks();
  // Prunes the output of jobs that ended log_retention_hours ago (see
  // HttpOptions), now or when an hour has passed since the last time.
  void PruneLogs();
  void PruneLogsIfDue();

  Coordinator* const coordinator_;
  const TokenAuth auth_;
  const Authorization authorization_;  // of auth_'s tokens; every route goes through it
  const HttpOptions options_;
  std::unique_ptr<httplib::Server> server_;
  LogTails logs_;  // workers' output, from the agents' heartbeats
  std::atomic<int64_t> next_log_prune_ns_{0};  // steady clock
  int port_ = 0;
  // cpp-httplib's stop() does nothing until listen has begun, so Stop() and
  // Serve() hand over through these (see Stop()).
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> serve_entered_{false};
  std::atomic<bool> serve_returned_{false};  // set under serve_mu_, for serve_cv_
  std::mutex serve_mu_;
  std::condition_variable serve_cv_;
  // The peers (address, port) of requests being answered (see Stop()).
  std::mutex answering_mu_;
  std::set<std::pair<std::string, int>> answering_;  // guarded by answering_mu_
};

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SERVER_HTTP_API_H_
