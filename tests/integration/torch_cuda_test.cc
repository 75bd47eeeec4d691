// The LibTorch CUDA path end to end on a real device: a CUDA model (Linear +
// BatchNorm1d, AdamW) saved through TorchStateBuilder with the CUDA copier
// (pinned staging, copy streams) in lazy mode while training goes on behind
// the BeforeWrite barriers; the checkpoint must hold exactly the state of the
// save's moment (compared bit for bit with a CPU copy taken then). Loads
// host-to-device into a CUDA model and into a CPU model; ResumableTraining
// on a CUDA model; tensors on two devices of one process.
//
// Every device case skips without a GPU (torch::cuda::is_available() or the
// copier's probe says no), two-device cases without two. Run by
// tools/gpu_check.sh on a GPU machine.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adamw.h>
#include <torch/utils.h>

#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "resumable_training.h"
#include "stint/checkpointer.h"
#include "stint_torch.h"
#include "torch_device.h"
#include "util/optimizer_state.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

namespace nn = torch::nn;
namespace optim = torch::optim;

// Wide enough that a device-to-host copy of the state (~100 MB with AdamW's
// moments) takes longer than the training kernels queued right after the
// save: a missing barrier shows as a checkpoint holding later values.
constexpr int64_t kIn = 1024, kHidden = 2048, kOut = 256, kBatch = 128;

#define SKIP_WITHOUT_CUDA()                                                      \
  do {                                                                           \
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device (torch)";  \
    auto probe = NewTorchDeviceCopier();                                         \
    if (!probe.ok()) GTEST_SKIP() << probe.status().ToString();                  \
  } while (0)

nn::Sequential MakeNet(uint64_t seed, const torch::Device& device) {
  torch::manual_seed(seed);
  nn::Sequential net(nn::Linear(kIn, kHidden), nn::BatchNorm1d(kHidden), nn::ReLU(),
                     nn::Linear(kHidden, kOut));
  net->to(device);
  return net;
}

optim::AdamW MakeOptimizer(nn::Sequential& net) {
  return optim::AdamW(net->parameters(), optim::AdamWOptions(1e-3).weight_decay(0.01));
}

struct Batch {
  torch::Tensor x, y;
};

Batch MakeBatch(int i, const torch::Device& device) {
  torch::manual_seed(1000 + i);
  return {torch::randn({kBatch, kIn}).to(device), torch::randn({kBatch, kOut}).to(device)};
}

// Everything a checkpoint of (module, AdamW) holds, as CPU copies: the moment's
// state. .cpu() runs on the current stream, after every kernel queued so far.
using Snapshot = std::map<std::string, torch::Tensor>;

Snapshot Take(const nn::Module& module, optim::Optimizer& opt) {
  Snapshot s;
  torch::NoGradGuard no_grad;
  for (const auto& p : module.named_parameters()) s["p." + p.key()] = p.value().cpu().clone();
  for (const auto& b : module.named_buffers()) s["b." + b.key()] = b.value().cpu().clone();
  for (size_t g = 0; g < opt.param_groups().size(); ++g) {
    const auto& params = opt.param_groups()[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      auto* st = dynamic_cast<const optim::AdamWParamState*>(FindState(opt.state(), params[i]));
      if (st == nullptr) continue;
      const std::string key = "o." + std::to_string(g) + "." + std::to_string(i) + ".";
      s[key + "step"] = torch::tensor(int64_t(st->step()));
      s[key + "exp_avg"] = st->exp_avg().cpu().clone();
      s[key + "exp_avg_sq"] = st->exp_avg_sq().cpu().clone();
      s[key + "exp_avg.device"] = torch::tensor(int64_t(st->exp_avg().device().index()));
    }
  }
  return s;
}

bool SameBits(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  torch::Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// Bit for bit; `ignore_devices`: a load into a CPU model keeps the state on the CPU.
void ExpectSame(const Snapshot& expected, const Snapshot& actual, const std::string& what,
                bool ignore_devices = false) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  size_t optimizer_entries = 0;
  for (const auto& [key, tensor] : expected) {
    auto it = actual.find(key);
    ASSERT_NE(it, actual.end()) << what << ": " << key;
    if (key.rfind("o.", 0) == 0) ++optimizer_entries;
    if (ignore_devices && key.find(".device") != std::string::npos) continue;
    EXPECT_TRUE(SameBits(tensor, it->second)) << what << ": " << key << " differs";
  }
  EXPECT_GT(optimizer_entries, 0u) << what << ": no optimizer state";
}

// Whether training changed the state since `s` (else a test of ordering proves nothing).
bool ChangedSince(const Snapshot& s, const nn::Module& module, optim::Optimizer& opt) {
  Snapshot now = Take(module, opt);
  for (const auto& [key, tensor] : s) {
    if (key.rfind("b.", 0) == 0 && key.find("running_mean") != std::string::npos &&
        SameBits(tensor, now[key])) {
      return false;  // BatchNorm statistics must have moved too
    }
  }
  return !SameBits(s.at("p.0.weight"), now.at("p.0.weight"));
}

// One training step; `ckpt` (lazy) puts the barriers where the loop writes.
void Step(nn::Sequential& net, optim::Optimizer& opt, const Batch& batch,
          Checkpointer* ckpt = nullptr) {
  net->train();
  if (ckpt != nullptr) {
    ASSERT_OK(ckpt->BeforeWrite(WriteBarrier::kForward));
  }
  opt.zero_grad();
  torch::Tensor loss = torch::mse_loss(net->forward(batch.x), batch.y);
  loss.backward();
  if (ckpt != nullptr) {
    ASSERT_OK(ckpt->BeforeWrite(WriteBarrier::kOptimizerStep));
  }
  opt.step();
}

class TorchCudaTest : public ::testing::Test {
 protected:
  const torch::Device cuda_{torch::kCUDA, 0};
  TempDir dir_;
};

// Without a device the copier says why (and everything else here skips).
TEST_F(TorchCudaTest, NoDeviceGivesAClearReason) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  auto copier = NewTorchDeviceCopier();
  ASSERT_FALSE(copier.ok());
  EXPECT_EQ(copier.status().code(), Code::kUnavailable) << copier.status().ToString();
}

// Lazy save of a CUDA model while training continues: the checkpoint is the
// state at Save() (BatchNorm statistics included, though the next forward
// changes them), loaded into a CPU model by a Checkpointer without a copier.
TEST_F(TorchCudaTest, LazySaveWhileTrainingHoldsTheStateAtSaveTime) {
  SKIP_WITHOUT_CUDA();
  auto copier = NewTorchDeviceCopier();
  ASSERT_OK(copier);
  nn::Sequential net = MakeNet(1, cuda_);
  optim::AdamW opt = MakeOptimizer(net);
  for (int i = 0; i < 3; ++i) Step(net, opt, MakeBatch(i, cuda_));

  CheckpointOptions o;
  o.root = dir_.Sub("ckpt");
  o.snapshot = SnapshotMode::kLazy;
  o.device_copier = copier->get();
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  // Two saves: the first also maps and pins the staging buffers, the second
  // reuses them.
  std::map<uint64_t, Snapshot> at_save;
  for (uint64_t step : {3u, 6u}) {
    at_save[step] = Take(*net, opt);
    auto b = std::make_unique<TorchStateBuilder>();
    ASSERT_OK(b->AddModule("model", *net));
    ASSERT_OK(b->AddOptimizer("optim", opt));
    auto h = (*ckpt)->Save(step, b->state());
    ASSERT_OK(h);
    b.reset();  // the State holds the tensors until their copies completed
    // Training goes on at once: the barriers order every write after the copies.
    for (int i = 0; i < 3; ++i) Step(net, opt, MakeBatch(int(step) + i, cuda_), ckpt->get());
    ASSERT_OK(h->staged.get());
    ASSERT_OK(h->durable.get());
    ASSERT_TRUE(ChangedSince(at_save[step], *net, opt)) << "step " << step;
  }
  auto stats = (*ckpt)->stats();
  ASSERT_TRUE(stats.last.has_value());
  EXPECT_GT(stats.last->device_copy_seconds, 0.0);

  // Into a CPU model, through a Checkpointer that has no device copier.
  CheckpointOptions ro;
  ro.root = o.root;
  ro.read_only = true;
  auto reader = Checkpointer::Open(ro);
  ASSERT_OK(reader);
  for (uint64_t step : {3u, 6u}) {
    nn::Sequential cpu = MakeNet(2, torch::kCPU);
    optim::AdamW cpu_opt = MakeOptimizer(cpu);
    TorchStateLoader loader;
    ASSERT_OK(loader.AddModule("model", *cpu));
    ASSERT_OK(loader.AddOptimizer("optim", cpu_opt));
    LoadOptions at;
    at.step = step;
    auto r = loader.Load(**reader, at);
    ASSERT_OK(r);
    EXPECT_EQ(r->step, step);
    ExpectSame(at_save[step], Take(*cpu, cpu_opt), "step " + std::to_string(step) + " in a CPU model",
               /*ignore_devices=*/true);
    for (const auto& p : cpu->parameters()) EXPECT_TRUE(p.device().is_cpu());
  }
}

// Host-to-device into a CUDA model (the Checkpointer has a copier, so the
// loader fills contiguous CUDA tensors in place on a copy stream ordered
// before the current stream's next use); training continues the same.
TEST_F(TorchCudaTest, LoadsIntoACudaModelHostToDevice) {
  SKIP_WITHOUT_CUDA();
  auto copier = NewTorchDeviceCopier();
  ASSERT_OK(copier);
  nn::Sequential net = MakeNet(3, cuda_);
  optim::AdamW opt = MakeOptimizer(net);
  for (int i = 0; i < 4; ++i) Step(net, opt, MakeBatch(i, cuda_));
  const Snapshot expected = Take(*net, opt);
  CheckpointOptions o;
  o.root = dir_.Sub("ckpt");
  o.device_copier = copier->get();  // eager: Save() + WaitStaged()
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  {
    TorchStateBuilder b;
    ASSERT_OK(b.AddModule("model", *net));
    ASSERT_OK(b.AddOptimizer("optim", opt));
    auto h = (*ckpt)->Save(4, b.state());
    ASSERT_OK(h);
    ASSERT_OK((*ckpt)->WaitStaged());
    ASSERT_OK(h->durable.get());
  }

  nn::Sequential fresh = MakeNet(4, cuda_);
  optim::AdamW fresh_opt = MakeOptimizer(fresh);
  std::vector<void*> storage;
  for (const auto& p : fresh->parameters()) storage.push_back(p.data_ptr());
  TorchStateLoader loader;
  ASSERT_OK(loader.AddModule("model", *fresh));
  ASSERT_OK(loader.AddOptimizer("optim", fresh_opt));
  auto r = loader.Load(**ckpt);
  ASSERT_OK(r);
  EXPECT_EQ(r->step, 4u);
  for (size_t i = 0; i < storage.size(); ++i)
    EXPECT_EQ(fresh->parameters()[i].data_ptr(), storage[i]) << "parameter " << i << " replaced";
  for (const auto& p : fresh->parameters()) EXPECT_TRUE(p.is_cuda());
  ExpectSame(expected, Take(*fresh, fresh_opt), "loaded on cuda:0");  // optimizer state on cuda:0 too

  // Both continue alike (same kernels on the same device; not asserted bit
  // for bit, cuBLAS may pick other algorithms for other allocations).
  for (int i = 0; i < 2; ++i) {
    Step(net, opt, MakeBatch(10 + i, cuda_));
    Step(fresh, fresh_opt, MakeBatch(10 + i, cuda_));
  }
  for (size_t i = 0; i < net->parameters().size(); ++i) {
    EXPECT_TRUE(torch::allclose(net->parameters()[i], fresh->parameters()[i], 1e-5, 1e-6))
        << "parameter " << i << " after 2 more steps";
  }
}

// ResumableTraining on a CUDA model, lazy snapshots every 3 steps: it makes
// its own copier, StepBoundary orders the next forward, BeforeOptimizerStep
// the optimizer step; Resume into a fresh CUDA model gives the state of the
// last checkpoint bit for bit.
TEST_F(TorchCudaTest, ResumableTrainingOnCudaResumesBitExact) {
  SKIP_WITHOUT_CUDA();
  ResumableTrainingOptions o;
  o.checkpoint.root = dir_.Sub("run");
  o.checkpoint.snapshot = SnapshotMode::kLazy;
  o.save_every = 3;
  o.watch_signals = false;
  std::map<uint64_t, Snapshot> saved;
  {
    nn::Sequential net = MakeNet(5, cuda_);
    optim::AdamW opt = MakeOptimizer(net);
    auto run = ResumableTraining::Create(o, *net, opt, nullptr);
    ASSERT_OK(run);
    auto resumed = (*run)->Resume();
    ASSERT_OK(resumed);
    ASSERT_EQ(*resumed, 0u);
    uint64_t step = 0;
    while (step < 10) {
      Batch batch = MakeBatch(int(step), cuda_);
      net->train();
      opt.zero_grad();
      torch::Tensor loss = torch::mse_loss(net->forward(batch.x), batch.y);
      loss.backward();
      ASSERT_OK((*run)->BeforeOptimizerStep());
      opt.step();
      Snapshot now;
      if ((step + 1) % 3 == 0) now = Take(*net, opt);
      auto action = (*run)->StepBoundary(++step);
      ASSERT_OK(action);
      ASSERT_FALSE(action->exit);
      EXPECT_EQ(action->saved, step % 3 == 0) << "step " << step;
      if (action->saved) saved[step] = std::move(now);
    }
    ASSERT_OK((*run)->checkpointer().Flush());
    auto committed = (*run)->checkpointer().ListCommitted();
    ASSERT_OK(committed);
    ASSERT_FALSE(committed->empty());
    EXPECT_EQ(committed->back(), 9u);
  }
  ASSERT_EQ(saved.count(9), 1u);
  nn::Sequential fresh = MakeNet(6, cuda_);
  optim::AdamW fresh_opt = MakeOptimizer(fresh);
  auto run = ResumableTraining::Create(o, *fresh, fresh_opt, nullptr);
  ASSERT_OK(run);
  auto step = (*run)->Resume();
  ASSERT_OK(step);
  EXPECT_EQ(*step, 9u);
  ExpectSame(saved[9], Take(*fresh, fresh_opt), "resumed at step 9");
}

// Tensors on two devices of one process: each shard is copied on its own
// device's copy stream, ordered after that device's current stream, and
// loads back host-to-device onto the same devices.
struct TwoDevices : nn::Module {
  TwoDevices() {
    a = register_module("a", nn::Linear(512, 512));
    b = register_module("b", nn::Linear(512, 512));
    a->to(torch::Device(torch::kCUDA, 0));
    b->to(torch::Device(torch::kCUDA, 1));
  }
  nn::Linear a{nullptr}, b{nullptr};
};

void TwoDeviceStep(TwoDevices& m, optim::Optimizer& opt, int i, Checkpointer* ckpt) {
  torch::manual_seed(2000 + i);
  torch::Tensor x = torch::randn({64, 512});
  if (ckpt != nullptr) {
    ASSERT_OK(ckpt->BeforeWrite(WriteBarrier::kForward));
  }
  opt.zero_grad();
  m.a->forward(x.to(torch::Device(torch::kCUDA, 0))).pow(2).mean().backward();
  m.b->forward(x.to(torch::Device(torch::kCUDA, 1))).pow(2).mean().backward();
  if (ckpt != nullptr) {
    ASSERT_OK(ckpt->BeforeWrite(WriteBarrier::kOptimizerStep));
  }
  opt.step();
}

TEST_F(TorchCudaTest, TensorsOnTwoDevicesOfOneProcess) {
  SKIP_WITHOUT_CUDA();
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices";
  auto copier = NewTorchDeviceCopier();
  ASSERT_OK(copier);
  auto m = std::make_shared<TwoDevices>();
  optim::AdamW opt(m->parameters(), optim::AdamWOptions(1e-3));
  for (int i = 0; i < 2; ++i) TwoDeviceStep(*m, opt, i, nullptr);
  const Snapshot expected = Take(*m, opt);
  CheckpointOptions o;
  o.root = dir_.Sub("ckpt");
  o.snapshot = SnapshotMode::kLazy;
  o.device_copier = copier->get();
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  {
    TorchStateBuilder b;
    ASSERT_OK(b.AddModule("model", *m));
    ASSERT_OK(b.AddOptimizer("optim", opt));
    auto h = (*ckpt)->Save(2, b.state());
    ASSERT_OK(h);
    for (int i = 2; i < 4; ++i) TwoDeviceStep(*m, opt, i, ckpt->get());
    ASSERT_OK(h->durable.get());
  }
  auto fresh = std::make_shared<TwoDevices>();
  optim::AdamW fresh_opt(fresh->parameters(), optim::AdamWOptions(1e-3));
  TorchStateLoader loader;
  ASSERT_OK(loader.AddModule("model", *fresh));
  ASSERT_OK(loader.AddOptimizer("optim", fresh_opt));
  ASSERT_OK(loader.Load(**ckpt));
  EXPECT_EQ(fresh->a->weight.device().index(), 0);
  EXPECT_EQ(fresh->b->weight.device().index(), 1);
  ExpectSame(expected, Take(*fresh, fresh_opt), "two devices");
}

}  // namespace
}  // namespace stint
