// Snapshot: a State copied into one staging buffer laid out exactly like an
// uncompressed data file: each entry (tensor shard or blob) split into chunks,
// each chunk at a 4 KiB-aligned offset, padding zeroed. With compression off
// the buffer is written to disk as it is, with O_DIRECT and no further copy.
#ifndef STINT_RUNTIME_CHECKPOINT_SNAPSHOT_H_
#define STINT_RUNTIME_CHECKPOINT_SNAPSHOT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "checkpoint/staging_pool.h"
#include "stint/device_copier.h"
#include "stint/state.h"

namespace stint {

struct SnapshotEntry {
  std::string name;
  bool is_blob = false;
  DType dtype = DType::kUInt8;
  std::vector<int64_t> global_shape, offsets, extents;  // tensors only
  uint64_t raw_bytes = 0;
  std::vector<uint64_t> chunk_offset;  // in the staging buffer
  std::vector<uint64_t> chunk_len;     // raw bytes
};

struct SnapshotLayout {
  std::vector<SnapshotEntry> entries;  // tensors first, then blobs, in State order
  uint64_t image_bytes = 0;            // staging buffer size, a multiple of 4 KiB
  uint64_t raw_bytes = 0;
};

// Validates the state (unique non-empty names, shards inside their global
// shapes, data present) and plans the staging layout.
Result<SnapshotLayout> PlanSnapshot(const State& state, uint64_t chunk_size);

// Copies every host tensor and blob into `buffer` (REQUIRES: size >=
// image_bytes) with the pool's threads, and zeroes the padding. Device
// tensors (device >= 0) are not touched: one DeviceCopy per tensor (its
// chunks are contiguous in the buffer) is appended to `device_copies`, for
// the caller to start. REQUIRES: device_copies != null if any tensor is on a
// device.
void CopyIntoStaging(const State& state, const SnapshotLayout& layout, char* buffer,
                     ThreadPool* pool, std::vector<DeviceCopy>* device_copies = nullptr);

struct Snapshot {
  uint64_t step = 0;
  SnapshotLayout layout;
  std::unique_ptr<StagingBuffer> buffer;
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_SNAPSHOT_H_
