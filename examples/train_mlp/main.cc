// train_mlp: a small LibTorch training loop that checkpoints itself with stint
// and resumes from the newest checkpoint, bit for bit.
//
// The task: regress the outputs of a fixed random "teacher" MLP (plus noise)
// with a student MLP that has dropout, trained with AdamW under a warmup +
// cosine learning-rate schedule computed from the step. Everything random
// (data, init, minibatch sampling, dropout masks) comes from the LibTorch CPU
// generator, so a resumed run matches an uninterrupted one only if the
// model, the optimizer state, the step and the generator state all come back:
// the final checksum printed at the end shows it.
//
//   train_mlp --ckpt-dir /tmp/run --steps 200            # one go
//   train_mlp --ckpt-dir /tmp/run2 --steps 120           # stopped early ...
//   train_mlp --ckpt-dir /tmp/run2 --steps 200           # ... resumed: same checksum
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "stint/checkpointer.h"
#include "stint_torch.h"

namespace {

namespace nn = torch::nn;
namespace optim = torch::optim;

struct Flags {
  int64_t steps = 200;   // train until this many steps are done
  std::string ckpt_dir;  // required
  int64_t every = 50;    // checkpoint every N steps (and at the end)
  uint64_t seed = 0;
  int64_t hidden = 64;
  int64_t schedule_steps = 200;  // cosine horizon; independent of --steps so a run can stop early
  int threads = 1;               // intra-op threads; fixed so reductions repeat exactly
};

constexpr int64_t kInputs = 32, kOutputs = 8, kExamples = 4096, kBatch = 64, kWarmup = 10,
                  kLogEvery = 10;
constexpr double kBaseLr = 3e-3, kMinLr = 1e-4;

void Usage(const char* argv0) {
  std::fprintf(
      stderr,
      "usage: %s --ckpt-dir DIR [--steps N=200] [--every N=50] [--seed S=0] [--hidden H=64]\n"
      "          [--schedule-steps N=200] [--threads T=1]\n",
      argv0);
}

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::fprintf(stderr, "%s needs a value\n", arg.c_str());
      return false;
    }
    char* end = nullptr;
    long long n = std::strtoll(value.c_str(), &end, 10);
    bool numeric = !value.empty() && *end == '\0';
    if (arg == "--ckpt-dir") {
      f->ckpt_dir = value;
      continue;
    }
    if (!numeric) {
      std::fprintf(stderr, "%s: '%s' is not a number\n", arg.c_str(), value.c_str());
      return false;
    }
    if (arg == "--steps")
      f->steps = n;
    else if (arg == "--every")
      f->every = n;
    else if (arg == "--seed")
      f->seed = static_cast<uint64_t>(n);
    else if (arg == "--hidden")
      f->hidden = n;
    else if (arg == "--schedule-steps")
      f->schedule_steps = n;
    else if (arg == "--threads")
      f->threads = static_cast<int>(n);
    else {
      std::fprintf(stderr, "unknown flag %s\n", arg.c_str());
      return false;
    }
  }
  return !f->ckpt_dir.empty() && f->steps >= 0 && f->every > 0 && f->hidden > 0 &&
         f->schedule_steps > 0 && f->threads > 0;
}

// Linear warmup, then cosine decay to kMinLr at schedule_steps. A pure
// function of the step: nothing about the schedule needs saving.
double LearningRate(int64_t step, int64_t schedule_steps) {
  if (step < kWarmup) return kBaseLr * double(step + 1) / kWarmup;
  double t = std::min(
      1.0, double(step - kWarmup) / double(std::max<int64_t>(1, schedule_steps - kWarmup)));
  return kMinLr + 0.5 * (kBaseLr - kMinLr) * (1.0 + std::cos(M_PI * t));
}

nn::Sequential MakeStudent(int64_t hidden) {
  return nn::Sequential(nn::Linear(kInputs, hidden), nn::ReLU(), nn::Dropout(0.1),
                        nn::Linear(hidden, hidden), nn::ReLU(), nn::Dropout(0.1),
                        nn::Linear(hidden, kOutputs));
}

// FNV-1a over every parameter's and buffer's bytes, in module order.
uint64_t Checksum(const nn::Module& model) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const torch::Tensor& t) {
    torch::Tensor c = t.detach().contiguous();
    const auto* p = static_cast<const unsigned char*>(c.data_ptr());
    for (int64_t i = 0, n = c.numel() * int64_t(c.element_size()); i < n; ++i) {
      h = (h ^ p[i]) * 1099511628211ull;
    }
  };
  for (const auto& item : model.named_parameters()) mix(item.value());
  for (const auto& item : model.named_buffers()) mix(item.value());
  return h;
}

int Fail(const std::string& what, const stint::Status& s) {
  std::fprintf(stderr, "train_mlp: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

int Run(const Flags& flags) {
  torch::set_num_threads(flags.threads);

  // Data and initial weights, all from the seed: a resumed run regenerates the
  // same data, then the checkpoint overwrites weights and the generator.
  torch::manual_seed(flags.seed);
  torch::Tensor x, y;
  {
    torch::NoGradGuard no_grad;
    nn::Sequential teacher(nn::Linear(kInputs, 48), nn::Tanh(), nn::Linear(48, kOutputs));
    x = torch::randn({kExamples, kInputs});
    y = teacher->forward(x) + 0.05 * torch::randn({kExamples, kOutputs});
  }
  nn::Sequential model = MakeStudent(flags.hidden);
  optim::AdamW optimizer(model->parameters(), optim::AdamWOptions(kBaseLr).weight_decay(0.01));

  stint::CheckpointOptions options;
  options.root = flags.ckpt_dir;
  options.job_id = "train_mlp";
  options.keep_last = 2;
  auto opened = stint::Checkpointer::Open(options);
  if (!opened.ok()) return Fail("opening " + flags.ckpt_dir, opened.status());
  std::unique_ptr<stint::Checkpointer> ckpt = std::move(*opened);

  const nlohmann::json config = {
      {"seed", flags.seed}, {"hidden", flags.hidden}, {"schedule_steps", flags.schedule_steps}};
  int64_t step = 0;
  auto committed = ckpt->ListCommitted();
  if (!committed.ok()) return Fail("listing checkpoints", committed.status());
  if (!committed->empty()) {
    // Resume: one Load() restores model and optimizer; then step and generator.
    stint::TorchStateLoader loader;
    stint::Status s = loader.AddModule("model", *model);
    if (s.ok()) s = loader.AddOptimizer("optim", optimizer);
    if (!s.ok()) return Fail("planning the resume", s);
    auto loaded = loader.Load(*ckpt);
    if (!loaded.ok()) return Fail("resuming from " + flags.ckpt_dir, loaded.status());
    for (const auto& skipped : loaded->skipped)
      std::printf("skipped damaged checkpoint %s\n", skipped.c_str());
    auto saved =
        nlohmann::json::parse(loaded->blobs["train.json"], nullptr, /*allow_exceptions=*/false);
    if (saved.is_discarded() || saved["config"] != config) {
      std::fprintf(stderr,
                   "train_mlp: %s was written with other flags (%s); use the same --seed, "
                   "--hidden and --schedule-steps or another --ckpt-dir\n",
                   loaded->dir.c_str(),
                   saved.is_discarded() ? "?" : saved["config"].dump().c_str());
      return 2;
    }
    s = stint::SetTorchCpuRngState(loaded->blobs["rng.cpu"]);
    if (!s.ok()) return Fail("restoring the generator", s);
    step = int64_t(loaded->step);
    std::printf("resumed from step %lld (%s)\n", (long long)step, loaded->dir.c_str());
  }

  // The state is copied into stint's staging memory before Save() returns;
  // writing and fsync run in the background while training goes on.
  auto save = [&](int64_t done) -> stint::Status {
    stint::TorchStateBuilder b;
    STINT_RETURN_IF_ERROR(b.AddModule("model", *model));
    STINT_RETURN_IF_ERROR(b.AddOptimizer("optim", optimizer));
    STINT_ASSIGN_OR_RETURN(std::string rng, stint::GetTorchCpuRngState());
    STINT_RETURN_IF_ERROR(b.AddBlob("rng.cpu", std::move(rng)));
    STINT_RETURN_IF_ERROR(
        b.AddBlob("train.json", nlohmann::json{{"config", config}, {"step", done}}.dump()));
    STINT_ASSIGN_OR_RETURN(stint::SaveHandle handle, ckpt->Save(uint64_t(done), b.state()));
    return handle.staged.get();
  };

  model->train();
  for (; step < flags.steps; ++step) {
    const double lr = LearningRate(step, flags.schedule_steps);
    for (auto& group : optimizer.param_groups())
      static_cast<optim::AdamWOptions&>(group.options()).lr(lr);
    torch::Tensor idx = torch::randint(kExamples, {kBatch}, torch::kLong);
    optimizer.zero_grad();
    torch::Tensor loss =
        torch::mse_loss(model->forward(x.index_select(0, idx)), y.index_select(0, idx));
    loss.backward();
    nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    optimizer.step();

    const int64_t done = step + 1;
    if (done % kLogEvery == 0 || done == flags.steps) {
      std::printf("step %lld loss %.6f lr %.3e\n", (long long)done, loss.item<double>(), lr);
    }
    if (done % flags.every == 0 || done == flags.steps) {
      stint::Status s = save(done);
      if (!s.ok()) return Fail("checkpoint at step " + std::to_string(done), s);
    }
  }
  stint::Status s = ckpt->Flush();
  if (!s.ok()) return Fail("flushing checkpoints", s);

  model->eval();
  double eval_loss;
  {
    torch::NoGradGuard no_grad;
    eval_loss = torch::mse_loss(model->forward(x), y).item<double>();
  }
  std::printf("final step %lld eval_loss %.6f checksum %016llx\n", (long long)step, eval_loss,
              (unsigned long long)Checksum(*model));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    Usage(argv[0]);
    return 2;
  }
  // LibTorch reports errors by throwing; this program's edge turns them into a message.
  try {
    return Run(flags);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_mlp: %s\n", e.what());
    return 1;
  }
}
