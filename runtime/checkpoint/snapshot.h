// Snapshot: a State copied into one staging buffer laid out exactly like an
// uncompressed data file: each entry (tensor shard or blob) split into chunks,
// each chunk at a 4 KiB-aligned offset, padding zeroed. With compression off
// the buffer is written to disk as it is, with O_DIRECT and no further copy.
#ifndef STINT_RUNTIME_CHECKPOINT_SNAPSHOT_H_
#define STINT_RUNTIME_CHECKPOINT_SNAPSHOT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "base/thread_pool.h"
#include "checkpoint/incremental_base.h"
#include "checkpoint/staging_pool.h"
#include "checkpoint/staging_watermark.h"
#include "format/chunk.h"
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
  // A frozen shard the incremental base holds: its chunks are referenced as
  // they are; it takes no staging space (chunk_offset, chunk_len empty).
  std::vector<ChunkRecord> reused;
};

struct SnapshotLayout {
  std::vector<SnapshotEntry> entries;  // tensors first, then blobs, in State order
  uint64_t image_bytes = 0;            // staging buffer size, a multiple of 4 KiB
  uint64_t raw_bytes = 0;
};

// Validates the state (unique non-empty names, shards inside their global
// shapes, data present) and plans the staging layout. With a `base`, frozen
// shards it holds with the same chunking are reused instead of staged.
Result<SnapshotLayout> PlanSnapshot(const State& state, uint64_t chunk_size,
                                    const IncrementalBase* base = nullptr);
// Shards of one tensor must not overlap (nor, with `require_cover`, as from
// a single rank, leave a gap): refused at Save() (kInvalidArgument) rather
// than found by a reader later. With several ranks the committer checks the
// whole job's layout.
Status CheckSnapshotLayout(const SnapshotLayout& layout, bool require_cover);

// One host copy into a staging buffer: `len` bytes from `src` (may be null
// when len is 0) to buffer + dst, then zeroes up to dst + padded.
struct StagingPiece {
  const char* src;
  uint64_t dst;
  uint64_t len;
  uint64_t padded;
  // Incremental: the hash of the base's chunk for these bytes. When `src`
  // hashes the same, nothing is copied and *unchanged is set: reading the
  // bytes once to hash them costs less than copying them and hashing the copy.
  const RawHash* base_hash = nullptr;
  uint8_t* unchanged = nullptr;
};

// Incremental saves: which shards' chunks are hashed from their own memory
// before they are copied (StagingPiece::base_hash). A chunk that differs is
// then copied too, so only shards likely unchanged are tried: those whose
// ShardKey is in `unchanged` (the previous save found them whole in its base).
struct SourceHashing {
  const IncrementalBase* base;
  const std::unordered_set<std::string>* unchanged;
};

// Every copy that fills a staging buffer, by when it runs. Indexed by
// WriteBarrier: [kOptimizerStep], [kForward].
struct StagingCopies {
  std::vector<StagingPiece> now;       // blobs, padding, and host tensors unless lazy
  std::vector<StagingPiece> later[2];  // lazy: host tensors, after Save() returned
  std::vector<DeviceCopy> device[2];   // device tensors: one copy per tensor
  // What the pieces' `unchanged` point into: one byte per staged chunk, in
  // staging order (the persist's chunk order). Null when no source is hashed.
  std::shared_ptr<std::vector<uint8_t>> unchanged;
};

// Plans the copies of `state` into `buffer` (REQUIRES: size >= image_bytes).
// Device tensors (device >= 0) go into `device`: each tensor's chunks are
// back to back in the buffer, so one copy fills them. With `lazy_host`,
// host tensors go into `later`, else into `now`. With `hashing`, the chunks
// of the host shards it names are hashed before they are copied.
StagingCopies PlanStagingCopies(const State& state, const SnapshotLayout& layout, char* buffer,
                                bool lazy_host, const SourceHashing* hashing = nullptr);
// Runs `pieces` (in staging order, as planned) into `buffer` with the
// pool's threads, a batch at a time; `filled` (may be null) advances past
// each batch.
void RunStagingCopies(const std::vector<StagingPiece>& pieces, char* buffer, ThreadPool* pool,
                      StagingWatermark* filled = nullptr);

struct Snapshot {
  uint64_t step = 0;
  SnapshotLayout layout;
  std::unique_ptr<StagingBuffer> buffer;
  // StagingCopies::unchanged: 1 where a chunk's source matched the base
  // and was not copied. Read once every copy is done; null when no source
  // is hashed.
  std::shared_ptr<const std::vector<uint8_t>> unchanged;
  // Where Save()'s copies into `buffer` have got to while they still run;
  // null: the buffer was filled before the snapshot was handed on. Copies
  // that outlast Save() (lazy, device) are waited for on their own.
  std::shared_ptr<StagingWatermark> filled;
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_SNAPSHOT_H_
