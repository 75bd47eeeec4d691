// RNG capture and restore for LibTorch's default generators: the CPU one
// (MT19937 state, 5056 bytes, including the cached normal sample) and one
// Philox (seed, offset) per CUDA device.
#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <torch/cuda.h>

#include <cstring>
#include <mutex>

#include "stint_torch.h"
#include "torch_guard.h"

namespace stint {
namespace {

std::string StateBytes(at::Generator& gen) {
  torch::Tensor state;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());  // as torch.get_rng_state() does
    state = gen.get_state();
  }
  state = state.contiguous();
  // The same bytes torch.get_rng_state() / torch.cuda.get_rng_state() return in Python.
  return std::string(static_cast<const char*>(state.data_ptr()),
                     state.numel() * state.element_size());
}

void SetStateBytes(at::Generator& gen, const std::string& blob) {
  torch::Tensor state =
      torch::empty({static_cast<int64_t>(blob.size())}, at::TensorOptions().dtype(c10::kByte));
  if (!blob.empty()) std::memcpy(state.data_ptr(), blob.data(), blob.size());
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);  // throws on a state of the wrong size
}

at::Generator CudaGenerator(int index) {
  return at::globalContext().defaultGenerator(
      c10::Device(c10::DeviceType::CUDA, c10::DeviceIndex(index)));
}

// LibTorch refuses only malformed states: that is the caller's argument.
Status AsArgumentError(Status s) {
  return s.code() == Code::kInternal ? Status::InvalidArgument(s.message()) : s;
}

}  // namespace

Result<std::string> GetTorchCpuRngState() {
  return Guard("reading the CPU generator state", [&]() -> Result<std::string> {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    return StateBytes(gen);
  });
}

Status SetTorchCpuRngState(const std::string& blob) {
  return AsArgumentError(Guard("restoring the CPU generator state", [&]() -> Status {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    SetStateBytes(gen, blob);
    return Status::OK();
  }));
}

Result<std::map<std::string, std::string>> CaptureTorchRng() {
  std::map<std::string, std::string> out;
  STINT_ASSIGN_OR_RETURN(out["cpu"], GetTorchCpuRngState());
  return Guard(
      "reading the CUDA generator states", [&]() -> Result<std::map<std::string, std::string>> {
        const int devices = torch::cuda::is_available() ? int(torch::cuda::device_count()) : 0;
        for (int i = 0; i < devices; ++i) {
          at::Generator gen = CudaGenerator(i);
          out["cuda:" + std::to_string(i)] = StateBytes(gen);
        }
        return out;
      });
}

Status RestoreTorchRng(const std::map<std::string, std::string>& states) {
  auto cpu = states.find("cpu");
  if (cpu == states.end()) return Status::InvalidArgument("RNG state has no 'cpu' generator");
  STINT_RETURN_IF_ERROR(SetTorchCpuRngState(cpu->second));
  return AsArgumentError(Guard("restoring the CUDA generator states", [&]() -> Status {
    const int devices = torch::cuda::is_available() ? int(torch::cuda::device_count()) : 0;
    for (const auto& [name, blob] : states) {
      if (name == "cpu") continue;
      if (name.rfind("cuda:", 0) != 0)
        return Status::InvalidArgument("unknown RNG generator '" + name + "'");
      int index = std::atoi(name.c_str() + 5);
      if (index < 0 || index >= devices) {
        return Status::InvalidArgument("RNG state for " + name + " but this process sees " +
                                       std::to_string(devices) + " CUDA devices");
      }
      at::Generator gen = CudaGenerator(index);
      SetStateBytes(gen, blob);
    }
    return Status::OK();
  }));
}

}  // namespace stint
