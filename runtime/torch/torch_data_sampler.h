// TorchDataSampler: a ResumableSampler as a torch::data sampler, so a C++
// training loop can feed torch::data::make_data_loader with it directly.
//
//   stint::TorchDataSampler sampler(&resumable, rank, world);
//   auto loader = torch::data::make_data_loader(
//       dataset.map(torch::data::transforms::Stack<>()), std::move(sampler),
//       torch::data::DataLoaderOptions().batch_size(global_batch / world));
//   for (auto& batch : *loader) { ...train...; run->StepBoundary(++step); }
//
// next() hands out this rank's batch for successive global steps, running
// ahead of the committed cursor as far as the loader prefetches; the cursor
// itself moves only when the training loop commits a step
// (ResumableSampler::CommitStep, which ResumableTraining::StepBoundary
// calls). A new loader after Resume() therefore starts at the first
// uncommitted step. An epoch ends (next() returns nothing) at the epoch
// boundary of the global order; reset() starts the next one.
//
// Header-only on purpose: it is compiled where it is used, and only there
// do the torch::data headers cost compile time.
#ifndef STINT_TORCH_TORCH_DATA_SAMPLER_H_
#define STINT_TORCH_TORCH_DATA_SAMPLER_H_

#include <c10/util/Optional.h>
#include <torch/data/samplers/base.h>
#include <torch/serialize/archive.h>

#include <string>
#include <vector>

#include "stint/resumable_sampler.h"

namespace stint {

class TorchDataSampler : public torch::data::samplers::Sampler<std::vector<size_t>> {
 public:
  // `sampler` must outlive this object. REQUIRES: 0 <= rank < world.
  TorchDataSampler(ResumableSampler* sampler, int rank, int world)
      : sampler_(sampler), rank_(rank), world_(world) {
    reset(c10::nullopt);
  }

  // Starts at the first step not yet committed, in that step's epoch.
  void reset(c10::optional<size_t> /*new_size: fixed by the sampler*/ = c10::nullopt) override {
    next_step_ = sampler_->committed_steps();
    epoch_ = sampler_->CursorAtStep(next_step_).epoch;
  }

  // This rank's indices for the next global step; empty at the end of the epoch.
  c10::optional<std::vector<size_t>> next(size_t /*batch_size: fixed by the sampler*/) override {
    if (next_step_ < sampler_->committed_steps()) next_step_ = sampler_->committed_steps();
    if (sampler_->CursorAtStep(next_step_).epoch != epoch_) return c10::nullopt;
    auto ids = sampler_->RankIndicesAtStep(next_step_, rank_, world_);
    if (!ids.ok()) return c10::nullopt;  // only for a world that does not divide the batch
    ++next_step_;
    return std::vector<size_t>(ids->begin(), ids->end());
  }

  // The committed cursor and data fingerprint (ResumableSampler::SaveState).
  void save(torch::serialize::OutputArchive& archive) const override {
    archive.write("stint_sampler_state", c10::IValue(sampler_->SaveState()));
  }
  void load(torch::serialize::InputArchive& archive) override {
    c10::IValue state;
    archive.read("stint_sampler_state", state);
    Status s = sampler_->LoadState(state.toStringRef());
    TORCH_CHECK(s.ok(), "stint sampler state: ", s.ToString());  // torch's own error channel
    reset(c10::nullopt);
  }

  uint64_t next_step() const { return next_step_; }

 private:
  ResumableSampler* sampler_;
  int rank_, world_;
  uint64_t next_step_ = 0;
  uint64_t epoch_ = 0;
};

}  // namespace stint

#endif  // STINT_TORCH_TORCH_DATA_SAMPLER_H_
