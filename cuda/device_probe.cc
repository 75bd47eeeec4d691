#include "device_probe.h"

#include <cuda_runtime_api.h>

namespace stint {
namespace {

// cudaGetLastError clears the sticky per-thread error, as NCCL's CUDACHECK does.
Status StatusFromCuda(cudaError_t err, const std::string& context) {
  cudaGetLastError();
  return Status::Unavailable(context + ": " + cudaGetErrorString(err));
}

}  // namespace

Result<int> CudaDeviceCount() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) return StatusFromCuda(err, "no CUDA device: cudaGetDeviceCount");
  if (n == 0) return Status::Unavailable("no CUDA device: cudaGetDeviceCount found none");
  return n;
}

Result<std::string> CudaDeviceSummary(int index) {
  cudaDeviceProp prop;
  cudaError_t err = cudaGetDeviceProperties(&prop, index);
  if (err != cudaSuccess) return StatusFromCuda(err, "cudaGetDeviceProperties");
  int runtime = 0;
  err = cudaRuntimeGetVersion(&runtime);
  if (err != cudaSuccess) return StatusFromCuda(err, "cudaRuntimeGetVersion");
  return std::string(prop.name) + ", " + std::to_string(prop.totalGlobalMem >> 30) + " GiB, compute " +
         std::to_string(prop.major) + "." + std::to_string(prop.minor) + ", runtime " +
         std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10);
}

}  // namespace stint
