#include "checkpoint/staging_pool.h"

#include <string>

#include "format/chunk.h"

namespace stint {

StagingBuffer::~StagingBuffer() { pool_->Release(std::move(memory_)); }

StagingPool::StagingPool(size_t capacity_bytes, std::function<void(char*)> before_unmap,
                         std::function<Status(char*, size_t)> after_map, unsigned auto_buffers)
    : before_unmap_(std::move(before_unmap)),
      after_map_(std::move(after_map)),
      auto_buffers_(auto_buffers == 0 ? 1 : auto_buffers),
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
  if (capacity_ == 0) capacity_ = size_t(auto_buffers_) * size;
  if (size > capacity_) {
    return Status::ResourceExhausted("staging pool: snapshot needs " + std::to_string(size) +
                                     " bytes, capacity is " + std::to_string(capacity_));
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

void StagingPool::Release(MappedBuffer memory) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_use_ -= memory.size();
    cached_.push_back(std::move(memory));
  }
  released_.notify_all();
}

}  // namespace stint
