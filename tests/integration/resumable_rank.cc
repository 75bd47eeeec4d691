// resumable_rank: one rank of a data-parallel C++ job trained with
// stint::ResumableTraining, its stop agreed over a ProcessGroupGloo, for
// resumable_ranks_test.
//
//   resumable_rank ROOT PORT RANK WORLD TOTAL
//
// The ranks meet on the parent's TCPStore at 127.0.0.1:PORT (the c10d group
// and the commit channel). Each trains the same small model on the same data
// to step TOTAL, saving only on a preemption notice and at the end. Prints
// "resumed S", "ready" three steps after it, then "stopped S saved B
// on_replicas_ms M exit E" (preempted; M: notice to durable and replicated,
// -1 when not) or "finished S digest D". Exit: the StepAction's exit code
// (75) when preempted, 0 when finished, 1 on an error (printed).
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "c10d_commit_channel.h"
#include "resumable_training.h"

namespace stint {
namespace {

int Fail(const std::string& what, const Status& s) {
  std::printf("error %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

int Run(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: resumable_rank ROOT PORT RANK WORLD TOTAL\n");
    return 1;
  }
  const int rank = std::atoi(argv[3]);
  const int world = std::atoi(argv[4]);
  const uint64_t total = std::strtoull(argv[5], nullptr, 10);
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(std::atoi(argv[2]));
  so.isServer = false;
  so.waitWorkers = false;
  so.timeout = std::chrono::seconds(120);
  auto tcp = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(120));
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(
      c10::make_intrusive<c10d::PrefixStore>("pg", tcp), rank, world, opts);
  C10dCommitChannel channel(c10::make_intrusive<c10d::PrefixStore>("ckpt", tcp), "c10d TCPStore");

  torch::manual_seed(0);
  torch::nn::Linear model(8, 4);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  ResumableTrainingOptions o;
  o.checkpoint.root = argv[1];
  o.checkpoint.rank = rank;
  o.checkpoint.world_size = world;
  o.checkpoint.commit_channel = &channel;
  o.checkpoint.io_engine = "posix";
  o.save_every = 0;
  o.preemption.grace = std::chrono::seconds(120);
  o.process_group = pg;
  auto run = ResumableTraining::Create(o, *model, optimizer, nullptr);
  if (!run.ok()) return Fail("create", run.status());
  auto resumed = (*run)->Resume();
  if (!resumed.ok()) return Fail("resume", resumed.status());
  std::printf("resumed %llu\n", static_cast<unsigned long long>(*resumed));
  std::fflush(stdout);

  const at::Tensor data = torch::randn({16, 8}, torch::Generator(at::detail::createCPUGenerator(7)));
  for (uint64_t step = *resumed; step < total;) {
    at::Tensor loss = model->forward(data).pow(2).mean();
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    ++step;
    if (step == *resumed + 3) {
      std::printf("ready\n");
      std::fflush(stdout);
    }
    auto action = (*run)->StepBoundary(step);
    if (!action.ok()) return Fail("step boundary", action.status());
    if (action->exit) {
      const long long on_replicas_ms =
          action->notice_to_replicas_seconds ? std::llround(*action->notice_to_replicas_seconds * 1000)
                                             : -1;
      std::printf("stopped %llu saved %d on_replicas_ms %lld exit %d (%s)\n",
                  static_cast<unsigned long long>(step), action->saved ? 1 : 0, on_replicas_ms,
                  action->exit_code, action->plan.reason.c_str());
      std::fflush(stdout);
      return action->exit_code;
    }
  }
  Status finished = (*run)->Finish(total);
  if (!finished.ok()) return Fail("finish", finished);
  double digest = 0;
  for (const auto& p : model->parameters()) digest += p.sum().item<double>() * 1e6;
  std::printf("finished %llu digest %.6f\n", static_cast<unsigned long long>(total), digest);
  return 0;
}

}  // namespace
}  // namespace stint

int main(int argc, char** argv) { return stint::Run(argc, argv); }
