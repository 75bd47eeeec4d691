// Where the data of an NCCL collective may live, and how host memory goes
// through the device: NCCL's kernels read and write device memory only, so
// the NCCL communicator copies host memory (pageable or pinned) through a
// bounded pair of staging buffers (pinned host + device), chunk by chunk:
// host -> pinned (memcpy) -> device (cudaMemcpyAsync on the collective's
// stream), the collective, device -> pinned (same stream), completion
// polled against the call's deadline, pinned -> host. The caller's host
// memory is never handed to an asynchronous copy, so a collective that
// hangs or is aborted never leaves a copy into it in flight.
//
// Pure functions (the CUDA query is the caller's); thread-safe. Internal
// to cuda/ (and its tests).
#ifndef STINT_CUDA_NCCL_STAGING_H_
#define STINT_CUDA_NCCL_STAGING_H_

#include <cstddef>

namespace stint {

// What cudaPointerGetAttributes says about a pointer, in stint's words.
enum class NcclMemoryKind {
  kDevice,        // cudaMemoryTypeDevice (cudaMalloc, the caching allocator)
  kManaged,       // cudaMemoryTypeManaged
  kHost,          // cudaMemoryTypeHost (pinned: cudaMallocHost, cudaHostRegister)
  kUnregistered,  // cudaMemoryTypeUnregistered, or cudaErrorInvalidValue from
                  // an old runtime: ordinary pageable host memory
};

enum class NcclRoute {
  kDirect,   // the collective runs on the caller's memory
  kStaged,   // through the staging buffers
  kRefused,  // device memory of another device: kInvalidArgument
};

// `pointer_device`: the device cudaPointerGetAttributes names (device
// memory only); `comm_device`: the communicator's.
NcclRoute RouteNcclBuffer(NcclMemoryKind kind, int pointer_device, int comm_device);

// Bytes per staged chunk: the largest multiple of `element_bytes` not above
// `capacity_bytes`, never 0 for element_bytes in 1..capacity_bytes.
// REQUIRES: 1 <= element_bytes <= capacity_bytes.
size_t NcclStagingChunkBytes(size_t element_bytes, size_t capacity_bytes);

// The staging buffers' size for a call of `bytes`: min(bytes, capacity)
// rounded up to 256 (cudaMalloc's alignment), so small control messages
// (the boundary agreement, a blob's size) allocate little.
size_t NcclStagingAllocation(size_t bytes, size_t capacity_bytes);

// Default capacity of each staging buffer: 4 MiB.
inline constexpr size_t kNcclStagingCapacity = size_t{4} << 20;

}  // namespace stint

#endif  // STINT_CUDA_NCCL_STAGING_H_
