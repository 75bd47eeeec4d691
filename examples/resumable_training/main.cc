// resumable_training: a LibTorch training loop made preemption-safe and
// exactly resumable with stint::ResumableTraining (the lines marked "stint").
//
// Task: 10-way classification of 24-dimensional inputs labelled by a fixed
// random teacher network; student MLP with LayerNorm and dropout, AdamW,
// warmup + cosine LR. Data order comes from stint's ResumableSampler (one
// global cursor, Feistel permutation per epoch); per-sample augmentation
// noise is keyed by (seed, epoch, sample index), so it does not depend on
// which process draws it; dropout draws from the LibTorch CPU generator,
// whose state is checkpointed.
//
// SIGTERM or SIGUSR1 -> emergency checkpoint at the next step boundary (if
// it fits in the grace period) -> exit 75 ("requeue me"). Run it again and
// it continues from exactly where it stopped.
//
// Data parallel under Slurm (srun, one task per GPU) or torchrun: each rank
// trains its slice of every global batch and the gradients are averaged
// over the group ResumableTraining formed from the environment; under
// Slurm a stop requeues the job and a completed run exits 0 when started
// again (see stint::ResumableTraining):
//
//   stint slurm submit --root DIR --gpus-per-node 2 --nodes=2 -- resumable_training --ckpt-dir DIR
//
//   resumable_training --ckpt-dir DIR [--steps 600] [--every 50] [--seed 1]
//                      [--log FILE] [--step-ms 0] [--grace 30]
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/optim/adamw.h>
#include <torch/utils.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "resumable_training.h"
#include "stint_torch.h"

namespace {

namespace nn = torch::nn;

constexpr int64_t kInputs = 24, kClasses = 10, kExamples = 3000, kGlobalBatch = 48, kWarmup = 20;
constexpr double kBaseLr = 2e-3, kMinLr = 5e-5;

struct Flags {
  std::string ckpt_dir;
  int64_t steps = 600;
  int64_t every = 50;
  uint64_t seed = 1;
  std::string log;      // one line per committed step: "step S: id id id ..."
  int64_t step_ms = 0;  // extra time per step (makes signal timing in tests easy)
  double grace = 30;
  bool lazy = true;  // --snapshot lazy|eager
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) return false;
    std::string v = argv[++i];
    if (a == "--ckpt-dir")
      f->ckpt_dir = v;
    else if (a == "--steps")
      f->steps = std::atoll(v.c_str());
    else if (a == "--every")
      f->every = std::atoll(v.c_str());
    else if (a == "--seed")
      f->seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--log")
      f->log = v;
    else if (a == "--step-ms")
      f->step_ms = std::atoll(v.c_str());
    else if (a == "--grace")
      f->grace = std::atof(v.c_str());
    else if (a == "--snapshot" && (v == "lazy" || v == "eager"))
      f->lazy = v == "lazy";
    else
      return false;
  }
  return !f->ckpt_dir.empty() && f->steps > 0 && f->every >= 0;
}

double LearningRate(int64_t step, int64_t total) {
  if (step < kWarmup) return kBaseLr * double(step + 1) / kWarmup;
  double t = double(step - kWarmup) / double(std::max<int64_t>(1, total - kWarmup));
  return kMinLr + 0.5 * (kBaseLr - kMinLr) * (1 + std::cos(M_PI * std::min(1.0, t)));
}

// FNV-1a over every tensor of the checkpointable state: parameters, buffers
// and optimizer state, so "same checksum" means "same everything".
uint64_t StateChecksum(nn::Module& model, torch::optim::Optimizer& opt) {
  stint::TorchStateBuilder b;
  if (!b.AddModule("model", model).ok() || !b.AddOptimizer("optim", opt).ok()) return 0;
  uint64_t h = 1469598103934665603ull;
  for (const auto& t : b.state().tensors) {
    const auto* p = static_cast<const unsigned char*>(t.data);
    size_t n = size_t(stint::NumElements(t.extents.empty() ? t.global_shape : t.extents)) *
               stint::DTypeSize(t.dtype);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

int Fail(const char* what, const stint::Status& s) {
  std::fprintf(stderr, "resumable_training: %s: %s\n", what, s.ToString().c_str());
  // A changed data configuration or a corrupt checkpoint will not fix itself on a retry.
  bool fatal = s.code() == stint::Code::kFailedPrecondition ||
               s.code() == stint::Code::kInvalidArgument || s.code() == stint::Code::kDataLoss;
  return fatal ? stint::kExitDoNotRequeue : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    std::fprintf(stderr,
                 "usage: %s --ckpt-dir DIR [--steps N] [--every N] [--seed S] [--log FILE] "
                 "[--step-ms MS] [--grace SECONDS] [--snapshot lazy|eager]\n",
                 argv[0]);
    return 2;
  }
  torch::set_num_threads(1);  // fixed reduction order: bit-identical reruns

  // The dataset: fixed by the seed alone.
  torch::manual_seed(flags.seed);
  torch::Tensor inputs = torch::randn({kExamples, kInputs});
  torch::Tensor labels;
  {
    torch::NoGradGuard no_grad;
    nn::Sequential teacher(nn::Linear(kInputs, 32), nn::Tanh(), nn::Linear(32, kClasses));
    labels = teacher->forward(inputs).argmax(1);
  }
  nn::Sequential model(nn::Linear(kInputs, 96), nn::LayerNorm(nn::LayerNormOptions({96})),
                       nn::ReLU(), nn::Dropout(0.2), nn::Linear(96, 96), nn::ReLU(),
                       nn::Dropout(0.2), nn::Linear(96, kClasses));
  torch::optim::AdamW optimizer(model->parameters(),
                                torch::optim::AdamWOptions(kBaseLr).weight_decay(0.01));

  // stint: sampler, checkpointer, preemption — then resume.
  stint::SamplerConfig data;
  data.dataset_size = kExamples;
  data.global_batch = kGlobalBatch;
  data.seed = flags.seed;
  auto sampler = stint::ResumableSampler::Create(data);
  if (!sampler.ok()) return Fail("sampler", sampler.status());
  stint::ResumableTrainingOptions options;
  options.checkpoint.root = flags.ckpt_dir;
  options.checkpoint.job_id = "resumable_training";
  options.save_every = uint64_t(flags.every);
  // Lazy: a save returns at once; its copy threads run during the next
  // forward and backward, and BeforeOptimizerStep() below waits for them.
  options.checkpoint.snapshot = flags.lazy ? stint::SnapshotMode::kLazy : stint::SnapshotMode::kEager;
  options.preemption.grace = std::chrono::milliseconds(int64_t(flags.grace * 1000));
  auto run = stint::ResumableTraining::Create(options, *model, optimizer, &*sampler);
  if (!run.ok()) return Fail("open", run.status());
  stint::LaunchedGroup* group = (*run)->group();  // stint: several ranks (Slurm, torchrun)
  const int rank = group != nullptr ? group->env().rank : 0;
  const int world = group != nullptr ? group->env().world_size : 1;
  if (world > 1) torch::manual_seed(flags.seed * 1000 + uint64_t(rank));  // dropout per rank
  auto resumed = (*run)->Resume();
  if (!resumed.ok()) return Fail("resume", resumed.status());
  if ((*run)->complete()) {  // stint: finished before (a requeue racing the end)
    std::printf("complete: the run finished at step %llu, nothing to do\n",
                (unsigned long long)*resumed);
    return 0;
  }
  uint64_t step = *resumed;
  for (const auto& why : (*run)->resume_skipped())
    std::printf("skipped damaged checkpoint %s\n", why.c_str());
  double ema_loss = 0;
  if (auto s = (*run)->UserState("ema_loss")) ema_loss = std::atof(s->c_str());
  std::printf("ready: resumed from step %llu (epoch %llu, sample %llu)\n", (unsigned long long)step,
              (unsigned long long)sampler->cursor().epoch,
              (unsigned long long)sampler->cursor().consumed);
  std::fflush(stdout);

  const std::string log_path = world > 1 && !flags.log.empty()
                                   ? flags.log + ".rank" + std::to_string(rank)
                                   : flags.log;
  FILE* log = log_path.empty() ? nullptr : std::fopen(log_path.c_str(), "a");
  model->train();
  while (step < uint64_t(flags.steps)) {
    auto ids = sampler->RankIndices(rank, world);
    if (!ids.ok()) return Fail("sampler", ids.status());
    const uint64_t epoch = sampler->cursor().epoch;
    std::vector<int64_t> index(ids->begin(), ids->end());
    torch::Tensor idx = torch::tensor(index, torch::kLong);
    torch::Tensor x = inputs.index_select(0, idx).clone();
    for (size_t i = 0; i < index.size();
         ++i) {  // augmentation keyed by the sample, not the process
      auto gen = at::make_generator<at::CPUGeneratorImpl>(flags.seed * 1000003 + epoch * 7919 +
                                                          uint64_t(index[i]));
      x[int64_t(i)] += 0.05 * torch::randn({kInputs}, gen);
    }
    for (auto& group : optimizer.param_groups())
      group.options().set_lr(LearningRate(int64_t(step), flags.steps));
    optimizer.zero_grad();
    torch::Tensor loss =
        torch::nn::functional::cross_entropy(model->forward(x), labels.index_select(0, idx));
    loss.backward();
    if (group != nullptr) {  // the global batch's mean gradient: every rank's, averaged
      std::vector<torch::Tensor> grads;
      for (auto& p : model->parameters()) grads.push_back(p.grad());
      for (auto& g : grads) {
        std::vector<torch::Tensor> one = {g};
        group->backend()->allreduce(one)->wait();
        g.div_(world);
      }
    }
    auto barrier = (*run)->BeforeOptimizerStep();  // stint: the snapshot's copies are done
    if (!barrier.ok()) return Fail("lazy barrier", barrier);
    optimizer.step();
    ema_loss = step == 0 ? loss.item<double>() : 0.98 * ema_loss + 0.02 * loss.item<double>();
    if (flags.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(flags.step_ms));
    ++step;

    if (log != nullptr) {
      std::string line = "step " + std::to_string(step) + ":";
      for (int64_t id : index) line += " " + std::to_string(id);
      std::fprintf(log, "%s\n", line.c_str());
      std::fflush(log);
    }
    char ema[32];
    std::snprintf(ema, sizeof(ema), "%.17g", ema_loss);
    (*run)->SetUserState("ema_loss", ema);     // stint: named user state
    // stint: cursor, saves, preemption; the loss goes to stintd under stint-agent
    auto action = (*run)->StepBoundary(step, loss.item<double>());
    if (!action.ok()) return Fail("step boundary", action.status());
    if (action->exit) {
      std::printf("preempted at step %llu: %s\n", (unsigned long long)step,
                  action->plan.reason.c_str());
      if (log != nullptr) std::fclose(log);
      return action->exit_code;  // stint: 75 = requeue me
    }
    if (step % 100 == 0) std::printf("step %llu loss %.4f\n", (unsigned long long)step, ema_loss);
  }
  if (log != nullptr) std::fclose(log);
  stint::Status done = (*run)->Finish(step);  // stint: final durable checkpoint
  if (!done.ok()) return Fail("final checkpoint", done);
  std::printf("final step %llu rank %d loss %.4f checksum %016llx\n", (unsigned long long)step,
              rank, ema_loss, (unsigned long long)StateChecksum(*model, optimizer));
  std::fflush(stdout);  // before the teardown: a supervisor's kill then loses nothing said
  return 0;
}
