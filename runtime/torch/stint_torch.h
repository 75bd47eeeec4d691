// LibTorch adapter: module parameters, buffers and optimizer state to and from
// a stint checkpoint.
//
// Saving:
//   stint::TorchStateBuilder b;
//   STINT_RETURN_IF_ERROR(b.AddModule("model", *model));
//   STINT_RETURN_IF_ERROR(b.AddOptimizer("optim", optimizer));
//   auto handle = ckpt->Save(step, b.state());  // `b` must outlive Save()
//
// Loading (one Checkpointer::Load() restores everything registered):
//   stint::TorchStateLoader l;
//   STINT_RETURN_IF_ERROR(l.AddModule("model", *model));
//   STINT_RETURN_IF_ERROR(l.AddOptimizer("optim", optimizer));
//   STINT_ASSIGN_OR_RETURN(stint::LoadResult r, l.Load(*ckpt));
//
// Names in the checkpoint:
//   <prefix>.<module path>                    parameters and buffers ("model.0.weight")
//   <prefix>.state.<group>.<param>.<field>    optimizer state tensors ("optim.state.0.3.exp_avg")
//   <prefix>.param_groups.json                blob: optimizer type and hyper-parameters
// Optimizer state is keyed by (param group index, index in the group), so it
// reloads into any optimizer built over the same parameters in the same order.
//
// Only this directory of stint includes LibTorch headers. No exception leaves
// these functions: c10::Error (and anything else LibTorch throws) becomes a
// Status here, at the edge.
//
// Thread-compatible. Nothing here synchronizes with other threads that use
// the same module or optimizer.
#ifndef STINT_TORCH_STINT_TORCH_H_
#define STINT_TORCH_STINT_TORCH_H_

#include <c10/core/ScalarType.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "stint/checkpoint_reader.h"
#include "stint/checkpointer.h"
#include "stint/state.h"
#include "stint/status.h"

namespace stint {

// torch dtype <-> stint dtype. kInvalidArgument for a dtype stint cannot store
// (quantized types, float8, unsigned >8 bit, ...).
Result<DType> DTypeFromTorch(c10::ScalarType type);
c10::ScalarType TorchScalarType(DType dtype);

// Collects a State that borrows from torch tensors.
//
// A CPU tensor that is contiguous (and has no lazy conj/neg bit) is borrowed
// as is; another CPU tensor (a transposed view) is copied into a contiguous
// one first. A CUDA tensor becomes a device shard: the Checkpointer copies it
// device-to-host into pinned staging on a copy stream ordered after the
// tensor's current stream (CheckpointOptions::device_copier, e.g.
// NewTorchDeviceCopier() in torch_device.h), and Save() returns without
// waiting for it. A borrowed tensor must not be written until its copy read
// it: after Save() returned (SnapshotMode::kEager, host), or after
// Checkpointer::BeforeWrite() for its WriteBarrier (lazy host snapshots and
// every device tensor). The State holds references to every tensor
// (State::owner) until the save's copies completed, so the builder itself
// may go away after Save().
//
// Sharded state: AddShard() records a tensor as a box of its global shape;
// with CheckpointOptions::world_size > 1 every rank builds its own State and
// calls Save() (see stint/checkpointer.h).
//
// The State returned by state() is valid as long as the builder is.
class TorchStateBuilder {
 public:
  TorchStateBuilder();
  TorchStateBuilder(const TorchStateBuilder&) = delete;
  TorchStateBuilder& operator=(const TorchStateBuilder&) = delete;

  // One tensor under `name`. An undefined tensor is skipped.
  // kInvalidArgument for an unsupported dtype or layout (naming the tensor),
  // kAlreadyExists for a name added before.
  // `written_at`: when training writes it next (WriteBarrier::kForward for a
  // buffer the forward pass updates).
  Status AddTensor(const std::string& name, const torch::Tensor& tensor,
                   WriteBarrier written_at = WriteBarrier::kOptimizerStep);
  // One shard of a tensor sharded over ranks (FSDP, tensor parallel): `tensor`
  // is the box at `offsets` (one per dim; its sizes are the extents) of a
  // tensor of `global_shape`. With several ranks each saves its own boxes
  // (together covering the tensor once; a replicated tensor from one rank
  // only) and the commit checks they neither overlap nor leave a gap. A rank
  // may add several boxes of one name; kAlreadyExists if it was added whole.
  Status AddShard(const std::string& name, const torch::Tensor& tensor,
                  std::vector<int64_t> global_shape, std::vector<int64_t> offsets,
                  WriteBarrier written_at = WriteBarrier::kOptimizerStep);

  // Every parameter and buffer of `module` and its submodules, as
  // "<prefix>.<name>" ("model.fc1.weight"); `prefix` may be empty. Buffers
  // are marked WriteBarrier::kForward.
  Status AddModule(const std::string& prefix, const torch::nn::Module& module);

  // Per-parameter state and the param groups' hyper-parameters of an Adam,
  // AdamW or SGD optimizer; kUnimplemented for other optimizers.
  Status AddOptimizer(const std::string& prefix, const torch::optim::Optimizer& optimizer);

  // A byte blob, copied into the checkpoint at Save().
  Status AddBlob(const std::string& name, std::string bytes);

  // Flags the tensor added as `name` TensorShard::frozen: with
  // CheckpointOptions::incremental its bytes are promised unchanged since the
  // previous save (frozen weights), so they are referenced, not copied.
  // kNotFound if no tensor of that name was added.
  Status MarkFrozen(const std::string& name);

  const State& state() const { return state_; }

 private:
  State state_;
  std::set<std::string> names_;
  std::set<std::string> whole_names_;  // added by AddTensor (or without a box)
  // Every tensor added, and the contiguous copies (and scalars such as Adam's
  // step) that state_ points into; shared with state_.owner.
  std::shared_ptr<std::vector<torch::Tensor>> held_;
};

struct TorchLoadOptions {
  // Also fail when the checkpoint holds tensors under a registered, non-empty
  // prefix that nothing registered here claims (a module with a layer removed).
  // Default: true.
  bool strict = true;
  // Fill contiguous CUDA tensors host-to-device through the Checkpointer's
  // device_copier (REQUIRES one) instead of through a CPU copy in Finish().
  // Load(Checkpointer&) sets it from the Checkpointer's options. Default: false
  bool device_destinations = false;
};

// Restores modules, optimizers and single tensors from one checkpoint.
//
// Register everything first, then call Load() (or pass Planner() to
// Checkpointer::Load yourself and call Finish() after it succeeds). The
// planner checks every registered tensor against the checkpoint before any
// byte is read: kNotFound for a tensor the checkpoint lacks and
// kInvalidArgument for a wrong shape, dtype or optimizer layout, each naming
// the tensor.
//
// Bytes are read straight into the storage of contiguous CPU parameters and
// buffers, and host-to-device into contiguous CUDA ones on a copy stream
// (TorchLoadOptions::device_destinations); other tensors are read into a CPU
// staging copy and copied in under torch::NoGradGuard by Finish(). Optimizer state is read into new tensors of
// the stored shape and dtype and installed by Finish() (moved to the
// parameter's device), replacing whatever state the optimizer had; a parameter
// without saved state ends up without state. Param group hyper-parameters
// (lr, betas, momentum, ...) and the optimizer's defaults are restored too.
//
// If the read fails, module tensors may hold a partially loaded mix; the
// optimizer is untouched.
//
// Registered modules, optimizers and tensors must outlive the loader.
class TorchStateLoader {
 public:
  explicit TorchStateLoader(TorchLoadOptions options = {}) : options_(options) {}
  TorchStateLoader(const TorchStateLoader&) = delete;
  TorchStateLoader& operator=(const TorchStateLoader&) = delete;

  // Loads into `tensor` in place (its shape and dtype must match).
  Status AddTensor(const std::string& name, torch::Tensor tensor);
  // Loads the box at `offsets` of a tensor of `global_shape` into `tensor`
  // (its sizes are the box's extents), whatever the shards it was saved as:
  // any world size, any layout.
  Status AddShard(const std::string& name, torch::Tensor tensor, std::vector<int64_t> global_shape,
                  std::vector<int64_t> offsets);
  Status AddModule(const std::string& prefix, torch::nn::Module& module);
  // Adam, AdamW or SGD; kUnimplemented for other optimizers.
  Status AddOptimizer(const std::string& prefix, torch::optim::Optimizer& optimizer);

  // Checks the checkpoint and returns the destinations to read. May be called
  // more than once (Checkpointer::Load falls back to older checkpoints); each
  // call starts over.
  DestPlanner Planner();
  // Completes a load whose destinations came from the last Planner() call.
  Status Finish();

  // Planner() + Checkpointer::Load + Finish().
  Result<LoadResult> Load(Checkpointer& checkpointer, const LoadOptions& options = {});
  // The same from an open reader.
  Status LoadFrom(const CheckpointReader& reader);

 private:
  struct TensorTarget {
    std::string name;
    torch::Tensor tensor;
    std::vector<int64_t> global_shape;
    std::vector<int64_t> offsets;  // of the box `tensor` holds
  };
  struct OptimizerTarget {
    std::string prefix;
    torch::optim::Optimizer* optimizer;
  };
  struct Pending;  // what the last Planner() call prepared

  Result<std::vector<TensorDest>> Plan(const CheckpointReader& reader);

  TorchLoadOptions options_;
  std::vector<TensorTarget> tensors_;
  std::set<std::string> names_;  // of tensors_
  std::vector<OptimizerTarget> optimizers_;
  std::set<std::string> strict_prefixes_;
  std::shared_ptr<Pending> pending_;
};

// One-call forms of TorchStateLoader for a single module or optimizer.
Result<LoadResult> LoadModule(Checkpointer& checkpointer, const std::string& prefix,
                              torch::nn::Module& module, const LoadOptions& options = {});
Result<LoadResult> LoadOptimizer(Checkpointer& checkpointer, const std::string& prefix,
                                 torch::optim::Optimizer& optimizer,
                                 const LoadOptions& options = {});

// The default CPU generator's state (what torch::manual_seed sets; dropout and
// torch::randn draw from it) as an opaque blob, and back.
Result<std::string> GetTorchCpuRngState();
Status SetTorchCpuRngState(const std::string& blob);

// Every default LibTorch generator of this process: "cpu", and "cuda:<i>"
// for each visible CUDA device (seed and Philox offset).
Result<std::map<std::string, std::string>> CaptureTorchRng();
// kInvalidArgument for a malformed state or a device this process lacks.
Status RestoreTorchRng(const std::map<std::string, std::string>& states);

}  // namespace stint

#endif  // STINT_TORCH_STINT_TORCH_H_
