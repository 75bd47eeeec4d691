// LaunchEnvFromEnvironment (torchrun's and Slurm's variables, the master
// address and port), ExpandHostlist (Slurm's hostlist syntax) and
// SlurmEndClock (when a job with a time limit must stop).
#include "stint/launch_env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <string>
#include <vector>

#include "stint/slurm.h"
#include "util/status_matchers.h"

namespace stint {
namespace {

class LaunchEnvTest : public ::testing::Test {
 protected:
  static constexpr const char* kNames[] = {
      "RANK",         "WORLD_SIZE",   "LOCAL_RANK",    "GROUP_RANK",   "MASTER_ADDR",
      "MASTER_PORT",  "SLURM_PROCID", "SLURM_NTASKS",  "SLURM_LOCALID", "SLURM_NODEID",
      "SLURM_JOB_ID", "SLURM_RESTART_COUNT", "SLURM_JOB_NODELIST", "SLURM_NODELIST"};

  void SetUp() override {
    for (const char* name : kNames) {
      if (const char* value = getenv(name)) saved_[name] = value;
      unsetenv(name);
    }
  }
  void TearDown() override {
    for (const char* name : kNames) {
      auto it = saved_.find(name);
      if (it == saved_.end()) {
        unsetenv(name);
      } else {
        setenv(name, it->second.c_str(), 1);
      }
    }
  }
  static void Set(const char* name, const char* value) { setenv(name, value, 1); }

  // The error for the current environment; fails the test when it parses.
  static Status ErrorOf() {
    Result<LaunchEnv> env = LaunchEnvFromEnvironment();
    EXPECT_FALSE(env.ok());
    return env.status();
  }

 private:
  std::map<std::string, std::string> saved_;
};

TEST_F(LaunchEnvTest, NoLauncherIsRankZeroOfOne) {
  Result<LaunchEnv> env = LaunchEnvFromEnvironment();
  ASSERT_OK(env);
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->local_rank, 0);
  EXPECT_EQ(env->launcher, "none");
}

TEST_F(LaunchEnvTest, TorchrunVariables) {
  Set("RANK", "5");
  Set("WORLD_SIZE", "8");
  Set("LOCAL_RANK", "1");
  Result<LaunchEnv> env = LaunchEnvFromEnvironment();
  ASSERT_OK(env);
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->launcher, "torchrun");
}

TEST_F(LaunchEnvTest, TorchrunWinsOverSlurm) {
  // torchrun started inside an srun step: torchrun's ranks are the real ones.
  Set("RANK", "3");
  Set("WORLD_SIZE", "4");
  Set("LOCAL_RANK", "3");
  Set("SLURM_PROCID", "0");
  Set("SLURM_NTASKS", "1");
  Set("SLURM_LOCALID", "0");
  Result<LaunchEnv> env = LaunchEnvFromEnvironment();
  ASSERT_OK(env);
  EXPECT_EQ(env->launcher, "torchrun");
  EXPECT_EQ(env->rank, 3);
}

TEST_F(LaunchEnvTest, SlurmVariables) {
  Set("SLURM_PROCID", "6");
  Set("SLURM_NTASKS", "16");
  Set("SLURM_LOCALID", "2");
  Result<LaunchEnv> env = LaunchEnvFromEnvironment();
  ASSERT_OK(env);
  EXPECT_EQ(env->rank, 6);
  EXPECT_EQ(env->world_size, 16);
  EXPECT_EQ(env->local_rank, 2);
  EXPECT_EQ(env->launcher, "slurm");
}

TEST_F(LaunchEnvTest, SlurmBatchScriptWithoutNtasksIsOneTask) {
  Set("SLURM_PROCID", "0");
  Result<LaunchEnv> env = LaunchEnvFromEnvironment();
  ASSERT_OK(env);
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->local_rank, 0);
  EXPECT_EQ(env->launcher, "slurm");
}

TEST_F(LaunchEnvTest, SlurmNtasksAloneIsNotATask) {
  Set("SLURM_NTASKS", "4");  // an salloc shell
  Result<LaunchEnv> env = LaunchEnvFromEnvironment();
  ASSERT_OK(env);
  EXPECT_EQ(env->launcher, "none");
}

TEST_F(LaunchEnvTest, NonNumericValueNamesTheVariableAndValue) {
  Set("RANK", "zero");
  Set("WORLD_SIZE", "2");
  Set("LOCAL_RANK", "0");
  const Status s = ErrorOf();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("RANK='zero'"), std::string::npos) << s.ToString();
}

TEST_F(LaunchEnvTest, NegativeValueIsInvalid) {
  Set("SLURM_PROCID", "-1");
  Set("SLURM_NTASKS", "2");
  const Status s = ErrorOf();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("SLURM_PROCID='-1'"), std::string::npos) << s.ToString();
}

TEST_F(LaunchEnvTest, TrailingGarbageIsInvalid) {
  Set("RANK", "1");
  Set("WORLD_SIZE", "2x");
  Set("LOCAL_RANK", "0");
  const Status s = ErrorOf();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("WORLD_SIZE='2x'"), std::string::npos) << s.ToString();
}

TEST_F(LaunchEnvTest, HugeValueIsInvalid) {
  Set("SLURM_PROCID", "0");
  Set("SLURM_NTASKS", "99999999999999999999");
  const Status s = ErrorOf();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("SLURM_NTASKS"), std::string::npos) << s.ToString();
}

TEST_F(LaunchEnvTest, RankNotBelowWorldSizeIsInvalid) {
  Set("RANK", "4");
  Set("WORLD_SIZE", "4");
  Set("LOCAL_RANK", "0");
  const Status s = ErrorOf();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("RANK='4'"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("WORLD_SIZE='4'"), std::string::npos) << s.ToString();
}

TEST_F(LaunchEnvTest, LocalRankNotBelowWorldSizeIsInvalid) {
  Set("SLURM_PROCID", "0");
  Set("SLURM_NTASKS", "2");
  Set("SLURM_LOCALID", "2");
  const Status s = ErrorOf();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("SLURM_LOCALID='2'"), std::string::npos) << s.ToString();
}

TEST_F(LaunchEnvTest, ZeroWorldSizeIsInvalid) {
  Set("RANK", "0");
  Set("WORLD_SIZE", "0");
  Set("LOCAL_RANK", "0");
  const Status s = ErrorOf();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("WORLD_SIZE='0'"), std::string::npos) << s.ToString();
}

TEST_F(LaunchEnvTest, PartialTorchrunSetNamesTheMissingVariable) {
  Set("RANK", "0");
  Set("WORLD_SIZE", "1");
  const Status s = ErrorOf();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("LOCAL_RANK is not set"), std::string::npos) << s.ToString();
}

TEST_F(LaunchEnvTest, SlurmMasterIsTheFirstNodeAndThePortComesFromTheJobId) {
  Set("SLURM_PROCID", "3");
  Set("SLURM_NTASKS", "4");
  Set("SLURM_LOCALID", "1");
  Set("SLURM_NODEID", "1");
  Set("SLURM_JOB_ID", "1234567");
  Set("SLURM_RESTART_COUNT", "2");
  Set("SLURM_JOB_NODELIST", "gpu[07-08]");
  Result<LaunchEnv> env = LaunchEnvFromEnvironment();
  ASSERT_OK(env);
  EXPECT_EQ(env->node_rank, 1);
  EXPECT_EQ(env->master_addr, "gpu07");
  EXPECT_EQ(env->master_port, 15000 + 4567);
  EXPECT_EQ(env->job_id, "1234567");
  EXPECT_EQ(env->restart_count, 2);

  // MASTER_ADDR / MASTER_PORT win.
  Set("MASTER_ADDR", "head");
  Set("MASTER_PORT", "29500");
  env = LaunchEnvFromEnvironment();
  ASSERT_OK(env);
  EXPECT_EQ(env->master_addr, "head");
  EXPECT_EQ(env->master_port, 29500);
}

TEST_F(LaunchEnvTest, ABadNodelistOrPortNamesTheVariable) {
  Set("SLURM_PROCID", "0");
  Set("SLURM_JOB_ID", "5");
  Set("SLURM_JOB_NODELIST", "gpu[1-");
  EXPECT_NE(ErrorOf().ToString().find("SLURM_JOB_NODELIST"), std::string::npos);
  Set("SLURM_JOB_NODELIST", "gpu1");
  Set("MASTER_PORT", "70000");
  EXPECT_NE(ErrorOf().ToString().find("MASTER_PORT='70000'"), std::string::npos);
}

TEST_F(LaunchEnvTest, TorchrunKeepsItsOwnMasterAndGroupRank) {
  Set("RANK", "1");
  Set("WORLD_SIZE", "2");
  Set("LOCAL_RANK", "0");
  Set("GROUP_RANK", "1");
  Set("MASTER_ADDR", "10.0.0.1");
  Set("MASTER_PORT", "29400");
  Set("SLURM_JOB_NODELIST", "other[1-2]");  // torchrun under an salloc: torchrun's
  Result<LaunchEnv> env = LaunchEnvFromEnvironment();
  ASSERT_OK(env);
  EXPECT_EQ(env->launcher, "torchrun");
  EXPECT_EQ(env->node_rank, 1);
  EXPECT_EQ(env->master_addr, "10.0.0.1");
  EXPECT_EQ(env->master_port, 29400);
  EXPECT_EQ(env->job_id, "");
}

std::vector<std::string> Hosts(const std::string& list) {
  Result<std::vector<std::string>> hosts = ExpandHostlist(list);
  EXPECT_OK(hosts);
  return hosts.ok() ? *hosts : std::vector<std::string>{};
}

TEST(ExpandHostlist, NamesRangesAndPadding) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Hosts("node1"), V({"node1"}));
  EXPECT_EQ(Hosts("gpu[01-03,7],login"), V({"gpu01", "gpu02", "gpu03", "gpu7", "login"}));
  EXPECT_EQ(Hosts("n[8-10]"), V({"n8", "n9", "n10"}));
  EXPECT_EQ(Hosts("n[098-100]"), V({"n098", "n099", "n100"}));
  EXPECT_EQ(Hosts("r[1-2]n[1-2]"), V({"r1n1", "r1n2", "r2n1", "r2n2"}));
  EXPECT_EQ(Hosts("a[1-2]-ib,b"), V({"a1-ib", "a2-ib", "b"}));
  EXPECT_EQ(Hosts("stint[1-3]"), V({"stint1", "stint2", "stint3"}));
}

TEST(ExpandHostlist, MalformedListsNameTheListAndWhere) {
  for (const char* bad : {"", "n[1-", "n]1", "n[3-1]", "n[a-b]", "n[1-2],,m", "n[]", "[1-2000000]"}) {
    Result<std::vector<std::string>> hosts = ExpandHostlist(bad);
    ASSERT_FALSE(hosts.ok()) << "'" << bad << "' expanded";
    EXPECT_EQ(hosts.status().code(), Code::kInvalidArgument);
    EXPECT_NE(hosts.status().ToString().find(std::string("hostlist '") + bad + "'"),
              std::string::npos)
        << hosts.status().ToString();
  }
}

TEST(SlurmEndClockTest, StopsWhenTheCheckpointTwoStepsAndTheSafetyStillFit) {
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  const auto t0 = std::chrono::system_clock::time_point(seconds(1800000000));
  SlurmEndClock clock(t0 + seconds(100), milliseconds(2000));
  CheckpointCost measured;
  measured.state_bytes = 1000000000;    // 1 GB at 100 MB/s: 10 s, plus 1 s fixed
  measured.bytes_per_second = 100e6;
  measured.fixed_seconds = 1;
  // Steps 5 s apart: the rule is 11 + 2 x 5 + 2 = 23 s before the end.
  for (int t = 50; t <= 75; t += 5)
    EXPECT_FALSE(clock.Due(measured, t0 + seconds(t)).has_value()) << t;
  std::optional<double> due = clock.Due(measured, t0 + seconds(80));
  ASSERT_TRUE(due.has_value());
  EXPECT_DOUBLE_EQ(*due, 20.0);
  EXPECT_EQ(clock.end(), t0 + seconds(100));
  // One slow step (40 s) moves the stop earlier: 11 + 2 x 40 + 2 s.
  SlurmEndClock slow(t0 + seconds(100), milliseconds(2000));
  EXPECT_FALSE(slow.Due(measured, t0).has_value());
  due = slow.Due(measured, t0 + seconds(40));
  ASSERT_TRUE(due.has_value());
  EXPECT_DOUBLE_EQ(*due, 60.0);

  // Nothing measured yet: a checkpoint is taken to cost 10 s.
  SlurmEndClock fresh(t0 + seconds(100), milliseconds(0));
  EXPECT_FALSE(fresh.Due(CheckpointCost{}, t0 + seconds(89)).has_value());
  EXPECT_TRUE(fresh.Due(CheckpointCost{}, t0 + seconds(90)).has_value());
  // Past the end it says so (a negative time left): stop at once.
  SlurmEndClock late(t0, milliseconds(0));
  EXPECT_LT(*late.Due(CheckpointCost{}, t0 + seconds(1)), 0);
}

}  // namespace
}  // namespace stint
