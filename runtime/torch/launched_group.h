// LaunchedGroup: a LibTorch job's process group from its launcher's
// environment (stint/launch_env.h): Slurm's srun tasks (one per GPU, no
// torchrun in between) or torchrun's variables. Rank 0 serves a TCPStore at
// MASTER_ADDR:MASTER_PORT (under Slurm the first host of the job's node
// list and a port from the job id, unless set), every rank joins a
// ProcessGroupGloo over it, and a checkpoint's commit channel uses another
// prefix of the same store.
//
//   auto group = stint::LaunchedGroup::FromEnvironment().value();  // nullptr: one process
//   options.checkpoint.rank = group->env().rank; ... (ResumableTraining does this itself)
//   group->backend()->allreduce(grads)->wait();
//
// The Python twin is stint.distributed.init_from_env().
#ifndef STINT_TORCH_LAUNCHED_GROUP_H_
#define STINT_TORCH_LAUNCHED_GROUP_H_

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>

#include "c10d_commit_channel.h"
#include "stint/launch_env.h"
#include "stint/status.h"

namespace stint {

class LaunchedGroup {
 public:
  // The group of this process's job, or nullptr for a job of one process.
  // `timeout` bounds the rendezvous and every collective. kInvalidArgument
  // for a launch of several ranks without a master address and port;
  // kUnavailable / kDeadlineExceeded when the store or the group cannot be
  // formed (naming the master).
  static Result<std::unique_ptr<LaunchedGroup>> FromEnvironment(
      std::chrono::milliseconds timeout = std::chrono::minutes(10));

  const LaunchEnv& env() const { return env_; }
  // The Gloo backend (CPU tensors): gradients, and ResumableTraining's stop
  // agreement.
  const c10::intrusive_ptr<c10d::Backend>& backend() const { return backend_; }
  C10dCommitChannel* commit_channel() { return commit_channel_.get(); }

 private:
  LaunchedGroup() = default;
  LaunchEnv env_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  std::unique_ptr<C10dCommitChannel> commit_channel_;
};

}  // namespace stint

#endif  // STINT_TORCH_LAUNCHED_GROUP_H_
