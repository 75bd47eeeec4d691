// stint-commit-bench: how long the commit of a multi-rank save takes as the
// job grows, from the last rank's report to every rank's durable, for
// N = 2 ... 1,024 ranks with tiny state (16 floats per rank, so the figure
// is the protocol's, not the disk's), over a real c10d TCPStore or over a
// real stintd's job KV.
//
//   stint-commit-bench [--ranks 2,4,...,1024] [--max-procs 16] [--saves 6]
//                      [--dir DIR] [--json FILE]
//   stint-commit-bench --channel stintd [--stintd PATH] [--ranks 2,8,32,64]
//
// Over stintd the bench starts its own (a temporary database, default
// flags, loopback), gives it a window and a job, and keeps one registered
// worker heartbeating every 50 ms throughout: each world size's line also
// gives that worker's heartbeat p99 while the commits ran, beside its p99
// before any rank started, so stintd's answering its workers is measured,
// not assumed.
//
// Every rank is a Checkpointer (the public API) with its own TCPStore
// connection, saving its shard of one tensor into one root. Up to
// --max-procs ranks are processes; above that, each of --max-procs
// processes hosts N / procs ranks as threads (the output says which), since
// this machine does not hold 1,024 processes of a job. Per save, the ranks
// start together (a barrier on the store); each records when it called
// Save(), when its report went out (Save() + snapshot + persist, from its
// SaveStats) and when its durable future resolved. Per N it prints the
// median over saves (the first is a warm-up and left out) of:
//   commit   max(durable) - max(report): the protocol, what the issue asks
//   save     max(durable) - min(call): a save end to end at that size
// and the machine's load. A measurement, not a test: nothing is asserted.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "coord/http_json.h"
#include "machine.h"
#include "process.h"
#include "stint/checkpointer.h"
#include "stint/coordinator_commit_channel.h"
#include "tcp_store_channel.h"

namespace stint {
namespace bench {
namespace {

using json = nlohmann::json;

constexpr int64_t kFloatsPerRank = 16;

double Seconds(Clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

// One rank's figures for one save, in seconds of the monotonic clock, which
// every process on this machine shares.
struct RankSample {
  int rank = 0;
  uint64_t step = 0;
  double call = 0, report = 0, durable = 0;
  std::string error;  // empty: durable
};

// Where the ranks agree: a TCPStore's port, or a stintd job's KV.
struct ChannelTarget {
  std::string kind;  // "tcpstore" or "stintd"
  uint16_t port = 0;
  std::string url, token;
  uint64_t job = 0;
};

// A rank's channel to `target`; `client` keeps a stintd channel's client.
Result<std::unique_ptr<CommitChannel>> OpenChannel(const ChannelTarget& target, int world,
                                                   std::unique_ptr<CoordinatorClient>* client) {
  if (target.kind == "tcpstore") {
    TcpStoreOptions so;
    so.port = target.port;
    return ConnectTcpStore(so);
  }
  CoordinatorOptions co;
  co.url = target.url;
  co.token = target.token;
  co.job_id = target.job;
  STINT_ASSIGN_OR_RETURN(*client, CoordinatorClient::Create(co));
  return std::unique_ptr<CommitChannel>(
      std::make_unique<CoordinatorCommitChannel>(client->get(), "bench-" + std::to_string(world)));
}

// One rank: opens its Checkpointer, then per save waits for every rank and
// saves its shard.
Status RunRank(const ChannelTarget& target, const std::string& root, int world, int rank, int saves,
               std::vector<RankSample>* out) {
  std::unique_ptr<CoordinatorClient> client;
  STINT_ASSIGN_OR_RETURN(std::unique_ptr<CommitChannel> channel,
                         OpenChannel(target, world, &client));
  CheckpointOptions o;
  o.root = root;
  o.rank = rank;
  o.world_size = world;
  o.commit_channel = channel.get();
  o.job_id = "commit-bench-" + std::to_string(world);
  o.io_engine = "posix";
  o.threads = 1;
  o.keep_last = 2;
  STINT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> ckpt, Checkpointer::Open(o));
  std::vector<float> shard(kFloatsPerRank, float(rank));
  State state;
  state.tensors.push_back(TensorShard{"w",
                                      DType::kFloat32,
                                      {world * kFloatsPerRank},
                                      {rank * kFloatsPerRank},
                                      {kFloatsPerRank},
                                      shard.data()});
  for (int s = 1; s <= saves; ++s) {
    // Start together: the last to arrive opens the gate.
    const std::string gate = "bench/" + std::to_string(world) + "/go-" + std::to_string(s);
    STINT_ASSIGN_OR_RETURN(
        int64_t arrived,
        channel->Add("bench/" + std::to_string(world) + "/arrive-" + std::to_string(s), 1));
    if (arrived == world) STINT_RETURN_IF_ERROR(channel->Set(gate, "1"));
    STINT_ASSIGN_OR_RETURN(std::optional<std::string> open,
                           channel->WaitFor(gate, Clock::now() + std::chrono::minutes(5)));
    if (!open) return Status::DeadlineExceeded("rank " + std::to_string(rank) + ": no start");
    RankSample sample;
    sample.rank = rank;
    sample.step = s;
    const Clock::time_point call = Clock::now();
    STINT_ASSIGN_OR_RETURN(SaveHandle handle, ckpt->Save(s, state));
    Status durable = handle.durable.get();
    const Clock::time_point done = Clock::now();
    sample.call = Seconds(call);
    sample.durable = Seconds(done);
    if (!durable.ok()) {
      sample.error = durable.ToString();
    } else {
      const CheckpointerStats stats = ckpt->stats();
      const double to_report =
          stats.last ? stats.last->snapshot_seconds + stats.last->persist_seconds : 0;
      sample.report = sample.call + to_report;
    }
    out->push_back(sample);
  }
  return Status::OK();
}

// A child process: ranks [first, first + count) as threads; one JSON line
// per sample on stdout.
int RunChild(const ChannelTarget& target, const std::string& root, int world, int first, int count,
             int saves) {
  std::vector<std::vector<RankSample>> samples(count);
  std::vector<Status> status(count);
  std::vector<std::thread> threads;
  for (int i = 0; i < count; ++i) {
    threads.emplace_back(
        [&, i] { status[i] = RunRank(target, root, world, first + i, saves, &samples[i]); });
  }
  for (auto& t : threads) t.join();
  int rc = 0;
  for (int i = 0; i < count; ++i) {
    if (!status[i].ok()) {
      std::fprintf(stderr, "rank %d: %s\n", first + i, status[i].ToString().c_str());
      rc = 1;
    }
    for (const RankSample& s : samples[i]) {
      std::printf("%s\n", json{{"rank", s.rank},
                               {"step", s.step},
                               {"call", s.call},
                               {"report", s.report},
                               {"durable", s.durable},
                               {"error", s.error}}
                              .dump()
                              .c_str());
    }
  }
  return rc;
}

struct WorldResult {
  int ranks = 0, procs = 0, threads_per_proc = 0;
  std::vector<double> commit, save;  // per save after the warm-up
  std::string error;
};

// The child's arguments after --child: where, then the ranks it runs.
std::vector<std::string> TargetArgs(const ChannelTarget& t) {
  return {t.kind, std::to_string(t.port), t.url.empty() ? "-" : t.url,
          t.token.empty() ? "-" : t.token, std::to_string(t.job)};
}

WorldResult RunWorld(const std::string& self, const ChannelTarget& target, const std::string& dir,
                     int world, int max_procs, int saves) {
  WorldResult r;
  r.ranks = world;
  r.procs = std::min(world, max_procs);
  r.threads_per_proc = (world + r.procs - 1) / r.procs;
  const std::string root = dir + "/world-" + std::to_string(world);
  std::vector<Result<ProcessResult>> runs(r.procs, Status::Internal("not run"));
  std::vector<std::thread> spawners;
  for (int p = 0, first = 0; p < r.procs; ++p) {
    const int count = std::min(r.threads_per_proc, world - first);
    spawners.emplace_back([&, p, first, count] {
      std::vector<std::string> argv{self, "--child"};
      for (std::string& a : TargetArgs(target)) argv.push_back(std::move(a));
      for (int v : {world, first, count, saves}) argv.push_back(std::to_string(v));
      argv.insert(argv.begin() + 2 + 5, root);
      runs[p] = RunProcess(argv, /*timeout_s=*/600);
    });
    first += count;
  }
  for (auto& t : spawners) t.join();
  std::map<uint64_t, std::vector<RankSample>> by_step;
  for (int p = 0; p < r.procs; ++p) {
    if (!runs[p].ok() || runs[p]->exit_code != 0) {
      r.error = "process " + std::to_string(p) + ": " +
                (runs[p].ok() ? LastLine(runs[p]->err) : runs[p].status().ToString());
      return r;
    }
    std::istringstream lines(runs[p]->out);
    for (std::string line; std::getline(lines, line);) {
      json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object()) continue;  // a library's own output
      RankSample s{j["rank"], j["step"], j["call"], j["report"], j["durable"], j["error"]};
      if (!s.error.empty() && r.error.empty())
        r.error = "rank " + std::to_string(s.rank) + ": " + s.error;
      by_step[s.step].push_back(s);
    }
  }
  for (auto& [step, samples] : by_step) {
    if (step == 1 || static_cast<int>(samples.size()) != world) continue;  // warm-up
    double last_report = 0, last_durable = 0, first_call = samples[0].call;
    for (const RankSample& s : samples) {
      last_report = std::max(last_report, s.report);
      last_durable = std::max(last_durable, s.durable);
      first_call = std::min(first_call, s.call);
    }
    r.commit.push_back(last_durable - last_report);
    r.save.push_back(last_durable - first_call);
  }
  return r;
}

// Each rank holds two store connections, and the server one per connection.
void RaiseOpenFileLimit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

constexpr const char* kAdminToken = "commit-bench-admin-0123456789abcdef";
constexpr const char* kWorkerToken = "commit-bench-worker-0123456789abcdef";

// A stintd of the bench's own on loopback: started with default flags on a
// fresh database in `dir`, its output in dir/stintd.log; SIGTERMed and
// reaped on destruction.
class BenchStintd {
 public:
  ~BenchStintd() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }

  Status Start(const std::string& binary, const std::string& dir) {
    const std::string admin = dir + "/admin.tokens", worker = dir + "/worker.tokens";
    std::ofstream(admin) << kAdminToken << "\n";
    std::ofstream(worker) << kWorkerToken << "\n";
    const std::string log = dir + "/stintd.log";
    std::vector<std::string> args{binary,
                                  "--listen",
                                  "127.0.0.1:0",
                                  "--db",
                                  dir + "/stintd.db",
                                  "--admin-token-file",
                                  admin,
                                  "--worker-token-file",
                                  worker};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&files, 1, 2);
    const int rc = posix_spawn(&pid_, binary.c_str(), &files, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&files);
    if (rc != 0) {
      pid_ = 0;
      return Status::IoError("spawning " + binary + ": " + std::strerror(rc));
    }
    // Its first line says where it listens; a database and a bind take far
    // less than this bound, which only turns a hang into an error.
    const auto until = Clock::now() + std::chrono::seconds(60);
    const std::string marker = "stintd: listening on ";
    while (Clock::now() < until) {
      std::ifstream in(log);
      for (std::string line; std::getline(in, line);) {
        const size_t at = line.find(marker);
        if (at == std::string::npos) continue;
        std::string where = line.substr(at + marker.size());
        where = where.substr(0, where.find(' '));
        url_ = "http://" + where;
        return Status::OK();
      }
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = 0;
        return Status::Unavailable("stintd exited; see " + log);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return Status::DeadlineExceeded("stintd did not say where it listens within 60 s; see " + log);
  }
  const std::string& url() const { return url_; }

 private:
  pid_t pid_ = 0;
  std::string url_;
};

// A job that runs on a one-GPU window of its own, so a worker can register
// and heartbeat as a training process would.
Result<uint64_t> RunningJob(const std::string& url) {
  internal::HttpJsonOptions ho;
  ho.url = url;
  ho.token = kAdminToken;
  STINT_ASSIGN_OR_RETURN(std::unique_ptr<internal::HttpJsonClient> admin,
                         internal::HttpJsonClient::Create(ho));
  auto post = [&](const std::string& path, internal::Json body) {
    internal::HttpRequest req;
    req.method = "POST";
    req.path = path;
    req.body = std::move(body);
    return admin->Call(req);
  };
  STINT_RETURN_IF_ERROR(post("/v1/pools", {{"name", "bench"}}).status());
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  STINT_RETURN_IF_ERROR(
      post("/v1/windows", {{"pool", "bench"}, {"gpus", 1}, {"end_ms", now_ms + 24 * 3600 * 1000}})
          .status());
  STINT_ASSIGN_OR_RETURN(
      internal::HttpReply job,
      post("/v1/jobs", {{"name", "commit-bench"}, {"pool", "bench"}, {"min_gpus", 1}}));
  const uint64_t id = job.body.value("id", uint64_t{0});
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < until) {
    internal::HttpRequest get;
    get.method = "GET";
    get.path = "/v1/jobs/" + std::to_string(id);
    STINT_ASSIGN_OR_RETURN(internal::HttpReply view, admin->Call(get));
    if (view.body.value("state", std::string()) == "RUNNING") return id;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status::DeadlineExceeded("the bench's job did not start within 60 s");
}

// One registered worker heartbeating every 50 ms on its own thread; each
// heartbeat's latency with the time it was sent.
class HeartbeatProbe {
 public:
  Status Start(const std::string& url, uint64_t job) {
    CoordinatorOptions co;
    co.url = url;
    co.token = kWorkerToken;
    co.job_id = job;
    co.worker_name = "commit-bench-probe";
    STINT_ASSIGN_OR_RETURN(client_, CoordinatorClient::Create(co));
    STINT_RETURN_IF_ERROR(client_->Register().status());
    thread_ = std::thread([this] {
      for (uint64_t step = 1; !stop_.load(); ++step) {
        const Clock::time_point t0 = Clock::now();
        Status s = client_->Heartbeat(step).status();
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        {
          std::lock_guard<std::mutex> lock(mu_);
          samples_.push_back({Seconds(t0), s.ok() ? ms : -1});
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
    return Status::OK();
  }
  ~HeartbeatProbe() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // p99 of the heartbeats sent in [from, to] in ms (a failed one counts as
  // infinitely slow), and how many there were.
  std::pair<double, size_t> P99(double from, double to) {
    std::vector<double> ms;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [at, took] : samples_) {
        if (at >= from && at <= to) ms.push_back(took < 0 ? 1e9 : took);
      }
    }
    if (ms.empty()) return {0, 0};
    std::sort(ms.begin(), ms.end());
    return {ms[std::min(ms.size() - 1, size_t(0.99 * ms.size()))], ms.size()};
  }

 private:
  std::unique_ptr<CoordinatorClient> client_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::pair<double, double>> samples_;
};

std::string SelfPath() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  self[n] = '\0';
  return self;
}

int Main(int argc, char** argv) {
  RaiseOpenFileLimit();
  if (argc == 12 && std::string(argv[1]) == "--child") {
    ChannelTarget t{argv[2], static_cast<uint16_t>(std::atoi(argv[3])),
                    std::string(argv[4]) == "-" ? "" : argv[4],
                    std::string(argv[5]) == "-" ? "" : argv[5],
                    std::strtoull(argv[6], nullptr, 10)};
    return RunChild(t, argv[7], std::atoi(argv[8]), std::atoi(argv[9]), std::atoi(argv[10]),
                    std::atoi(argv[11]));
  }
  const std::string self = SelfPath();
  CLI::App app{"stint-commit-bench: multi-rank commit latency over a real TCPStore or stintd"};
  std::vector<int> ranks;
  int max_procs = 16, saves = 6;
  std::string dir, json_out, kind = "tcpstore";
  std::string stintd =
      std::filesystem::path(self).parent_path().parent_path() / "stintd" / "stintd";
  app.add_option("--channel", kind, "tcpstore or stintd")
      ->check(CLI::IsMember({"tcpstore", "stintd"}));
  app.add_option("--stintd", stintd, "the stintd binary (--channel stintd)")->capture_default_str();
  app.add_option("--ranks", ranks, "world sizes (default 2,4,...,1024; stintd: 2,8,32,64)")
      ->delimiter(',');
  app.add_option("--max-procs", max_procs, "ranks beyond this are threads of that many processes")
      ->check(CLI::Range(1, 256));
  app.add_option("--saves", saves, "saves per world size (the first is a warm-up)")
      ->check(CLI::Range(2, 1000));
  app.add_option("--dir", dir, "where the roots go (default: a temporary directory)");
  app.add_option("--json", json_out, "also write the figures as JSON here");
  CLI11_PARSE(app, argc, argv);
  if (ranks.empty()) {
    ranks = kind == "tcpstore" ? std::vector<int>{2, 4, 8, 16, 64, 256, 1024}
                               : std::vector<int>{2, 8, 32, 64};
  }

  // Removed at the end, after the stintd using it stopped (declared first).
  struct RemovedAtExit {
    std::string path;
    ~RemovedAtExit() {
      std::error_code ignored;
      if (!path.empty()) std::filesystem::remove_all(path, ignored);
    }
  } made;
  if (dir.empty()) {
    std::string pattern = "/var/tmp/stint-commit-bench.XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::perror("stint-commit-bench: mkdtemp in /var/tmp");
      return 1;
    }
    dir = made.path = pattern;
  }
  auto fail = [&](const Status& s) {
    std::fprintf(stderr, "stint-commit-bench: %s\n", s.ToString().c_str());
    return 1;
  };
  ChannelTarget target;
  target.kind = kind;
  std::unique_ptr<CommitChannel> server;
  BenchStintd daemon;
  HeartbeatProbe probe;
  if (kind == "tcpstore") {
    TcpStoreOptions so;
    so.serve = true;
    auto served = ConnectTcpStore(so, &target.port);
    if (!served.ok()) return fail(served.status());
    server = std::move(*served);
  } else {
    if (Status s = daemon.Start(stintd, dir); !s.ok()) return fail(s);
    auto job = RunningJob(daemon.url());
    if (!job.ok()) return fail(job.status());
    target.url = daemon.url();
    target.token = kAdminToken;
    target.job = *job;
    if (Status s = probe.Start(daemon.url(), *job); !s.ok()) return fail(s);
  }

  const std::string where = kind == "tcpstore"
                                ? "TCPStore on 127.0.0.1:" + std::to_string(target.port)
                                : "stintd KV at " + target.url + " (default flags)";
  std::printf("stint-commit-bench: %s (%s), %s, load %s\n", dir.c_str(), FsTypeOf(dir).c_str(),
              where.c_str(), LoadAverage().c_str());
  double idle_p99 = 0;
  if (kind == "stintd") {
    // Heartbeats with no rank running: the reference for the ones below.
    const double from = Seconds(Clock::now());
    std::this_thread::sleep_for(std::chrono::seconds(3));  // the reference's own length
    auto [p99, n] = probe.P99(from, Seconds(Clock::now()));
    idle_p99 = p99;
    std::printf("heartbeat p99 with no rank running: %.2f ms (%zu heartbeats)\n", p99, n);
  }
  std::printf("%6s %6s %8s %12s %12s %22s%s\n", "ranks", "procs", "thr/proc", "commit_med_s",
              "save_med_s", "commit_range_s", kind == "stintd" ? "   hb_p99_ms" : "");
  json all = json::array();
  int rc = 0;
  for (int world : ranks) {
    const double from = Seconds(Clock::now());
    WorldResult r = RunWorld(self, target, dir, world, max_procs, saves);
    const auto [hb_p99, hb_n] =
        kind == "stintd" ? probe.P99(from, Seconds(Clock::now())) : std::pair<double, size_t>{0, 0};
    if (!r.error.empty() || r.commit.empty()) {
      std::printf("%6d %6d %8d  failed: %s\n", r.ranks, r.procs, r.threads_per_proc,
                  r.error.empty() ? "no complete save" : r.error.c_str());
      rc = 1;
      continue;
    }
    const auto [lo, hi] = std::minmax_element(r.commit.begin(), r.commit.end());
    char range[64];
    std::snprintf(range, sizeof(range), "%.4f-%.4f", *lo, *hi);
    char beat[32] = "";
    if (kind == "stintd") std::snprintf(beat, sizeof(beat), " %11.2f", hb_p99);
    std::printf("%6d %6d %8d %12.4f %12.4f %22s%s\n", r.ranks, r.procs, r.threads_per_proc,
                Median(r.commit), Median(r.save), range, beat);
    std::fflush(stdout);
    json row{{"channel", kind},
             {"ranks", r.ranks},
             {"processes", r.procs},
             {"ranks_per_process", r.threads_per_proc},
             {"commit_seconds_median", Median(r.commit)},
             {"save_seconds_median", Median(r.save)},
             {"commit_seconds", r.commit},
             {"load_average", LoadAverage()}};
    if (kind == "stintd") {
      row["heartbeat_p99_ms"] = hb_p99;
      row["heartbeats"] = hb_n;
      row["heartbeat_p99_ms_idle"] = idle_p99;
    }
    all.push_back(row);
  }
  if (!json_out.empty()) std::ofstream(json_out) << all.dump(2) << "\n";
  return rc;
}

}  // namespace
}  // namespace bench
}  // namespace stint

int main(int argc, char** argv) { return stint::bench::Main(argc, argv); }
