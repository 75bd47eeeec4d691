// stint::ResumableTraining with two ranks (real processes, resumable_rank,
// ProcessGroupGloo on loopback): a SIGTERM to one rank stops both at the
// same step with one checkpoint and exit 75, and the job resumed from it
// ends where an uninterrupted one does.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <string>
#include <vector>

#include "checkpoint/commit.h"
#include "resumable_training.h"
#include "util/status_matchers.h"
#include "util/subprocess.h"
#include "util/temp_dir.h"

#ifndef STINT_RESUMABLE_RANK
#error "STINT_RESUMABLE_RANK must name the resumable_rank binary"
#endif

namespace stint {
namespace {

constexpr double kRankDeadline = 300;  // seconds: libtorch start-up and gloo on a loaded machine

struct Job {
  c10::intrusive_ptr<c10d::TCPStore> store;
  std::vector<std::unique_ptr<ChildProcess>> ranks;
};

Job Start(const std::string& root, uint64_t total) {
  c10d::TCPStoreOptions so;
  so.port = 0;
  so.isServer = true;
  so.waitWorkers = false;
  Job job{c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so), {}};
  for (int r = 0; r < 2; ++r) {
    job.ranks.push_back(std::make_unique<ChildProcess>(
        STINT_RESUMABLE_RANK,
        std::vector<std::string>{root, std::to_string(job.store->getPort()), std::to_string(r), "2",
                                 std::to_string(total)}));
  }
  return job;
}

// Exit codes of both ranks (-1: killed by a signal or past the deadline).
std::vector<int> Finish(Job& job) {
  std::vector<int> codes;
  for (auto& rank : job.ranks) {
    bool killed = false;
    const int status = rank->WaitAtMost(kRankDeadline, &killed);
    codes.push_back(!killed && WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  return codes;
}

std::string Output(const Job& job) {
  return "rank 0:\n" + job.ranks[0]->output() + "rank 1:\n" + job.ranks[1]->output();
}

// The number after `word` on the line that starts with `prefix`, or -1.
long long Field(const std::string& output, const std::string& prefix, const std::string& word) {
  const size_t line = output.find("\n" + prefix);
  const size_t at = line == std::string::npos ? line : output.find(word + " ", line);
  return at == std::string::npos ? -1 : std::atoll(output.c_str() + at + word.size() + 1);
}

std::string FinalLine(const std::string& output) {
  const size_t at = output.find("finished ");
  return at == std::string::npos ? "" : output.substr(at, output.find('\n', at) - at);
}

TEST(ResumableRanksTest, ASigtermToOneRankStopsBothAtOneStepWithOneCheckpoint) {
  TempDir dir;
  const std::string root = dir.Sub("ckpt");
  Job first = Start(root, 1000000);
  for (auto& rank : first.ranks) ASSERT_TRUE(rank->WaitForLine("ready", kRankDeadline)) << Output(first);
  ASSERT_EQ(kill(first.ranks[1]->pid(), SIGTERM), 0);
  ASSERT_EQ(Finish(first), (std::vector<int>{kExitRequeue, kExitRequeue})) << Output(first);
  const std::string out0 = "\n" + first.ranks[0]->output(), out1 = "\n" + first.ranks[1]->output();
  const long long stopped = Field(out0, "stopped", "stopped");
  ASSERT_GT(stopped, 0) << Output(first);
  EXPECT_EQ(Field(out1, "stopped", "stopped"), stopped) << Output(first);
  EXPECT_EQ(Field(out0, "stopped", "saved"), 1) << Output(first);
  EXPECT_EQ(Field(out1, "stopped", "saved"), 1) << Output(first);
  // Notice to durable and on its replicas (none here: durable is enough), a figure on both.
  EXPECT_GE(Field(out0, "stopped", "on_replicas_ms"), 0) << Output(first);
  EXPECT_GE(Field(out1, "stopped", "on_replicas_ms"), 0) << Output(first);
  auto committed = ListCheckpointSteps(Env::Default(), root);
  ASSERT_OK(committed.status());
  EXPECT_EQ(*committed, std::vector<uint64_t>{uint64_t(stopped)});  // the agreed emergency one

  // Resumed there to the end, and the same steps uninterrupted: the same model.
  const uint64_t total = uint64_t(stopped) + 5;
  Job second = Start(root, total);
  ASSERT_EQ(Finish(second), (std::vector<int>{0, 0})) << Output(second);
  EXPECT_EQ(Field("\n" + second.ranks[0]->output(), "resumed", "resumed"), stopped) << Output(second);
  Job reference = Start(dir.Sub("reference"), total);
  ASSERT_EQ(Finish(reference), (std::vector<int>{0, 0})) << Output(reference);
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(FinalLine(second.ranks[r]->output()).empty()) << Output(second);
    EXPECT_EQ(FinalLine(second.ranks[r]->output()), FinalLine(reference.ranks[r]->output()))
        << "rank " << r;
  }
}

TEST(ResumableRanksTest, SeveralRanksWatchingSignalsWithoutAProcessGroupAreRefused) {
  TempDir dir;
  torch::nn::Linear model(2, 2);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  ResumableTrainingOptions o;
  o.checkpoint.root = dir.Sub("ckpt");
  o.checkpoint.rank = 0;
  o.checkpoint.world_size = 2;
  auto run = ResumableTraining::Create(o, *model, optimizer, nullptr);
  ASSERT_EQ(run.status().code(), Code::kInvalidArgument) << run.status().ToString();
  EXPECT_NE(run.status().message().find("process_group"), std::string::npos) << run.status().ToString();
}

}  // namespace
}  // namespace stint
