// MemoryTier: tier 0 of a Checkpointer (CheckpointOptions.keep_in_memory),
// the newest committed save's staging image kept as an InMemoryCheckpoint
// and replaced by each later commit. It is a convenience, never a reason
// for a save to fail: when the staging pool is full and only tier 0 holds
// the room a save needs (nothing is persisting that would free some), it
// gives its image back (AcquireStaging).
//
// Thread-safe.
#ifndef STINT_RUNTIME_CHECKPOINT_MEMORY_TIER_H_
#define STINT_RUNTIME_CHECKPOINT_MEMORY_TIER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "base/thread_pool.h"
#include "checkpoint/in_memory_checkpoint.h"
#include "checkpoint/persist.h"
#include "checkpoint/snapshot.h"
#include "checkpoint/staging_pool.h"
#include "stint/checkpointer.h"

namespace stint {

class MemoryTier {
 public:
  MemoryTier() = default;
  MemoryTier(const MemoryTier&) = delete;
  MemoryTier& operator=(const MemoryTier&) = delete;

  // The committed `snapshot` (its staging buffer is taken), persisted as
  // `file`, replaces the image held so far. Its manifest describes the raw
  // image (RawImageFile, hashed on `pool`).
  void Keep(const CheckpointOptions& options, Snapshot* snapshot, const PersistedFile& file,
            ThreadPool* pool);
  // The image held, or null. A Load holds its own reference.
  std::shared_ptr<InMemoryCheckpoint> image() const;
  // Its step; nullopt when none is held.
  std::optional<uint64_t> step() const;
  // Lets go of the image: its buffer goes back to the staging pool once no
  // Load holds it.
  void Clear();

  // A staging buffer of `bytes` for a save: at once if `staging` has the
  // room; otherwise, if `persist_idle()` (asked under this tier's lock),
  // the image held gives way first; then waits up to `wait`.
  Result<std::unique_ptr<StagingBuffer>> AcquireStaging(StagingPool* staging, uint64_t bytes,
                                                        std::chrono::milliseconds wait,
                                                        const std::function<bool()>& persist_idle);

 private:
  // Swaps the image held for `image` and returns the old one, to be released
  // outside the lock.
  std::shared_ptr<InMemoryCheckpoint> Replace(std::shared_ptr<InMemoryCheckpoint> image);

  mutable std::mutex mu_;
  std::shared_ptr<InMemoryCheckpoint> image_;  // guarded by mu_
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_MEMORY_TIER_H_
