// stint-commit-bench: how long the commit of a multi-rank save takes as the
// job grows, from the last rank's report to every rank's durable, for
// N = 2 ... 1,024 ranks with tiny state (16 floats per rank, so the figure
// is the protocol's, not the disk's), over a real c10d TCPStore.
//
//   stint-commit-bench [--ranks 2,4,...,1024] [--max-procs 16] [--saves 6]
//                      [--dir DIR] [--json FILE]
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
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "machine.h"
#include "process.h"
#include "stint/checkpointer.h"
#include "tcp_store_channel.h"

namespace stint {
namespace bench {
namespace {

using Clock = std::chrono::steady_clock;
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

// One rank: opens its Checkpointer, then per save waits for every rank and
// saves its shard.
Status RunRank(uint16_t port, const std::string& root, int world, int rank, int saves,
               std::vector<RankSample>* out) {
  TcpStoreOptions so;
  so.port = port;
  STINT_ASSIGN_OR_RETURN(std::unique_ptr<CommitChannel> channel, ConnectTcpStore(so));
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
  state.tensors.push_back(TensorShard{"w", DType::kFloat32, {world * kFloatsPerRank},
                                      {rank * kFloatsPerRank}, {kFloatsPerRank}, shard.data()});
  for (int s = 1; s <= saves; ++s) {
    // Start together: the last to arrive opens the gate.
    const std::string gate = "bench/" + std::to_string(world) + "/go-" + std::to_string(s);
    STINT_ASSIGN_OR_RETURN(int64_t arrived,
                           channel->Add("bench/" + std::to_string(world) + "/arrive-" +
                                            std::to_string(s),
                                        1));
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
int RunChild(uint16_t port, const std::string& root, int world, int first, int count, int saves) {
  std::vector<std::vector<RankSample>> samples(count);
  std::vector<Status> status(count);
  std::vector<std::thread> threads;
  for (int i = 0; i < count; ++i) {
    threads.emplace_back(
        [&, i] { status[i] = RunRank(port, root, world, first + i, saves, &samples[i]); });
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

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

struct WorldResult {
  int ranks = 0, procs = 0, threads_per_proc = 0;
  std::vector<double> commit, save;  // per save after the warm-up
  std::string error;
};

WorldResult RunWorld(const std::string& self, uint16_t port, const std::string& dir, int world,
                     int max_procs, int saves) {
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
      runs[p] = RunProcess({self, "--child", std::to_string(port), root, std::to_string(world),
                            std::to_string(first), std::to_string(count), std::to_string(saves)},
                           /*timeout_s=*/600);
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
      if (!s.error.empty() && r.error.empty()) r.error = "rank " + std::to_string(s.rank) + ": " + s.error;
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

int Main(int argc, char** argv) {
  RaiseOpenFileLimit();
  if (argc == 8 && std::string(argv[1]) == "--child") {
    return RunChild(static_cast<uint16_t>(std::atoi(argv[2])), argv[3], std::atoi(argv[4]),
                    std::atoi(argv[5]), std::atoi(argv[6]), std::atoi(argv[7]));
  }
  CLI::App app{"stint-commit-bench: multi-rank commit latency over a real TCPStore"};
  std::vector<int> ranks{2, 4, 8, 16, 64, 256, 1024};
  int max_procs = 16, saves = 6;
  std::string dir, json_out;
  app.add_option("--ranks", ranks, "world sizes")->delimiter(',');
  app.add_option("--max-procs", max_procs, "ranks beyond this are threads of that many processes")
      ->check(CLI::Range(1, 256));
  app.add_option("--saves", saves, "saves per world size (the first is a warm-up)")
      ->check(CLI::Range(2, 1000));
  app.add_option("--dir", dir, "where the roots go (default: a temporary directory)");
  app.add_option("--json", json_out, "also write the figures as JSON here");
  CLI11_PARSE(app, argc, argv);

  std::string made;  // removed at the end
  if (dir.empty()) {
    std::string pattern = "/var/tmp/stint-commit-bench.XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::perror("stint-commit-bench: mkdtemp in /var/tmp");
      return 1;
    }
    dir = made = pattern;
  }
  uint16_t port = 0;
  TcpStoreOptions so;
  so.serve = true;
  auto server = ConnectTcpStore(so, &port);
  if (!server.ok()) {
    std::fprintf(stderr, "stint-commit-bench: %s\n", server.status().ToString().c_str());
    return 1;
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    std::perror("stint-commit-bench: /proc/self/exe");
    return 1;
  }
  self[n] = '\0';

  std::printf("stint-commit-bench: %s (%s), TCPStore on 127.0.0.1:%u, load %s\n", dir.c_str(),
              FsTypeOf(dir).c_str(), port, LoadAverage().c_str());
  std::printf("%6s %6s %8s %12s %12s %22s\n", "ranks", "procs", "thr/proc", "commit_med_s",
              "save_med_s", "commit_range_s");
  json all = json::array();
  int rc = 0;
  for (int world : ranks) {
    WorldResult r = RunWorld(self, port, dir, world, max_procs, saves);
    if (!r.error.empty() || r.commit.empty()) {
      std::printf("%6d %6d %8d  failed: %s\n", r.ranks, r.procs, r.threads_per_proc,
                  r.error.empty() ? "no complete save" : r.error.c_str());
      rc = 1;
      continue;
    }
    const auto [lo, hi] = std::minmax_element(r.commit.begin(), r.commit.end());
    char range[64];
    std::snprintf(range, sizeof(range), "%.4f-%.4f", *lo, *hi);
    std::printf("%6d %6d %8d %12.4f %12.4f %22s\n", r.ranks, r.procs, r.threads_per_proc,
                Median(r.commit), Median(r.save), range);
    std::fflush(stdout);
    all.push_back({{"ranks", r.ranks},
                   {"processes", r.procs},
                   {"ranks_per_process", r.threads_per_proc},
                   {"commit_seconds_median", Median(r.commit)},
                   {"save_seconds_median", Median(r.save)},
                   {"commit_seconds", r.commit},
                   {"load_average", LoadAverage()}});
  }
  if (!json_out.empty()) std::ofstream(json_out) << all.dump(2) << "\n";
  if (!made.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(made, ignored);
  }
  return rc;
}

}  // namespace
}  // namespace bench
}  // namespace stint

int main(int argc, char** argv) { return stint::bench::Main(argc, argv); }
