#include "cuda_handles.h"

#include <string>

#include "cuda_status.h"

namespace stint {

Result<CudaStream> CudaStream::Create() {
  cudaStream_t s = nullptr;
  STINT_RETURN_IF_ERROR(StatusFromCuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                                       "cudaStreamCreateWithFlags"));
  return CudaStream(s);
}

Result<CudaEvent> CudaEvent::Create() {
  cudaEvent_t e = nullptr;
  STINT_RETURN_IF_ERROR(StatusFromCuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                                       "cudaEventCreateWithFlags"));
  return CudaEvent(e);
}

Result<CudaDeviceBuffer> CudaDeviceBuffer::Allocate(size_t bytes) {
  void* p = nullptr;
  STINT_RETURN_IF_ERROR(
      StatusFromCuda(cudaMalloc(&p, bytes), "cudaMalloc(" + std::to_string(bytes) + " bytes)"));
  return CudaDeviceBuffer(p);
}

ScopedCudaDevice::~ScopedCudaDevice() {
  if (restore_ && cudaSetDevice(previous_) != cudaSuccess) cudaGetLastError();
}

Status ScopedCudaDevice::Enter(int device) {
  STINT_RETURN_IF_ERROR(StatusFromCuda(cudaGetDevice(&previous_), "cudaGetDevice"));
  if (previous_ != device) {
    STINT_RETURN_IF_ERROR(
        StatusFromCuda(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")"));
    restore_ = true;
  }
  return Status::OK();
}

}  // namespace stint
