// Checkpointer: asynchronous, crash-consistent checkpoints of one rank's state.
//
//   auto ckpt = stint::Checkpointer::Open(options);           // cleans .tmp-* leftovers
//   auto handle = (*ckpt)->Save(step, state);                  // snapshot, then returns
//   handle->staged.wait();   // state may be mutated again (already true on return)
//   handle->durable.get();   // committed on disk: MANIFEST, rename, LATEST
//
// Save() copies the state into a bounded staging pool (parallel memcpy) and
// hands it to a background persist thread, which chunks, optionally
// compresses (zstd), checksums (XXH3-64) and writes it with the I/O engine
// (io_uring + O_DIRECT, or pwrite), then commits:
//   .tmp-<step>-<nonce>/ -> fdatasync data -> MANIFEST.json -> fsync ->
//   [commit_guard] -> rename to step-<step> -> fsync root -> LATEST (tmp + fsync + rename) -> fsync root
// A crash at any point leaves the previous checkpoint loadable and nothing
// half-written loadable. Background errors appear on the durable future and
// are returned once more by the next Save()/Flush().
//
// Thread-compatible: one training thread calls Save/Load/Flush.
#ifndef STINT_INCLUDE_STINT_CHECKPOINTER_H_
#define STINT_INCLUDE_STINT_CHECKPOINTER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stint/checkpoint_reader.h"
#include "stint/env.h"
#include "stint/state.h"
#include "stint/status.h"

namespace stint {

enum class BusyPolicy {
  kBlock,  // wait for a persisting checkpoint to free the staging pool
  kSkip,   // skip this checkpoint and report it (SaveHandle::skipped)
};

struct CheckpointOptions {
  std::string root;        // REQUIRES: non-empty; created if missing
  Env* env = nullptr;      // Default: Env::Default(); must outlive the Checkpointer
  std::string job_id;      // recorded in the manifest. Default: ""
  uint64_t fencing_token = 0;  // recorded in the manifest. Default: 0
  int rank = 0;            // this process's data file is rank-<rank>.stint. Default: 0
  int world_size = 1;      // Default: 1
  uint64_t chunk_size = 8u << 20;  // REQUIRES: multiple of 4096. Default: 8 MiB
  bool compress = false;   // zstd per chunk, independent frames. Default: false
  int zstd_level = 1;      // Default: 1
  // Staging pool capacity; 0 = twice the first snapshot. Default: 0
  size_t staging_bytes = 0;
  BusyPolicy busy_policy = BusyPolicy::kBlock;  // Default: kBlock
  std::chrono::milliseconds block_timeout{std::chrono::minutes(10)};  // for kBlock
  int keep_last = 3;       // newest K committed checkpoints kept; 0 = all. Default: 3
  uint64_t keep_every = 0; // also keep steps divisible by N forever; 0 = none. Default: 0
  std::string io_engine = "auto";  // "auto", "uring", "posix". Default: "auto"
  bool direct_io = true;   // O_DIRECT data files where supported. Default: true
  unsigned io_queue_depth = 32;    // writes in flight. Default: 32
  unsigned io_size = 4u << 20;     // bytes per write request. Default: 4 MiB
  // Helper threads for memcpy, hashing and zstd; 0 = hardware threads - 1.
  unsigned threads = 0;
  // Asked on the persist thread right before the commit rename (data and
  // MANIFEST are written and synced; nothing is visible yet), e.g. "is my
  // fencing token still current?" (CoordinatorClient::CommitGuard()). A
  // non-OK answer aborts this commit: the .tmp- directory is removed, nothing
  // committed (step dirs, LATEST) is touched, the save's durable future holds
  // exactly that status, and the next Save()/Flush() returns it once more.
  // Called once per save, never concurrently; its time (a network round trip
  // for a fencing check) adds to this save's and delays the saves queued
  // behind it. Default: none (always commit).
  std::function<Status(uint64_t step)> commit_guard;
};

struct SaveHandle {
  uint64_t step = 0;
  bool skipped = false;  // BusyPolicy::kSkip found the pool full; futures hold why
  std::shared_future<Status> staged;   // the state may be modified again
  std::shared_future<Status> durable;  // committed and fsynced
};

struct SaveStats {
  uint64_t step = 0;
  uint64_t raw_bytes = 0;
  uint64_t stored_bytes = 0;
  double snapshot_seconds = 0;  // in Save(): the training thread's stall
  double persist_seconds = 0;   // data written and fdatasync'ed
  double commit_seconds = 0;    // manifest, renames, LATEST
  std::string engine;           // "io_uring" or "posix"
};

struct CheckpointerStats {
  uint64_t saves = 0, skipped = 0, failed = 0, committed = 0;
  std::optional<SaveStats> last;  // last committed save
};

struct LoadOptions {
  std::optional<uint64_t> step;  // Default: the newest checkpoint that verifies
  bool verify_all = false;       // full checksum pass before reading. Default: false
};

struct LoadResult {
  uint64_t step = 0;
  std::string dir;
  std::map<std::string, std::string> blobs;
  // Newer checkpoints passed over, each "step-... : <error>": never silent.
  std::vector<std::string> skipped;
  std::vector<uint64_t> skipped_steps;  // the same, as steps (see Quarantine)
};

// Chooses destinations once the checkpoint to load is known (e.g. allocate
// optimizer state for the tensors it holds).
using DestPlanner = std::function<Result<std::vector<TensorDest>>(const CheckpointReader&)>;

class Checkpointer {
 public:
  virtual ~Checkpointer() = default;  // waits for pending saves
  static Result<std::unique_ptr<Checkpointer>> Open(const CheckpointOptions& options);

  virtual Result<SaveHandle> Save(uint64_t step, const State& state) = 0;
  // Waits until every pending save is durable or failed; returns the first
  // background error not yet returned. kDeadlineExceeded on timeout.
  virtual Status Flush(std::chrono::milliseconds timeout = std::chrono::minutes(10)) = 0;

  virtual Result<LoadResult> Load(const DestPlanner& planner, const LoadOptions& options = {}) = 0;
  Result<LoadResult> Load(std::vector<TensorDest> dests, const LoadOptions& options = {}) {
    return Load([d = std::move(dests)](const CheckpointReader&) -> Result<std::vector<TensorDest>> {
      return d;
    }, options);
  }

  // Committed steps, oldest first.
  virtual Result<std::vector<uint64_t>> ListCommitted() = 0;
  // Moves a checkpoint that failed to load out of the way, to
  // "quarantine-step-<step>-<nonce>" (kept for inspection, never loaded or
  // deleted by retention), so a resumed run can save that step again.
  virtual Status Quarantine(uint64_t step) = 0;
  virtual CheckpointerStats stats() const = 0;
  virtual const CheckpointOptions& options() const = 0;
};

}  // namespace stint

#endif  // STINT_INCLUDE_STINT_CHECKPOINTER_H_
