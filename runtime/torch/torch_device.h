// LibTorch CUDA tensors for the device checkpoint path: borrows a CUDA
// tensor's memory and its device's current stream (what
// torch.cuda.current_stream() returns) and hands raw pointers and the stream
// (a cudaStream_t as void*) to stint::DeviceCopier, so nothing here includes
// a CUDA header and nothing in cuda/ includes LibTorch.
//
//   stint::State state;
//   std::vector<torch::Tensor> keep;                       // must outlive the staged future
//   STINT_RETURN_IF_ERROR(stint::AddCudaModule("model", *model, &state, &keep));
//   auto h = ckpt->Save(step, state);                      // enqueues D2H, returns
//   ... forward, backward ...
//   STINT_RETURN_IF_ERROR(stint::OrderBeforeOptimizerStep(*copier, state));
//   optimizer.step();
//
// Thread-compatible. No exception leaves these functions.
#ifndef STINT_TORCH_TORCH_DEVICE_H_
#define STINT_TORCH_TORCH_DEVICE_H_

#include <torch/nn/module.h>

#include <string>
#include <vector>

#include "stint/device_copier.h"
#include "stint/state.h"
#include "stint/status.h"

namespace stint {

// The current CUDA stream of `device` as a cudaStream_t (void*).
// kUnavailable when LibTorch has no CUDA support loaded.
Result<void*> CurrentCudaStream(int device);

// A device shard borrowing `tensor` (a CUDA tensor), ordered after its
// device's current stream. A non-contiguous tensor is first made contiguous
// on the device; that copy is appended to `keep_alive`, which must outlive
// the save's staged future (the caching allocator must not reuse it while
// the copy stream reads it). A CPU tensor gives a host shard as usual.
Result<TensorShard> CudaShard(const std::string& name, const torch::Tensor& tensor,
                              std::vector<torch::Tensor>* keep_alive);

// Every parameter and buffer of `module` as "<prefix>.<name>" (the names
// TorchStateBuilder uses), CUDA tensors as device shards.
Status AddCudaModule(const std::string& prefix, const torch::nn::Module& module, State* state,
                     std::vector<torch::Tensor>* keep_alive);

// A destination filling a contiguous CUDA tensor in place, H2D ordered
// before later work on its device's current stream.
Result<TensorDest> CudaDest(const std::string& name, const torch::Tensor& tensor);

// The lazy barrier for every device `state` holds shards of: each device's
// current stream waits (on the device) for the checkpoint copies. Call right
// before the optimizer step.
Status OrderBeforeOptimizerStep(DeviceCopier& copier, const State& state);

}  // namespace stint

#endif  // STINT_TORCH_TORCH_DEVICE_H_
