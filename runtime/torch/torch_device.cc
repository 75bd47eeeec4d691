// CUDA tensors -> raw pointers and streams (see torch_device.h). The stream
// comes from c10's device guard registry, so this file needs no CUDA header
// and works with any LibTorch that has CUDA loaded.
#include "torch_device.h"

#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <set>

#include "stint_torch.h"
#include "torch_guard.h"

namespace stint {

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

Status AddCudaModule(const std::string& prefix, const torch::nn::Module& module, State* state,
                     std::vector<torch::Tensor>* keep_alive) {
  return Guard("module '" + prefix + "'", [&]() -> Status {
    auto add = [&](const std::string& name, const torch::Tensor& t) -> Status {
      if (!t.defined()) return Status::OK();
      STINT_ASSIGN_OR_RETURN(TensorShard shard,
                             CudaShard(prefix.empty() ? name : prefix + "." + name, t, keep_alive));
      state->tensors.push_back(std::move(shard));
      return Status::OK();
    };
    for (const auto& item : module.named_parameters(/*recurse=*/true)) {
      STINT_RETURN_IF_ERROR(add(item.key(), item.value()));
    }
    for (const auto& item : module.named_buffers(/*recurse=*/true)) {
      STINT_RETURN_IF_ERROR(add(item.key(), item.value()));
    }
    return Status::OK();
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

Status OrderBeforeOptimizerStep(DeviceCopier& copier, const State& state) {
  std::set<int> devices;
  for (const auto& t : state.tensors) {
    if (t.device != kHostDevice) devices.insert(t.device);
  }
  for (int device : devices) {
    STINT_ASSIGN_OR_RETURN(void* stream, CurrentCudaStream(device));
    STINT_RETURN_IF_ERROR(copier.OrderBeforeWrite(device, stream).WithContext("lazy barrier"));
  }
  return Status::OK();
}

}  // namespace stint
