// elastic_training: data-parallel LibTorch training whose workers come and
// go (the lines marked "stint"). Each worker registers with stintd, joins
// the job's rendezvous, and trains its slice of every global batch; when a
// worker dies or a new one joins, the others re-form the group at the next
// step boundary and carry on from the same state.
//
// Task: least-squares regression of 8 inputs (a fixed teacher), SGD with
// momentum. The loss is summed over this rank's samples and divided by the
// global batch, so the allreduced gradient is the global batch's mean
// whatever the world size: any sequence of resizes trains the same model
// as one process would (up to float summation order). The model carries a
// "seen" counter per sample, summed by the same allreduce as the gradients
// and applied with the optimizer step, so the final model itself says how
// often each sample was trained on.
//
//   elastic_training --url http://127.0.0.1:7077 --token T --job ID
//                    [--steps 300] [--step-ms 0] [--sample-ms 0] [--out FILE] [--timeout-ms 10000]
//                    [--ballast N] [--die-in-allreduce-at STEP] [--name NAME]
//                    [--ckpt-dir DIR] [--save-every 50] [--backend gloo|nccl] [--device 0]
//   elastic_training --reference --out FILE [--steps 300]   (one process, no stintd)
//
// With --ckpt-dir, the generation's rank 0 resumes from the newest
// checkpoint there (the others get it by the state sync), checkpoints every
// --save-every steps (durable, fenced by the segment's token, reported to
// stintd), and on a preemption notice (stintd's or SIGTERM) every rank stops
// at the same step boundary: rank 0 checkpoints, reports, acks the segment,
// and all exit 75 ("requeue me"). A fenced worker exits 75 without saving.
//
// --backend gloo (the default) trains on the CPU over Gloo; --backend nccl
// trains on CUDA device --device over NCCL (NewTorchNcclCommunicatorFactory:
// the gradients are reduced in place on the device, after torch's current
// stream; the per-sample counter, the step-boundary agreement and the state
// sync are host buffers staged through the device). Without NCCL in this
// build, or without that device, the worker exits 2 before registering.
//
// --step-ms sleeps after every step; --sample-ms sleeps that long per
// sample of this rank's slice (a stand-in for GPU time, so a step's cost
// per worker falls as the group grows, as on real devices).
//
// Prints "GENERATION g rank r world w reform_s x step s t_ms T" whenever a
// generation is formed, "FIRST_STEP g step s t_ms T" at its first committed
// step, "RESUMED step s", "CHECKPOINT step s seconds x", "PREEMPTED step s
// t_ms T", "FENCED step s t_ms T" and "DONE step s rank r t_ms T" (with --backend nccl, first
// "NCCL_LADDER
// ...": the recovery rungs the loaded NCCL offers). Rank 0 writes FILE
// (JSON) at the end.
#include <signal.h>
#include <unistd.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#if defined(STINT_HAVE_NCCL) && STINT_HAVE_NCCL
#include "device_probe.h"
#include "nccl_communicator.h"
#endif
#include "gloo_communicator.h"
#include "resumable_training.h"
#include "stint/preemption.h"
#include "stint/coordinator_client.h"
#include "stint/elastic_group.h"
#include "stint_torch.h"
#include "torch_elastic.h"

namespace {

constexpr int64_t kInputs = 8, kDataset = 240, kGlobalBatch = 12;

struct Flags {
  std::string url, token, out, name, ckpt_dir, backend = "gloo";
  uint64_t job = 0;
  int device = 0;  // --backend nccl: the CUDA device this worker trains on
  int64_t steps = 300, step_ms = 0, sample_ms = 0, timeout_ms = 10000, ballast = 0, die_at = -1,
          save_every = 50;
  bool reference = false;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reference") {
      f->reference = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    const std::string v = argv[++i];
    if (a == "--url")
      f->url = v;
    else if (a == "--token")
      f->token = v;
    else if (a == "--job")
      f->job = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--out")
      f->out = v;
    else if (a == "--name")
      f->name = v;
    else if (a == "--steps")
      f->steps = std::atoll(v.c_str());
    else if (a == "--step-ms")
      f->step_ms = std::atoll(v.c_str());
    else if (a == "--sample-ms")
      f->sample_ms = std::atoll(v.c_str());
    else if (a == "--timeout-ms")
      f->timeout_ms = std::atoll(v.c_str());
    else if (a == "--ballast")
      f->ballast = std::atoll(v.c_str());
    else if (a == "--die-in-allreduce-at")
      f->die_at = std::atoll(v.c_str());
    else if (a == "--ckpt-dir")
      f->ckpt_dir = v;
    else if (a == "--save-every")
      f->save_every = std::atoll(v.c_str());
    else if (a == "--backend")
      f->backend = v;
    else if (a == "--device")
      f->device = std::atoi(v.c_str());
    else
      return false;
  }
  if (f->backend != "gloo" && f->backend != "nccl") return false;
  return f->reference ? !f->out.empty() : (!f->url.empty() && f->job != 0);
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc = register_module("fc", torch::nn::Linear(kInputs, 1));
    seen = register_buffer("seen", torch::zeros({kDataset}, torch::kFloat64));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc->forward(x); }
  torch::nn::Linear fc{nullptr};
  torch::Tensor seen;
};
TORCH_MODULE(Net);

// Sample i: inputs from a fixed formula, target from a fixed teacher plus a
// little structure, so the answer does not depend on who computes it.
void Batch(const std::vector<uint64_t>& ids, torch::Tensor* x, torch::Tensor* y) {
  *x = torch::empty({static_cast<int64_t>(ids.size()), kInputs});
  *y = torch::empty({static_cast<int64_t>(ids.size()), 1});
  auto xa = x->accessor<float, 2>();
  auto ya = y->accessor<float, 2>();
  for (size_t r = 0; r < ids.size(); ++r) {
    double target = 0.3;
    for (int64_t j = 0; j < kInputs; ++j) {
      const double v = std::sin(0.37 * static_cast<double>(ids[r]) + 1.3 * static_cast<double>(j));
      xa[r][j] = static_cast<float>(v);
      target += (0.5 - 0.1 * static_cast<double>(j)) * v;
    }
    ya[r][0] = static_cast<float>(target + 0.05 * std::cos(static_cast<double>(ids[r])));
  }
}

// One step's forward and backward on this rank's slice, on `device` (the
// samples are built on the CPU); the sample counter delta (a CPU tensor)
// goes with the gradients. `*slice_loss`: the mean loss of the slice.
torch::Tensor LocalStep(Net& net, const std::vector<uint64_t>& ids, torch::Device device,
                        double* slice_loss) {
  net->zero_grad();
  torch::Tensor x, y;
  Batch(ids, &x, &y);
  x = x.to(device);
  y = y.to(device);
  torch::Tensor loss = (net->forward(x) - y).pow(2).sum() / static_cast<double>(kGlobalBatch);
  loss.backward();
  *slice_loss = ids.empty() ? 0.0
                            : loss.item<double>() * static_cast<double>(kGlobalBatch) /
                                  static_cast<double>(ids.size());
  torch::Tensor delta = torch::zeros({kDataset}, torch::kFloat64);
  for (uint64_t id : ids) delta[static_cast<int64_t>(id)] += 1;
  return delta;
}

void Apply(Net& net, torch::optim::SGD& opt, const torch::Tensor& delta) {
  opt.step();
  torch::NoGradGuard no_grad;
  net->seen.add_(delta.to(net->seen.device()));
}

int WriteResult(const Flags& f, Net& net, uint64_t step) {
  torch::NoGradGuard no_grad;
  std::ofstream out(f.out);
  out << "{\"step\": " << step << ", \"params\": [";
  bool first = true;
  for (const torch::Tensor& p : net->parameters()) {
    torch::Tensor flat = p.reshape({-1}).to(torch::kCPU);
    for (int64_t i = 0; i < flat.numel(); ++i) {
      out << (first ? "" : ", ") << flat[i].item<float>();
      first = false;
    }
  }
  out << "], \"seen\": [";
  torch::Tensor seen = net->seen.to(torch::kCPU);
  for (int64_t i = 0; i < kDataset; ++i) out << (i ? ", " : "") << seen[i].item<double>();
  out << "]}\n";
  return out.good() ? 0 : 1;
}

stint::ResumableSampler MakeSampler() {
  stint::SamplerConfig config;
  config.dataset_size = kDataset;
  config.seed = 7;
  config.global_batch = kGlobalBatch;
  return stint::ResumableSampler::Create(config).value();
}

int RunReference(const Flags& f) {
  torch::manual_seed(0);
  Net net;
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  stint::ResumableSampler sampler = MakeSampler();
  for (int64_t step = 0; step < f.steps; ++step) {
    double loss = 0;
    torch::Tensor delta = LocalStep(net, sampler.RankIndices(0, 1).value(), torch::kCPU, &loss);
    Apply(net, opt, delta);
    sampler.CommitStep();
  }
  std::printf("DONE step %lld\n", static_cast<long long>(f.steps));
  return WriteResult(f, net, static_cast<uint64_t>(f.steps));
}

void PrintGeneration(const stint::ElasticStep& s, uint64_t step) {
  std::printf("GENERATION %llu rank %d world %d reform_s %.3f step %llu t_ms %lld\n",
              static_cast<unsigned long long>(s.generation), s.rank, s.world_size, s.reform_seconds,
              static_cast<unsigned long long>(step), static_cast<long long>(NowMs()));
  std::fflush(stdout);
}

// Rank 0's checkpoints (--ckpt-dir): one Checkpointer, held only while this
// process is rank 0, fenced by the segment's token.
class RankZeroCheckpoints {
 public:
  RankZeroCheckpoints(const Flags& f, stint::CoordinatorSession* session, Net& net,
                      torch::optim::SGD& opt, stint::ResumableSampler* sampler)
      : f_(f), session_(session), net_(net), opt_(opt), sampler_(sampler) {}

  bool enabled() const { return !f_.ckpt_dir.empty(); }

  // Opens (when this process just became rank 0) or closes (when it no
  // longer is) the checkpointer; `resume`: load the newest checkpoint.
  stint::Status Follow(int rank, bool resume, uint64_t* step) {
    if (!enabled()) return stint::Status::OK();
    if (rank != 0) {
      run_.reset();
      saved_any_ = false;
      return stint::Status::OK();
    }
    if (run_ == nullptr) {
      stint::ResumableTrainingOptions ro;
      ro.checkpoint.root = f_.ckpt_dir;
      ro.checkpoint.fencing_token = session_->fencing_token();
      ro.checkpoint.commit_guard = session_->client()->CommitGuard();
      // The process that was rank 0 before this generation closes its
      // checkpointer (the root's writer lock) once it learns it no longer is.
      ro.checkpoint.lock_wait = std::chrono::minutes(2);
      ro.save_every = 0;
      ro.watch_signals = false;  // the process's watcher already has the signals
      // The elastic group is the job's; this rank-0 checkpointer is one
      // process's, whatever WORLD_SIZE the launcher set.
      ro.group_from_environment = false;
      STINT_ASSIGN_OR_RETURN(run_, stint::ResumableTraining::Create(ro, *net_, opt_, sampler_));
    }
    if (!resume) return stint::Status::OK();
    STINT_ASSIGN_OR_RETURN(uint64_t resumed, run_->Resume());
    if (resumed > 0) {
      *step = resumed;
      std::printf("RESUMED step %llu\n", static_cast<unsigned long long>(resumed));
      std::fflush(stdout);
    }
    return stint::Status::OK();
  }

  // A durable checkpoint of `step`, reported to stintd.
  stint::Status Save(uint64_t step) {
    if (run_ == nullptr || (saved_any_ && step == last_saved_)) return stint::Status::OK();
    const auto t0 = std::chrono::steady_clock::now();
    STINT_RETURN_IF_ERROR(run_->SaveNow(step, /*wait_durable=*/true));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    saved_any_ = true;
    last_saved_ = step;
    std::printf("CHECKPOINT step %llu seconds %.3f\n", static_cast<unsigned long long>(step),
                seconds);
    std::fflush(stdout);
    return session_->ReportCheckpoint(step, seconds);
  }

 private:
  const Flags& f_;
  stint::CoordinatorSession* session_;
  Net& net_;
  torch::optim::SGD& opt_;
  stint::ResumableSampler* sampler_;
  std::unique_ptr<stint::ResumableTraining> run_;
  bool saved_any_ = false;
  uint64_t last_saved_ = 0;
};

// The group's state sync, with the checkpoint in it: rank 0 of a new
// generation that has no trained state yet (a fresh process: every member
// of the job's first generation in this segment is one) resumes from the
// newest checkpoint before the broadcast, so joiners get either a
// survivor's live state or the checkpoint, and every rank makes the same
// collective calls in the same order.
class CheckpointedState final : public stint::ElasticState {
 public:
  CheckpointedState(stint::TorchElasticState* inner, RankZeroCheckpoints* checkpoints,
                    uint64_t* step)
      : inner_(inner), checkpoints_(checkpoints), step_(step) {}

  stint::Status Synchronize(stint::Communicator& comm) override {
    const int rank = comm.membership().rank;
    STINT_RETURN_IF_ERROR(checkpoints_->Follow(rank, /*resume=*/rank == 0 && !has_state_, step_));
    if (rank == 0) has_state_ = true;
    STINT_RETURN_IF_ERROR(inner_->Synchronize(comm));
    has_state_ = true;
    return stint::Status::OK();
  }

 private:
  stint::TorchElasticState* inner_;
  RankZeroCheckpoints* checkpoints_;
  uint64_t* step_;
  bool has_state_ = false;  // this process holds trained (or resumed) state
};

// stint: the communicator factory of --backend. For NCCL it also checks
// --device, so that a worker without it fails before registering.
stint::Result<std::unique_ptr<stint::CommunicatorFactory>> NewCommunicatorFactory(
    const Flags& f, const stint::CommunicatorOptions& comm) {
  if (f.backend == "gloo")
    return std::unique_ptr<stint::CommunicatorFactory>(new stint::GlooCommunicatorFactory(comm));
  STINT_ASSIGN_OR_RETURN(std::unique_ptr<stint::CommunicatorFactory> nccl,
                         stint::NewTorchNcclCommunicatorFactory(comm, f.device));
#if defined(STINT_HAVE_NCCL) && STINT_HAVE_NCCL
  STINT_ASSIGN_OR_RETURN(int gpus, stint::CudaDeviceCount());
  if (f.device < 0 || f.device >= gpus) {
    return stint::Status::InvalidArgument("device " + std::to_string(f.device) +
                                          ": no such device (" + std::to_string(gpus) +
                                          " CUDA devices)");
  }
  // Which recovery rungs the loaded NCCL offers (a test's log shows it).
  stint::Result<stint::NcclRecoveryPlan> ladder = stint::LoadedNcclRecoveryPlan();
  std::printf("NCCL_LADDER %s\n",
              ladder.ok() ? ladder->summary.c_str() : ladder.status().ToString().c_str());
  std::fflush(stdout);
#endif
  return nccl;
}

int RunWorker(const Flags& f) {
  stint::ElasticOptions eo;
  eo.comm.timeout = std::chrono::milliseconds(f.timeout_ms);
  eo.join_timeout = std::chrono::seconds(120);
  auto factory = NewCommunicatorFactory(f, eo.comm);
  if (!factory.ok()) {
    std::fprintf(stderr, "backend %s: %s\n", f.backend.c_str(),
                 factory.status().ToString().c_str());
    return 2;
  }
  // stint: SIGTERM and stintd's notices reach one watcher.
  auto watcher = stint::PreemptionWatcher::Install();
  if (!watcher.ok()) {
    std::fprintf(stderr, "watcher: %s\n", watcher.status().ToString().c_str());
    return 2;
  }
  // stint: register with stintd (heartbeats on the session's threads).
  stint::CoordinatorOptions co;
  co.url = f.url;
  co.token = f.token;
  co.job_id = f.job;
  if (!f.name.empty()) co.worker_name = f.name;
  auto session = stint::CoordinatorSession::Start(co, watcher->get());
  if (!session.ok()) {
    std::fprintf(stderr, "register: %s\n", session.status().ToString().c_str());
    return 2;
  }
  // stint: the elastic group over Gloo or NCCL.
  auto group = stint::ElasticGroup::Create((*session)->client(), factory->get(), eo);
  if (!group.ok()) {
    std::fprintf(stderr, "group: %s\n", group.status().ToString().c_str());
    return 2;
  }
  const torch::Device device =
      f.backend == "nccl" ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(f.device))
                          : torch::Device(torch::kCPU);
  torch::manual_seed(0);
  Net net;
  net->to(device);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  stint::ResumableSampler sampler = MakeSampler();
  uint64_t step = 0;
  stint::TorchElasticState torch_state(*net, opt, &sampler, &step);  // stint
  RankZeroCheckpoints checkpoints(f, session->get(), net, opt, &sampler);
  CheckpointedState state(&torch_state, &checkpoints, &step);
  auto joined = (*group)->Join(&state);  // stint: rank 0 resumes; the sync hands it on
  if (!joined.ok()) {
    std::fprintf(stderr, "join: %s\n", joined.status().ToString().c_str());
    return stint::IsFenced(joined.status()) ? stint::kExitRequeue : 3;
  }
  PrintGeneration(*joined, step);
  bool first_step = true;
  torch::Tensor ballast = torch::zeros({std::max<int64_t>(f.ballast, 1)}, device);
  while (step < static_cast<uint64_t>(f.steps)) {
    stint::ElasticGroup& g = **group;
    if ((*session)->fenced()) {
      std::printf("FENCED step %llu t_ms %lld\n", static_cast<unsigned long long>(step),
                  static_cast<long long>(NowMs()));
      return stint::kExitRequeue;
    }
    const std::vector<uint64_t> ids = sampler.RankIndices(g.rank(), g.world_size()).value();
    double loss = 0;
    torch::Tensor delta = LocalStep(net, ids, device, &loss);
    // Stands in for device compute, which scales with this rank's share.
    if (f.sample_ms > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(f.sample_ms * ids.size()));
    if (f.die_at >= 0 && static_cast<int64_t>(step) == f.die_at) {
      // A real SIGKILL 5 ms into the collective below (raise is
      // async-signal-safe).
      signal(SIGALRM, [](int) { raise(SIGKILL); });
      ualarm(5000, 0);
    }
    stint::Status reduced =
        f.ballast > 0 ? g.comm().AllReduce(ballast.data_ptr(), static_cast<size_t>(f.ballast),
                                           stint::DType::kFloat32, stint::ReduceOp::kSum)
                      : stint::Status::OK();
    if (reduced.ok()) reduced = stint::AllReduceGradients(g.comm(), *net, &delta);  // stint
    if (reduced.ok()) {
      Apply(net, opt, delta);
      sampler.CommitStep();
      ++step;
      (*session)->SetStep(step);  // stint: progress with the next heartbeat
      // stint: rank 0's slice loss for the job's loss curve (one slice
      // stands for the batch: no extra collective per step)
      if (g.rank() == 0) (*session)->ReportLoss(loss);
      if (f.save_every > 0 && step % static_cast<uint64_t>(f.save_every) == 0) {
        stint::Status saved = checkpoints.Save(step);
        if (!saved.ok()) std::fprintf(stderr, "checkpoint: %s\n", saved.ToString().c_str());
      }
      if (first_step) {
        std::printf("FIRST_STEP %llu step %llu t_ms %lld\n",
                    static_cast<unsigned long long>(g.generation()),
                    static_cast<unsigned long long>(step), static_cast<long long>(NowMs()));
        std::fflush(stdout);
        first_step = false;
      }
    } else {
      std::printf("COLLECTIVE_FAILED step %llu: %s\n", static_cast<unsigned long long>(step),
                  reduced.ToString().c_str());
      std::fflush(stdout);
    }
    if (f.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(f.step_ms));
    // stint: re-forms here when needed; every rank stops at the same step.
    auto boundary = g.StepBoundary((*watcher)->requested(), &state);
    if (!boundary.ok()) {
      std::fprintf(stderr, "step boundary: %s\n", boundary.status().ToString().c_str());
      return stint::IsFenced(boundary.status()) ? stint::kExitRequeue : 3;
    }
    if (boundary->stop) {
      if (g.rank() == 0) {
        stint::Status saved = checkpoints.Save(step);
        if (saved.ok()) saved = (*session)->Ack(step);
        if (!saved.ok())
          std::fprintf(stderr, "emergency checkpoint: %s\n", saved.ToString().c_str());
      }
      std::printf("PREEMPTED step %llu t_ms %lld\n", static_cast<unsigned long long>(step),
                  static_cast<long long>(NowMs()));
      std::fflush(stdout);
      return stint::kExitRequeue;
    }
    if (boundary->reformed) {
      PrintGeneration(*boundary, step);
      first_step = true;
    }
  }
  // Everyone reached the end before rank 0 reports the job complete.
  stint::Status end = (*group)->comm().Barrier();
  std::printf("DONE step %llu rank %d t_ms %lld\n", static_cast<unsigned long long>(step),
              (*group)->rank(), static_cast<long long>(NowMs()));
  std::fflush(stdout);
  if ((*group)->rank() != 0) return end.ok() ? 0 : 4;
  if (checkpoints.enabled()) {
    stint::Status saved = checkpoints.Save(step);
    if (!saved.ok()) std::fprintf(stderr, "final checkpoint: %s\n", saved.ToString().c_str());
  }
  const int written = WriteResult(f, net, step);
  stint::Status finished = (*session)->Finished();
  if (!finished.ok()) std::fprintf(stderr, "finished: %s\n", finished.ToString().c_str());
  return written;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, &f)) {
    std::fprintf(stderr,
                 "usage: elastic_training --url URL --token T --job ID [--steps N] [--step-ms MS] "
                 "[--out FILE] [--backend gloo|nccl] [--device D]\n"
                 "       elastic_training --reference --out FILE [--steps N]\n");
    return 2;
  }
  return f.reference ? RunReference(f) : RunWorker(f);
}
