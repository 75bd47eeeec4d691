// Tier 0: the last committed checkpoint kept in host memory, readable through
// the ordinary CheckpointReader (so it is checksummed and resharded exactly
// like a checkpoint on disk) without a byte of disk I/O.
//
// It holds the save's staging buffer, which is laid out like an uncompressed
// data file, and a manifest describing that image: with compression off it is
// the committed manifest; with compression on the chunk records are re-made
// for the raw image (RawImageFile).
//
// Thread-safe after construction: readers opened on it may run concurrently;
// it must outlive them.
#ifndef STINT_RUNTIME_CHECKPOINT_IN_MEMORY_CHECKPOINT_H_
#define STINT_RUNTIME_CHECKPOINT_IN_MEMORY_CHECKPOINT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "base/thread_pool.h"
#include "checkpoint/persist.h"
#include "checkpoint/snapshot.h"
#include "stint/checkpoint_reader.h"
#include "stint/env.h"

namespace stint {

// The records of `persisted` rewritten for the uncompressed staging image of
// `snapshot`: each chunk at its staging offset, codec none, XXH3 of its raw
// bytes (hashed on `pool` where the stored chunk was compressed), and the file
// record (same name, size image_bytes, digest). Pure apart from hashing.
PersistedFile RawImageFile(const Snapshot& snapshot, const PersistedFile& persisted,
                           ThreadPool* pool);

class InMemoryCheckpoint {
 public:
  // `buffer` holds the image (image_bytes long) of the data file `file_name`;
  // `manifest_bytes` (EncodeManifest) describes it.
  InMemoryCheckpoint(uint64_t step, std::unique_ptr<StagingBuffer> buffer, uint64_t image_bytes,
                     std::string file_name, std::string manifest_bytes);
  ~InMemoryCheckpoint();
  InMemoryCheckpoint(const InMemoryCheckpoint&) = delete;
  InMemoryCheckpoint& operator=(const InMemoryCheckpoint&) = delete;

  uint64_t step() const { return step_; }
  // "memory:/step-<step>".
  const std::string& dir() const { return dir_; }
  // A reader over the image. `options.env` is ignored (an in-memory Env is
  // used); everything else applies.
  Result<std::unique_ptr<CheckpointReader>> OpenReader(ReaderOptions options) const;

 private:
  class ImageEnv;
  const uint64_t step_;
  const std::string dir_;
  std::unique_ptr<StagingBuffer> buffer_;
  std::unique_ptr<ImageEnv> env_;
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_IN_MEMORY_CHECKPOINT_H_
