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
// epoch across any resize.
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
// counter, when not null) over the group in one flat float32/float64
// allreduce per dtype. Parameters without a gradient contribute zeros.
// REQUIRES: CPU tensors for Gloo; same model on every rank.
Status AllReduceGradients(Communicator& comm, torch::nn::Module& model,
                          torch::Tensor* extra = nullptr);

}  // namespace stint

#endif  // STINT_TORCH_TORCH_ELASTIC_H_
