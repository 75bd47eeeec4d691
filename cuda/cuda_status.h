// StatusFromCuda: the one place a cudaError_t becomes a Status (STYLE §2.3),
// for every file in cuda/. Clears the sticky per-thread error, as NCCL's
// CUDACHECK does, so it does not resurface in an unrelated later call.
#ifndef STINT_CUDA_CUDA_STATUS_H_
#define STINT_CUDA_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include <string>

#include "stint/status.h"

namespace stint {

// OK for cudaSuccess. Otherwise the message is "<context>: <name>: <string>"
// (cudaErrorNoDevice: no CUDA-capable device is detected) and the code:
//   kUnavailable, the message prefixed "no CUDA device: ": no usable device
//     or driver (no device, a missing, stub, mismatched or too old driver,
//     initialization failed, devices busy or unavailable, system not ready);
//   kResourceExhausted: out of device (or pinned host) memory;
//   kInternal: anything else (a bad argument or handle here, a failed kernel).
Status StatusFromCuda(cudaError_t err, const std::string& context);

}  // namespace stint

// Returns the CUDA call's error as a Status naming the call and its place.
#define STINT_CUDA_RETURN_IF_ERROR(call)                                                         \
  do {                                                                                           \
    cudaError_t stint_cuda_err_ = (call);                                                        \
    if (stint_cuda_err_ != cudaSuccess) {                                                        \
      return ::stint::StatusFromCuda(                                                            \
          stint_cuda_err_, std::string(#call) + " at " __FILE__ ":" + std::to_string(__LINE__)); \
    }                                                                                            \
  } while (0)

#endif  // STINT_CUDA_CUDA_STATUS_H_
