// ElasticJobTest: what the e2e tests of examples/elastic_training share
// (elastic_test over Gloo, elastic_nccl_test over NCCL): a real stintd with
// a RUNNING elastic job, the example's worker processes for it, their
// "GENERATION ..." lines, and the check of the final model against the
// example's one-process --reference run. Header-only: the program paths
// (STINTD_PATH, STINT_ELASTIC_BINARY) are the including test's macros.
#ifndef STINT_TESTS_UTIL_ELASTIC_JOB_H_
#define STINT_TESTS_UTIL_ELASTIC_JOB_H_

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/stintd_process.h"
#include "util/temp_dir.h"

#ifndef STINTD_PATH
#error "STINTD_PATH must name the stintd binary"
#endif
#ifndef STINT_ELASTIC_BINARY
#error "STINT_ELASTIC_BINARY must name the elastic_training example"
#endif

namespace stint {

// "GENERATION g rank r world w reform_s x step s t_ms T" -> fields.
struct Generation {
  uint64_t generation = 0;
  int rank = -1, world = 0;
  double reform_s = 0;
  int64_t t_ms = 0;
};

// The last GENERATION line of a worker's `output` (`nth_from_end` 1: the
// one before it, ...); {} if there is none.
inline Generation ParseGeneration(const std::string& output, size_t nth_from_end = 0) {
  std::vector<Generation> all;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("GENERATION ", 0) != 0) continue;
    Generation g;
    unsigned long long gen = 0, step = 0;
    long long t = 0;
    if (std::sscanf(line.c_str(),
                    "GENERATION %llu rank %d world %d reform_s %lf step %llu t_ms %lld", &gen,
                    &g.rank, &g.world, &g.reform_s, &step, &t) == 6) {
      g.generation = gen;
      g.t_ms = t;
      all.push_back(g);
    }
  }
  return all.size() > nth_from_end ? all[all.size() - 1 - nth_from_end] : Generation{};
}

// A wait status as one number: the exit code, or minus the signal.
inline int ExitCode(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

class ElasticJobTest : public ::testing::Test {
 protected:
  // stintd (leases of `lease_ttl_seconds`), the pool "p" with a window of
  // `max_workers` GPUs for an hour, and the job `name` of `min_workers` to
  // `max_workers`, running.
  void StartJob(const std::string& name, int min_workers, int max_workers,
                const std::string& lease_ttl_seconds) {
    stintd_ = std::make_unique<StintdProcess>(
        STINTD_PATH, dir_.path(),
        std::vector<std::string>{"--tick-seconds", "0.1", "--lease-ttl-seconds", lease_ttl_seconds,
                                 "--rendezvous-last-call-seconds", "1", "--start-grace-seconds",
                                 "120"});
    ASSERT_TRUE(stintd_->Start()) << stintd_->output();
    admin_ = std::make_unique<HttpJson>(stintd_->port(), StintdProcess::kAdminToken);
    ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
    const int64_t now = WallNowMs();
    auto w = admin_->Post(
        "/v1/windows",
        {{"pool", "p"}, {"gpus", max_workers}, {"start_ms", now}, {"end_ms", now + 3'600'000}});
    ASSERT_EQ(w.status, 201) << w.text;
    auto j = admin_->Post("/v1/jobs", {{"name", name},
                                       {"min_gpus", min_workers},
                                       {"max_gpus", max_workers},
                                       {"checkpoint_seconds", 1},
                                       {"restart_seconds", 1},
                                       {"checkpoint_interval_seconds", 10}});
    ASSERT_EQ(j.status, 201) << j.text;
    job_ = j.body["id"].get<int64_t>();
    ASSERT_TRUE(Eventually([&] {
      return admin_->Get("/v1/jobs/" + std::to_string(job_)).body["state"] == "RUNNING";
    }));
  }

  // A worker of the job named `name`, training `steps` with collectives
  // of `timeout_ms`; `extra` flags after those. Rank 0 writes result.json.
  std::unique_ptr<ChildProcess> Worker(const std::string& name, int steps,
                                       const std::string& timeout_ms,
                                       const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"--url",        stintd_->url(),
                                     "--token",      StintdProcess::kWorkerToken,
                                     "--job",        std::to_string(job_),
                                     "--steps",      std::to_string(steps),
                                     "--out",        dir_.Sub("result.json"),
                                     "--name",       name,
                                     "--timeout-ms", timeout_ms};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<ChildProcess>(STINT_ELASTIC_BINARY, args);
  }

  // result.json against one process's uninterrupted run of `steps`: every
  // parameter within `tolerance`, every sample trained on exactly once per
  // epoch (global batch 12, 240 samples).
  void ExpectMatchesReference(int steps, double tolerance) {
    const int epochs = steps * 12 / 240;
    RunResult ref = RunProgram(
        STINT_ELASTIC_BINARY,
        {"--reference", "--steps", std::to_string(steps), "--out", dir_.Sub("reference.json")});
    ASSERT_EQ(ref.exit_code, 0) << ref.output;
    nlohmann::json got = ReadJson(dir_.Sub("result.json"));
    nlohmann::json want = ReadJson(dir_.Sub("reference.json"));
    ASSERT_TRUE(got.is_object()) << "no result written";
    EXPECT_EQ(got["step"], steps);
    ASSERT_EQ(got["params"].size(), want["params"].size());
    for (size_t i = 0; i < got["params"].size(); ++i) {
      EXPECT_NEAR(got["params"][i].get<double>(), want["params"][i].get<double>(), tolerance)
          << "param " << i;
    }
    ASSERT_EQ(got["seen"].size(), 240u);
    for (size_t i = 0; i < 240; ++i) {
      ASSERT_EQ(got["seen"][i].get<double>(), double(epochs))
          << "sample " << i << " was not trained on exactly " << epochs
          << " times (once per epoch)";
    }
  }

  TempDir dir_;
  std::unique_ptr<StintdProcess> stintd_;
  std::unique_ptr<HttpJson> admin_;
  int64_t job_ = 0;

 private:
  static nlohmann::json ReadJson(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  }
};

}  // namespace stint

#endif  // STINT_TESTS_UTIL_ELASTIC_JOB_H_
