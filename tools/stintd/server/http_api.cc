#include "stintd/server/http_api.h"

#include <dirent.h>
#include <httplib.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "common/launch_spec.h"
#include "stintd/server/dashboard.h"
#include "stintd/server/json_model.h"
#include "stintd/server/metrics.h"
#include "stintd/server/worker_secret.h"

namespace stint::stintd {
namespace {

// Shuts down the reading side of every TCP connection this process accepted
// on `port` (the sockets whose local port is `port` and that have a peer;
// the listener has none) unless `spare(peer address, peer port)`. Returns
// how many. A descriptor closed or reused while the scan runs is skipped:
// it is no longer a connection to stop.
Result<int> ShutdownReadsOfAcceptedConnections(
    int port, const std::function<bool(const std::string&, int)>& spare) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir("/proc/self/fd"), closedir);
  if (dir == nullptr) return StatusFromErrno("opendir /proc/self/fd", errno);
  auto port_of = [](const sockaddr_storage& a) {
    if (a.ss_family == AF_INET)
      return int(ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port));
    if (a.ss_family == AF_INET6)
      return int(ntohs(reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port));
    return -1;
  };
  int count = 0;
  for (;;) {
    errno = 0;
    const dirent* entry = readdir(dir.get());
    if (entry == nullptr) {
      if (errno != 0) return StatusFromErrno("readdir /proc/self/fd", errno);
      return count;
    }
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir.get())) continue;
    struct stat st;
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&addr), &len) != 0) continue;
    if (port_of(addr) != port) continue;
    len = sizeof(addr);
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&addr), &len) != 0) continue;
    // The peer as cpp-httplib writes it into Request::remote_addr.
    char host[NI_MAXHOST] = {};
    if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), nullptr, 0,
                    NI_NUMERICHOST) == 0 &&
        spare(host, port_of(addr))) {
      continue;
    }
    // ENOTCONN: the peer went meanwhile, nothing left to wake.
    if (shutdown(static_cast<int>(fd), SHUT_RD) == 0) count++;
  }
}

// cpp-httplib (0.11) listens with a backlog of 5: a burst of connections
// past it (hundreds of clients at once) has its SYNs dropped, and each
// client waits out TCP's retransmit (1 s, 3 s, 7 s, ...) before it is even
// accepted. Listening again on the bound socket on `port` raises the
// backlog to the system's limit.
Status WidenListenBacklog(int port) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir("/proc/self/fd"), closedir);
  if (dir == nullptr) return StatusFromErrno("opendir /proc/self/fd", errno);
  for (;;) {
    errno = 0;
    const dirent* entry = readdir(dir.get());
    if (entry == nullptr) {
      if (errno != 0) return StatusFromErrno("readdir /proc/self/fd", errno);
      return Status::NotFound("no listening socket on port " + std::to_string(port));
    }
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir.get())) continue;
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 ||
        listening == 0) {
      continue;
    }
    sockaddr_storage addr{};
    len = sizeof(addr);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&addr), &len) != 0) continue;
    const int bound = addr.ss_family == AF_INET
                          ? ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port)
                      : addr.ss_family == AF_INET6
                          ? ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port)
                          : -1;
    if (bound != port) continue;
    if (listen(static_cast<int>(fd), SOMAXCONN) != 0) return StatusFromErrno("listen", errno);
    return Status::OK();
  }
}

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

struct Reply {
  int status = 200;
  json body;  // sent as JSON unless `text` is set
  std::string text;
  std::string content_type;  // for `text`
};

int HttpStatus(Code code) {
  switch (code) {
    case Code::kOk:
      return 200;
    case Code::kInvalidArgument:
      return 400;
    case Code::kUnauthenticated:
      return 401;
    case Code::kPermissionDenied:
      return 403;
    case Code::kNotFound:
      return 404;
    case Code::kAlreadyExists:
    case Code::kFailedPrecondition:
    case Code::kAborted:
      return 409;
    case Code::kResourceExhausted:
      return 429;
    case Code::kUnavailable:
      return 503;
    case Code::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

json ErrorBody(const char* code, const std::string& message) {
  return {{"error", {{"code", code}, {"message", message}}}};
}

Reply ErrorReply(const Status& s) {
  return {HttpStatus(s.code()), ErrorBody(CodeName(s.code()), s.message()), {}, {}};
}

// A worker whose segment ended or whose incarnation is stale must stop:
// 410 Gone, distinct from every retryable or caller error.
Reply GoneReply(const std::string& message) { return {410, ErrorBody("GONE", message), {}, {}}; }

Reply WorkerErrorReply(const Status& s) {
  return s.code() == Code::kAborted ? GoneReply(s.message()) : ErrorReply(s);
}

Result<int64_t> PathId(const httplib::Request& req, size_t i, const char* what) {
  const std::string& m = req.matches[i];
  int64_t v = 0;
  auto [p, ec] = std::from_chars(m.data(), m.data() + m.size(), v);
  if (ec != std::errc() || p != m.data() + m.size() || v <= 0) {
    return Status::InvalidArgument(std::string(what) + " id \"" + m + "\" is not a valid id");
  }
  return v;
}

Result<double> QuerySeconds(const httplib::Request& req, const char* name, double dflt,
                            double max) {
  if (!req.has_param(name)) return dflt;
  const std::string v = req.get_param_value(name);
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !(d >= 0)) {
    return Status::InvalidArgument(std::string(name) + " must be a number of seconds >= 0 (got \"" +
                                   v + "\")");
  }
  return std::min(d, max);
}

Result<int64_t> QueryInt(const httplib::Request& req, const char* name, int64_t dflt, int64_t min) {
  if (!req.has_param(name)) return dflt;
  const std::string v = req.get_param_value(name);
  int64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size() || out < min) {
    return Status::InvalidArgument(std::string(name) + " must be an integer >= " +
                                   std::to_string(min) + " (got \"" + v + "\")");
  }
  return out;
}

// Seconds a caller reports (estimates, measured durations, work left):
// refused unless finite, >= 0 and at most kMaxReportedSeconds (31 years),
// so that no sum or product of them the policy makes overflows a TimeMs
// (SecondsToMs) or outweighs every other job's numbers (API.md).
constexpr double kMaxReportedSeconds = 1e9;

Result<std::optional<double>> OptionalSeconds(const RequestBody& b, const char* name) {
  STINT_ASSIGN_OR_RETURN(std::optional<double> v, b.OptionalNumber(name));
  if (v && !(*v >= 0 && *v <= kMaxReportedSeconds)) {
    char got[32];
    std::snprintf(got, sizeof(got), "%g", *v);
    return Status::InvalidArgument(std::string(name) +
                                   " must be a number of seconds in [0, 1e9] (got " + got + ")");
  }
  return v;
}

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

Result<Job> ParseJobSpec(const RequestBody& b) {
  Job j;
  STINT_ASSIGN_OR_RETURN(j.name, b.String("name"));
  STINT_ASSIGN_OR_RETURN(std::optional<std::string> team, b.OptionalString("team"));
  STINT_ASSIGN_OR_RETURN(std::optional<std::string> pool, b.OptionalString("pool"));
  STINT_ASSIGN_OR_RETURN(std::optional<std::string> prio, b.OptionalString("priority"));
  STINT_ASSIGN_OR_RETURN(int64_t min_gpus, b.Int64("min_gpus"));
  STINT_ASSIGN_OR_RETURN(std::optional<int64_t> max_gpus, b.OptionalInt64("max_gpus"));
  STINT_ASSIGN_OR_RETURN(std::optional<bool> gang, b.OptionalBool("gang"));
  STINT_ASSIGN_OR_RETURN(std::optional<bool> preemptible, b.OptionalBool("preemptible"));
  STINT_ASSIGN_OR_RETURN(std::optional<double> ckpt, OptionalSeconds(b, "checkpoint_seconds"));
  STINT_ASSIGN_OR_RETURN(std::optional<double> restart, OptionalSeconds(b, "restart_seconds"));
  STINT_ASSIGN_OR_RETURN(std::optional<double> interval,
                         OptionalSeconds(b, "checkpoint_interval_seconds"));
  STINT_ASSIGN_OR_RETURN(std::optional<double> remaining, OptionalSeconds(b, "remaining_seconds"));
  if (min_gpus < 1 || min_gpus > 1000000) {
    return Status::InvalidArgument("min_gpus must be between 1 and 1000000 (got " +
                                   std::to_string(min_gpus) + ")");
  }
  if (max_gpus && (*max_gpus < 1 || *max_gpus > 1000000)) {
    return Status::InvalidArgument("max_gpus must be between 1 and 1000000 (got " +
                                   std::to_string(*max_gpus) + ")");
  }
  j.team = team.value_or("");
  j.pool = pool.value_or("");
  if (prio) {
    STINT_ASSIGN_OR_RETURN(j.priority, ParsePriority(*prio));
  }
  j.min_gpus = static_cast<int>(min_gpus);
  j.max_gpus = static_cast<int>(max_gpus.value_or(min_gpus));
  j.gang = gang.value_or(true);
  j.preemptible = preemptible.value_or(true);
  if (ckpt) j.checkpoint_seconds = *ckpt;
  if (restart) j.restart_seconds = *restart;
  if (interval) j.checkpoint_interval_seconds = *interval;
  if (remaining) j.remaining_seconds = *remaining;
  return j;
}

// What a node's agent runs (API.md, "Launching"): each active segment with
// GPUs on `window`, with its ranks and the job's launch spec.
// `placed`: the active segments placed on the window (PlacementIndex).
// A torchrun launch also gets the segment's registration token for this
// node (auth.h), with which the launcher reaches the job's KV and each of
// its ranks registers itself.
json Assignments(const ClusterState& s, const Window& window, const std::set<int64_t>& placed,
                 const TokenAuth& auth) {
  json out = json::array();
  for (int64_t sid : placed) {
    auto seg_it = s.segments.find(sid);
    if (seg_it == s.segments.end()) continue;
    const Segment& seg = seg_it->second;
    if (!SegmentActive(seg.state) || seg.placement.empty()) continue;
    auto job = s.jobs.find(seg.job_id);
    if (job == s.jobs.end() || job->second.launch.empty()) continue;
    const json launch = json::parse(job->second.launch, nullptr, /*allow_exceptions=*/false);
    const Result<tools::LaunchSpec> spec = tools::LaunchSpec::FromJson(launch);
    if (!spec.ok()) continue;
    const int gpw = spec->GpusPerWorker();
    int world = 0, rank_base = -1;
    std::vector<int> gpus;
    std::string master;
    for (const Placement& p : seg.placement) {
      auto w = s.windows.find(p.window_id);
      if (master.empty() && w != s.windows.end()) {
        master = w->second.node_addr.empty() ? w->second.node : w->second.node_addr;
      }
      if (p.window_id == window.id) {
        rank_base = world;
        gpus = p.gpus;
      }
      world += static_cast<int>(p.gpus.size()) / gpw;
    }
    if (rank_base < 0) continue;
    json a = {{"segment_id", sid},
              {"job_id", seg.job_id},
              {"job_name", job->second.name},
              {"state", SegmentStateName(seg.state)},
              {"fencing_token", seg.fencing_token},
              {"gpus", gpus},
              {"rank_base", rank_base},
              {"world_size", world},
              {"nodes", seg.placement.size()},
              {"master_addr", master},
              // Chosen when the segment started (ChooseMasterPort); a
              // segment started before that keeps the port it was given.
              {"master_port", seg.master_port != 0 ? seg.master_port : 20000 + sid % 20000},
              {"launch", launch},
              {"notice", nullptr}};
    if (spec->ThroughTorchrun()) a["registration_token"] = auth.SegmentToken(sid, window.node);
    if (seg.state == SegmentState::kNotified) {
      a["notice"] = {{"reason", NoticeReasonName(seg.notice_reason)},
                     {"deadline_ms", seg.deadline_ms},
                     {"notice_ms", seg.notice_ms}};
    } else if (seg.shrink_deadline_ms != 0) {
      // A shrink giving up GPUs here: the notice names the ones that leave
      // (the node's highest local ranks); the others run on.
      int leaving = 0;
      for (const Allocation& r : seg.shrink_release)
        leaving += r.window_id == window.id ? r.gpus : 0;
      leaving = std::min(leaving, static_cast<int>(gpus.size()));
      if (leaving > 0) {
        a["notice"] = {{"reason", NoticeReasonName(NoticeReason::kShrink)},
                       {"deadline_ms", seg.shrink_deadline_ms},
                       {"notice_ms", seg.shrink_notice_ms},
                       {"gpus", std::vector<int>(gpus.end() - leaving, gpus.end())}};
      }
    }
    out.push_back(std::move(a));
  }
  return out;
}

// `gpus_required` false: an absent "gpus" leaves Window::gpus 0 (an admin
// window on nodes that each name their GPU indices).
Result<Window> ParseWindowSpec(const RequestBody& b, TimeMs now, bool gpus_required = true) {
  Window w;
  STINT_ASSIGN_OR_RETURN(w.pool, b.String("pool"));
  STINT_ASSIGN_OR_RETURN(std::optional<int64_t> given, b.OptionalInt64("gpus"));
  if (!given && gpus_required) return b.Int64("gpus").status();  // "gpus is required"
  const int64_t gpus = given.value_or(1);  // absent: passes the check below, w.gpus stays 0
  STINT_ASSIGN_OR_RETURN(std::optional<int64_t> start, b.OptionalInt64("start_ms"));
  STINT_ASSIGN_OR_RETURN(std::optional<int64_t> end, b.OptionalInt64("end_ms"));
  STINT_ASSIGN_OR_RETURN(std::optional<std::string> kind, b.OptionalString("kind"));
  STINT_ASSIGN_OR_RETURN(std::optional<double> lead, b.OptionalNumber("notice_lead_seconds"));
  if (gpus < 1 || gpus > 1000000) {
    return Status::InvalidArgument("gpus must be between 1 and 1000000 (got " +
                                   std::to_string(gpus) + ")");
  }
  w.gpus = b.Find("gpus") != nullptr ? static_cast<int>(gpus) : 0;
  w.start_ms = start.value_or(now);
  w.end_ms = end.value_or(kNever);
  if (kind) {
    STINT_ASSIGN_OR_RETURN(w.kind, ParseWindowKind(*kind));
  }
  if (lead && !(*lead >= 0 && *lead < 1e9))
    return Status::InvalidArgument("notice_lead_seconds must be >= 0");
  w.notice_lead_ms = lead ? SecondsToMs(*lead) : 0;
  return w;
}

// What a worker secret (parsed by ParseWorkerSecret) says: whether it is
// the current secret of worker `owner`, that worker's job, whether it is
// still active, and the job of worker `target` (0: none or unknown).
struct SecretHolder {
  bool known = false;
  bool active = false;
  int64_t job = 0;
  int64_t target_job = 0;
};

SecretHolder LookUpSecret(Coordinator* c, int64_t owner, const std::string& random,
                          int64_t target = 0) {
  // Hashed before the lock; compared in constant time.
  const std::string hash = Sha256Hex(random);
  SecretHolder h;
  c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
    auto w = s.workers.find(owner);
    if (w == s.workers.end() || w->second.secret_hash.empty()) return;
    h.known = ConstantTimeEqual(w->second.secret_hash, hash);
    if (!h.known) return;
    h.job = w->second.job_id;
    Result<WorkerView> v = ViewWorker(s, owner);
    h.active = v.ok() && v->active;
    auto t = s.workers.find(target);
    if (t != s.workers.end()) h.target_job = t->second.job_id;
  });
  return h;
}

Reply FencedSecretReply(int64_t owner) {
  return GoneReply("worker " + std::to_string(owner) +
                   " is fenced (it left, or its segment ended): its secret is dead");
}

// Who may act on /v1/workers/{wid}/* (API.md, "Credentials"): that
// worker's own secret while it is active (410 once it left or its segment
// ended), an admin token, or the shared worker token for a worker
// registered before per-worker secrets (no secret_hash). nullopt: allowed.
std::optional<Reply> AuthorizeWorker(const TokenAuth& auth, Coordinator* c,
                                     const httplib::Request& req) {
  const std::string header = req.get_header_value("Authorization");
  const Right right = auth.Check(header);
  if (right == Right::kAdmin) return std::nullopt;
  Result<int64_t> wid = PathId(req, 1, "worker");
  if (!wid.ok()) return ErrorReply(wid.status());
  const std::string token = BearerToken(header);
  int64_t owner = 0;
  std::string random;
  if (right == Right::kNone && ParseWorkerSecret(token, &owner, &random)) {
    const SecretHolder h = LookUpSecret(c, owner, random, *wid);
    if (!h.known) return ErrorReply(Status::Unauthenticated("unknown or revoked worker secret"));
    if (owner != *wid) {
      std::string whose =
          "worker " + std::to_string(owner) + " (job " + std::to_string(h.job) + ")";
      std::string target = "worker " + std::to_string(*wid);
      if (h.target_job != 0) target += " (job " + std::to_string(h.target_job) + ")";
      return ErrorReply(Status::PermissionDenied("the secret of " + whose +
                                                 " cannot act for " + target));
    }
    if (!h.active) return FencedSecretReply(owner);
    return std::nullopt;
  }
  if (right == Right::kWorker || right == Right::kAgent) {
    bool legacy = false;
    c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
      auto w = s.workers.find(*wid);
      legacy = right == Right::kWorker && w != s.workers.end() && w->second.secret_hash.empty();
    });
    if (legacy) return std::nullopt;
    return ErrorReply(Status::PermissionDenied(
        "/v1/workers/" + std::to_string(*wid) +
        "/* needs that worker's own secret (worker_secret from its registration); the shared "
        "worker token only registers and reads"));
  }
  return ErrorReply(Status::Unauthenticated("missing or unknown bearer token"));
}

// A job or segment token (auth.h) acting on job `job`: a job token for
// that job; a segment token while its segment is the job's active one and
// placed on its node. nullopt: allowed.
std::optional<Reply> AuthorizeScoped(Coordinator* c, const ScopedToken& t, int64_t job) {
  if (t.segment == 0) {
    if (t.job == job) return std::nullopt;
    return ErrorReply(Status::PermissionDenied("the registration token of job " +
                                               std::to_string(t.job) + " cannot act for job " +
                                               std::to_string(job)));
  }
  int64_t seg_job = 0;
  bool current = false, placed = false;
  c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
    auto seg = s.segments.find(t.segment);
    if (seg == s.segments.end()) return;
    seg_job = seg->second.job_id;
    auto j = s.jobs.find(seg_job);
    current = j != s.jobs.end() && j->second.segment_id == t.segment &&
              SegmentActive(seg->second.state);
    for (const Placement& p : seg->second.placement) {
      auto w = s.windows.find(p.window_id);
      placed = placed || (w != s.windows.end() && w->second.node == t.node);
    }
  });
  const std::string whose = "the registration token of segment " + std::to_string(t.segment) +
                            " (job " + std::to_string(seg_job) + ") on node " + t.node;
  if (seg_job != job)
    return ErrorReply(Status::PermissionDenied(whose + " cannot act for job " + std::to_string(job)));
  if (!current || !placed)
    return GoneReply(whose + " is dead: that segment ended or left the node");
  return std::nullopt;
}

// The job-scoped calls (KV, fencing check) of job `job` (auth.h): an admin
// token, the job's own job or segment token, or the secret of an active
// worker of that job (a process stint-agent launched holds only its
// secret). Not the shared worker token (it registers and reads; kept only
// for a job whose active segment has a worker registered before per-worker
// secrets), not an agent token. nullopt: allowed.
std::optional<Reply> AuthorizeJob(const TokenAuth& auth, Coordinator* c,
                                  const httplib::Request& req, int64_t job) {
  const std::string header = req.get_header_value("Authorization");
  const Right right = auth.Check(header);
  if (right == Right::kAdmin) return std::nullopt;
  if (right == Right::kAgent) {
    return ErrorReply(Status::PermissionDenied(
        "an agent token does not reach job " + std::to_string(job) +
        "'s KV or fencing check: the workers stint-agent launches use their own secret "
        "(STINT_WORKER_SECRET)"));
  }
  if (right == Right::kWorker) {
    bool legacy = false;
    c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
      auto j = s.jobs.find(job);
      if (j == s.jobs.end() || j->second.segment_id == 0) return;
      for (const auto& [wid, w] : s.workers) {
        legacy = legacy || (w.segment_id == j->second.segment_id && !w.released &&
                            w.secret_hash.empty());
      }
    });
    if (legacy) return std::nullopt;
    return ErrorReply(Status::PermissionDenied(
        "the shared worker token only registers workers and reads: job " + std::to_string(job) +
        "'s KV and fencing check take the job's own credential (a worker's secret, or the job's "
        "registration_token)"));
  }
  if (ScopedToken scoped; auth.CheckScoped(header, &scoped)) return AuthorizeScoped(c, scoped, job);
  int64_t owner = 0;
  std::string random;
  if (right != Right::kNone || !ParseWorkerSecret(BearerToken(header), &owner, &random))
    return ErrorReply(Status::Unauthenticated("missing or unknown bearer token"));
  const SecretHolder h = LookUpSecret(c, owner, random);
  if (!h.known) return ErrorReply(Status::Unauthenticated("unknown or revoked worker secret"));
  if (h.job != job) {
    return ErrorReply(Status::PermissionDenied("the secret of worker " + std::to_string(owner) +
                                               " (job " + std::to_string(h.job) +
                                               ") cannot act for job " + std::to_string(job)));
  }
  if (!h.active) return FencedSecretReply(owner);
  return std::nullopt;
}

// Who registers workers into job `job` (POST /v1/jobs/{id}/workers,
// auth.h): an admin or the shared worker token; an agent or node token for
// a node it names (the wrapper checked a node token's name); the job's job
// token; a segment token of the job's active segment (the worker is then on
// the token's node, `*node`). nullopt: allowed.
std::optional<Reply> AuthorizeRegistration(const TokenAuth& auth, Coordinator* c,
                                           const httplib::Request& req, int64_t job,
                                           std::optional<std::string>* node) {
  const std::string header = req.get_header_value("Authorization");
  const Right right = auth.Check(header);
  if (right == Right::kAdmin || right == Right::kWorker) return std::nullopt;
  std::string own, random;
  if (right == Right::kAgent || ParseNodeToken(BearerToken(header), &own, &random)) {
    // An agent registers workers only where it launches them: the job's
    // active segment must be placed on the node it names.
    if (!*node) {
      return ErrorReply(Status::PermissionDenied(
          "an agent token registers workers only for a node it names (\"node\")"));
    }
    return std::nullopt;
  }
  if (ScopedToken scoped; auth.CheckScoped(header, &scoped)) {
    if (std::optional<Reply> refused = AuthorizeScoped(c, scoped, job)) return refused;
    if (scoped.segment != 0) {
      if (*node && **node != scoped.node) {
        return ErrorReply(Status::PermissionDenied("the registration token of node " +
                                                   scoped.node + " cannot register on node " +
                                                   **node));
      }
      *node = scoped.node;
    }
    return std::nullopt;
  }
  int64_t owner = 0;
  if (ParseWorkerSecret(BearerToken(header), &owner, &random) &&
      LookUpSecret(c, owner, random).known) {
    return ErrorReply(Status::PermissionDenied(
        "a worker secret does not register workers (worker " + std::to_string(owner) +
        "): registering takes the job's registration_token, or a worker or agent token"));
  }
  return ErrorReply(Status::Unauthenticated("missing or unknown bearer token"));
}

// A caller of the job read views (GET /v1/jobs, /v1/jobs/{id}, logs;
// auth.h): an admin sees everything; every other caller sees no launch.env;
// an agent sees only jobs with an active segment on its node (a node
// token's), or for the shared agent token on a node without a token of its
// own.
struct JobReader {
  bool admin = false;
  bool agent = false;
  std::string node;  // a node token's node
};

JobReader JobReaderOf(const TokenAuth& auth, const httplib::Request& req) {
  const std::string header = req.get_header_value("Authorization");
  JobReader r;
  std::string random;
  const Right right = auth.Check(header);
  r.admin = right == Right::kAdmin;
  r.agent = right == Right::kAgent || ParseNodeToken(BearerToken(header), &r.node, &random);
  return r;
}

bool SeesJob(const ClusterState& s, const JobReader& r, int64_t job) {
  if (!r.agent) return true;
  for (const auto& [sid, seg] : s.segments) {
    if (seg.job_id != job || !SegmentActive(seg.state)) continue;
    for (const Placement& p : seg.placement) {
      auto w = s.windows.find(p.window_id);
      if (w == s.windows.end() || w->second.node.empty()) continue;
      if (r.node.empty() ? s.node_credentials.count(w->second.node) == 0 : w->second.node == r.node)
        return true;
    }
  }
  return false;
}

// A job's JSON as `r` may see it: launch.env only to admins (it may hold
// credentials of the job's own).
json JobJsonFor(const JobReader& r, const Job& job) {
  json j = ToJson(job);
  if (!r.admin && j.contains("launch") && j["launch"].is_object()) j["launch"].erase("env");
  return j;
}

Reply UnseenJobReply(int64_t job) {
  return ErrorReply(Status::PermissionDenied(
      "job " + std::to_string(job) + " has no active segment on this agent's node"));
}

// The node a node-endpoint request acts for: the path's name, or for
// registration the body's "name", or for a worker registration the body's
// "node". nullopt: the request names no node (not a node endpoint).
std::optional<std::string> NodeActedFor(const std::string& pattern, const httplib::Request& req) {
  if (pattern.rfind("/v1/nodes/(", 0) == 0 && req.matches.size() > 1) return req.matches[1];
  const char* field = pattern == "/v1/nodes"                   ? "name"
                      : pattern == R"(/v1/jobs/(\d+)/workers)" ? "node"
                                                               : nullptr;
  if (field == nullptr || req.method != "POST") return std::nullopt;
  const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  const json v = body.is_object() ? body.value(field, json()) : json();
  return v.is_string() ? v.get<std::string>() : std::string();
}

// Node credentials (API.md, "Credentials"): a node's own token ("stn1.")
// acts only as that node's agent: its node endpoints, registering workers
// on it, and reads; the shared agent token cannot act for a node that has
// a credential of its own. nullopt: allowed; `*node_token` says whether the
// caller holds a node token (its right is then the agent's).
std::optional<Reply> AuthorizeNodeCaller(const TokenAuth& auth, const Coordinator* c,
                                         const std::string& pattern, Right need,
                                         const httplib::Request& req, bool* node_token) {
  *node_token = false;
  const std::string header = req.get_header_value("Authorization");
  std::string own, random;
  if (ParseNodeToken(BearerToken(header), &own, &random)) {
    if (c->CheckNodeToken(own, random) != Coordinator::NodeToken::kMatch)
      return ErrorReply(Status::Unauthenticated("unknown or revoked node token"));
    *node_token = true;
    const std::optional<std::string> acted = NodeActedFor(pattern, req);
    const bool read = req.method == "GET" && need == Right::kWorker;
    if (!acted && !read) {
      return ErrorReply(Status::PermissionDenied(
          "the token of node " + own +
          " acts only as that node's agent (its node endpoints, registering workers on it, "
          "reads)"));
    }
    if (acted && *acted != own) {
      return ErrorReply(Status::PermissionDenied("the token of node " + own +
                                                 " cannot act for node \"" + *acted + "\""));
    }
    return std::nullopt;
  }
  if (auth.Check(header) != Right::kAgent) return std::nullopt;
  const std::optional<std::string> acted = NodeActedFor(pattern, req);
  if (acted && !acted->empty() &&
      c->CheckNodeToken(*acted, "") != Coordinator::NodeToken::kNoCredential) {
    return ErrorReply(Status::PermissionDenied(
        "node " + *acted +
        " has a credential of its own: the shared agent token cannot act for it"));
  }
  return std::nullopt;
}

}  // namespace

HttpApi::HttpApi(Coordinator* coordinator, TokenAuth auth, HttpOptions options)
    : coordinator_(coordinator),
      auth_(std::move(auth)),
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
  // cpp-httplib (0.11) returns from listen only once every connection's
  // thread has, and a thread holding an idle keep-alive connection looks
  // at the stopped server only after its keep-alive timeout, one
  // mid-request after its read timeout. Shutting the reading side of each
  // accepted connection wakes it at once: it reads end-of-stream and
  // closes. Not yet for a connection whose answer is being made or written
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
  using Handler = std::function<Reply(const httplib::Request&)>;
  enum Method { kGet, kPost, kPut, kDelete };
  // One wrapper: authentication, exceptions (never expected: every parse is
  // checked, but a throw must not take the server down), the JSON answer.
  auto route = [this](Method method, const char* pattern, Right need, Handler handler) {
    const std::string route_pattern = pattern;
    auto wrapped = [this, need, handler, route_pattern](const httplib::Request& req,
                                                        httplib::Response& res) {
      Reply reply;
      bool node_token = false;
      const std::optional<Reply> node_refused =
          AuthorizeNodeCaller(auth_, coordinator_, route_pattern, need, req, &node_token);
      const Right have = need == Right::kNone ? Right::kNone
                         : node_token         ? Right::kAgent
                                              : auth_.Check(req.get_header_value("Authorization"));
      if (node_refused) {
        reply = *node_refused;
      } else if (need != Right::kNone && have == Right::kNone) {
        reply = ErrorReply(Status::Unauthenticated("missing or unknown bearer token"));
      } else if (!Allows(have, need)) {
        reply = ErrorReply(Status::PermissionDenied(need == Right::kAgent
                                                        ? "this endpoint needs an agent token"
                                                        : "this endpoint needs an admin token"));
      } else {
        try {
          reply = handler(req);
        } catch (const std::exception& e) {
          reply = ErrorReply(Status::Internal(std::string("unexpected error: ") + e.what()));
        }
      }
      res.status = reply.status;
      if (!reply.text.empty() || !reply.content_type.empty()) {
        res.set_content(reply.text, reply.content_type.c_str());
      } else {
        res.set_content(reply.body.dump(), "application/json");
      }
    };
    switch (method) {
      case kGet:
        server_->Get(pattern, wrapped);
        break;
      case kPost:
        server_->Post(pattern, wrapped);
        break;
      case kPut:
        server_->Put(pattern, wrapped);
        break;
      case kDelete:
        server_->Delete(pattern, wrapped);
        break;
    }
  };
  // The endpoints of one worker, /v1/workers/{wid}/...: AuthorizeWorker
  // instead of a right.
  auto worker_route = [this, &route](Method method, const char* pattern, Handler handler) {
    const TokenAuth* auth = &auth_;
    Coordinator* c = coordinator_;
    route(method, pattern, Right::kNone, [auth, c, handler](const httplib::Request& req) {
      if (std::optional<Reply> refused = AuthorizeWorker(*auth, c, req)) return *refused;
      return handler(req);
    });
  };
  Coordinator* c = coordinator_;
  const double max_wait = options_.max_wait_seconds;
#define STINT_HTTP_TRY(expr)                      \
  ({                                              \
    auto _r = (expr);                             \
    if (!_r.ok()) return ErrorReply(_r.status()); \
    std::move(_r).value();                        \
  })

  route(kGet, "/healthz", Right::kNone, [](const httplib::Request&) {
    return Reply{200, {{"ok", true}}, {}, {}};
  });

  // Static HTML without data: its script fetches the views below with the token from its URL
  // fragment.
  route(kGet, "/dashboard", Right::kNone, [](const httplib::Request&) {
    return Reply{200, {}, std::string(DashboardHtml()), "text/html; charset=utf-8"};
  });

  route(kGet, "/metrics", Right::kWorker, [c](const httplib::Request&) {
    Reply r;
    const ServerCounters sc = c->server_counters();
    c->Read([&](const ClusterState& s, const Plan& plan, TimeMs now) {
      r.text = RenderMetrics(s, plan, now, sc);
    });
    r.content_type = "text/plain; version=0.0.4";
    return r;
  });

  // --- pools, windows, teams ---
  route(kPost, "/v1/pools", Right::kAdmin, [c](const httplib::Request& req) {
    RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"name", "description"}));
    Pool p;
    p.name = STINT_HTTP_TRY(b.String("name"));
    p.description = STINT_HTTP_TRY(b.OptionalString("description")).value_or("");
    Pool out = STINT_HTTP_TRY(c->AddPool(p));
    return Reply{201, ToJson(out), {}, {}};
  });
  route(kGet, "/v1/pools", Right::kWorker, [c](const httplib::Request&) {
    json pools = json::array();
    c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
      for (const auto& [name, p] : s.pools) pools.push_back(ToJson(p));
    });
    return Reply{200, {{"pools", pools}}, {}, {}};
  });
  route(kPost, "/v1/windows", Right::kAdmin, [c](const httplib::Request& req) {
    RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(
        req.body, {"pool", "gpus", "start_ms", "end_ms", "kind", "notice_lead_seconds", "nodes"}));
    const json* nodes = STINT_HTTP_TRY(b.OptionalArray("nodes"));
    Window spec = STINT_HTTP_TRY(ParseWindowSpec(b, c->now(), /*gpus_required=*/nodes == nullptr));
    if (nodes != nullptr) {
      // One window per named node (API.md, "Windows on nodes").
      std::vector<Coordinator::DeclaredNode> declared;
      for (const json& n : *nodes) {
        Coordinator::DeclaredNode d;
        const json gpus = n.is_object() ? n.value("gpus", json::array()) : json::array();
        const bool named = n.is_string() || (n.is_object() && n.value("name", json()).is_string());
        if (!named || !gpus.is_array() ||
            (n.is_object() && n.size() != (n.contains("gpus") ? 2u : 1u))) {
          return ErrorReply(Status::InvalidArgument(
              "nodes must be an array of node names or {\"name\",\"gpus\":[indices]?}"));
        }
        d.name = n.is_string() ? n.get<std::string>() : n["name"].get<std::string>();
        for (const json& g : gpus) {
          if (!g.is_number_integer() || g.get<int64_t>() < 0 || g.get<int64_t>() > 1000000)
            return ErrorReply(Status::InvalidArgument("nodes[].gpus must hold GPU indices >= 0"));
          d.gpus.push_back(g.get<int>());
        }
        declared.push_back(std::move(d));
      }
      std::vector<Window> made = STINT_HTTP_TRY(c->AddNodeWindows(spec, declared));
      Reply r{201, {}, {}, {}};
      c->Read([&](const ClusterState& s, const Plan&, TimeMs now) {
        json windows = json::array();
        for (const Window& w : made) windows.push_back(ToJson(s, w, now));
        r.body = {{"windows", windows}};
      });
      return r;
    }
    Window w = STINT_HTTP_TRY(c->AddWindow(spec));
    Reply r{201, {}, {}, {}};
    c->Read([&](const ClusterState& s, const Plan&, TimeMs now) { r.body = ToJson(s, w, now); });
    return r;
  });
  route(kGet, "/v1/windows", Right::kWorker, [c](const httplib::Request&) {
    json windows = json::array();
    c->Read([&](const ClusterState& s, const Plan&, TimeMs now) {
      for (const auto& [id, w] : s.windows) windows.push_back(ToJson(s, w, now));
    });
    return Reply{200, {{"windows", windows}}, {}, {}};
  });
  route(kPost, R"(/v1/windows/(\d+)/close)", Right::kAdmin, [c](const httplib::Request& req) {
    const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "window"));
    RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"lead_seconds"}));
    std::optional<double> lead = STINT_HTTP_TRY(b.OptionalNumber("lead_seconds"));
    if (lead && !(*lead >= 0 && *lead < 1e9)) {
      return ErrorReply(Status::InvalidArgument("lead_seconds must be >= 0"));
    }
    std::optional<TimeMs> lead_ms;
    if (lead) lead_ms = SecondsToMs(*lead);
    Window w = STINT_HTTP_TRY(c->CloseWindow(id, lead_ms));
    Reply r;
    c->Read([&](const ClusterState& s, const Plan&, TimeMs now) { r.body = ToJson(s, w, now); });
    return r;
  });
  route(kPut, R"(/v1/teams/([^/]+))", Right::kAdmin, [c](const httplib::Request& req) {
    RequestBody b =
        STINT_HTTP_TRY(RequestBody::Parse(req.body, {"guaranteed_gpus", "borrow_limit_gpus"}));
    Team t;
    t.name = req.matches[1];
    std::optional<int64_t> g = STINT_HTTP_TRY(b.OptionalInt64("guaranteed_gpus"));
    std::optional<int64_t> bl = STINT_HTTP_TRY(b.OptionalInt64("borrow_limit_gpus"));
    if ((g && (*g < 0 || *g > 1000000)) || (bl && (*bl < -1 || *bl > 1000000))) {
      return ErrorReply(Status::InvalidArgument(
          "guaranteed_gpus must be 0..1000000 and borrow_limit_gpus -1..1000000"));
    }
    // An update keeps the fields it does not name.
    c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
      auto it = s.teams.find(t.name);
      if (it != s.teams.end()) t = it->second;
    });
    if (g) t.guaranteed_gpus = static_cast<int>(*g);
    if (bl) t.borrow_limit_gpus = static_cast<int>(*bl);
    Team out = STINT_HTTP_TRY(c->PutTeam(t));
    Reply r;
    c->Read([&](const ClusterState& s, const Plan&, TimeMs) { r.body = ToJson(s, out); });
    return r;
  });
  route(kGet, "/v1/teams", Right::kWorker, [c](const httplib::Request&) {
    json teams = json::array();
    c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
      for (const auto& [name, t] : s.teams) teams.push_back(ToJson(s, t));
    });
    return Reply{200, {{"teams", teams}}, {}, {}};
  });

  // --- jobs, queue, segments ---
  const TokenAuth* const reader_auth = &auth_;
  route(kPost, "/v1/jobs", Right::kAdmin, [c, reader_auth](const httplib::Request& req) {
    RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(
        req.body, {"name", "team", "pool", "priority", "min_gpus", "max_gpus", "gang",
                   "preemptible", "checkpoint_seconds", "restart_seconds",
                   "checkpoint_interval_seconds", "remaining_seconds", "launch"}));
    Job spec = STINT_HTTP_TRY(ParseJobSpec(b));
    const json* launch = STINT_HTTP_TRY(b.OptionalObject("launch"));
    if (launch != nullptr) {
      const auto checked = tools::LaunchSpec::ForJob(*launch, spec.min_gpus, spec.max_gpus);
      if (!checked.ok()) return ErrorReply(checked.status());
      spec.launch = launch->dump();
    }
    Job j = STINT_HTTP_TRY(c->SubmitJob(spec));
    // The job's own credential for workers started by hand (auth.h).
    json answer = ToJson(j);
    answer["registration_token"] = reader_auth->JobToken(j.id);
    return Reply{201, std::move(answer), {}, {}};
  });
  route(kGet, "/v1/jobs", Right::kWorker, [c, reader_auth](const httplib::Request& req) {
    const JobReader reader = JobReaderOf(*reader_auth, req);
    std::optional<JobState> filter;
    if (req.has_param("state")) {
      const std::string want = req.get_param_value("state");
      for (JobState st : {JobState::kPending, JobState::kRunning, JobState::kDone,
                          JobState::kCancelled, JobState::kFailed}) {
        if (want == JobStateName(st)) filter = st;
      }
      if (!filter) {
        return ErrorReply(
            Status::InvalidArgument("state must be PENDING, RUNNING, DONE, CANCELLED or FAILED"));
      }
    }
    json jobs = json::array();
    c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
      for (const auto& [id, j] : s.jobs) {
        if ((!filter || j.state == *filter) && SeesJob(s, reader, id))
          jobs.push_back(JobJsonFor(reader, j));
      }
    });
    return Reply{200, {{"jobs", jobs}}, {}, {}};
  });
  route(kGet, R"(/v1/jobs/(\d+))", Right::kWorker, [c, reader_auth](const httplib::Request& req) {
    const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "job"));
    const JobReader reader = JobReaderOf(*reader_auth, req);
    Reply r;
    c->Read([&](const ClusterState& s, const Plan& plan, TimeMs now) {
      auto it = s.jobs.find(id);
      if (it == s.jobs.end()) {
        r = ErrorReply(Status::NotFound("job " + std::to_string(id) + " does not exist"));
        return;
      }
      if (!SeesJob(s, reader, id)) {
        r = UnseenJobReply(id);
        return;
      }
      r.body = JobJsonFor(reader, it->second);
      if (reader.admin) r.body["registration_token"] = reader_auth->JobToken(id);
      json segments = json::array();
      for (const auto& [sid, seg] : s.segments) {
        if (seg.job_id == id) segments.push_back(ToJson(seg));
      }
      r.body["segments"] = segments;
      auto rdzv = s.rendezvous.find(id);
      if (rdzv != s.rendezvous.end()) r.body["rendezvous"] = ToJson(rdzv->second);
      for (const PendingInfo& p : plan.pending) {
        if (p.job_id == id) r.body["pending"] = ToJson(s, p, now);
      }
    });
    return r;
  });
  route(kPost, R"(/v1/jobs/(\d+)/cancel)", Right::kAdmin, [c](const httplib::Request& req) {
    const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "job"));
    RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"reason"}));
    const std::string reason = STINT_HTTP_TRY(b.OptionalString("reason")).value_or("");
    Job j = STINT_HTTP_TRY(c->CancelJob(id, reason));
    return Reply{200, ToJson(j), {}, {}};
  });
  route(kPost, R"(/v1/jobs/(\d+)/priority)", Right::kAdmin, [c](const httplib::Request& req) {
    const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "job"));
    RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"priority"}));
    const Priority p = STINT_HTTP_TRY(ParsePriority(STINT_HTTP_TRY(b.String("priority"))));
    Job j = STINT_HTTP_TRY(c->SetPriority(id, p));
    return Reply{200, ToJson(j), {}, {}};
  });
  route(kGet, "/v1/queue", Right::kWorker, [c](const httplib::Request&) {
    Reply r;
    c->Read([&](const ClusterState& s, const Plan& plan, TimeMs now) {
      json pending = json::array();
      for (const PendingInfo& p : plan.pending) {
        auto job = s.jobs.find(p.job_id);
        // A job cancelled or started since the plan is no longer pending.
        if (job != s.jobs.end() && job->second.state == JobState::kPending)
          pending.push_back(ToJson(s, p, now));
      }
      json running = json::array();
      for (const auto& [id, j] : s.jobs) {
        if (j.state != JobState::kRunning) continue;
        auto seg = s.segments.find(j.segment_id);
        running.push_back(
            {{"job_id", id},
             {"name", j.name},
             {"team", j.team},
             {"priority", PriorityName(j.priority)},
             {"segment", seg == s.segments.end() ? json(nullptr) : ToJson(seg->second)}});
      }
      r.body = {{"now_ms", now},
                {"pending", pending},
                {"running", running},
                {"stats", ToJson(plan.stats)}};
    });
    return r;
  });
  route(kGet, "/v1/segments", Right::kWorker, [c](const httplib::Request& req) {
    int64_t job_filter = 0;
    if (req.has_param("job_id")) {
      const std::string v = req.get_param_value("job_id");
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), job_filter);
      if (ec != std::errc() || p != v.data() + v.size() || job_filter <= 0) {
        return ErrorReply(Status::InvalidArgument("job_id must be a positive integer"));
      }
    }
    json segments = json::array();
    c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
      for (const auto& [id, seg] : s.segments) {
        if (job_filter == 0 || seg.job_id == job_filter) segments.push_back(ToJson(seg));
      }
    });
    return Reply{200, {{"segments", segments}}, {}, {}};
  });

  // --- nodes (stint-agent) ---
  route(kPost, "/v1/nodes", Right::kAgent, [c](const httplib::Request& req) {
    RequestBody b =
        STINT_HTTP_TRY(RequestBody::Parse(req.body, {"name", "pool", "gpus", "end_ms", "kind",
                                                     "notice_lead_seconds", "addr", "join"}));
    Window spec;
    spec.node = STINT_HTTP_TRY(b.String("name"));
    spec.node_addr = STINT_HTTP_TRY(b.OptionalString("addr")).value_or("");
    if (spec.node_addr.size() > 255) return ErrorReply(Status::InvalidArgument("addr is too long"));
    // "join": the node joins the admin window naming it; it lends none of
    // its own, so pool is optional and end, kind and lead are refused.
    const bool join = STINT_HTTP_TRY(b.OptionalBool("join")).value_or(false);
    if (join && (b.Find("end_ms") || b.Find("kind") || b.Find("notice_lead_seconds"))) {
      return ErrorReply(Status::InvalidArgument(
          "join takes the admin window's end, kind and lead: give none of end_ms, kind, "
          "notice_lead_seconds"));
    }
    spec.pool = join ? STINT_HTTP_TRY(b.OptionalString("pool")).value_or("")
                     : STINT_HTTP_TRY(b.String("pool"));
    const json* gpus = STINT_HTTP_TRY(b.Array("gpus"));
    for (const json& g : *gpus) {
      if (!g.is_number_integer() || g.get<int64_t>() < 0 || g.get<int64_t>() > 1000000)
        return ErrorReply(Status::InvalidArgument("gpus must be an array of GPU indices >= 0"));
      spec.node_gpus.push_back(g.get<int>());
    }
    std::optional<int64_t> end = STINT_HTTP_TRY(b.OptionalInt64("end_ms"));
    std::optional<std::string> kind = STINT_HTTP_TRY(b.OptionalString("kind"));
    std::optional<double> lead = STINT_HTTP_TRY(b.OptionalNumber("notice_lead_seconds"));
    spec.end_ms = end.value_or(kNever);
    if (kind) spec.kind = STINT_HTTP_TRY(ParseWindowKind(*kind));
    if (lead && !(*lead >= 0 && *lead < 1e9))
      return ErrorReply(Status::InvalidArgument("notice_lead_seconds must be >= 0"));
    spec.notice_lead_ms = lead ? SecondsToMs(*lead) : 0;
    bool created = false;
    Window w = STINT_HTTP_TRY(c->RegisterNode(spec, &created, join));
    Reply r{created ? 201 : 200, {}, {}, {}};
    c->Read([&](const ClusterState& s, const Plan&, TimeMs now) {
      r.body = {{"name", w.node}, {"window", ToJson(s, w, now)}};
    });
    return r;
  });
  // A node's own credential (API.md, "Credentials"): issued (or replaced)
  // by an admin, shown once.
  route(
      kPost, R"(/v1/nodes/([A-Za-z0-9._-]+)/token)", Right::kAdmin,
      [c](const httplib::Request& req) {
        STINT_HTTP_TRY(RequestBody::Parse(req.body.empty() ? "{}" : req.body, {}));
        std::string token;
        NodeCredential n = STINT_HTTP_TRY(c->IssueNodeToken(req.matches[1], &token));
        return Reply{201, {{"name", n.name}, {"token", token}, {"issued_ms", n.issued_ms}}, {}, {}};
      });
  route(kDelete, R"(/v1/nodes/([A-Za-z0-9._-]+)/token)", Right::kAdmin,
        [c](const httplib::Request& req) {
          Status s = c->RevokeNodeToken(req.matches[1]);
          return s.ok() ? Reply{200, {{"ok", true}}, {}, {}} : ErrorReply(s);
        });
  route(kGet, "/v1/nodes", Right::kWorker, [c](const httplib::Request&) {
    // Each node once, with its newest window.
    json nodes = json::array();
    c->Read([&](const ClusterState& s, const Plan&, TimeMs now) {
      std::map<std::string, const Window*> newest;
      for (const auto& [id, w] : s.windows) {
        if (w.node.empty()) continue;
        const Window*& n = newest[w.node];
        if (n == nullptr || w.id > n->id) n = &w;
      }
      for (const auto& [name, w] : newest) {
        const TimeMs beat = c->NodeLastHeartbeat(w->id);
        // The active segments placed on it: the workers it runs.
        json running = json::array();
        for (const auto& [sid, seg] : s.segments) {
          if (!SegmentActive(seg.state)) continue;
          for (const Placement& p : seg.placement) {
            if (p.window_id != w->id) continue;
            auto job = s.jobs.find(seg.job_id);
            running.push_back({{"segment_id", sid},
                               {"job_id", seg.job_id},
                               {"job_name", job != s.jobs.end() ? job->second.name : ""},
                               {"gpus", p.gpus}});
          }
        }
        nodes.push_back({{"name", name},
                         {"own_token", s.node_credentials.count(name) > 0},
                         {"pool", w->pool},
                         {"gpus", w->node_gpus},
                         {"open", w->open_at(now)},
                         {"last_heartbeat_ms", beat == 0 ? json(nullptr) : json(beat)},
                         {"window", ToJson(s, *w, now)},
                         {"running", running}});
      }
    });
    return Reply{200, {{"nodes", nodes}}, {}, {}};
  });
  LogTails* const logs = &logs_;
  route(kPost, R"(/v1/nodes/([A-Za-z0-9._-]+)/heartbeat)", Right::kAgent,
        [this, c, logs, max_wait](const httplib::Request& req) {
          PruneLogsIfDue();
          RequestBody b = STINT_HTTP_TRY(
              RequestBody::Parse(req.body, {"running", "exited", "logs", "crashed"}));
          std::vector<int64_t> running;
          std::vector<Coordinator::NodeExit> exits;
          const json* r = STINT_HTTP_TRY(b.OptionalArray("running"));
          for (const json& id : r != nullptr ? *r : json::array()) {
            if (!id.is_number_integer())
              return ErrorReply(Status::InvalidArgument("running must be an array of segment ids"));
            running.push_back(id.get<int64_t>());
          }
          const json* e = STINT_HTTP_TRY(b.OptionalArray("exited"));
          for (const json& x : e != nullptr ? *e : json::array()) {
            if (!x.is_object() || !x.value("segment_id", json()).is_number_integer() ||
                !x.value("exit_code", json()).is_number_integer() ||
                !x.value("message", json("")).is_string()) {
              return ErrorReply(Status::InvalidArgument(
                  "exited must be an array of {\"segment_id\",\"exit_code\",\"message\"?}"));
            }
            exits.push_back({x["segment_id"].get<int64_t>(), x["exit_code"].get<int>(),
                             x.value("message", "").substr(0, 4096)});
          }
          std::vector<Coordinator::NodeExit> crashes;
          const json* cr = STINT_HTTP_TRY(b.OptionalArray("crashed"));
          for (const json& x : cr != nullptr ? *cr : json::array()) {
            if (!x.is_object() || !x.value("segment_id", json()).is_number_integer() ||
                !x.value("exit_code", json()).is_number_integer() ||
                !x.value("message", json("")).is_string()) {
              return ErrorReply(Status::InvalidArgument(
                  "crashed must be an array of {\"segment_id\",\"exit_code\",\"message\"?}"));
            }
            crashes.push_back({x["segment_id"].get<int64_t>(), x["exit_code"].get<int>(),
                               x.value("message", "").substr(0, 4096)});
          }
          const json* l = STINT_HTTP_TRY(b.OptionalArray("logs"));
          for (const json& x : l != nullptr ? *l : json::array()) {
            auto integer = [&](const char* k) { return x.value(k, json()).is_number_integer(); };
            if (!x.is_object() || !integer("segment_id") || !integer("rank") ||
                !integer("offset") || !integer("size") || !x.value("text", json()).is_string() ||
                x["offset"].get<int64_t>() < 0 || x["size"].get<int64_t>() < 0) {
              return ErrorReply(Status::InvalidArgument(
                  "logs must be an array of {\"segment_id\",\"rank\",\"offset\",\"size\","
                  "\"text\"}"));
            }
          }
          // The output first, then the exits: whoever sees the job end
          // finds all of it (stintctl logs --follow). Only output of
          // segments with GPUs on this node is taken.
          const std::string node = req.matches[1];
          std::set<int64_t> exit_jobs;  // their followers look again once the exits are in
          // (job, index into logs) of the entries taken: appended after the
          // read, so the file writes never hold the coordinator's lock.
          std::vector<std::pair<int64_t, size_t>> taken;
          c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
            for (const Coordinator::NodeExit& x : exits) {
              auto seg = s.segments.find(x.segment_id);
              if (seg != s.segments.end()) exit_jobs.insert(seg->second.job_id);
            }
            for (size_t i = 0; l != nullptr && i < l->size(); i++) {
              const json& x = (*l)[i];
              auto seg = s.segments.find(x["segment_id"].get<int64_t>());
              if (seg == s.segments.end()) continue;
              bool here = false;
              for (const Allocation& a : seg->second.allocs) {
                auto win = s.windows.find(a.window_id);
                here = here || (win != s.windows.end() && win->second.node == node);
              }
              if (here) taken.emplace_back(seg->second.job_id, i);
            }
          });
          for (const auto& [job, i] : taken) {
            const json& x = (*l)[i];
            logs->Append(job, x["segment_id"].get<int64_t>(), x["rank"].get<int>(),
                         x["offset"].get<uint64_t>(), x["size"].get<uint64_t>(),
                         x["text"].get<std::string>());
          }
          // A long poll (API.md, "Nodes"): with `wait_seconds` and `known`
          // (the assignments_tag of the agent's last answer) it answers
          // once the node's assignments differ from those, or after the wait.
          const double wait = STINT_HTTP_TRY(QuerySeconds(req, "wait_seconds", 0, max_wait));
          const std::string known = req.has_param("known") ? req.get_param_value("known") : "";
          const auto until = std::chrono::steady_clock::now() + c->NodePollLimit(Millis(wait));
          Result<Window> w = c->NodeHeartbeat(node, running, exits, crashes);
          for (int64_t job : exit_jobs) logs->Wake(job);
          if (!w.ok()) return WorkerErrorReply(w.status());
          Reply reply;
          for (;;) {
            const uint64_t seen = c->EventSeq();
            std::string tag;
            c->ReadPlacedOn(w->id, [&](const ClusterState& s, const std::set<int64_t>& placed,
                                       TimeMs now) {
              json assignments = Assignments(s, *w, placed, auth_);
              char hex[17];
              std::snprintf(hex, sizeof(hex), "%016zx",
                            std::hash<std::string>()(assignments.dump()));
              tag = hex;
              auto win = s.windows.find(w->id);
              reply.body = {{"name", w->node},
                            {"window", ToJson(s, win != s.windows.end() ? win->second : *w, now)},
                            {"assignments", std::move(assignments)},
                            {"assignments_tag", tag}};
            });
            if (known.empty() || tag != known || !c->WaitEvent(seen, until)) break;
          }
          return reply;
        });
  route(kPost, R"(/v1/nodes/([A-Za-z0-9._-]+)/close)", Right::kAgent,
        [c](const httplib::Request& req) {
          STINT_HTTP_TRY(RequestBody::Parse(req.body, {}));
          Window w = STINT_HTTP_TRY(c->CloseNode(req.matches[1]));
          Reply r;
          c->Read([&](const ClusterState& s, const Plan&, TimeMs now) {
            r.body = {{"name", w.node}, {"window", ToJson(s, w, now)}};
          });
          return r;
        });

  // --- workers ---
  const double hb_interval = coordinator_->options().heartbeat_interval_seconds;
  const double ttl = coordinator_->options().policy.lease_ttl_seconds;
  const TokenAuth* const registrar_auth = &auth_;
  route(kPost, R"(/v1/jobs/(\d+)/workers)", Right::kNone,
        [c, hb_interval, ttl, registrar_auth](const httplib::Request& req) {
          const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "job"));
          RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"name", "node"}));
          const std::string name = STINT_HTTP_TRY(b.String("name"));
          std::optional<std::string> node = STINT_HTTP_TRY(b.OptionalString("node"));
          if (std::optional<Reply> refused =
                  AuthorizeRegistration(*registrar_auth, c, req, id, &node))
            return *refused;
          if (node) {
            bool placed = false;
            c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
              auto job = s.jobs.find(id);
              if (job == s.jobs.end()) return;
              auto seg = s.segments.find(job->second.segment_id);
              if (seg == s.segments.end() || !SegmentActive(seg->second.state)) return;
              for (const Placement& p : seg->second.placement) {
                auto win = s.windows.find(p.window_id);
                placed = placed || (win != s.windows.end() && win->second.node == *node);
              }
            });
            if (!placed) {
              return ErrorReply(Status::PermissionDenied(
                  "job " + std::to_string(id) + " has no active segment on node " + *node));
            }
          }
          std::string secret;
          Worker w = STINT_HTTP_TRY(c->RegisterWorker(id, name, &secret, node.value_or("")));
          // A segment token's segment may have ended meanwhile and the
          // worker landed in the next one: it must not stay there.
          if (std::optional<Reply> late =
                  AuthorizeRegistration(*registrar_auth, c, req, id, &node)) {
            Status left = c->Leave(w.id);
            if (!left.ok()) return ErrorReply(left);
            return *late;
          }
          return Reply{201,
                       {{"worker_id", w.id},
                        {"worker_secret", secret},
                        {"job_id", w.job_id},
                        {"segment_id", w.segment_id},
                        {"fencing_token", w.fencing_token},
                        {"lease_ttl_seconds", ttl},
                        {"heartbeat_interval_seconds", hb_interval}},
                       {},
                       {}};
        });
  auto view_reply = [](const Result<WorkerView>& v) {
    if (!v.ok()) return WorkerErrorReply(v.status());
    if (!v->active) {
      Reply r = GoneReply("segment " + std::to_string(v->segment_id) + " is " +
                          SegmentStateName(v->segment_state) + ": this worker is fenced");
      r.body["view"] = ToJson(*v);
      return r;
    }
    return Reply{200, ToJson(*v), {}, {}};
  };
  worker_route(kPost, R"(/v1/workers/(\d+)/heartbeat)",
        [c, view_reply](const httplib::Request& req) {
          const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "worker"));
          RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"step"}));
          const int64_t step = STINT_HTTP_TRY(b.OptionalInt64("step")).value_or(0);
          if (step < 0) return ErrorReply(Status::InvalidArgument("step must be >= 0"));
          return view_reply(c->Heartbeat(id, step));
        });
  worker_route(kGet, R"(/v1/workers/(\d+)/notice)",
        [c, view_reply, max_wait](const httplib::Request& req) {
          const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "worker"));
          const double wait = STINT_HTTP_TRY(QuerySeconds(req, "wait_seconds", 30, max_wait));
          return view_reply(c->WaitNotice(id, Millis(wait)));
        });
  auto worker_status = [](const Status& s) {
    return s.ok() ? Reply{200, {{"ok", true}}, {}, {}} : WorkerErrorReply(s);
  };
  worker_route(kPost, R"(/v1/workers/(\d+)/progress)",
      [c, worker_status](const httplib::Request& req) {
        const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "worker"));
        RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"step", "remaining_seconds"}));
        const int64_t step = STINT_HTTP_TRY(b.Int64("step"));
        if (step < 0) return ErrorReply(Status::InvalidArgument("step must be >= 0"));
        std::optional<double> remaining = STINT_HTTP_TRY(OptionalSeconds(b, "remaining_seconds"));
        double keep = 0;
        if (!remaining) {
          c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
            auto w = s.workers.find(id);
            if (w == s.workers.end()) return;
            auto j = s.jobs.find(w->second.job_id);
            if (j != s.jobs.end()) keep = j->second.remaining_seconds;
          });
        }
        return worker_status(c->ReportProgress(id, step, remaining.value_or(keep)));
      });
  worker_route(kPost, R"(/v1/workers/(\d+)/checkpoint)",
      [c, worker_status](const httplib::Request& req) {
        const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "worker"));
        RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"step", "seconds", "bytes"}));
        const int64_t step = STINT_HTTP_TRY(b.Int64("step"));
        std::optional<double> seconds = STINT_HTTP_TRY(OptionalSeconds(b, "seconds"));
        std::optional<int64_t> bytes = STINT_HTTP_TRY(b.OptionalInt64("bytes"));
        if (!seconds) return ErrorReply(Status::InvalidArgument("seconds is required"));
        if (bytes && *bytes < 0) return ErrorReply(Status::InvalidArgument("bytes must be >= 0"));
        return worker_status(
            c->ReportCheckpoint(id, step, *seconds, static_cast<uint64_t>(bytes.value_or(0))));
      });
  worker_route(kPost, R"(/v1/workers/(\d+)/ack)",
        [c, worker_status](const httplib::Request& req) {
          const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "worker"));
          RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"step"}));
          const int64_t step = STINT_HTTP_TRY(b.OptionalInt64("step")).value_or(-1);
          return worker_status(c->Ack(id, step));
        });
  worker_route(kPost, R"(/v1/workers/(\d+)/finished)",
        [c, worker_status](const httplib::Request& req) {
          const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "worker"));
          STINT_HTTP_TRY(RequestBody::Parse(req.body, {}));
          return worker_status(c->Finish(id));
        });
  worker_route(kPost, R"(/v1/workers/(\d+)/leave)",
        [c, worker_status](const httplib::Request& req) {
          const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "worker"));
          STINT_HTTP_TRY(RequestBody::Parse(req.body, {}));
          return worker_status(c->Leave(id));
        });
  // --- rendezvous ---
  auto rendezvous_reply = [](const Result<RendezvousView>& v) {
    return v.ok() ? Reply{200, ToJson(*v), {}, {}} : WorkerErrorReply(v.status());
  };
  worker_route(kPost, R"(/v1/workers/(\d+)/rendezvous/join)",
        [c, rendezvous_reply, max_wait](const httplib::Request& req) {
          const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "worker"));
          RequestBody b = STINT_HTTP_TRY(
              RequestBody::Parse(req.body, {"endpoint", "known_generation", "wait_seconds"}));
          const std::string endpoint = STINT_HTTP_TRY(b.String("endpoint"));
          const int64_t known = STINT_HTTP_TRY(b.OptionalInt64("known_generation")).value_or(0);
          const double wait = STINT_HTTP_TRY(b.OptionalNumber("wait_seconds")).value_or(30);
          if (known < 0)
            return ErrorReply(Status::InvalidArgument("known_generation must be >= 0"));
          if (!(wait >= 0 && wait <= max_wait)) {
            return ErrorReply(Status::InvalidArgument("wait_seconds must be in [0, " +
                                                      std::to_string(max_wait) + "]"));
          }
          return rendezvous_reply(
              c->JoinRendezvous(id, endpoint, static_cast<uint64_t>(known), Millis(wait)));
        });
  worker_route(kGet, R"(/v1/workers/(\d+)/rendezvous)",
      [c, rendezvous_reply, max_wait](const httplib::Request& req) {
        const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "worker"));
        const double wait = STINT_HTTP_TRY(QuerySeconds(req, "wait_seconds", 0, max_wait));
        const int64_t known = STINT_HTTP_TRY(QueryInt(req, "known_generation", 0, 0));
        return rendezvous_reply(c->WaitRendezvous(id, static_cast<uint64_t>(known), Millis(wait)));
      });

  const TokenAuth* auth = &auth_;
  route(kPost, "/v1/fencing/check", Right::kNone, [c, auth](const httplib::Request& req) {
    RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"job_id", "fencing_token"}));
    const int64_t job = STINT_HTTP_TRY(b.Int64("job_id"));
    if (std::optional<Reply> refused = AuthorizeJob(*auth, c, req, job)) return *refused;
    const int64_t token = STINT_HTTP_TRY(b.Int64("fencing_token"));
    if (token < 0) return ErrorReply(Status::InvalidArgument("fencing_token must be >= 0"));
    TimeMs until = kNever;
    std::string why;
    const bool valid = c->CheckFencing(job, static_cast<uint64_t>(token), &until, &why);
    json answer = {{"valid", valid}, {"valid_until_ms", valid ? TimeJson(until) : json(nullptr)}};
    // Why a token is stale, for the worker's error message (API.md).
    if (!valid) answer["reason"] = why;
    return Reply{200, std::move(answer), {}, {}};
  });

  // --- KV ---
  route(kPut, R"(/v1/jobs/(\d+)/kv/([A-Za-z0-9._/-]+))", Right::kNone,
        [c, auth](const httplib::Request& req) {
          const int64_t job = STINT_HTTP_TRY(PathId(req, 1, "job"));
          if (std::optional<Reply> refused = AuthorizeJob(*auth, c, req, job)) return *refused;
          RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"value", "if_version"}));
          const std::string value = STINT_HTTP_TRY(b.String("value"));
          std::optional<int64_t> if_version = STINT_HTTP_TRY(b.OptionalInt64("if_version"));
          // A value past the limit is 413; a job past its caps is 429 (API.md, "KV").
          if (value.size() > kKvMaxValueBytes) {
            return Reply{413,
                         ErrorBody("PAYLOAD_TOO_LARGE", "kv value is " +
                                                            std::to_string(value.size()) +
                                                            " bytes; the limit is 1 MiB"),
                         {},
                         {}};
          }
          const int64_t version = STINT_HTTP_TRY(c->PutKv(job, req.matches[2], value, if_version));
          return Reply{200, {{"version", version}}, {}, {}};
        });
  route(kGet, R"(/v1/jobs/(\d+)/kv/([A-Za-z0-9._/-]+))", Right::kNone,
        [c, auth, max_wait](const httplib::Request& req) {
          const int64_t job = STINT_HTTP_TRY(PathId(req, 1, "job"));
          if (std::optional<Reply> refused = AuthorizeJob(*auth, c, req, job)) return *refused;
          const double wait = STINT_HTTP_TRY(QuerySeconds(req, "wait_seconds", 0, max_wait));
          const int64_t min_version = STINT_HTTP_TRY(QueryInt(req, "min_version", 1, 1));
          KvRecord e = STINT_HTTP_TRY(c->GetKv(job, req.matches[2], min_version, Millis(wait)));
          return Reply{200, ToJson(e), {}, {}};
        });
  route(kDelete, R"(/v1/jobs/(\d+)/kv/([A-Za-z0-9._/-]+))", Right::kNone,
        [c, auth](const httplib::Request& req) {
          const int64_t job = STINT_HTTP_TRY(PathId(req, 1, "job"));
          if (std::optional<Reply> refused = AuthorizeJob(*auth, c, req, job)) return *refused;
          Status s = c->DeleteKv(job, req.matches[2]);
          return s.ok() ? Reply{200, {{"ok", true}}, {}, {}} : ErrorReply(s);
        });
  // --- workers' output (LogTails) ---
  route(
      kGet, R"(/v1/jobs/(\d+)/logs)", Right::kWorker,
      [c, logs, max_wait, reader_auth](const httplib::Request& req) {
        const int64_t job = STINT_HTTP_TRY(PathId(req, 1, "job"));
        const JobReader reader = JobReaderOf(*reader_auth, req);
        bool known = false, seen = false;
        c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
          known = s.jobs.count(job) > 0;
          seen = SeesJob(s, reader, job);
        });
        if (!known) return ErrorReply(Status::NotFound("no job " + std::to_string(job)));
        if (!seen) return UnseenJobReply(job);
        const int64_t after = STINT_HTTP_TRY(QueryInt(req, "after", 0, 0));
        const double wait = STINT_HTTP_TRY(QuerySeconds(req, "wait_seconds", 0, max_wait));
        LogTails::Tail tail = logs->Read(job, after, Millis(wait));
        std::string state;
        c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
          state = JobStateName(s.jobs.at(job).state);
        });
        json chunks = json::array();
        for (const LogChunk& ch : tail.chunks) {
          chunks.push_back({{"seq", ch.seq},
                            {"segment_id", ch.segment_id},
                            {"rank", ch.rank},
                            {"text", ch.text}});
        }
        return Reply{200,
                     {{"job_id", job},
                      {"state", state},
                      {"chunks", chunks},
                      {"next", tail.next},
                      {"dropped", tail.dropped}},
                     {},
                     {}};
      });
#undef STINT_HTTP_TRY

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
      res.set_content(ErrorBody("NOT_FOUND", "no route " + req.method + " " + req.path).dump(),
                      "application/json");
    } else if (res.status == 413) {
      res.set_content(ErrorBody("INVALID_ARGUMENT", "request body too large (limit 2 MiB)").dump(),
                      "application/json");
    }
  });
}

}  // namespace stint::stintd
