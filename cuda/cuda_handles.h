// RAII owners of the CUDA runtime's handles, for every file in cuda/:
// CudaStream, CudaEvent and CudaDeviceBuffer (move-only, empty when default
// constructed or moved from) and ScopedCudaDevice.
//
// Releasing never fails the caller: an error there is dropped (and the
// sticky per-thread error cleared). Destroying a stream or an event with
// work pending is legal: the driver frees it once the work is done.
//
// Thread-compatible; the handles themselves may be used from any thread.
#ifndef STINT_CUDA_CUDA_HANDLES_H_
#define STINT_CUDA_CUDA_HANDLES_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "stint/status.h"

namespace stint {

class CudaStream {
 public:
  // A new non-blocking stream (no implicit ordering with the legacy default
  // stream) on the current device.
  static Result<CudaStream> Create();

  CudaStream() = default;
  explicit CudaStream(cudaStream_t stream) : stream_(stream) {}  // adopts it
  ~CudaStream() { Reset(); }
  CudaStream(CudaStream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  cudaStream_t get() const { return stream_; }
  // Destroys the stream (if any); the handle is empty afterwards.
  void Reset();

 private:
  cudaStream_t stream_ = nullptr;
};

class CudaEvent {
 public:
  // A new event without timing (the cheapest to record and query) on the
  // current device.
  static Result<CudaEvent> Create();

  CudaEvent() = default;
  explicit CudaEvent(cudaEvent_t event) : event_(event) {}  // adopts it
  ~CudaEvent() { Reset(); }
  CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  cudaEvent_t get() const { return event_; }
  // Destroys the event (if any); the handle is empty afterwards.
  void Reset();

 private:
  cudaEvent_t event_ = nullptr;
};

// Device memory from cudaMalloc, released with cudaFree.
class CudaDeviceBuffer {
 public:
  // `bytes` of uninitialized memory on the current device.
  static Result<CudaDeviceBuffer> Allocate(size_t bytes);

  CudaDeviceBuffer() = default;
  explicit CudaDeviceBuffer(void* ptr) : ptr_(ptr) {}  // adopts it
  ~CudaDeviceBuffer() { Reset(); }
  CudaDeviceBuffer(CudaDeviceBuffer&& other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)) {}
  CudaDeviceBuffer& operator=(CudaDeviceBuffer&& other) noexcept;
  CudaDeviceBuffer(const CudaDeviceBuffer&) = delete;
  CudaDeviceBuffer& operator=(const CudaDeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  // Frees the memory (if any); the handle is empty afterwards.
  void Reset();

 private:
  void* ptr_ = nullptr;
};

// Makes a device the calling thread's current device until it goes out of
// scope, then restores the previous one, so a caller's framework (PyTorch
// keeps its own idea of the current device) never sees it changed.
//
//   ScopedCudaDevice scope;
//   STINT_RETURN_IF_ERROR(scope.Enter(device));
class ScopedCudaDevice {
 public:
  ScopedCudaDevice() = default;
  ~ScopedCudaDevice();
  ScopedCudaDevice(const ScopedCudaDevice&) = delete;
  ScopedCudaDevice& operator=(const ScopedCudaDevice&) = delete;

  // At most once per scope. On failure the current device is unchanged and
  // nothing is restored.
  Status Enter(int device);

 private:
  int previous_ = 0;
  bool restore_ = false;  // Enter changed the current device
};

}  // namespace stint

#endif  // STINT_CUDA_CUDA_HANDLES_H_
