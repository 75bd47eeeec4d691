#include "checkpoint/staging_pool.h"

#include <unistd.h>

#include <string>

#include "format/chunk.h"

namespace stint {

size_t DefaultStagingCap() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return SIZE_MAX;
  return size_t(pages) / 2 * size_t(page_size);
}

StagingBuffer::~StagingBuffer() { pool_->Release(std::move(memory_)); }

StagingPool::StagingPool(size_t capacity_bytes, size_t max_bytes,
                         std::function<void(char*)> before_unmap,
                         std::function<Status(char*, size_t)> after_map, unsigned auto_buffers)
    : before_unmap_(std::move(before_unmap)),
      after_map_(std::move(after_map)),
      auto_buffers_(auto_buffers == 0 ? 1 : auto_buffers),
      auto_sized_(capacity_bytes == 0),
      max_bytes_(max_bytes),
      capacity_(capacity_bytes) {}

void StagingPool::Unmap(MappedBuffer memory) {
  if (before_unmap_) before_unmap_(memory.data());
}

StagingPool::~StagingPool() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& memory : cached_) Unmap(std::move(memory));
}

size_t StagingPool::capacity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return capacity_;
}

size_t StagingPool::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

void StagingPool::EvictFor(size_t need) {
  while (!cached_.empty() && allocated_ + need > capacity_) {
    allocated_ -= cached_.back().size();
    Unmap(std::move(cached_.back()));
    cached_.pop_back();
  }
}

Result<std::unique_ptr<StagingBuffer>> StagingPool::Acquire(size_t size,
                                                            std::chrono::milliseconds wait) {
  size = AlignUp(size == 0 ? 1 : size);
  std::unique_lock<std::mutex> lock(mu_);
  if (auto_sized_) {
    if (size > max_bytes_) {
      return Status::ResourceExhausted(
          "staging pool: snapshot needs " + std::to_string(size) + " bytes, more than the cap of " +
          std::to_string(max_bytes_) +
          " bytes (CheckpointOptions.staging_max_bytes, staging_max_bytes= in Python)");
    }
    // Grows with the largest snapshot; never shrinks (a smaller one may
    // still be persisting).
    size_t want = size > max_bytes_ / auto_buffers_ ? max_bytes_ : size * auto_buffers_;
    if (want > capacity_) capacity_ = want;
  } else if (size > capacity_) {
    return Status::ResourceExhausted(
        "staging pool: snapshot needs " + std::to_string(size) + " bytes, capacity is " +
        std::to_string(capacity_) +
        " (CheckpointOptions.staging_bytes, staging_bytes= in Python; 0 sizes it automatically)");
  }
  auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    for (size_t i = 0; i < cached_.size(); ++i) {
      if (cached_[i].size() == size) {  // exact-size reuse
        MappedBuffer memory = std::move(cached_[i]);
        cached_.erase(cached_.begin() + long(i));
        in_use_ += size;
        return std::unique_ptr<StagingBuffer>(new StagingBuffer(this, std::move(memory)));
      }
    }
    if (in_use_ + size <= capacity_) {
      EvictFor(size);
      auto memory = MappedBuffer::Map(size);
      if (!memory.ok()) return memory.status().WithContext("staging pool");
      if (after_map_) {
        // A pinning error unmaps the buffer again (it was never pinned, so
        // before_unmap_ has nothing to undo).
        Status pinned = after_map_(memory->data(), size);
        if (!pinned.ok()) {
          return pinned.WithContext("staging pool: pinning " + std::to_string(size) + " bytes");
        }
      }
      allocated_ += size;
      in_use_ += size;
      return std::unique_ptr<StagingBuffer>(new StagingBuffer(this, std::move(*memory)));
    }
    if (released_.wait_until(lock, deadline) == std::cv_status::timeout &&
        in_use_ + size > capacity_) {
      return Status::Unavailable("staging pool busy: " + std::to_string(in_use_) + " of " +
                                 std::to_string(capacity_) +
                                 " bytes held by checkpoints still persisting");
    }
  }
}

void StagingPool::Abandon(std::unique_ptr<StagingBuffer> buffer) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_use_ -= buffer->memory_.size();
    allocated_ -= buffer->memory_.size();
    buffer->memory_.Leak();  // its destructor then returns nothing
  }
  released_.notify_all();
}

void StagingPool::Release(MappedBuffer memory) {
  if (memory.data() == nullptr) return;  // abandoned
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_use_ -= memory.size();
    cached_.push_back(std::move(memory));
  }
  released_.notify_all();
}

}  // namespace stint
