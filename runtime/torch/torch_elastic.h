// LibTorch glue for ElasticGroup: the state a data-parallel rank keeps
// consistent across generations, and the gradient allreduce.
//
//   stint::TorchElasticState state(model, optimizer, &sampler, &step);
//   group->Join(&state);
//   ...backward (loss = sum over this rank's samples / global batch)...
//   if (stint::AllReduceGradients(group->comm(), model).ok()) { optimizer.step();
//   sampler.CommitStep(); ++step; } group->StepBoundary(stop, &state);
#ifndef STINT_TORCH_TORCH_ELASTIC_H_
#define STINT_TORCH_TORCH_ELASTIC_H_

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "stint/communicator.h"
#include "stint/elastic_group.h"
#include "stint/resumable_sampler.h"

namespace stint {

// Synchronize() broadcasts rank 0's module (parameters and buffers),
// optimizer state, sampler cursor and step to every rank: a new joiner
// starts from the survivors' state, and ranks that disagreed after a
// collective failed mid-step (one applied it, one did not) agree again. The
// data each rank trains on next follows from the synchronized cursor and
// the new (rank, world_size), so every sample is used exactly once per
// epoch across any resize. The broadcast is of one host blob (its size
// first), so it works over Gloo and over NCCL (staged through the device);
// CUDA tensors are loaded onto this rank's model device, whatever device
// rank 0 had.
class TorchElasticState final : public ElasticState {
 public:
  // All must outlive this object; `sampler` may be null.
  TorchElasticState(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                    ResumableSampler* sampler, uint64_t* step);
  Status Synchronize(Communicator& comm) override;

 private:
  Result<std::string> Serialize() const;
  Status Deserialize(const std::string& bytes);

  torch::nn::Module& model_;
  torch::optim::Optimizer& optimizer_;
  ResumableSampler* sampler_;
  uint64_t* step_;
};

// Sums the gradients of `model`'s parameters (and `extra`, e.g. a sample
// counter, when not null) over the group in one flat allreduce per
// (device, dtype). Parameters without a gradient contribute zeros.
// REQUIRES: CPU tensors for Gloo; same model on every rank.
//
// CUDA tensors (the NCCL backend): the flat buffer is written by
// torch::cat on the device's current stream, and read by the collective on
// the communicator's stream. The collective must wait for the current
// stream: build the NCCL factory with
//   NcclCommunicatorOptions::current_stream = stint::CurrentCudaStream;
// (torch_device.h; cuda/nccl_communicator.h, the stream rule). Without it
// the communicator waits for the legacy default stream, which is torch's
// current stream only while the program has not set another one. The
// collective completes before this returns, so the copies back into the
// gradients (on the current stream) see the sums. CPU tensors (e.g. a
// sample counter) go through the NCCL backend's host staging.
Status AllReduceGradients(Communicator& comm, torch::nn::Module& model,
                          torch::Tensor* extra = nullptr);

// The NCCL communicator factory (cuda/nccl_communicator.h) for a LibTorch
// job: every collective waits for torch's current stream on `device` (the
// stream rule above), `device` -1 meaning the current device at Form().
// kUnavailable when stint was built without NCCL.
//   auto nccl = stint::NewTorchNcclCommunicatorFactory(eo.comm, local_rank).value();
//   auto group = stint::ElasticGroup::Create(client, nccl.get(), eo);
Result<std::unique_ptr<CommunicatorFactory>> NewTorchNcclCommunicatorFactory(
    const CommunicatorOptions& comm, int device = -1);

}  // namespace stint

#endif  // STINT_TORCH_TORCH_ELASTIC_H_
