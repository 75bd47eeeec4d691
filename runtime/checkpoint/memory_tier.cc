#include "checkpoint/memory_tier.h"

#include <string>
#include <utility>

#include "format/manifest.h"

namespace stint {

void MemoryTier::Keep(const CheckpointOptions& options, Snapshot* snapshot,
                      const PersistedFile& file, ThreadPool* pool) {
  PersistedFile raw = RawImageFile(*snapshot, file, pool);
  std::string manifest = EncodeManifest(BuildManifest(options, *snapshot, raw));
  auto image = std::make_shared<InMemoryCheckpoint>(snapshot->step, std::move(snapshot->buffer),
                                                    snapshot->layout.image_bytes, raw.file.name,
                                                    std::move(manifest));
  // Released outside the lock: a Load may still hold it, and the pool wakes
  // a waiting Save.
  Replace(std::move(image)).reset();
}

std::shared_ptr<InMemoryCheckpoint> MemoryTier::image() const {
  std::lock_guard<std::mutex> lock(mu_);
  return image_;
}

std::optional<uint64_t> MemoryTier::step() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (image_ == nullptr) return std::nullopt;
  return image_->step();
}

void MemoryTier::Clear() { Replace(nullptr).reset(); }

Result<std::unique_ptr<StagingBuffer>> MemoryTier::AcquireStaging(
    StagingPool* staging, uint64_t bytes, std::chrono::milliseconds wait,
    const std::function<bool()>& persist_idle) {
  auto buffer = staging->Acquire(bytes, std::chrono::milliseconds(0));
  if (buffer.ok() || buffer.status().code() != Code::kUnavailable) return buffer;
  std::shared_ptr<InMemoryCheckpoint> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (image_ != nullptr && persist_idle()) dropped = std::move(image_);
  }
  dropped.reset();
  return staging->Acquire(bytes, wait);
}

std::shared_ptr<InMemoryCheckpoint> MemoryTier::Replace(std::shared_ptr<InMemoryCheckpoint> image) {
  std::lock_guard<std::mutex> lock(mu_);
  std::swap(image_, image);
  return image;
}

}  // namespace stint
