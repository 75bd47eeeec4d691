// End-to-end elastic groups: real worker processes (examples/
// elastic_training) training data-parallel over Gloo on loopback, grouped
// by a real stintd's rendezvous. Workers are SIGKILLed (between steps, and
// in the middle of a 16 MB allreduce) and added; the survivors re-form
// without a restart, and the final model must match one process's
// uninterrupted run within float tolerance, with every sample trained on
// exactly once per epoch (the model's own per-sample counter says so).
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <memory>
#include <string>
#include <vector>

#include "util/elastic_job.h"

namespace stint {
namespace {

constexpr int kSteps = 500;

class ElasticTest : public ElasticJobTest {
 protected:
  void SetUp() override { StartJob("elastic", 2, 3, "3"); }

  std::unique_ptr<ChildProcess> Worker(const std::string& name,
                                       std::vector<std::string> extra = {}) {
    return ElasticJobTest::Worker(name, kSteps, "5000", extra);
  }

  // The final model against one process's uninterrupted run.
  void ExpectMatchesReference() { ElasticJobTest::ExpectMatchesReference(kSteps, 1e-4); }
};

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

TEST_F(ElasticTest, CheckpointingUnderALaunchersVariablesRankZeroFormsNoGroupOfItsOwn) {
  // stint-agent (like torchrun) gives every worker WORLD_SIZE, RANK and
  // MASTER_*; the elastic group is the job's, so rank 0's ResumableTraining
  // must not form a second group from them: it did, and waited for peers
  // that never came (spot_demo's elastic jobs stalled at their first step).
  // MASTER_PORT names a port nobody serves.
  const std::vector<std::pair<const char*, const char*>> launcher = {
      {"WORLD_SIZE", "2"},          {"RANK", "0"},
      {"LOCAL_RANK", "0"},          {"LOCAL_WORLD_SIZE", "1"},
      {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "9"}};
  for (const auto& [k, v] : launcher) ASSERT_EQ(setenv(k, v, 1), 0);
  const std::vector<std::string> flags = {"--ckpt-dir", dir_.Sub("ckpt"), "--save-every", "100"};
  std::vector<std::unique_ptr<ChildProcess>> w;
  for (int i = 0; i < 2; ++i) w.push_back(Worker("w" + std::to_string(i), flags));
  for (const auto& [k, v] : launcher) unsetenv(k);
  for (auto& p : w) {
    bool killed = false;
    EXPECT_EQ(ExitCode(p->WaitAtMost(300, &killed)), 0) << p->output();
    EXPECT_FALSE(killed) << p->output();
  }
  const std::string all = w[0]->output() + w[1]->output();
  EXPECT_NE(all.find("CHECKPOINT step 100 "), std::string::npos) << all;
  ExpectMatchesReference();
}

}  // namespace
}  // namespace stint
