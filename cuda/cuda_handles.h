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

// Owns one handle that `Release` frees: move-only, empty when default
// constructed or moved from. The three handles below differ only in how
// they are made.
template <typename Handle, cudaError_t (*Release)(Handle)>
class CudaOwned {
 public:
  CudaOwned() = default;
  explicit CudaOwned(Handle handle) : handle_(handle) {}  // adopts it
  ~CudaOwned() { Reset(); }
  CudaOwned(CudaOwned&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  CudaOwned& operator=(CudaOwned&& other) noexcept {
    if (this != &other) {
      Reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  CudaOwned(const CudaOwned&) = delete;
  CudaOwned& operator=(const CudaOwned&) = delete;

  Handle get() const { return handle_; }
  // Releases the handle (if any); empty afterwards.
  void Reset() {
    if (handle_ != nullptr && Release(handle_) != cudaSuccess) cudaGetLastError();
    handle_ = nullptr;
  }

 private:
  Handle handle_ = nullptr;
};

class CudaStream : public CudaOwned<cudaStream_t, cudaStreamDestroy> {
 public:
  using CudaOwned::CudaOwned;
  // A new non-blocking stream (no implicit ordering with the legacy default
  // stream) on the current device.
  static Result<CudaStream> Create();
};

class CudaEvent : public CudaOwned<cudaEvent_t, cudaEventDestroy> {
 public:
  using CudaOwned::CudaOwned;
  // A new event without timing (the cheapest to record and query) on the
  // current device.
  static Result<CudaEvent> Create();
};

// Device memory from cudaMalloc, released with cudaFree.
class CudaDeviceBuffer : public CudaOwned<void*, cudaFree> {
 public:
  using CudaOwned::CudaOwned;
  // `bytes` of uninitialized memory on the current device.
  static Result<CudaDeviceBuffer> Allocate(size_t bytes);
};

// Whether `device`'s primary context exists (cuDevicePrimaryCtxGetState,
// reached through the runtime, so no libcuda link); true when that cannot
// be told. Creates no context.
bool CudaPrimaryContextActive(int device);

// Makes a device the calling thread's current device until it goes out of
// scope, then restores the previous one, so a caller's framework (PyTorch
// keeps its own idea of the current device) never sees it changed. A
// previous device without a primary context (a thread that never chose
// one) is not restored: cudaSetDevice would create a context on it.
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
