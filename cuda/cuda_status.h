// StatusFromCuda: the one place a cudaError_t becomes a Status (STYLE §2.3).
// Clears the sticky per-thread error, as NCCL's CUDACHECK does.
#ifndef STINT_CUDA_CUDA_STATUS_H_
#define STINT_CUDA_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include <string>

#include "stint/status.h"

namespace stint {

// No device or driver -> kUnavailable; out of memory -> kResourceExhausted;
// anything else -> kInternal. The message is "<context>: <name>: <string>".
inline Status StatusFromCuda(cudaError_t err, const std::string& context) {
  if (err == cudaSuccess) return Status::OK();
  cudaGetLastError();
  std::string msg = context + ": " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
      return Status::Unavailable("no CUDA device: " + msg);
    case cudaErrorMemoryAllocation:
      return Status::ResourceExhausted(msg);
    default:
      return Status::Internal(msg);
  }
}

}  // namespace stint

// Returns the CUDA call's error as a Status naming the call and its place.
#define STINT_CUDA_RETURN_IF_ERROR(call)                                                     \
  do {                                                                                       \
    cudaError_t stint_cuda_err_ = (call);                                                    \
    if (stint_cuda_err_ != cudaSuccess) {                                                    \
      return ::stint::StatusFromCuda(stint_cuda_err_, std::string(#call) + " at " __FILE__ ":" + \
                                                          std::to_string(__LINE__));         \
    }                                                                                        \
  } while (0)

#endif  // STINT_CUDA_CUDA_STATUS_H_
