// End-to-end elastic groups: real worker processes (examples/
// elastic_training) training data-parallel over Gloo on loopback, grouped
// by a real stintd's rendezvous. Workers are SIGKILLed (between steps, and
// in the middle of a 16 MB allreduce) and added; the survivors re-form
// without a restart, and the final model must match one process's
// uninterrupted run within float tolerance, with every sample trained on
// exactly once per epoch (the model's own per-sample counter says so).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/stintd_process.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

constexpr int kSteps = 500;
constexpr int kEpochs = kSteps * 12 / 240;  // global batch 12, 240 samples

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
}

// "GENERATION g rank r world w reform_s x ..." -> fields.
struct Generation {
  uint64_t generation = 0;
  int rank = -1, world = 0;
  double reform_s = 0;
  int64_t t_ms = 0;
};
Generation ParseGeneration(const std::string& output, size_t nth_from_end = 0) {
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

class ElasticTest : public ::testing::Test {
 protected:
  void SetUp() override {
    stintd_ = std::make_unique<StintdProcess>(
        STINTD_PATH, dir_.path(),
        std::vector<std::string>{"--tick-seconds", "0.1", "--lease-ttl-seconds", "3",
                                 "--rendezvous-last-call-seconds", "1", "--start-grace-seconds",
                                 "120"});
    ASSERT_TRUE(stintd_->Start()) << stintd_->output();
    admin_ = std::make_unique<HttpJson>(stintd_->port(), StintdProcess::kAdminToken);
    ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
    const int64_t now = WallNowMs();
    auto w =
        admin_->Post("/v1/windows",
                     {{"pool", "p"}, {"gpus", 3}, {"start_ms", now}, {"end_ms", now + 3'600'000}});
    ASSERT_EQ(w.status, 201) << w.text;
    auto j = admin_->Post("/v1/jobs", {{"name", "elastic"},
                                       {"min_gpus", 2},
                                       {"max_gpus", 3},
                                       {"checkpoint_seconds", 1},
                                       {"restart_seconds", 1},
                                       {"checkpoint_interval_seconds", 10}});
    ASSERT_EQ(j.status, 201) << j.text;
    job_ = j.body["id"].get<int64_t>();
    ASSERT_TRUE(Eventually([&] {
      return admin_->Get("/v1/jobs/" + std::to_string(job_)).body["state"] == "RUNNING";
    }));
  }

  std::unique_ptr<ChildProcess> Worker(const std::string& name,
                                       std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--url",        stintd_->url(),
                                     "--token",      StintdProcess::kWorkerToken,
                                     "--job",        std::to_string(job_),
                                     "--steps",      std::to_string(kSteps),
                                     "--out",        dir_.Sub("result.json"),
                                     "--name",       name,
                                     "--timeout-ms", "5000"};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<ChildProcess>(STINT_ELASTIC_BINARY, args);
  }

  // The final model against one process's uninterrupted run.
  void ExpectMatchesReference() {
    RunResult ref = RunProgram(
        STINT_ELASTIC_BINARY,
        {"--reference", "--steps", std::to_string(kSteps), "--out", dir_.Sub("reference.json")});
    ASSERT_EQ(ref.exit_code, 0) << ref.output;
    nlohmann::json got = ReadJson(dir_.Sub("result.json"));
    nlohmann::json want = ReadJson(dir_.Sub("reference.json"));
    ASSERT_TRUE(got.is_object()) << "no result written";
    EXPECT_EQ(got["step"], kSteps);
    ASSERT_EQ(got["params"].size(), want["params"].size());
    for (size_t i = 0; i < got["params"].size(); ++i) {
      EXPECT_NEAR(got["params"][i].get<double>(), want["params"][i].get<double>(), 1e-4)
          << "param " << i;
    }
    ASSERT_EQ(got["seen"].size(), 240u);
    for (size_t i = 0; i < 240; ++i) {
      ASSERT_EQ(got["seen"][i].get<double>(), double(kEpochs))
          << "sample " << i << " was not trained on exactly " << kEpochs
          << " times (once per epoch)";
    }
  }

  TempDir dir_;
  std::unique_ptr<StintdProcess> stintd_;
  std::unique_ptr<HttpJson> admin_;
  int64_t job_ = 0;
};

int ExitCode(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status); }

TEST_F(ElasticTest, KillOneThenAddOneWithoutRestart) {
  std::vector<std::unique_ptr<ChildProcess>> w;
  for (int i = 0; i < 3; ++i) w.push_back(Worker("w" + std::to_string(i), {"--step-ms", "15"}));
  for (auto& p : w) ASSERT_TRUE(p->WaitForLine("FIRST_STEP ")) << p->output();
  // SIGKILL rank 0: it also serves the group's store, the hardest member to lose.
  int victim = -1;
  for (int i = 0; i < 3; ++i) {
    if (ParseGeneration(w[i]->output()).rank == 0) victim = i;
  }
  ASSERT_GE(victim, 0);
  const int64_t killed_ms = WallNowMs();
  ASSERT_EQ(kill(w[victim]->pid(), SIGKILL), 0);
  EXPECT_EQ(ExitCode(w[victim]->Wait()), -SIGKILL);
  std::vector<ChildProcess*> alive;
  for (int i = 0; i < 3; ++i) {
    if (i != victim) alive.push_back(w[i].get());
  }
  for (ChildProcess* p : alive) {
    ASSERT_TRUE(p->WaitForLine("GENERATION ")) << p->output();
    const Generation g = ParseGeneration(p->output());
    EXPECT_EQ(g.world, 2) << p->output();
    ASSERT_TRUE(p->WaitForLine("FIRST_STEP ")) << p->output();
    RecordProperty("reform_after_kill_ms", std::to_string(g.t_ms - killed_ms));
  }
  // A new worker joins the running segment: three again.
  w.push_back(Worker("w3", {"--step-ms", "15"}));
  alive.push_back(w.back().get());
  for (ChildProcess* p : alive) {
    ASSERT_TRUE(p->WaitForLine("GENERATION ")) << p->output();
    EXPECT_EQ(ParseGeneration(p->output()).world, 3) << p->output();
  }
  for (ChildProcess* p : alive) EXPECT_EQ(ExitCode(p->Wait()), 0) << p->output();
  ExpectMatchesReference();
  EXPECT_EQ(admin_->Get("/v1/jobs/" + std::to_string(job_)).body["state"], "DONE");
}

TEST_F(ElasticTest, WorkerKilledMidAllreduceDoesNotHangTheOthers) {
  // 16 MB of ballast per step keeps each allreduce in flight for a while;
  // the victim SIGKILLs itself 5 ms into the one of step 30.
  const std::vector<std::string> big = {"--ballast", "4000000"};
  std::vector<std::unique_ptr<ChildProcess>> w;
  w.push_back(Worker("w0", big));
  w.push_back(Worker("w1", big));
  std::vector<std::string> dies = big;
  dies.insert(dies.end(), {"--die-in-allreduce-at", "30"});
  w.push_back(Worker("victim", dies));
  EXPECT_EQ(ExitCode(w[2]->Wait()), -SIGKILL) << w[2]->output();
  for (int i = 0; i < 2; ++i) {
    // Each survivor leaves generation 1 by a failed collective (or the
    // agreement after it), re-forms with the other, and finishes.
    EXPECT_EQ(ExitCode(w[i]->Wait()), 0) << w[i]->output();
    const Generation last = ParseGeneration(w[i]->output());
    EXPECT_EQ(last.world, 2) << w[i]->output();
    EXPECT_GT(last.generation, 1u) << w[i]->output();
  }
  ExpectMatchesReference();
}

}  // namespace
}  // namespace stint
