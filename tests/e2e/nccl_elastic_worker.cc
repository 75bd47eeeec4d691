// nccl_elastic_worker: examples/elastic_training's task (the same model,
// data, sampler and loss, so the same reference) trained on one CUDA device
// per worker through ElasticGroup with the NCCL communicator factory, for
// tests/e2e/elastic_nccl_test.cc. The gradients are CUDA tensors reduced in
// place by NCCL, ordered after torch's current stream
// (NcclCommunicatorOptions::current_stream = stint::CurrentCudaStream); the
// step-boundary agreement, the per-sample counter (a CPU tensor) and the
// state sync are host buffers staged through the device.
//
//   nccl_elastic_worker --url URL --token T --job ID --device D [--steps N]
//                       [--step-ms MS] [--out FILE] [--timeout-ms MS]
//                       [--ballast N] [--die-in-allreduce-at STEP] [--name NAME]
//   nccl_elastic_worker --reference --out FILE [--steps N]   (one process, CPU)
//
// Prints "GENERATION g rank r world w reform_s x step s t_ms T" whenever a
// generation is formed, "FIRST_STEP g step s t_ms T" at its first committed
// step, "COLLECTIVE_FAILED step s: ..." and "DONE step s rank r t_ms T".
// Rank 0 writes FILE (JSON) at the end. Exit 2: bad flags or no device.
#include <signal.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "device_probe.h"
#include "nccl_communicator.h"
#include "stint/coordinator_client.h"
#include "stint/elastic_group.h"
#include "stint/preemption.h"
#include "stint_torch.h"
#include "torch_device.h"
#include "torch_elastic.h"

namespace {

constexpr int64_t kInputs = 8, kDataset = 240, kGlobalBatch = 12;

struct Flags {
  std::string url, token, out, name;
  uint64_t job = 0;
  int device = 0;
  int64_t steps = 300, step_ms = 0, timeout_ms = 10000, ballast = 0, die_at = -1;
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
    else if (a == "--device")
      f->device = std::atoi(v.c_str());
    else if (a == "--out")
      f->out = v;
    else if (a == "--name")
      f->name = v;
    else if (a == "--steps")
      f->steps = std::atoll(v.c_str());
    else if (a == "--step-ms")
      f->step_ms = std::atoll(v.c_str());
    else if (a == "--timeout-ms")
      f->timeout_ms = std::atoll(v.c_str());
    else if (a == "--ballast")
      f->ballast = std::atoll(v.c_str());
    else if (a == "--die-in-allreduce-at")
      f->die_at = std::atoll(v.c_str());
    else
      return false;
  }
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

// examples/elastic_training's samples, built on the CPU.
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

// Forward and backward on `device`; the sample-counter delta stays on the CPU.
torch::Tensor LocalStep(Net& net, const std::vector<uint64_t>& ids, torch::Device device) {
  net->zero_grad();
  torch::Tensor x, y;
  Batch(ids, &x, &y);
  x = x.to(device);
  y = y.to(device);
  torch::Tensor loss = (net->forward(x) - y).pow(2).sum() / static_cast<double>(kGlobalBatch);
  loss.backward();
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
    torch::Tensor delta = LocalStep(net, sampler.RankIndices(0, 1).value(), torch::kCPU);
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

int RunWorker(const Flags& f) {
  stint::Result<int> gpus = stint::CudaDeviceCount();
  if (!gpus.ok() || f.device < 0 || f.device >= *gpus) {
    std::fprintf(stderr, "device %d: %s\n", f.device,
                 gpus.ok() ? "no such device" : gpus.status().ToString().c_str());
    return 2;
  }
  // Which rungs this library offers (the test log shows it).
  stint::Result<stint::NcclRecoveryPlan> ladder = stint::LoadedNcclRecoveryPlan();
  std::printf("NCCL_LADDER %s\n",
              ladder.ok() ? ladder->summary.c_str() : ladder.status().ToString().c_str());
  std::fflush(stdout);
  auto watcher = stint::PreemptionWatcher::Install();
  if (!watcher.ok()) {
    std::fprintf(stderr, "watcher: %s\n", watcher.status().ToString().c_str());
    return 2;
  }
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
  // The elastic group over NCCL: one device per worker, collectives
  // ordered after torch's current stream on it.
  stint::ElasticOptions eo;
  eo.comm.timeout = std::chrono::milliseconds(f.timeout_ms);
  eo.join_timeout = std::chrono::seconds(120);
  stint::NcclCommunicatorOptions no;
  no.comm = eo.comm;
  no.device = f.device;
  no.current_stream = stint::CurrentCudaStream;
  stint::NcclCommunicatorFactory nccl(no);
  auto group = stint::ElasticGroup::Create((*session)->client(), &nccl, eo);
  if (!group.ok()) {
    std::fprintf(stderr, "group: %s\n", group.status().ToString().c_str());
    return 2;
  }
  const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(f.device));
  torch::manual_seed(0);
  Net net;
  net->to(device);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  stint::ResumableSampler sampler = MakeSampler();
  uint64_t step = 0;
  stint::TorchElasticState state(*net, opt, &sampler, &step);
  auto joined = (*group)->Join(&state);
  if (!joined.ok()) {
    std::fprintf(stderr, "join: %s\n", joined.status().ToString().c_str());
    return 3;
  }
  PrintGeneration(*joined, step);
  bool first_step = true;
  torch::Tensor ballast = torch::zeros({std::max<int64_t>(f.ballast, 1)}, device);
  while (step < static_cast<uint64_t>(f.steps)) {
    stint::ElasticGroup& g = **group;
    const std::vector<uint64_t> ids = sampler.RankIndices(g.rank(), g.world_size()).value();
    torch::Tensor delta = LocalStep(net, ids, device);
    if (f.die_at >= 0 && static_cast<int64_t>(step) == f.die_at) {
      signal(SIGALRM, [](int) { raise(SIGKILL); });
      ualarm(5000, 0);
    }
    stint::Status reduced =
        f.ballast > 0 ? g.comm().AllReduce(ballast.data_ptr(), static_cast<size_t>(f.ballast),
                                           stint::DType::kFloat32, stint::ReduceOp::kSum)
                      : stint::Status::OK();
    if (reduced.ok()) reduced = stint::AllReduceGradients(g.comm(), *net, &delta);
    if (reduced.ok()) {
      Apply(net, opt, delta);
      sampler.CommitStep();
      ++step;
      (*session)->SetStep(step);
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
    auto boundary = g.StepBoundary((*watcher)->requested(), &state);
    if (!boundary.ok()) {
      std::fprintf(stderr, "step boundary: %s\n", boundary.status().ToString().c_str());
      return 3;
    }
    if (boundary->stop) return stint::kExitRequeue;
    if (boundary->reformed) {
      PrintGeneration(*boundary, step);
      first_step = true;
    }
  }
  stint::Status end = (*group)->comm().Barrier();
  std::printf("DONE step %llu rank %d t_ms %lld\n", static_cast<unsigned long long>(step),
              (*group)->rank(), static_cast<long long>(NowMs()));
  std::fflush(stdout);
  if ((*group)->rank() != 0) return end.ok() ? 0 : 4;
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
                 "usage: nccl_elastic_worker --url URL --token T --job ID --device D [--steps N]\n"
                 "       nccl_elastic_worker --reference --out FILE [--steps N]\n");
    return 2;
  }
  return f.reference ? RunReference(f) : RunWorker(f);
}
