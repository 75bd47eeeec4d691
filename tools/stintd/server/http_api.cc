#include "stintd/server/http_api.h"

#include <httplib.h>
#include <openssl/err.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <functional>
#include <set>
#include <thread>

#include "stintd/server/http_reply.h"
#include "stintd/server/httplib_sockets.h"
#include "stintd/server/routes.h"

namespace stint::stintd {
namespace {

// Whether this thread answers connections past the cap (ConnectionPool):
// its requests are all refused with 503.
thread_local bool refusing_connections = false;

// cpp-httplib's task queue: one task per connection, which holds its thread
// until the connection closes (an idle keep-alive connection too, for
// HttpOptions::keep_alive_seconds). At most `threads` connections are served
// at once, on threads that run their requests at `nice`
// (HttpOptions::thread_nice): under a flood of requests the coordinator's
// tick thread, at the process's own priority, then gets the CPU its policy
// pass needs instead of one share among hundreds. Each thread raises its
// nice value before its first request (no privilege needed for that); the
// accepting thread keeps the process's, so connections are taken promptly.
// A connection past the cap goes to a few threads of its own that answer
// its request with 503 and close it (the pre-routing handler and the
// logger): it waits behind neither the served connections nor their idle
// time, and its client learns at once to come back later instead of
// hanging.
class ConnectionPool : public httplib::TaskQueue {
 public:
  ConnectionPool(size_t threads, int nice)
      : pool_(threads), refusals_(kRefusalThreads), threads_(threads), nice_(nice) {}

  void enqueue(std::function<void()> fn) override {
    if (connections_.fetch_add(1) >= threads_) {
      connections_.fetch_sub(1);
      refusals_.enqueue([fn = std::move(fn)] {
        refusing_connections = true;
        fn();
      });
      return;
    }
    pool_.enqueue([this, fn = std::move(fn)] {
      thread_local bool niced = false;
      if (!niced && nice_ != 0) {
        niced = true;
        if (setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), nice_) != 0) {
          static std::atomic<bool> said{false};
          if (!said.exchange(true)) {
            std::fprintf(stderr, "stintd: %s (HTTP threads keep the tick thread's priority)\n",
                         StatusFromErrno("setpriority", errno).ToString().c_str());
          }
        }
      }
      fn();
      connections_.fetch_sub(1);
    });
  }
  void shutdown() override {
    pool_.shutdown();
    refusals_.shutdown();
  }

 private:
  static constexpr size_t kRefusalThreads = 8;
  httplib::ThreadPool pool_;
  httplib::ThreadPool refusals_;
  const size_t threads_;
  const int nice_;
  std::atomic<size_t> connections_{0};  // served now, on pool_
};

}  // namespace

HttpApi::HttpApi(Coordinator* coordinator, TokenAuth auth, HttpOptions options)
    : coordinator_(coordinator),
      auth_(std::move(auth)),
      authorization_(&auth_, coordinator_),
      options_(std::move(options)),
      server_(options_.tls_cert.empty()
                  ? std::make_unique<httplib::Server>()
                  : std::make_unique<httplib::SSLServer>(options_.tls_cert.c_str(),
                                                         options_.tls_key.c_str())) {}

HttpApi::~HttpApi() = default;

Result<std::unique_ptr<HttpApi>> HttpApi::Bind(Coordinator* coordinator, TokenAuth auth,
                                               HttpOptions options) {
  if (options.threads < 4) return Status::InvalidArgument("threads must be >= 4");
  if (options.tls_cert.empty() != options.tls_key.empty())
    return Status::InvalidArgument("TLS needs both a certificate and its key");
  std::unique_ptr<HttpApi> api(new HttpApi(coordinator, std::move(auth), options));
  if (!api->server_->is_valid()) {
    // Only an SSLServer can be invalid: its context refused a file.
    const unsigned long err = ERR_peek_last_error();
    return Status::InvalidArgument("cannot load the TLS certificate " + options.tls_cert +
                                   " with its key " + options.tls_key + ": " +
                                   (err != 0 ? ERR_reason_error_string(err) : "unknown error"));
  }
  if (options.keep_alive_seconds < 1)
    return Status::InvalidArgument("keep_alive_seconds must be >= 1");
  const int threads = options.threads;
  const int nice = options.thread_nice;
  api->server_->new_task_queue = [threads, nice] { return new ConnectionPool(threads, nice); };
  api->server_->set_keep_alive_max_count(1000000);
  api->server_->set_keep_alive_timeout(options.keep_alive_seconds);
  api->server_->set_read_timeout(std::chrono::seconds(30));
  api->server_->set_write_timeout(std::chrono::seconds(30));
  api->server_->set_payload_max_length(2u << 20);
  api->server_->set_tcp_nodelay(true);
  if (!options.logs_dir.empty()) {
    if (!(options.log_retention_hours >= 0))
      return Status::InvalidArgument("log_retention_hours must not be negative");
    STINT_RETURN_IF_ERROR(api->logs_.Persist(options.logs_dir));
    api->PruneLogsIfDue();
  }
  api->InstallRoutes();
  if (options.port == 0) {
    api->port_ = api->server_->bind_to_any_port(options.host);
    if (api->port_ <= 0) return Status::IoError("cannot listen on " + options.host + " (any port)");
  } else {
    if (!api->server_->bind_to_port(options.host, options.port)) {
      return Status::IoError("cannot listen on " + options.host + ":" +
                             std::to_string(options.port) + " (address in use or not local?)");
    }
    api->port_ = options.port;
  }
  if (Status widened = WidenListenBacklog(api->port_); !widened.ok()) {
    std::fprintf(stderr, "stintd: %s (bursts of connections wait for TCP retransmits)\n",
                 widened.ToString().c_str());
  }
  return api;
}

Status HttpApi::Serve() {
  serve_entered_ = true;
  const bool ok = stop_requested_ || server_->listen_after_bind();
  {
    std::lock_guard<std::mutex> lock(serve_mu_);
    serve_returned_ = true;
  }
  serve_cv_.notify_all();
  if (!ok) return Status::IoError("the HTTP server stopped with an error");
  return Status::OK();
}

void HttpApi::Stop() {
  // Sequentially consistent flags: either Serve() sees stop_requested_ and
  // never listens, or this sees serve_entered_ and waits until the listen
  // has begun (or ended), when server_->stop() takes effect.
  stop_requested_ = true;
  // Long-polls answer now: the server's stop waits for every request.
  coordinator_->CancelWaits();
  logs_.Shutdown();
  while (serve_entered_ && !serve_returned_ && !server_->is_running()) std::this_thread::yield();
  server_->stop();
  // Wakes the threads of the open connections (httplib_sockets.h says why).
  // Not yet for a connection whose answer is being made or written
  // (a long-poll just cancelled): cpp-httplib takes a socket with nothing
  // more to read for a closed one and would drop the answer; it closes by
  // itself once the answer is out, or its turn comes after kAnswerGrace.
  // Again until Serve() returns: a connection accepted as the listener
  // closed is caught by the next pass.
  constexpr auto kAnswerGrace = std::chrono::seconds(5);
  const auto grace_end = std::chrono::steady_clock::now() + kAnswerGrace;
  std::unique_lock<std::mutex> lock(serve_mu_);
  while (serve_entered_ && !serve_returned_) {
    lock.unlock();
    const bool in_grace = std::chrono::steady_clock::now() < grace_end;
    Result<int> woken =
        ShutdownReadsOfAcceptedConnections(port_, [&](const std::string& addr, int port) {
          std::lock_guard<std::mutex> answering_lock(answering_mu_);
          return in_grace && answering_.count({addr, port}) > 0;
        });
    if (!woken.ok()) {
      std::fprintf(stderr, "stintd: stop: %s (idle connections end at their keep-alive timeout)\n",
                   woken.status().ToString().c_str());
    }
    lock.lock();
    if (!woken.ok()) break;
    serve_cv_.wait_for(lock, std::chrono::milliseconds(50),
                       [this] { return serve_returned_.load(); });
  }
}

void HttpApi::PruneLogs() {
  std::set<int64_t> live;  // jobs that may still write
  coordinator_->Read([&](const ClusterState& s, const Plan&, TimeMs) {
    for (const auto& [id, job] : s.jobs) {
      if (job.state == JobState::kPending || job.state == JobState::kRunning) live.insert(id);
    }
  });
  Result<int> pruned =
      logs_.Prune([&](int64_t job) { return live.count(job) > 0; },
                  std::chrono::seconds(static_cast<int64_t>(options_.log_retention_hours * 3600)));
  if (!pruned.ok())
    std::fprintf(stderr, "stintd: pruning old logs: %s\n", pruned.status().ToString().c_str());
}

void HttpApi::PruneLogsIfDue() {
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  int64_t due = next_log_prune_ns_.load();
  if (now < due) return;
  const int64_t next =
      now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::hours(1))
                .count();
  if (!next_log_prune_ns_.compare_exchange_strong(due, next)) return;  // another thread does it
  PruneLogs();
}

void HttpApi::InstallRoutes() {
  Routes routes(server_.get(), &authorization_, coordinator_, &auth_, options_.max_wait_seconds);
  InstallMetricsRoutes(&routes);
  InstallWindowRoutes(&routes);
  InstallJobRoutes(&routes);
  InstallSegmentRoutes(&routes);
  InstallNodeRoutes(&routes, &logs_, [this] { PruneLogsIfDue(); });
  InstallWorkerRoutes(&routes);
  InstallLogRoutes(&routes, &logs_);
  InstallLeaderRoutes(&routes, options_.leader_view);
  InstallConnectionHooks();
}

void HttpApi::InstallConnectionHooks() {
  // A request is being answered from routing until its answer is written
  // (the logger runs then): Stop() leaves its connection alone meanwhile.
  const int threads = options_.threads;
  server_->set_pre_routing_handler([this, threads](const httplib::Request& req,
                                                   httplib::Response& res) {
    if (refusing_connections) {
      res.status = 503;
      res.set_header("Connection", "close");
      res.set_content(ErrorBody("UNAVAILABLE",
                                "stintd serves at most " + std::to_string(threads) +
                                    " connections at once (--http-threads) and has that many: "
                                    "retry later")
                          .dump(),
                      "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (options_.leading && !options_.leading()) {
      // An old leader (paused past its lease, or cut from the database)
      // answers nothing from a state another stintd may have moved on from.
      res.status = 503;
      res.set_header("Connection", "close");
      res.set_content(ErrorBody("UNAVAILABLE",
                                "this stintd no longer holds the leader lease: ask the next "
                                "stintd of the list")
                          .dump(),
                      "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }
    std::lock_guard<std::mutex> lock(answering_mu_);
    answering_.insert({req.remote_addr, req.remote_port});
    return httplib::Server::HandlerResponse::Unhandled;
  });
  server_->set_logger([this](const httplib::Request& req, const httplib::Response&) {
    if (refusing_connections) {
      // Answered: a client that keeps the connection open anyway reads
      // end-of-stream now, and the refusing thread is free for the next.
      ShutdownReadsOfAcceptedConnections(port_, [&](const std::string& addr, int port) {
        return addr != req.remote_addr || port != req.remote_port;
      }).status().IgnoreError();
      return;
    }
    std::lock_guard<std::mutex> lock(answering_mu_);
    answering_.erase({req.remote_addr, req.remote_port});
  });
  server_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // a handler already answered
    if (res.status == 404) {
      res.set_content(DumpJson(ErrorBody("NOT_FOUND", "no route " + req.method + " " + req.path)),
                      "application/json");
    } else if (res.status == 413) {
      res.set_content(ErrorBody("INVALID_ARGUMENT", "request body too large (limit 2 MiB)").dump(),
                      "application/json");
    }
  });
}

}  // namespace stint::stintd
