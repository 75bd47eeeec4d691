// LibTorch's ResumableTraining with options.checkpoint.replica_root in an
// object store ("s3://bucket/job", the AWS_* environment), against a real
// `rclone serve s3` (RcloneS3Test): a run trains and saves, its node's
// local root is lost, and a run on a new, empty root resumes from the store
// with the model, the optimizer state and the RNG exactly where they were,
// so that it trains on bit-identically with a run never interrupted.
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <ATen/CPUGeneratorImpl.h>

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "resumable_training.h"
#include "util/rclone_s3.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

namespace nn = torch::nn;
namespace optim = torch::optim;

class ResumableObjectStoreTest : public RcloneS3Test {
 protected:
  void SetUp() override {
    RcloneS3Test::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ExportServerEnvironment();
  }

  ResumableTrainingOptions Options(const std::string& root) const {
    ResumableTrainingOptions o;
    o.checkpoint.root = root;
    o.checkpoint.replica_root = std::string("s3://") + kBucket + "/job";
    o.checkpoint.chunk_size = 4096;
    o.save_every = 2;
    o.watch_signals = false;
    return o;
  }

  TempDir local_;
};

nn::Sequential MakeMlp(uint64_t seed) {
  torch::manual_seed(seed);
  // Dropout: the resumed run must continue the CPU generator's sequence.
  return nn::Sequential(nn::Linear(12, 32), nn::ReLU(), nn::Dropout(0.25), nn::Linear(32, 3));
}

// One step: a batch drawn from the global generator, forward, backward, Adam.
void TrainStep(nn::Sequential& model, optim::Adam& opt) {
  model->train();
  torch::Tensor x = torch::randn({16, 12});
  opt.zero_grad();
  torch::mse_loss(model->forward(x), torch::zeros({16, 3})).backward();
  opt.step();
}

void ExpectSameModule(nn::Sequential& a, nn::Sequential& b) {
  auto pa = a->named_parameters(), pb = b->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& p : pa) EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << p.key();
}

TEST_F(ResumableObjectStoreTest, AWipedLocalRootResumesFromTheStoreBitExactly) {
  const std::string node_a = local_.Sub("node-a");
  {
    nn::Sequential model = MakeMlp(5);
    optim::Adam opt(model->parameters(), optim::AdamOptions(0.01));
    auto run = ResumableTraining::Create(Options(node_a), *model, opt, nullptr);
    ASSERT_OK(run);
    ASSERT_OK((*run)->Resume());
    for (uint64_t step = 1; step <= 5; ++step) {
      TrainStep(model, opt);
      auto action = (*run)->StepBoundary(step);
      ASSERT_OK(action);
      ASSERT_FALSE(action->exit);
    }
    ASSERT_OK((*run)->checkpointer().Flush());
    ASSERT_OK((*run)->checkpointer().FlushReplication(std::chrono::minutes(2)));
    EXPECT_EQ((*run)->checkpointer().ListReplicated().value().back(), 4u);
  }
  std::filesystem::remove_all(node_a);  // the node and its disk are gone

  // The reference: steps 1..4, then 5..7, never interrupted.
  nn::Sequential reference = MakeMlp(5);
  optim::Adam reference_opt(reference->parameters(), optim::AdamOptions(0.01));
  for (int i = 0; i < 4; ++i) TrainStep(reference, reference_opt);
  const torch::Tensor reference_rng = at::detail::getDefaultCPUGenerator().get_state();

  nn::Sequential model = MakeMlp(99);  // other weights: all must come from the store
  optim::Adam opt(model->parameters(), optim::AdamOptions(0.01));
  torch::manual_seed(12345);  // another generator state: it must come from the store too
  auto run = ResumableTraining::Create(Options(local_.Sub("node-b")), *model, opt, nullptr);
  ASSERT_OK(run);
  auto step = (*run)->Resume();
  ASSERT_OK(step);
  EXPECT_EQ(*step, 4u);
  ExpectSameModule(model, reference);
  EXPECT_TRUE(torch::equal(at::detail::getDefaultCPUGenerator().get_state(), reference_rng))
      << "the CPU generator is not where the uninterrupted run left it";
  // Both train on from there (one generator: the reference's turn starts
  // from the same state again).
  for (int i = 0; i < 3; ++i) TrainStep(model, opt);
  at::Generator cpu = at::detail::getDefaultCPUGenerator();
  cpu.set_state(reference_rng);
  for (int i = 0; i < 3; ++i) TrainStep(reference, reference_opt);
  ExpectSameModule(model, reference);
}

}  // namespace
}  // namespace stint
