// StagingPool: bounded host memory that snapshots are copied into.
//
// Each buffer has exactly the size asked for (rounded up to 4 KiB for
// O_DIRECT), never a power-of-two bucket: a 1.1 GiB state takes 1.1 GiB.
// Freed buffers are kept for reuse by the next save of the same size and
// released to the OS only when a different size needs the room. When the
// capacity is used up, Acquire either waits for a persist to finish or
// reports that the pool is busy, as the caller's policy says. An auto-sized
// pool grows with the largest snapshot, up to its cap.
//
// Thread-safe. Buffers may be returned from any thread; the pool must
// outlive its buffers.
#ifndef STINT_RUNTIME_CHECKPOINT_STAGING_POOL_H_
#define STINT_RUNTIME_CHECKPOINT_STAGING_POOL_H_

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "base/mapped_buffer.h"
#include "stint/status.h"

namespace stint {

class StagingPool;

// Half the physical memory: the default cap of an auto-sized pool
// (SIZE_MAX when the system does not say).
size_t DefaultStagingCap();

// An aligned buffer lent by a StagingPool; returns itself on destruction.
class StagingBuffer {
 public:
  ~StagingBuffer();
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;

  char* data() const { return memory_.data(); }
  size_t size() const { return memory_.size(); }

 private:
  friend class StagingPool;
  StagingBuffer(StagingPool* pool, MappedBuffer memory) : pool_(pool), memory_(std::move(memory)) {}
  StagingPool* pool_;
  MappedBuffer memory_;
};

class StagingPool {
 public:
  // capacity_bytes == 0 means auto-sized: `auto_buffers` times the largest
  // snapshot asked for so far (default two, so one checkpoint can be
  // persisting while the next is staged), growing when a larger one comes
  // (the state grew, e.g. the optimizer's state appeared after the first
  // step), never beyond `max_bytes`. A fixed capacity ignores `max_bytes`.
  // `before_unmap` (may be empty) runs, under the pool's lock, before a
  // buffer's memory goes back to the OS: the I/O engine forgets its
  // registration there, so a later mapping at the same address is never
  // served from stale pinned pages.
  // `after_map` (may be empty) runs, under the pool's lock, once for each
  // newly mapped buffer before it is first touched: the device copier pins it
  // there (cudaHostRegister, NUMA placement). Its error fails that Acquire
  // and the mapping is released again.
  explicit StagingPool(size_t capacity_bytes, size_t max_bytes = SIZE_MAX,
                       std::function<void(char*)> before_unmap = nullptr,
                       std::function<Status(char*, size_t)> after_map = nullptr,
                       unsigned auto_buffers = 2);
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // Waits up to `wait` for room (zero: do not wait). kResourceExhausted if
  // the size exceeds the capacity (auto-sized: the cap), naming the
  // CheckpointOptions field that sets it; kUnavailable if the pool stayed
  // busy.
  Result<std::unique_ptr<StagingBuffer>> Acquire(size_t size, std::chrono::milliseconds wait);

  // Takes a buffer that something may still write into (a device copy that
  // timed out) out of the pool for good: its memory stays mapped (and
  // registered) for the rest of the process instead of being reused or
  // unmapped under that write; its room in the pool is freed.
  void Abandon(std::unique_ptr<StagingBuffer> buffer);

  size_t capacity() const;  // auto-sized: 0 before the first Acquire
  size_t bytes_in_use() const;

 private:
  friend class StagingBuffer;
  void Release(MappedBuffer memory);
  // REQUIRES: mu_ held. Frees cached buffers until `need` more bytes fit.
  void EvictFor(size_t need);
  // REQUIRES: mu_ held. Runs before_unmap_, then lets `memory` go.
  void Unmap(MappedBuffer memory);

  const std::function<void(char*)> before_unmap_;
  const std::function<Status(char*, size_t)> after_map_;
  const unsigned auto_buffers_;
  const bool auto_sized_;
  const size_t max_bytes_;  // auto-sized only
  mutable std::mutex mu_;
  std::condition_variable released_;
  // Guarded by mu_.
  size_t capacity_;
  size_t allocated_ = 0;  // in use + cached
  size_t in_use_ = 0;
  std::vector<MappedBuffer> cached_;
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_STAGING_POOL_H_
