#include "stint-agent/node_agent.h"

#include <signal.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "coord/http_json.h"
#include "coord/wall_clock.h"

namespace stint {
namespace agent {
namespace {

using internal::HttpReply;
using internal::HttpRequest;
using internal::Json;

bool ValidNodeName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (unsigned char c : name) {
    if (!(std::isalnum(c) || c == '.' || c == '_' || c == '-')) return false;
  }
  return true;
}

std::string JoinGpus(const std::vector<int>& gpus) {
  std::string out;
  for (int g : gpus) out += (out.empty() ? "" : ",") + std::to_string(g);
  return out;
}

// mkdir -p.
Status MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); i++) {
    if (i < path.size() && path[i] != '/') continue;
    const std::string prefix = path.substr(0, i);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::IoError("mkdir " + prefix + ": " + std::strerror(errno));
    }
  }
  return Status::OK();
}

}  // namespace

Result<std::unique_ptr<NodeAgent>> NodeAgent::Create(NodeAgentOptions options) {
  if (!ValidNodeName(options.node)) {
    return Status::InvalidArgument("--node must match [A-Za-z0-9._-]{1,128} (got \"" +
                                   options.node + "\")");
  }
  if (options.pool.empty()) return Status::InvalidArgument("--pool is required");
  if (options.gpus.empty()) return Status::InvalidArgument("--gpus must list at least one index");
  for (int g : options.gpus) {
    if (g < 0) return Status::InvalidArgument("--gpus: an index is negative");
  }
  if (!options.spot && !options.end_ms) {
    return Status::InvalidArgument(
        "a hard window needs an end: give --for or --until, or --spot for a revocable window");
  }
  if (options.notice_lead_seconds < 0)
    return Status::InvalidArgument("--notice-lead must be >= 0");
  if (options.heartbeat_interval.count() <= 0)
    return Status::InvalidArgument("--heartbeat-seconds must be > 0");
  if (!options.workdir.empty()) STINT_RETURN_IF_ERROR(MakeDirs(options.workdir));
  internal::HttpJsonOptions h;
  h.url = options.url;
  h.token = options.token;
  h.retry.deadline = options.call_deadline;
  h.retry.initial_backoff = std::chrono::milliseconds(50);
  h.retry.max_backoff = std::chrono::seconds(1);
  STINT_ASSIGN_OR_RETURN(auto http, internal::HttpJsonClient::Create(h));
  return std::unique_ptr<NodeAgent>(new NodeAgent(std::move(options), std::move(http)));
}

NodeAgent::NodeAgent(NodeAgentOptions options, std::unique_ptr<internal::HttpJsonClient> http)
    : options_(std::move(options)), http_(std::move(http)) {}

NodeAgent::~NodeAgent() = default;

Status NodeAgent::Register() {
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/nodes";
  Json body{{"name", options_.node},
            {"pool", options_.pool},
            {"gpus", options_.gpus},
            {"kind", options_.spot ? "spot" : "hard"},
            {"notice_lead_seconds", options_.notice_lead_seconds}};
  if (options_.end_ms) body["end_ms"] = *options_.end_ms;
  req.body = std::move(body);
  // Registering again finds the same window (stintd answers it when pool
  // and GPUs match), so a lost answer may be repeated.
  req.idempotent = true;
  STINT_ASSIGN_OR_RETURN(HttpReply reply, http_->Call(req));
  const Json& w = reply.body.is_object() ? reply.body.value("window", Json()) : Json();
  if (!w.is_object() || !w.value("id", Json()).is_number_integer()) {
    return Status::Internal("stintd's answer to POST /v1/nodes has no window: " + reply.text);
  }
  window_id_ = w["id"].get<int64_t>();
  const Json end = w.value("end_ms", Json());
  window_end_ms_ = end.is_number_integer() ? end.get<int64_t>() : 0;
  std::printf("stint-agent: node %s registered: window %lld in pool %s, GPUs %s (%s)\n",
              options_.node.c_str(), static_cast<long long>(window_id_), options_.pool.c_str(),
              JoinGpus(options_.gpus).c_str(), reply.status == 201 ? "new" : "found again");
  std::fflush(stdout);
  return Status::OK();
}

Status NodeAgent::CloseWindow() {
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/nodes/" + options_.node + "/close";
  req.body = Json::object();
  return http_->Call(req).status();
}

AgentExit NodeAgent::Run(const std::vector<int>& stop_signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : stop_signals) sigaddset(&set, sig);
  auto next_beat = std::chrono::steady_clock::now() + options_.heartbeat_interval;
  for (;;) {
    const auto wait = std::max(std::chrono::steady_clock::duration::zero(),
                               next_beat - std::chrono::steady_clock::now());
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig > 0) {
      std::printf("stint-agent: %s: closing window %lld of node %s\n", strsignal(sig),
                  static_cast<long long>(window_id_), options_.node.c_str());
      std::fflush(stdout);
      Status closed = CloseWindow();
      if (!closed.ok()) {
        std::fprintf(stderr, "stint-agent: could not close window %lld: %s\n",
                     static_cast<long long>(window_id_), closed.ToString().c_str());
        return AgentExit::kCloseFailed;
      }
      std::printf("stint-agent: window %lld closed\n", static_cast<long long>(window_id_));
      std::fflush(stdout);
      return AgentExit::kStopped;
    }
    if (sig < 0 && errno != EAGAIN && errno != EINTR) {
      std::fprintf(stderr, "stint-agent: sigtimedwait: %s\n", std::strerror(errno));
    }
    if (std::chrono::steady_clock::now() < next_beat) continue;  // EINTR
    next_beat += options_.heartbeat_interval;
    if (window_end_ms_ != 0 && internal::WallNowMs() >= window_end_ms_) {
      std::printf("stint-agent: window %lld reached its end\n", static_cast<long long>(window_id_));
      std::fflush(stdout);
      return AgentExit::kWindowClosed;
    }
    HttpRequest req;
    req.method = "POST";
    req.path = "/v1/nodes/" + options_.node + "/heartbeat";
    req.body = Json::object();
    Result<HttpReply> beat = http_->Call(req);
    if (beat.ok()) continue;
    if (beat.status().code() == Code::kAborted) {  // 410: stintd closed the window
      std::printf("stint-agent: stintd closed window %lld: %s\n",
                  static_cast<long long>(window_id_), beat.status().message().c_str());
      std::fflush(stdout);
      return AgentExit::kWindowClosed;
    }
    // Unreachable past the call deadline, or a refusal: keep beating; stintd
    // closes the window itself if the silence outlasts its node TTL.
    std::fprintf(stderr, "stint-agent: heartbeat failed: %s\n", beat.status().ToString().c_str());
  }
}

}  // namespace agent
}  // namespace stint
