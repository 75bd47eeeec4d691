// LibTorch CUDA tensors for the device checkpoint path: borrows a CUDA
// tensor's memory and its device's current stream (what
// torch.cuda.current_stream() returns) and hands raw pointers and the stream
// (a cudaStream_t as void*) to stint::DeviceCopier, so nothing here includes
// a CUDA header and nothing in cuda/ includes LibTorch.
//
// TorchStateBuilder and TorchStateLoader (stint_torch.h) use these for every
// CUDA tensor; ResumableTraining and the Python module make the copier:
//
//   auto copier = stint::NewTorchDeviceCopier();        // kUnavailable without a device
//   if (copier.ok()) options.device_copier = copier->get();   // outlives the Checkpointer
//
// Thread-compatible. No exception leaves these functions.
#ifndef STINT_TORCH_TORCH_DEVICE_H_
#define STINT_TORCH_TORCH_DEVICE_H_

#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "stint/device_copier.h"
#include "stint/state.h"
#include "stint/status.h"

namespace stint {

// The CUDA copier (cuda/cuda_copier.h: pinned exact-size staging, copy
// streams ordered by events) for this process's current device. kUnavailable
// when stint was built without CUDA, LibTorch has no CUDA support loaded, or
// no device is visible.
Result<std::unique_ptr<DeviceCopier>> NewTorchDeviceCopier();

// The current CUDA stream of `device` as a cudaStream_t (void*).
// kUnavailable when LibTorch has no CUDA support loaded.
Result<void*> CurrentCudaStream(int device);

// A device shard borrowing `tensor` (a CUDA tensor), ordered after its
// device's current stream. A non-contiguous tensor is first made contiguous
// on the device; that copy is appended to `keep_alive`, which must outlive
// the save's copies (the caching allocator must not reuse it while the copy
// stream reads it). A CPU tensor gives a host shard as usual.
Result<TensorShard> CudaShard(const std::string& name, const torch::Tensor& tensor,
                              std::vector<torch::Tensor>* keep_alive);

// A destination filling a contiguous CUDA tensor in place, H2D ordered
// before later work on its device's current stream.
Result<TensorDest> CudaDest(const std::string& name, const torch::Tensor& tensor);

}  // namespace stint

#endif  // STINT_TORCH_TORCH_DEVICE_H_
