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

namespace {

// cuDevicePrimaryCtxGetState through the runtime's driver entry point, so
// stint_cuda links no libcuda (it must load on machines without a driver).
using PrimaryCtxGetState = int (*)(int device, unsigned int* flags, int* active);

PrimaryCtxGetState LookUpPrimaryCtxGetState() {
#if CUDART_VERSION >= 12000
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  const cudaError_t err = cudaGetDriverEntryPointByVersion(
      "cuDevicePrimaryCtxGetState", &fn, 12000, cudaEnableDefault, &found);
#else
  const cudaError_t err =
      cudaGetDriverEntryPoint("cuDevicePrimaryCtxGetState", &fn, cudaEnableDefault, &found);
#endif
  if (err != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return found == cudaDriverEntryPointSuccess ? reinterpret_cast<PrimaryCtxGetState>(fn) : nullptr;
#else
  return nullptr;  // before CUDA 12 cudaSetDevice creates no context: nothing to avoid
#endif
}

}  // namespace

bool CudaPrimaryContextActive(int device) {
  static const PrimaryCtxGetState get_state = LookUpPrimaryCtxGetState();  // immutable once set
  if (get_state == nullptr) return true;
  unsigned int flags = 0;
  int active = 0;
  return get_state(device, &flags, &active) != 0 || active != 0;
}

// Since CUDA 12 cudaSetDevice creates the device's primary context: putting
// back a previous device that never had one (a thread that never chose a
// device: device 0) would create a context there. It is then not put back,
// as PyTorch's device guards do (c10::cuda::MaybeSetDevice).
ScopedCudaDevice::~ScopedCudaDevice() {
  if (!restore_ || !CudaPrimaryContextActive(previous_)) return;
  if (cudaSetDevice(previous_) != cudaSuccess) cudaGetLastError();
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
