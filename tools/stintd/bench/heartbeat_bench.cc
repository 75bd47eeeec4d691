// stintd-heartbeat-bench: heartbeats/s and latency percentiles against a
// real stintd on loopback. It starts its own stintd (--stintd PATH) on a
// temporary database, registers --workers workers on running jobs, then
// --connections client threads send heartbeats in a closed loop for
// --seconds, --runs times; or, with --nodes N, registers N stint-agent
// nodes and submits --queued jobs, and the clients send the nodes'
// heartbeats. Prints each run (and stintd's last plan time after it) and
// the medians, with the targets (>= 5,000 heartbeats/s, p99 < 10 ms, plan
// < 50 ms) beside them. Benchmark only:
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
#include <functional>
#include <memory>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/stats.h"
#include "util/postgres_server.h"
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

// One heartbeat the clients send: a worker's (with its own secret) or a
// node's (with the agent token).
struct Beat {
  std::string path;
  std::string token;
  std::string body;
};

RunResult RunOnce(int port, const std::vector<Beat>& beats, int connections, double seconds) {
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
        const Beat& b = beats[i % beats.size()];
        const auto t0 = Clock::now();
        auto r = c.Post(b.path.c_str(), Auth(b.token.c_str()), b.body, "application/json");
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (!r || r->status != 200) {
          // The first few say what went wrong (a status, or cpp-httplib's error).
          if (errors++ < 3) {
            std::fprintf(stderr, "stintd-heartbeat-bench: %s after %.1f ms\n",
                         r ? ("HTTP " + std::to_string(r->status)).c_str()
                           : httplib::to_string(r.error()).c_str(),
                         std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
          }
        }
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

// Sends `count` POSTs (body(i) to path) from `connections` threads; false
// when one was refused.
bool PostMany(int port, int count, int connections, const std::string& path, const char* token,
              const std::function<json(int)>& body) {
  std::atomic<int> next{0};
  std::atomic<bool> ok{true};
  std::vector<std::thread> threads;
  for (int t = 0; t < connections; t++) {
    threads.emplace_back([&] {
      httplib::Client c("127.0.0.1", port);
      c.set_keep_alive(true);
      c.set_tcp_nodelay(true);
      for (int i = next++; i < count && ok; i = next++) {
        auto r = c.Post(path.c_str(), Auth(token), body(i).dump(), "application/json");
        if (!r || r->status >= 300) {
          std::fprintf(stderr, "stintd-heartbeat-bench: POST %s failed: %s\n", path.c_str(),
                       r ? r->body.c_str() : httplib::to_string(r.error()).c_str());
          ok = false;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  return ok;
}

// A sample of /metrics (its exact name and labels); -1 if missing.
double Metric(httplib::Client& c, const std::string& sample) {
  auto r = c.Get("/metrics", Auth(kAdmin));
  if (!r || r->status != 200) return -1;
  const size_t at = r->body.find("\n" + sample + " ");
  return at == std::string::npos ? -1
                                 : std::strtod(r->body.c_str() + at + sample.size() + 2, nullptr);
}

double LastPlanMs(httplib::Client& c) {
  return 1000 * Metric(c, "stintd_plan_seconds{stat=\"last\"}");
}

// The last plan's time once two more passes ran with no heartbeats going
// (the plan then has the cores to itself); -1 if none came within 60 s.
double QuietPlanMs(httplib::Client& c) {
  const double start = Metric(c, "stintd_plans_total");
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < until) {
    if (Metric(c, "stintd_plans_total") >= start + 2) return LastPlanMs(c);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return -1;
}

// --nodes: N agent nodes of 8 GPUs each and --queued jobs of 4 GPUs
// (more than the nodes hold, so most wait); the beats are the nodes'.
std::vector<Beat> SetUpNodes(stint::StintdProcess* daemon, int nodes, int queued) {
  const int port = daemon->port();
  const char* agent = stint::StintdProcess::kAgentToken;
  if (!PostMany(port, nodes, 16, "/v1/nodes", agent, [](int i) {
        return json{{"name", "node-" + std::to_string(i)},
                    {"pool", "bench"},
                    {"gpus", {0, 1, 2, 3, 4, 5, 6, 7}},
                    {"kind", "spot"}};
      }) ||
      !PostMany(port, queued, 16, "/v1/jobs", kAdmin, [](int i) {
        return json{{"name", "job" + std::to_string(i)}, {"pool", "bench"}, {"min_gpus", 4}};
      })) {
    return {};
  }
  std::vector<Beat> beats;
  for (int i = 0; i < nodes; i++) {
    beats.push_back({"/v1/nodes/node-" + std::to_string(i) + "/heartbeat", agent, "{}"});
  }
  return beats;
}

// Workers on 64 running jobs; the beats are theirs, each with its secret.
std::vector<Beat> SetUpWorkers(stint::StintdProcess* daemon, int workers) {
  httplib::Client admin("127.0.0.1", daemon->port());
  const int64_t far = stint::WallNowMs() + 3600 * 1000;
  PostJson(admin, "/v1/windows", {{"pool", "bench"}, {"gpus", 64}, {"end_ms", far}}, kAdmin);
  std::vector<int64_t> jobs;
  for (int j = 0; j < 64; j++) {
    jobs.push_back(PostJson(admin, "/v1/jobs",
                            {{"name", "job" + std::to_string(j)}, {"min_gpus", 1}}, kAdmin)["id"]);
  }
  // Wait for the tick to start every job, then register the workers.
  std::vector<Beat> beats;
  for (int attempt = 0; attempt < 100 && beats.size() < size_t(workers); attempt++) {
    beats.clear();
    for (int w = 0; w < workers; w++) {
      const std::string path = "/v1/jobs/" + std::to_string(jobs[w % jobs.size()]) + "/workers";
      auto r = admin.Post(path.c_str(), Auth(kWorker),
                          json{{"name", "w" + std::to_string(w)}}.dump(), "application/json");
      if (!r || r->status != 201) break;
      const json reg = json::parse(r->body);
      beats.push_back(
          {"/v1/workers/" + std::to_string(reg["worker_id"].get<int64_t>()) + "/heartbeat",
           reg.value("worker_secret", ""), "{\"step\":1}"});
    }
    if (beats.size() < size_t(workers)) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (beats.size() < size_t(workers)) return {};
  return beats;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "stintd-heartbeat-bench: heartbeats/s and latency against a real stintd on loopback"};
  std::string stintd;
  int workers = 256, connections = 16, runs = 5, nodes = 0, queued = 10000;
  double seconds = 3;
  app.add_option("--stintd", stintd, "path of the stintd binary")->required();
  app.add_option("--workers", workers, "registered workers (spread over 64 jobs)")
      ->capture_default_str();
  app.add_option("--nodes", nodes,
                 "instead of workers: stint-agent nodes (8 GPUs each) heartbeating, with --queued "
                 "jobs of 4 GPUs submitted")
      ->capture_default_str();
  app.add_option("--queued", queued, "jobs submitted with --nodes")->capture_default_str();
  app.add_option("--connections", connections, "client threads, one keep-alive connection each")
      ->capture_default_str();
  app.add_option("--seconds", seconds, "duration of one run")->capture_default_str();
  app.add_option("--runs", runs, "runs; medians are reported")->capture_default_str();
  std::string http_nice = "5";
  app.add_option("--http-nice", http_nice, "stintd's --http-nice")->capture_default_str();
  std::string store = "sqlite";
  app.add_option("--store", store,
                 "sqlite (a file), or postgres (a PostgreSQL server the bench starts, as the "
                 "tests do; stintd leads it alone)")
      ->check(CLI::IsMember({"sqlite", "postgres"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::unique_ptr<stint::PostgresServer> pg;
  std::string pg_url;
  if (store == "postgres") {
    std::string why;
    pg = stint::PostgresServer::Start(&why);
    if (pg != nullptr) pg_url = pg->CreateDatabase("stintd_bench", &why);
    if (pg_url.empty()) {
      std::fprintf(stderr, "stintd-heartbeat-bench: PostgreSQL: %s\n", why.c_str());
      return 1;
    }
  }

  char tmpl[] = "/tmp/stintd-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string dir = tmpl;
  int rc = 0;
  {
    // Leases and start grace outlast the bench: segments that no worker
    // joins (node mode) keep their GPUs instead of churning.
    stint::StintdProcess daemon(
        stintd, dir,
        {"--http-threads", "256", "--start-grace-seconds", "3600", "--lease-ttl-seconds", "3600",
         "--node-ttl-seconds", "300", "--http-nice", http_nice});
    if (!pg_url.empty()) daemon.set_store(pg_url);
    if (!daemon.Start()) {
      std::fprintf(stderr, "stintd-heartbeat-bench: could not start %s\n", stintd.c_str());
      return 1;
    }
    httplib::Client admin("127.0.0.1", daemon.port());
    PostJson(admin, "/v1/pools", {{"name", "bench"}}, kAdmin);
    const std::vector<Beat> beats =
        nodes > 0 ? SetUpNodes(&daemon, nodes, queued) : SetUpWorkers(&daemon, workers);
    if (beats.empty()) {
      std::fprintf(stderr, "stintd-heartbeat-bench: setting up failed\n");
      Stop(&daemon);
      return 1;
    }
    if (nodes > 0) {
      std::printf(
          "stintd-heartbeat-bench: %d nodes heartbeating, %d jobs submitted (%zu running)", nodes,
          queued,
          json::parse(admin.Get("/v1/jobs?state=RUNNING", Auth(kAdmin))->body)["jobs"].size());
    } else {
      std::printf("stintd-heartbeat-bench: %d workers", workers);
    }
    std::printf(
        ", %d connections, %d runs of %.1f s, store %s (client and server on the same %u cores)\n",
        connections, runs, seconds, store.c_str(), std::thread::hardware_concurrency());
    std::vector<double> rates, p50s, p99s, plans;
    for (int i = 0; i < runs; i++) {
      RunResult r = RunOnce(daemon.port(), beats, connections, seconds);
      const double plan_ms = LastPlanMs(admin);
      std::printf(
          "  run %d: %8.0f heartbeats/s  p50 %.2f ms  p99 %.2f ms  max %.2f ms  errors %lld  "
          "last plan %.1f ms\n",
          i + 1, r.per_second, r.p50_ms, r.p99_ms, r.max_ms, static_cast<long long>(r.errors),
          plan_ms);
      rates.push_back(r.per_second);
      p50s.push_back(r.p50_ms);
      p99s.push_back(r.p99_ms);
      plans.push_back(plan_ms);
      if (r.errors > 0) rc = 1;
    }
    std::vector<double> quiet;
    for (int i = 0; i < runs; i++) quiet.push_back(QuietPlanMs(admin));
    // The upper median: for an even --runs, the larger middle run.
    const double rate = stint::UpperMedian(rates);
    const double p50 = stint::UpperMedian(p50s), p99 = stint::UpperMedian(p99s);
    const double plan = stint::UpperMedian(plans), quiet_plan = stint::UpperMedian(quiet);
    std::printf(
        "median: %.0f heartbeats/s (target >= 5000: %s)  p50 %.2f ms  p99 %.2f ms (target < 10 ms: "
        "%s)  plan %.1f ms under the heartbeats, %.1f ms without (target < 50 ms: %s)\n",
        rate, rate >= 5000 ? "met" : "NOT met", p50, p99, p99 < 10 ? "met" : "NOT met", plan,
        quiet_plan, quiet_plan < 50 ? "met" : "NOT met");
    Stop(&daemon);
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return rc;
}
