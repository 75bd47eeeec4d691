// Persist: writes a Snapshot as one data file (rank-<r>.stint) through an
// IoEngine, checksumming (and optionally compressing) chunks on a thread
// pool, then fdatasyncs and closes it. Returns the chunk records for the
// manifest and the file's record (size and digest), from which
// BuildManifest makes the manifest.
#ifndef STINT_RUNTIME_CHECKPOINT_PERSIST_H_
#define STINT_RUNTIME_CHECKPOINT_PERSIST_H_

#include <functional>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "checkpoint/incremental_base.h"
#include "checkpoint/snapshot.h"
#include "format/manifest.h"
#include "io/io_engine.h"
#include "stint/checkpointer.h"
#include "stint/env.h"

namespace stint {

struct PersistOptions {
  bool compress = false;
  int zstd_level = 1;
  bool direct_io = true;
  uint64_t io_size = 4u << 20;  // bytes per write request (multiple of 4 KiB)
  // Record every chunk's raw hash; a chunk whose box, index and hash match
  // `base` (may be null) is referenced there instead of written.
  bool incremental = false;
  const IncrementalBase* base = nullptr;
  // Copies that outlast Save() (lazy host, device-to-host) may still run
  // when persisting starts: blocks until image bytes [0, to) are staged,
  // or returns their first error. Null: they are done. (Save()'s own
  // copies are waited for through Snapshot::filled.)
  std::function<Status(uint64_t to)> wait_staged;
};

struct PersistedFile {
  FileRecord file;
  std::vector<std::vector<ChunkRecord>> entry_chunks;  // parallel to layout.entries
  uint64_t stored_bytes = 0;      // written to `file`
  uint64_t referenced_bytes = 0;  // raw bytes referenced in the base instead
  uint64_t matched_in_place_bytes = 0;  // of those, matched before staging (not copied)
  std::vector<FileRecord> refs;   // the base's files those chunks live in
};

Result<PersistedFile> PersistSnapshot(Env* env, IoEngine* engine, ThreadPool* pool,
                                      const Snapshot& snapshot, const std::string& path,
                                      const PersistOptions& options);

// The manifest of `snapshot` stored as `file` (what PersistSnapshot returned,
// or RawImageFile's record of the staging image): each tensor with its
// shards, each blob, and the file record; job_id, fencing_token, world_size
// and chunk_size from `options`; created now.
Manifest BuildManifest(const CheckpointOptions& options, const Snapshot& snapshot,
                       const PersistedFile& file);

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_PERSIST_H_
