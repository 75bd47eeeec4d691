// CUDA tensors -> raw pointers and streams (see torch_device.h). The stream
// comes from c10's device guard registry, so this file needs no CUDA header
// and works with any LibTorch that has CUDA loaded.
#include "torch_device.h"

#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "stint_torch.h"
#include "torch_guard.h"
#if STINT_TORCH_HAVE_CUDA
#include "cuda_copier.h"
#endif

namespace stint {

Result<std::unique_ptr<DeviceCopier>> NewTorchDeviceCopier() {
#if STINT_TORCH_HAVE_CUDA
  if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA)) {
    return Status::Unavailable("no CUDA device: LibTorch has no CUDA support loaded");
  }
  return NewCudaDeviceCopier();
#else
  return Status::Unavailable("no CUDA device copier: stint was built without the CUDA toolkit");
#endif
}

Result<void*> CurrentCudaStream(int device) {
  return Guard("current CUDA stream", [&]() -> Result<void*> {
    if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA)) {
      return Status::Unavailable("no CUDA device: LibTorch has no CUDA support loaded");
    }
    const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    c10::Stream stream =
        impl->getStream(c10::Device(c10::DeviceType::CUDA, c10::DeviceIndex(device)));
    return stream.native_handle();
  });
}

Result<TensorShard> CudaShard(const std::string& name, const torch::Tensor& tensor,
                              std::vector<torch::Tensor>* keep_alive) {
  return Guard("tensor '" + name + "'", [&]() -> Result<TensorShard> {
    STINT_ASSIGN_OR_RETURN(DType dtype, DTypeFromTorch(tensor.scalar_type()));
    torch::Tensor data = tensor;
    if (!tensor.is_contiguous() || tensor.is_conj() || tensor.is_neg()) {
      torch::NoGradGuard no_grad;
      data = tensor.detach().resolve_conj().resolve_neg().contiguous();
      keep_alive->push_back(data);
    }
    TensorShard shard;
    shard.name = name;
    shard.dtype = dtype;
    shard.global_shape = data.sizes().vec();
    shard.data = data.numel() > 0 ? data.data_ptr() : nullptr;
    if (data.is_cuda()) {
      shard.device = data.device().index();
      STINT_ASSIGN_OR_RETURN(shard.stream, CurrentCudaStream(shard.device));
    } else if (!data.device().is_cpu()) {
      return Status::InvalidArgument("tensor '" + name + "' is on " + data.device().str() +
                                     ": only CPU and CUDA tensors are supported");
    }
    return shard;
  });
}

Result<TensorDest> CudaDest(const std::string& name, const torch::Tensor& tensor) {
  return Guard("tensor '" + name + "'", [&]() -> Result<TensorDest> {
    if (!tensor.is_contiguous()) {
      return Status::InvalidArgument("tensor '" + name +
                                     "': a load destination must be contiguous");
    }
    STINT_ASSIGN_OR_RETURN(DType dtype, DTypeFromTorch(tensor.scalar_type()));
    TensorDest dest;
    dest.name = name;
    dest.dtype = dtype;
    dest.global_shape = tensor.sizes().vec();
    dest.data = tensor.numel() > 0 ? tensor.data_ptr() : nullptr;
    if (tensor.is_cuda()) {
      dest.device = tensor.device().index();
      STINT_ASSIGN_OR_RETURN(dest.stream, CurrentCudaStream(dest.device));
    }
    return dest;
  });
}

}  // namespace stint
