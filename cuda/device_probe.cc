#include "device_probe.h"

#include <cuda_runtime_api.h>

#include "cuda_status.h"

namespace stint {

Result<int> CudaDeviceCount() {
  int n = 0;
  Status s = StatusFromCuda(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  if (!s.ok()) {
    // Whatever keeps the runtime from counting devices (StatusFromCuda's
    // no-device family, or an error it does not know as one, such as
    // cudaErrorUnknown after a driver fault) means there is no usable
    // device: the caller takes the CPU path.
    if (s.code() == Code::kUnavailable) return s;
    return Status::Unavailable("no CUDA device: " + s.message());
  }
  if (n == 0) return Status::Unavailable("no CUDA device: cudaGetDeviceCount found none");
  return n;
}

Result<std::string> CudaDeviceSummary(int index) {
  cudaDeviceProp prop;
  STINT_RETURN_IF_ERROR(
      StatusFromCuda(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties"));
  int runtime = 0;
  STINT_RETURN_IF_ERROR(StatusFromCuda(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion"));
  return std::string(prop.name) + ", " + std::to_string(prop.totalGlobalMem >> 30) +
         " GiB, compute " + std::to_string(prop.major) + "." + std::to_string(prop.minor) +
         ", runtime " + std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10);
}

}  // namespace stint
