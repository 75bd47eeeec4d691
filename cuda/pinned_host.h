// Pinned host memory that stint owns: exact-size, page-aligned anonymous
// mappings (base/mapped_buffer.h), placed on the GPU's NUMA node before their
// first touch and then page-locked with cudaHostRegister. Never PyTorch's
// CachingHostAllocator, which rounds every request up to a power of two (a
// 20 GiB state would pin 32 GiB).
//
// The checkpoint staging pool (runtime/checkpoint/staging_pool.h) is the
// exact-size pool; the CUDA copier pins each of its buffers once, through
// HostRegistration, when the pool maps it. PinnedHostBuffer is the same
// thing standalone (benchmarks, tests, load bounce buffers).
//
// Thread-compatible.
#ifndef STINT_CUDA_PINNED_HOST_H_
#define STINT_CUDA_PINNED_HOST_H_

#include <cstddef>
#include <memory>
#include <utility>

#include "base/mapped_buffer.h"
#include "stint/status.h"

namespace stint {

// NUMA node of `device` from /sys/bus/pci/devices/<bus id>/numa_node; -1 when
// unknown (single-node machines report -1 too).
int NumaNodeOfDevice(int device);

// Asks the kernel to place the untouched pages of [data, data + size) on
// `node` (mbind MPOL_PREFERRED: other nodes when it is full). Pages already
// touched stay where they are. OK without doing anything for node < 0.
Status PreferNumaNode(void* data, size_t size, int node);

// RAII cudaHostRegister (portable: usable from every device's context).
class HostRegistration {
 public:
  static Result<std::unique_ptr<HostRegistration>> Register(void* data, size_t size);
  ~HostRegistration();  // cudaHostUnregister; an error there is ignored
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;
  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  HostRegistration(void* data, size_t size) : data_(data), size_(size) {}
  void* data_;
  size_t size_;
};

// An owned pinned buffer of exactly `size` bytes (rounded up to the page).
class PinnedHostBuffer {
 public:
  // `numa_node` < 0: no placement. kUnavailable without a device.
  static Result<std::unique_ptr<PinnedHostBuffer>> Allocate(size_t size, int numa_node = -1);
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  char* data() const { return memory_.data(); }
  size_t size() const { return memory_.size(); }

 private:
  explicit PinnedHostBuffer(MappedBuffer memory) : memory_(std::move(memory)) {}
  MappedBuffer memory_;
  std::unique_ptr<HostRegistration> registration_;  // after memory_: unregistered before the unmap
};

}  // namespace stint

#endif  // STINT_CUDA_PINNED_HOST_H_
