// stintd: the queue coordinator daemon. See API.md for the HTTP API.
//
//   STINTD_ADMIN_TOKEN=... STINTD_WORKER_TOKEN=... stintd --store /var/lib/stintd/stintd.db
//   ... stintd --store postgresql://stintd@db.example/stintd
//   stintd migrate --from sqlite:/var/lib/stintd/stintd.db --to postgresql://...
//
// Several stintds on one PostgreSQL database: one leads (it prints
// "stintd: leading at epoch N" and then "listening on"), the others print
// "stintd: standby: the leader is URL (epoch N)" and wait without serving
// until its lease runs out (--leader-lease-seconds), then take over. A
// stintd that loses the lease exits 75 at once (restart it: it stands by).
//
// Prints "stintd: listening on HOST:PORT" (with " (https)" given --tls-cert
// and --tls-key) once it serves. SIGTERM or SIGINT
// stop it cleanly; kill -9 loses nothing that was acknowledged.
#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <random>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "stintd/server/auth.h"
#include "stintd/server/coordinator.h"
#include "stintd/server/http_api.h"
#include "stintd/server/leadership.h"
#include "stintd/slurm/slurm_executor.h"
#include "stintd/store/store_copy.h"

using namespace stint;
using namespace stint::stintd;

namespace {

// 127.0.0.0/8, ::1 and "localhost": addresses no other machine reaches.
bool IsLoopback(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    const in6_addr any = IN6ADDR_LOOPBACK_INIT;
    return std::memcmp(&v6, &any, sizeof(v6)) == 0;
  }
  return false;
}

// stintd's command line.
struct Flags {
  std::string listen = "127.0.0.1:7077";
  std::string db = "stintd.db";
  std::string admin_file, worker_file, agent_file;
  bool insecure = false;
  std::string logs_dir;
  std::string master_ports = "29500-29999";
  CoordinatorOptions options;
  HttpOptions http;
  bool slurm = false;
  SlurmExecutorOptions slurm_options;
  double slurm_poll_seconds = 2;
  double leader_lease_seconds = 5;
  std::string advertise_url;
  std::vector<std::string> slurm_partitions;  // --slurm-partition PARTITION[:LEAD]
};

// The server's flags: where it listens and keeps its state, tokens, TLS,
// nodes, logs, HTTP threads, KV limits and the tick.
void AddServerFlags(CLI::App& app, Flags* f) {
  app.add_option("--listen", f->listen, "host:port to serve on (port 0: any free port)")
      ->capture_default_str();
  CLI::Option* db =
      app.add_option("--db", f->db, "SQLite state file (created if missing); as --store")
          ->capture_default_str();
  app.add_option("--store", f->db,
                 "where the state is kept: an SQLite file (PATH or sqlite:PATH, created if "
                 "missing) or a PostgreSQL database (postgresql://user@host/db?...; the tables "
                 "are created in an empty one)")
      ->excludes(db);
  app.add_option("--leader-lease-seconds", f->leader_lease_seconds,
                 "with a database server as --store: the leader's lease; a standby takes over "
                 "within about this long of the leader's death")
      ->capture_default_str()
      ->check(CLI::Range(0.5, 600.0));
  app.add_option("--advertise-url", f->advertise_url,
                 "where clients reach this stintd, shown by GET /v1/leader and stintctl status "
                 "(default: --listen's address)");
  app.add_option("--admin-token-file", f->admin_file,
                 "admin bearer tokens, one per line (or $STINTD_ADMIN_TOKEN)");
  app.add_option("--worker-token-file", f->worker_file,
                 "worker bearer tokens, one per line (or $STINTD_WORKER_TOKEN)");
  app.add_option("--tls-cert", f->http.tls_cert,
                 "PEM certificate (chain) to serve https with; needs --tls-key");
  app.add_option("--tls-key", f->http.tls_key, "PEM private key of --tls-cert");
  app.add_flag("--insecure", f->insecure,
               "serve beyond loopback over plain HTTP (bearer tokens cross the network in clear)");
  app.add_option(
      "--agent-token-file", f->agent_file,
      "stint-agent bearer tokens, one per line (or $STINTD_AGENT_TOKEN); none: no nodes");
  app.add_option("--node-ttl-seconds", f->options.node_ttl_seconds,
                 "a node (stint-agent) silent this long has its window closed")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--logs-dir", f->logs_dir,
                 "where the workers' output is kept across restarts (default: the SQLite "
                 "file's path with .logs added; required with a database server)");
  app.add_option("--log-retention-hours", f->http.log_retention_hours,
                 "the output of a job that ended is deleted once it is this old")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--http-nice", f->http.thread_nice,
                 "nice value the HTTP threads add, so a flood of requests does not starve the "
                 "policy pass (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 19));
  app.add_option("--http-threads", f->http.threads,
                 "HTTP threads: one per open connection or long-poll; a connection past them is "
                 "answered 503 and closed")
      ->capture_default_str()
      ->check(CLI::Range(4, 4096));
  app.add_option("--http-keep-alive-seconds", f->http.keep_alive_seconds,
                 "an idle HTTP connection is closed after this long (and gives its thread back)")
      ->capture_default_str()
      ->check(CLI::Range(1, 300));
  app.add_option("--kv-max-keys-per-job", f->options.kv_max_keys_per_job,
                 "keys a job's KV may hold; a write past it is refused with 429")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--kv-max-bytes-per-job", f->options.kv_max_bytes_per_job,
                 "bytes (keys and values) a job's KV may hold; a write past it is refused with 429")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 50));
  app.add_option("--tick-seconds", f->options.tick_seconds, "policy pass period")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--heartbeat-interval-seconds", f->options.heartbeat_interval_seconds,
                 "suggested to workers")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

// The scheduling flags (PolicyConfig): leases, rendezvous, notices, growth,
// the queue order and service classes, the crash-loop guard, the launched
// segments' MASTER_PORT range and the plan depth.
void AddSchedulingFlags(CLI::App& app, Flags* f) {
  PolicyConfig& p = f->options.policy;
  app.add_option("--lease-ttl-seconds", p.lease_ttl_seconds, "a worker silent this long has left")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--rendezvous-last-call-seconds", p.rendezvous_last_call_seconds,
                 "a rendezvous round with min workers closes this long after reaching min")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--start-grace-seconds", p.start_grace_seconds,
                 "time a new segment's workers have to register")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--safety-seconds", p.safety_seconds,
                 "margin added to checkpoint estimates for notices")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-grace-seconds", p.max_grace_seconds, "bound on a preemption notice's grace")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  // stintd keeps only the grows stint-agent launches (coordinator.cc).
  p.grow_elastic = true;
  app.add_option("--grow-elastic", p.grow_elastic,
                 "elastic jobs launched on stint-agent nodes grow into GPUs that free up in "
                 "their windows (true/false)")
      ->capture_default_str();
  app.add_option("--grow-min-seconds", p.grow_min_seconds,
                 "an elastic job grows only with at least this much work left (remaining_seconds)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--price-migration", p.price_migration,
                 "move a running job to a pool cheaper per useful GPU-hour that has room now, "
                 "when the saving over its work left pays for the checkpoint and restart "
                 "(true/false; API.md, Prices and budgets)")
      ->capture_default_str();
  app.add_option("--price-migration-factor", p.price_migration_factor,
                 "a move needs the new pool below this x the current pool's cost per useful "
                 "GPU-hour")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--price-migration-min-left-seconds", p.price_migration_min_left_seconds,
                 "a job moves only with at least this much work left (remaining_seconds)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--object-store-gbps", p.object_store_gbps,
                 "GB/s a segment reads a checkpoint from an object store at, when its pool "
                 "reaches the job's newest step only there: added to its restart "
                 "(API.md, Storage)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--min-run-seconds", p.min_run_seconds,
                 "a segment younger than this is not preempted for priority")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--aging-points-per-hour", p.aging_points_per_hour,
                 "priority aging (1000 points = one level)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--aging-cap-points", p.aging_cap_points, "most aging can add")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--usage-half-life-seconds", p.usage_half_life_seconds, "team usage decay")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--service-class-points", p.service_class_points,
                 "points off per attained-service class (0: classes do not order the queue)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--service-class-by-remaining", p.service_class_by_remaining,
                 "a job reporting its remaining work is classed by the GPU-hours it has left "
                 "(false: by those it has attained)")
      ->capture_default_str();
  app.add_option("--service-class-remaining-max-drop", p.service_class_remaining_max_drop,
                 "a job's reported remaining work may class it at most this many classes below "
                 "its attained service (--service-classes or more: no bound)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app.add_option("--service-queue-guard-factor", p.service_queue_guard_factor,
                 "a pending job that never ran and waited longer than this x its remaining work "
                 "is classed 0 (0: off)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--service-class-gpu-hours", p.service_class_gpu_hours,
                 "attained GPU-hours of the first class step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--service-class-factor", p.service_class_factor,
                 "each next class step is this many times the last")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1e6));
  app.add_option("--service-classes", p.service_classes, "number of attained-service classes")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--service-preempt-classes", p.service_preempt_classes,
                 "a job preempts its own level's segments this many classes above it (0: never)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app.add_option("--crash-limit", p.crash_limit,
                 "a job whose launched workers crash this often within --crash-window-seconds "
                 "fails (0: never)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  app.add_option("--crash-window-seconds", p.crash_window_seconds, "the crash-loop guard's window")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--master-ports", f->master_ports,
                 "MASTER_PORT range of launched segments, FIRST-LAST (each active segment on a "
                 "master node gets one of its own)")
      ->capture_default_str();
  app.add_option("--plan-depth", p.plan_depth, "pending jobs planned per pass")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
}

// stintd over Slurm (slurm_executor.h): Slurm runs the segments on the
// nodes of the given partitions, no stint-agent there.
void AddSlurmFlags(CLI::App& app, Flags* f) {
  SlurmExecutorOptions& o = f->slurm_options;
  app.add_flag("--slurm", f->slurm,
               "run segments as Slurm jobs on the nodes of --slurm-partition (scontrol, squeue, "
               "sbatch and scancel in PATH, SLURM_CONF as for them)");
  app.add_option("--slurm-partition", f->slurm_partitions,
                 "PARTITION[:LEAD]: a Slurm partition whose GPU nodes lend windows, in the pool "
                 "of its name (repeat for several); LEAD: seconds of notice its node windows "
                 "give (a spot or cloud partition's; default --slurm-notice-lead-seconds)");
  app.add_option("--slurm-coord-url", o.coord_url,
                 "where the workers reach stintd (default: --listen's address)");
  app.add_option("--slurm-workdir", o.workdir,
                 "batch scripts and the jobs' output (default: the --db file's path with .slurm "
                 "added); must be readable where batch scripts start")
      ->capture_default_str();
  app.add_option("--slurm-tag", o.tag,
                 "Slurm job names are stint.TAG.SEGMENT: two stintds on one cluster need two tags")
      ->capture_default_str();
  app.add_option("--slurm-poll-seconds", f->slurm_poll_seconds,
                 "how often Slurm is read (a window never outlives its node by more)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 60.0));
  app.add_option("--slurm-notice-lead-seconds", o.notice_lead_seconds,
                 "notice a node window gives its segments when the node drains or leaves")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--slurm-margin-seconds", o.margin_seconds,
                 "a segment's Slurm time limit ends this long before its window")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--slurm-start-timeout-seconds", o.start_timeout_seconds,
                 "a segment's Slurm job still pending after this long is cancelled and the job "
                 "queued again")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--slurm-exit-grace-seconds", o.exit_grace_seconds,
                 "after one worker exits, the others' time to end by themselves (srun --wait)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

// A port of `host` no socket is bound to now.
Result<int> FreePort(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int err = getaddrinfo(host.c_str(), "0", &hints, &found); err != 0)
    return Status::InvalidArgument(std::string("cannot resolve: ") + gai_strerror(err));
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  Status s;
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (fd < 0) {
    s = StatusFromErrno("socket", errno);
  } else if (bind(fd, found->ai_addr, found->ai_addrlen) != 0) {
    s = StatusFromErrno("bind", errno);
  } else if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    s = StatusFromErrno("getsockname", errno);
  }
  freeaddrinfo(found);
  if (fd >= 0) close(fd);
  if (!s.ok()) return s;
  return static_cast<int>(ntohs(bound.ss_family == AF_INET6
                                    ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                    : reinterpret_cast<sockaddr_in*>(&bound)->sin_port));
}

// http(s)://HOST:PORT of --listen; a wildcard address by this host's name.
std::string ReachableUrl(const Flags& f, int port) {
  std::string host = f.http.host;
  if (host == "0.0.0.0" || host == "::" || host.empty()) {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    host = name;
  }
  return std::string(f.http.tls_cert.empty() ? "http://" : "https://") + host + ":" +
         std::to_string(port);
}

// Checks the parsed flags and fills in what they imply (--listen's host and
// port, the MASTER_PORT range, the logs dir). False, with a message on
// stderr, on a bad flag.
bool ResolveFlags(Flags* f) {
  const size_t colon = f->listen.rfind(':');
  if (colon == std::string::npos) {
    std::fprintf(stderr, "stintd: --listen must be host:port (got \"%s\")\n", f->listen.c_str());
    return false;
  }
  f->http.host = f->listen.substr(0, colon);
  try {
    f->http.port = std::stoi(f->listen.substr(colon + 1));
  } catch (const std::exception&) {
    f->http.port = -1;
  }
  if (f->http.port < 0 || f->http.port > 65535) {
    std::fprintf(stderr, "stintd: --listen port must be 0..65535 (got \"%s\")\n",
                 f->listen.c_str());
    return false;
  }
  if (f->http.tls_cert.empty() != f->http.tls_key.empty()) {
    std::fprintf(stderr, "stintd: --tls-cert and --tls-key go together\n");
    return false;
  }
  const bool tls = !f->http.tls_cert.empty();
  if (!IsLoopback(f->http.host) && !tls && !f->insecure) {
    // A token sent to a non-loopback address over plain HTTP travels in clear.
    std::fprintf(stderr,
                 "stintd: --listen %s is not a loopback address, and without --tls-cert/--tls-key "
                 "stintd speaks plain HTTP: every bearer token would cross the network in clear. "
                 "Give a certificate, listen on 127.0.0.1, or pass --insecure to accept that "
                 "explicitly\n",
                 f->http.host.c_str());
    return false;
  }
  {
    const size_t dash = f->master_ports.find('-');
    int first = -1, last = -1;
    if (dash != std::string::npos) {
      const char* b = f->master_ports.data();
      const char* e = b + f->master_ports.size();
      auto [p1, ec1] = std::from_chars(b, b + dash, first);
      auto [p2, ec2] = std::from_chars(b + dash + 1, e, last);
      if (ec1 != std::errc() || p1 != b + dash || ec2 != std::errc() || p2 != e) first = -1;
    }
    if (first < 1 || last > 65535 || first > last) {
      std::fprintf(stderr, "stintd: --master-ports must be FIRST-LAST in 1..65535 (got \"%s\")\n",
                   f->master_ports.c_str());
      return false;
    }
    f->options.master_port_first = first;
    f->options.master_port_last = last;
  }
  f->options.db_path = f->db;
  // Beside an SQLite file by default; a database server has no directory of ours.
  const bool server_store = f->db.find("://") != std::string::npos;
  if (server_store && f->http.port == 0) {
    // A standby names its address before it serves: fix the port now.
    Result<int> port = FreePort(f->http.host);
    if (!port.ok()) {
      std::fprintf(stderr, "stintd: --listen %s: %s\n", f->listen.c_str(),
                   port.status().ToString().c_str());
      return false;
    }
    f->http.port = *port;
  }
  if (f->advertise_url.empty()) f->advertise_url = ReachableUrl(*f, f->http.port);
  if (server_store && f->logs_dir.empty()) {
    std::fprintf(stderr, "stintd: with a database server as --store, give --logs-dir (where "
                         "the workers' output is kept across restarts)\n");
    return false;
  }
  f->http.logs_dir = f->logs_dir.empty() ? f->db + ".logs" : f->logs_dir;
  if (f->slurm_options.workdir.empty())
    f->slurm_options.workdir = (server_store ? f->logs_dir : f->db) + ".slurm";
  f->slurm_options.poll_interval =
      std::chrono::milliseconds(static_cast<int64_t>(f->slurm_poll_seconds * 1000));
  if (!f->slurm && !f->slurm_partitions.empty()) {
    std::fprintf(stderr, "stintd: --slurm-partition needs --slurm\n");
    return false;
  }
  for (const std::string& given : f->slurm_partitions) {
    const size_t colon = given.find(':');
    const std::string name = given.substr(0, colon);
    if (colon != std::string::npos) {
      const std::string lead = given.substr(colon + 1);
      char* end = nullptr;
      const double seconds = std::strtod(lead.c_str(), &end);
      if (name.empty() || lead.empty() || *end != '\0' || !(seconds >= 0)) {
        std::fprintf(stderr, "stintd: --slurm-partition %s: want PARTITION[:LEAD_SECONDS]\n",
                     given.c_str());
        return false;
      }
      f->slurm_options.partition_notice_lead_seconds[name] = seconds;
    }
    f->slurm_options.partitions.push_back(name);
  }
  return true;
}

// Waits as a standby until this stintd holds the leader lease of the
// database --store names; kCancelled when SIGTERM or SIGINT came first.
Result<std::unique_ptr<Leadership>> Lead(const Flags& f, const sigset_t& stop_signals) {
  LeadershipOptions o;
  o.store_url = f.db;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  o.holder = std::string(host) + ":" + std::to_string(getpid()) + ":" +
             std::to_string(std::random_device{}() % 1000000);
  o.advertise_url = f.advertise_url;
  o.lease = std::chrono::milliseconds(static_cast<int64_t>(f.leader_lease_seconds * 1000));
  o.on_lost = [](const Status& why) {
    // Crash-only: every acknowledged change is in the database; the
    // process must not act once another stintd may.
    std::fprintf(stderr, "stintd: %s; exiting\n", why.ToString().c_str());
    std::fflush(stderr);
    std::_Exit(75);
  };
  o.on_standby = [](const LeaderView& v) {
    std::printf("stintd: standby: the leader is %s (epoch %lld)\n",
                v.url.empty() ? "none yet" : v.url.c_str(), static_cast<long long>(v.epoch));
    std::fflush(stdout);
  };
  Result<std::unique_ptr<Leadership>> led =
      Leadership::Acquire(std::move(o), [&](std::chrono::milliseconds pause) {
        const timespec ts{static_cast<time_t>(pause.count() / 1000),
                          static_cast<long>(pause.count() % 1000) * 1000000};
        return sigtimedwait(&stop_signals, nullptr, &ts) > 0;
      });
  if (led.ok()) {
    std::printf("stintd: leading at epoch %lld\n", static_cast<long long>((*led)->epoch()));
    std::fflush(stdout);
  }
  return led;
}

// Loads the tokens, opens the coordinator, serves until SIGTERM or SIGINT.
int Serve(Flags* f) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "stintd: %s\n", s.ToString().c_str());
    return 1;
  };
  Result<std::vector<std::string>> admin = TokenAuth::Load(f->admin_file, "STINTD_ADMIN_TOKEN");
  if (!admin.ok()) return fail(admin.status());
  Result<std::vector<std::string>> worker = TokenAuth::Load(f->worker_file, "STINTD_WORKER_TOKEN");
  if (!worker.ok()) return fail(worker.status());
  Result<std::vector<std::string>> agent = TokenAuth::Load(f->agent_file, "STINTD_AGENT_TOKEN");
  if (!agent.ok()) return fail(agent.status());
  Result<TokenAuth> auth =
      TokenAuth::Create(std::move(*admin), std::move(*worker), std::move(*agent));
  if (!auth.ok()) return fail(auth.status());

  // Every thread started from here on inherits the blocked set, so only
  // the sigwait below sees SIGTERM/SIGINT.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  if (int err = pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr); err != 0) {
    return fail(StatusFromErrno("pthread_sigmask", err));
  }
  // A client that disconnects mid-answer must not kill the server.
  signal(SIGPIPE, SIG_IGN);

  // With a database server: stand by until this stintd leads.
  std::unique_ptr<Leadership> leadership;
  if (f->db.find("://") != std::string::npos) {
    Result<std::unique_ptr<Leadership>> led = Lead(*f, stop_signals);
    if (!led.ok()) {
      if (led.status().code() == Code::kCancelled) return 0;
      return fail(led.status());
    }
    leadership = std::move(*led);
    Leadership* l = leadership.get();
    f->options.fence = l->Fence();
    f->http.leading = [l] { return l->Valid(); };
    f->http.leader_view = [l] { return l->View(); };
    f->slurm_options.epoch = l->epoch();
    f->slurm_options.may_act = [l] { return l->Valid(); };
  }

  Result<std::unique_ptr<Coordinator>> coordinator = Coordinator::Open(f->options);
  if (!coordinator.ok()) return fail(coordinator.status());
  Result<std::unique_ptr<HttpApi>> api =
      HttpApi::Bind(coordinator->get(), std::move(*auth), f->http);
  if (!api.ok()) return fail(api.status());

  Status served;
  std::thread server([&] {
    served = (*api)->Serve();
    if (!served.ok()) kill(getpid(), SIGTERM);  // wakes the sigwait below
  });
  std::unique_ptr<SlurmExecutor> slurm;
  if (f->slurm) {
    SlurmExecutorOptions o = f->slurm_options;
    if (o.coord_url.empty()) o.coord_url = ReachableUrl(*f, (*api)->port());
    Result<std::unique_ptr<SlurmExecutor>> started =
        SlurmExecutor::Start(coordinator->get(), std::move(o));
    if (!started.ok()) {
      (*api)->Stop();
      server.join();
      return fail(started.status().WithContext("--slurm"));
    }
    slurm = std::move(*started);
  }
  std::printf("stintd: listening on %s:%d%s\n", f->http.host.c_str(), (*api)->port(),
              f->http.tls_cert.empty() ? "" : " (https)");
  std::fflush(stdout);

  int sig = 0;
  if (int err = sigwait(&stop_signals, &sig); err != 0) {
    (*api)->Stop();
    server.join();
    return fail(StatusFromErrno("sigwait", err));
  }
  std::fprintf(stderr, "stintd: %s received, stopping\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  slurm.reset();  // its Slurm jobs run on; a restarted stintd finds them by name
  (*api)->Stop();
  server.join();
  api->reset();
  coordinator->reset();
  leadership.reset();  // gives the lease up: a standby takes over at once
  if (!served.ok()) return fail(served);
  return 0;
}

// `stintd migrate --from A --to B`: copies a store into an empty one.
int Migrate(const std::string& from, const std::string& to) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "stintd migrate: %s\n", s.ToString().c_str());
    return 1;
  };
  Result<std::unique_ptr<Store>> source = Store::Open(from);
  if (!source.ok()) return fail(source.status().WithContext("--from"));
  Result<std::unique_ptr<Store>> target = Store::Open(to);
  if (!target.ok()) return fail(target.status().WithContext("--to"));
  Result<StoreCopyStats> copied = CopyStore(**source, **target);
  if (!copied.ok()) return fail(copied.status());
  std::printf("stintd migrate: copied %lld pools, %lld windows, %lld teams, %lld jobs, "
              "%lld segments, %lld workers, %lld evaluations, %lld kv entries from %s to %s\n",
              static_cast<long long>(copied->pools), static_cast<long long>(copied->windows),
              static_cast<long long>(copied->teams), static_cast<long long>(copied->jobs),
              static_cast<long long>(copied->segments), static_cast<long long>(copied->workers),
              static_cast<long long>(copied->evals), static_cast<long long>(copied->kv),
              (*source)->path().c_str(), (*target)->path().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "stintd: queue coordinator for stint training jobs (fragment/spot windows, priorities, "
      "notices)"};
  Flags flags;
  AddServerFlags(app, &flags);
  AddSchedulingFlags(app, &flags);
  AddSlurmFlags(app, &flags);
  std::string from, to;
  CLI::App* migrate = app.add_subcommand(
      "migrate", "copy the state of one store into an empty one (no stintd may hold either)");
  migrate->add_option("--from", from, "the store to copy: PATH, sqlite:PATH or postgresql://...")
      ->required();
  migrate->add_option("--to", to, "the empty store to fill: PATH, sqlite:PATH or postgresql://...")
      ->required();
  CLI11_PARSE(app, argc, argv);
  if (migrate->parsed()) return Migrate(from, to);
  if (!ResolveFlags(&flags)) return 2;
  return Serve(&flags);
}
