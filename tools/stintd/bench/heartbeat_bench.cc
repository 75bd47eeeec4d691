// stintd-heartbeat-bench: heartbeats/s and latency percentiles against a
// real stintd on loopback. It starts its own stintd (--stintd PATH) on a
// temporary database, registers --workers workers on running jobs, then
// --connections client threads send heartbeats in a closed loop for
// --seconds, --runs times. Prints each run and the medians, with the
// targets (>= 5,000 heartbeats/s, p99 < 10 ms) beside them. Benchmark only:
// nothing here is a test. Client and server share this machine's cores.
// stintd is started by the tests' StintdProcess (tests/util).
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/stats.h"
#include "util/stintd_process.h"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

const char* kAdmin = stint::StintdProcess::kAdminToken;
const char* kWorker = stint::StintdProcess::kWorkerToken;

// Stops stintd as an operator would (SIGTERM) and passes on what it printed
// besides "listening on": StintdProcess reads stintd's stdout and stderr
// together, and its stderr is the bench's.
void Stop(stint::StintdProcess* daemon) {
  if (!daemon->running()) return;
  daemon->Kill(SIGTERM);
  std::istringstream lines(daemon->output());
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("stintd: listening on ", 0) != 0) std::fprintf(stderr, "%s\n", line.c_str());
  }
}

httplib::Headers Auth(const char* token) {
  return {{"Authorization", std::string("Bearer ") + token}};
}

json PostJson(httplib::Client& c, const std::string& path, const json& body, const char* token) {
  auto r = c.Post(path.c_str(), Auth(token), body.dump(), "application/json");
  if (!r || r->status >= 300) {
    std::fprintf(stderr, "stintd-heartbeat-bench: POST %s failed: %s\n", path.c_str(),
                 r ? r->body.c_str() : httplib::to_string(r.error()).c_str());
    std::exit(1);
  }
  return json::parse(r->body);
}

struct RunResult {
  double per_second = 0, p50_ms = 0, p99_ms = 0, max_ms = 0;
  int64_t errors = 0;
};

// A registered worker: its id and its own secret (the only token its
// heartbeat is accepted with).
struct BenchWorker {
  int64_t id = 0;
  std::string secret;
};

RunResult RunOnce(int port, const std::vector<BenchWorker>& workers, int connections,
                  double seconds) {
  std::vector<std::vector<double>> latencies(connections);
  std::atomic<int64_t> errors{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  const auto end_after = std::chrono::duration<double>(seconds);
  for (int t = 0; t < connections; t++) {
    threads.emplace_back([&, t] {
      httplib::Client c("127.0.0.1", port);
      c.set_keep_alive(true);
      c.set_tcp_nodelay(true);  // header and body are two writes: no Nagle wait between them
      while (!go) std::this_thread::yield();
      const auto until = Clock::now() + end_after;
      for (size_t i = t; Clock::now() < until; i += connections) {
        const BenchWorker& w = workers[i % workers.size()];
        const std::string path = "/v1/workers/" + std::to_string(w.id) + "/heartbeat";
        const auto t0 = Clock::now();
        auto r = c.Post(path.c_str(), Auth(w.secret.c_str()), "{\"step\":1}", "application/json");
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (!r || r->status != 200) errors++;
        latencies[t].push_back(ms);
      }
    });
  }
  const auto t0 = Clock::now();
  go = true;
  for (auto& th : threads) th.join();
  const double elapsed = stint::SecondsSince(t0);
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  RunResult r;
  if (all.empty()) return r;
  r.per_second = all.size() / elapsed;
  r.p50_ms = all[all.size() / 2];
  r.p99_ms = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  r.max_ms = all.back();
  r.errors = errors;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "stintd-heartbeat-bench: heartbeats/s and latency against a real stintd on loopback"};
  std::string stintd;
  int workers = 256, connections = 16, runs = 5;
  double seconds = 3;
  app.add_option("--stintd", stintd, "path of the stintd binary")->required();
  app.add_option("--workers", workers, "registered workers (spread over 64 jobs)")
      ->capture_default_str();
  app.add_option("--connections", connections, "client threads, one keep-alive connection each")
      ->capture_default_str();
  app.add_option("--seconds", seconds, "duration of one run")->capture_default_str();
  app.add_option("--runs", runs, "runs; medians are reported")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  char tmpl[] = "/tmp/stintd-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string dir = tmpl;
  int rc = 0;
  {
    stint::StintdProcess daemon(stintd, dir, {"--http-threads", "256"});
    if (!daemon.Start()) {
      std::fprintf(stderr, "stintd-heartbeat-bench: could not start %s\n", stintd.c_str());
      return 1;
    }
    httplib::Client admin("127.0.0.1", daemon.port());
    PostJson(admin, "/v1/pools", {{"name", "bench"}}, kAdmin);
    const int64_t far = stint::WallNowMs() + 3600 * 1000;
    PostJson(admin, "/v1/windows", {{"pool", "bench"}, {"gpus", 64}, {"end_ms", far}}, kAdmin);
    std::vector<int64_t> jobs;
    for (int j = 0; j < 64; j++) {
      jobs.push_back(PostJson(
          admin, "/v1/jobs", {{"name", "job" + std::to_string(j)}, {"min_gpus", 1}}, kAdmin)["id"]);
    }
    // Wait for the tick to start every job, then register the workers.
    std::vector<BenchWorker> worker_ids;
    for (int attempt = 0; attempt < 100 && worker_ids.size() < size_t(workers); attempt++) {
      worker_ids.clear();
      for (int w = 0; w < workers; w++) {
        const std::string path = "/v1/jobs/" + std::to_string(jobs[w % jobs.size()]) + "/workers";
        auto r = admin.Post(path.c_str(), Auth(kWorker),
                            json{{"name", "w" + std::to_string(w)}}.dump(), "application/json");
        if (!r || r->status != 201) break;
        const json reg = json::parse(r->body);
        worker_ids.push_back({reg["worker_id"].get<int64_t>(), reg.value("worker_secret", "")});
      }
      if (worker_ids.size() < size_t(workers))
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (worker_ids.size() < size_t(workers)) {
      std::fprintf(stderr, "stintd-heartbeat-bench: jobs did not start\n");
      Stop(&daemon);
      return 1;
    }
    std::printf(
        "stintd-heartbeat-bench: %d workers, %d connections, %d runs of %.1f s (client and server "
        "on "
        "the same %u cores)\n",
        workers, connections, runs, seconds, std::thread::hardware_concurrency());
    std::vector<double> rates, p50s, p99s;
    for (int i = 0; i < runs; i++) {
      RunResult r = RunOnce(daemon.port(), worker_ids, connections, seconds);
      std::printf(
          "  run %d: %8.0f heartbeats/s  p50 %.2f ms  p99 %.2f ms  max %.2f ms  errors %lld\n",
          i + 1, r.per_second, r.p50_ms, r.p99_ms, r.max_ms, static_cast<long long>(r.errors));
      rates.push_back(r.per_second);
      p50s.push_back(r.p50_ms);
      p99s.push_back(r.p99_ms);
      if (r.errors > 0) rc = 1;
    }
    // The upper median: for an even --runs, the larger middle run.
    const double rate = stint::UpperMedian(rates);
    const double p50 = stint::UpperMedian(p50s), p99 = stint::UpperMedian(p99s);
    std::printf(
        "median: %.0f heartbeats/s (target >= 5000: %s)  p50 %.2f ms  p99 %.2f ms (target < 10 ms: "
        "%s)\n",
        rate, rate >= 5000 ? "met" : "NOT met", p50, p99, p99 < 10 ? "met" : "NOT met");
    Stop(&daemon);
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return rc;
}
