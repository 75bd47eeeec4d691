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

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    Reset();
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void CudaStream::Reset() {
  if (stream_ != nullptr && cudaStreamDestroy(stream_) != cudaSuccess) cudaGetLastError();
  stream_ = nullptr;
}

Result<CudaEvent> CudaEvent::Create() {
  cudaEvent_t e = nullptr;
  STINT_RETURN_IF_ERROR(StatusFromCuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                                       "cudaEventCreateWithFlags"));
  return CudaEvent(e);
}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    Reset();
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void CudaEvent::Reset() {
  if (event_ != nullptr && cudaEventDestroy(event_) != cudaSuccess) cudaGetLastError();
  event_ = nullptr;
}

Result<CudaDeviceBuffer> CudaDeviceBuffer::Allocate(size_t bytes) {
  void* p = nullptr;
  STINT_RETURN_IF_ERROR(
      StatusFromCuda(cudaMalloc(&p, bytes), "cudaMalloc(" + std::to_string(bytes) + " bytes)"));
  return CudaDeviceBuffer(p);
}

CudaDeviceBuffer& CudaDeviceBuffer::operator=(CudaDeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    ptr_ = std::exchange(other.ptr_, nullptr);
  }
  return *this;
}

void CudaDeviceBuffer::Reset() {
  if (ptr_ != nullptr && cudaFree(ptr_) != cudaSuccess) cudaGetLastError();
  ptr_ = nullptr;
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
