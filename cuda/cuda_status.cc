#include "cuda_status.h"

namespace stint {

Status StatusFromCuda(cudaError_t err, const std::string& context) {
  if (err == cudaSuccess) return Status::OK();
  cudaGetLastError();
  std::string msg = context + ": " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorStubLibrary:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemNotReady:
      return Status::Unavailable("no CUDA device: " + msg);
    case cudaErrorMemoryAllocation:
      return Status::ResourceExhausted(msg);
    default:
      return Status::Internal(msg);
  }
}

}  // namespace stint
