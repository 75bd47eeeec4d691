// Checkpointer: asynchronous, crash-consistent checkpoints of one rank's state.
//
//   auto ckpt = stint::Checkpointer::Open(options);           // the root's one writer
//   auto handle = (*ckpt)->Save(step, state);                  // snapshot, then returns
//   handle->staged.wait();   // state may be mutated again (already true on return)
//   handle->durable.get();   // committed on disk: MANIFEST, rename, LATEST
//
// Save() copies the state into a bounded staging pool (parallel memcpy) and
// hands it to a background persist thread, which chunks, optionally
// compresses (zstd), checksums (XXH3-64) and writes it with the I/O engine
// (io_uring + O_DIRECT, or pwrite), then commits. Writing does not wait for
// the whole snapshot: each 64 MiB window of the staging image goes to disk
// once the copies into it are done, while Save() (or the device, for device
// tensors) still copies the later ones. The commit:
//   .tmp-<step>-<nonce>/ -> fdatasync data -> MANIFEST.json -> fsync ->
//   [commit_guard] -> rename to step-<step> -> fsync root -> LATEST (tmp + fsync + rename) -> fsync
//   root
// A crash at any point leaves the previous checkpoint loadable and nothing
// half-written loadable. A save that fails in the background fails its own
// durable future only: the next Save() is not affected. Flush() returns the
// first background error since the previous Flush() (a failed save's, the
// same status its durable future holds, or one that belongs to no save, e.g.
// retention), so a loop that never looks at the futures still learns of it.
//
// Tiers (each optional except tier 1):
//   tier 0  host memory: the last committed checkpoint's staging image is kept
//           (keep_in_memory), for an instant in-process restore, e.g. after a
//           group change. Lost with the process.
//   tier 1  `root` (node-local NVMe): the commit protocol above.
//   tier 2  `replica_root` (a shared durable path): each tier-1 commit is
//           copied there in the background by a thread this object owns,
//           verified, and committed with the same protocol and its own
//           retention. A tier-2 failure never fails or delays a tier-1
//           commit; it is reported on SaveHandle::replicated, in stats() and
//           by FlushReplication().
// Load() picks the newest checkpoint that verifies on any tier (tier 0 before
// tier 1 before tier 2 for the same step) and reports every one passed over.
//
// Device tensors (TensorShard::device >= 0) are copied device-to-host through
// `device_copier` after Save() returned; loading into device destinations
// goes host-to-device on a copy stream.
//
// The snapshot rule: a tensor may be written again only once its copy read
// it. Host tensors are copied inside Save() (SnapshotMode::kEager) or after
// it returned (kLazy: copy threads run while the next forward and backward
// compute); device tensors always after it returned. The training loop calls
// BeforeWrite(WriteBarrier::kForward) before the forward pass and
// BeforeWrite(WriteBarrier::kOptimizerStep) before the optimizer step (the
// Python hooks and ResumableTraining do this); on a device the compute
// stream then waits for the copy, the host never does. WaitStaged() is the
// blunt form for other loops.
//
// One writer per root, any number of readers. A writer (read_only false;
// with several ranks, rank 0) holds <root>/.writer.lock (an advisory
// flock(2) naming its pid and host) from Open until it is destroyed, and
// only it removes leftovers (.tmp-* directories and LATEST.tmp of saves and
// deletions a dead writer left): removing them is safe only once their
// writer is provably gone, and its lock went with it. A second writer of the
// same root, in this process or another, gets kFailedPrecondition naming the
// holder's pid and host (after waiting `lock_wait` for it to close). Other
// ranks of a job never lock or clean: they write into the committer's tmp
// directory. Readers never lock and never remove anything, so they may open a
// root while its writer saves: a read_only Checkpointer, CheckpointReader
// (one step directory), the `stint` CLI, stint.dcp.StorageReader. The tier-2
// replica_root has a writer lock of its own, held by rank 0's replication
// (taken again at each replication until it is held).
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
#include <set>
#include <string>
#include <vector>

#include "stint/checkpoint_reader.h"
#include "stint/commit_channel.h"
#include "stint/device_copier.h"
#include "stint/env.h"
#include "stint/state.h"
#include "stint/status.h"

namespace stint {

enum class SnapshotMode {
  kEager,  // host tensors copied inside Save()
  kLazy,   // host tensors copied after Save() returned; see BeforeWrite()
};

enum class BusyPolicy {
  kBlock,  // wait for a persisting checkpoint to free the staging pool
  kSkip,   // skip this checkpoint and report it (SaveHandle::skipped)
};

struct CheckpointOptions {
  std::string root;            // REQUIRES: non-empty; created if missing, with its parents
  Env* env = nullptr;          // Default: Env::Default(); must outlive the Checkpointer
  std::string job_id;          // recorded in the manifest. Default: ""
  uint64_t fencing_token = 0;  // recorded in the manifest. Default: 0
  int rank = 0;                // this process's data file is rank-<rank>.stint. Default: 0
  int world_size = 1;          // Default: 1
  // Open only to load: the root must exist and is not touched (no lock
  // taken, no leftovers removed: its writer may be saving into it right
  // now); Save() is refused with kFailedPrecondition and there is no
  // retention or tier-2 replication. Default: false
  bool read_only = false;
  // A writer: how long Open waits while another writer holds the root (see
  // above) before failing with kFailedPrecondition. Default: 0 (at once)
  std::chrono::milliseconds lock_wait{0};
  // Several ranks (world_size > 1): every rank of the job opens a
  // Checkpointer on the same shared `root` with its own `rank`, and calls
  // Save() and Load() collectively (the same steps, in the same order). Each
  // rank writes only its own shards (TensorShard offsets/extents within the
  // global shape); rank 0 commits once every rank's part is durable, and every
  // rank's durable future gets the same outcome (see stint/commit_channel.h).
  // Each rank's blobs are kept apart: Load() gives a rank its own blobs, or
  // rank 0's where it saved none (e.g. a rank that did not exist at save).
  // REQUIRED with world_size > 1; must outlive the Checkpointer.
  CommitChannel* commit_channel = nullptr;
  // Several ranks: the node this rank runs on. Ranks of one node share one
  // root; each node's root may be its own disk (the same path string on
  // every node, or not): the ranks whose root is not the committer's
  // directory write their node's part there, one rank of the node (its
  // lowest) commits it, holding that root's writer lock, and the job still
  // commits once, when every node's part is durable. The committed manifest,
  // the same on every node, records which node holds each file.
  // Default: "" ($STINT_NODE_ID when set, else the host name)
  std::string node_id;
  // Node-local roots: how many nodes hold each node's part of a committed
  // step, its own included. After each commit, every node's files are
  // copied to peer_replicas - 1 other nodes of the job (other failure
  // domains first: $STINT_FAILURE_DOMAIN), verified against the manifest,
  // committed there, so a load finds a lost node's files on a peer. In the
  // background, one step at a time; a copy never delays a save. 1: none.
  // 0: 2 when the job's files span more than one node. Default: 0
  int peer_replicas = 0;
  // Where this node keeps the copies of other nodes' parts: a directory of
  // step-* like a root. On a tmpfs (/dev/shm/...) they live in host memory.
  // Default: "" (<root>/.peer-replicas)
  std::string peer_replica_dir;
  // Multi-rank saves: the one deadline of a save, published by the
  // committer with the save's tmp directory: it gathers the other ranks'
  // reports until this long after it started the save; the others wait for
  // its decision until twice that after they started. 0: the longest of
  // 60 s, 10 x the slowest rank's persist time in the last save and 1 s per
  // 10 MB of the committer's state.
  // Multi-rank loads: how long rank 0 waits for every rank to say which
  // step it loaded, from the start of the load (the others wait twice as
  // long for its decision); 0: 10 minutes. Default: 0
  std::chrono::milliseconds commit_timeout{0};
  // Multi-rank saves: asked on the committer about every rank's fencing
  // token right before the rename; an error aborts the commit, naming the
  // rank (CoordinatorTokenGuard: is that worker incarnation still current?).
  // kAborted for the committer's own token fences this writer as commit_guard's does.
  // Default: none
  std::function<Status(uint64_t fencing_token)> token_guard;
  uint64_t chunk_size = 8u << 20;  // REQUIRES: multiple of 4096. Default: 8 MiB
  bool compress = false;           // zstd per chunk, independent frames. Default: false
  // zstd only where it pays: a sample of a save's first chunks is compressed
  // on the helper threads (every 8th save) and the save compresses only if
  // min(zstd's rate,
  // the raw write rate x zstd's ratio) beats the raw write rate measured on
  // this Checkpointer's raw saves by 10% (a slow or shared target, not a
  // fast local disk). The first save, and every 17th after 16 compressed
  // ones, is written raw to measure the disk. SaveStats::compressed and
  // compress_decision report the choice. Overrides `compress`. Default: false
  bool compress_auto = false;
  // Incremental checkpoints: a save hashes every chunk (XXH3-128 of its raw
  // bytes) and, where the newest committed checkpoint holds the same bytes
  // for the same tensor box and chunk, references that chunk in the new
  // manifest instead of writing it (TensorShard::frozen shards are not even
  // copied). The chunks of host shards the previous save found unchanged
  // are hashed from their own memory before they would be copied, and not
  // copied when they still match. A referenced chunk is verified on load like any other;
  // retention never deletes a checkpoint that a kept one references; tier 2
  // copies what the replica lacks. Not with keep_in_memory. Default: false
  bool incremental = false;
  int zstd_level = 1;              // Default: 1
  // Staging pool capacity. 0: sized automatically to twice the largest
  // snapshot so far (three with keep_in_memory), growing when a save is
  // larger than any before (say the optimizer's state appeared after a save
  // at step 0), up to staging_max_bytes; memory once grown stays mapped for
  // reuse. > 0: fixed; a larger snapshot is refused (kResourceExhausted
  // naming this field). Default: 0
  size_t staging_bytes = 0;
  // The cap of an automatically sized pool (staging_bytes = 0): a snapshot
  // larger than this is refused with kResourceExhausted naming this field.
  // 0: half the physical memory. Default: 0
  size_t staging_max_bytes = 0;
  // Load into device tensors: the pinned host buffer they are read through,
  // in rounds, reused (a tensor bigger than it goes in pieces of rows along
  // dimension 0; a single row bigger than it gets a buffer of one row).
  // Default: 64 MiB
  uint64_t device_load_bytes = uint64_t(64) << 20;
  BusyPolicy busy_policy = BusyPolicy::kBlock;                        // Default: kBlock
  std::chrono::milliseconds block_timeout{std::chrono::minutes(10)};  // for kBlock
  // How long a save's copies that run after Save() returned (device to host,
  // lazy host) may take, from Save(). Past it (a wedged device) the save
  // fails with kDeadlineExceeded on its staged and durable futures, so
  // Flush() and the destructor do not hang; its staging buffer, which the
  // copy may still write, is never reused or unmapped (it stays mapped for
  // the rest of the process). Default: 10 min
  std::chrono::milliseconds copy_timeout{std::chrono::minutes(10)};
  int keep_last = 3;               // newest K committed checkpoints kept; 0 = all. Default: 3
  uint64_t keep_every = 0;         // also keep steps divisible by N forever; 0 = none. Default: 0
  // Steps retention must keep besides (with the steps they reference), e.g.
  // those an evaluation is queued or running on
  // (CoordinatorClient::RetentionPins(), set by FenceCommits). Asked on the
  // persist thread before each retention pass, tier 1 and tier 2; an error
  // makes that pass delete nothing (CheckpointStats::retention_held_back
  // says why). Default: none (no pins)
  std::function<Result<std::set<uint64_t>>()> retention_pins;
  std::string io_engine = "auto";  // "auto", "uring", "posix". Default: "auto"
  bool direct_io = true;           // O_DIRECT data files where supported. Default: true
  unsigned io_queue_depth = 32;    // writes in flight. Default: 32
  unsigned io_size = 4u << 20;     // bytes per write request. Default: 4 MiB
  // Helper threads for memcpy, hashing and zstd; 0 = hardware threads - 1.
  unsigned threads = 0;
  // Asked on the persist thread right before the commit rename (data and
  // MANIFEST are written and synced; nothing is visible yet), e.g. "is my
  // fencing token still current?" (CoordinatorClient::CommitGuard()). A
  // non-OK answer aborts this commit: the .tmp- directory is removed, nothing
  // committed (step dirs, LATEST) is touched, the save's durable future holds
  // exactly that status, and the next Flush() returns it once more.
  // kAborted means this writer incarnation is stale (fenced): the
  // Checkpointer then releases the root's writer lock at once and refuses
  // every later save with that status, so the writer that replaced it (which
  // may be waiting, see lock_wait) takes the root over.
  // Called once per save, never concurrently; its time (a network round trip
  // for a fencing check) adds to this save's and delays the saves queued
  // behind it. Default: none (always commit).
  std::function<Status(uint64_t step)> commit_guard;

  // When host tensors are copied; device tensors are always copied after
  // Save() returned. Default: kEager
  SnapshotMode snapshot = SnapshotMode::kEager;

  // Copies device tensors (TensorShard/TensorDest with device >= 0) and pins
  // the staging pool's buffers (page-locked, exact size). Must outlive the
  // Checkpointer. Default: none (device tensors are refused).
  DeviceCopier* device_copier = nullptr;

  // Tier 0: keep the last committed checkpoint's staging image in host memory
  // so Load() can restore it without touching the disk. It holds one staging
  // buffer, so with staging_bytes = 0 the pool is sized to three snapshots
  // instead of two. Default: false
  bool keep_in_memory = false;

  // Tier 2: a second directory (a shared durable path) that every tier-1
  // commit is replicated to in the background; created if missing, with its
  // parents, and locked like `root` (one writer each). Empty: no tier 2.
  // REQUIRES: not `root` and not inside it. Default: ""
  std::string replica_root;
  Env* replica_env = nullptr;       // Default: `env`; must outlive the Checkpointer
  int replica_keep_last = 3;        // tier-2 retention, as keep_last. Default: 3
  uint64_t replica_keep_every = 0;  // tier-2 retention, as keep_every. Default: 0
  // Read the replica back and check every checksum before committing it.
  // Default: true
  bool replica_verify = true;
};

struct SaveHandle {
  uint64_t step = 0;
  bool skipped = false;                // BusyPolicy::kSkip found the pool full; futures hold why
  std::shared_future<Status> staged;   // the state may be modified again
  std::shared_future<Status> durable;  // committed and fsynced
  // Committed on tier 2. OK at once without a replica_root; kCancelled when a
  // newer step was replicated instead (replication keeps only the newest
  // backlog entry); the tier-2 error otherwise (tier 1 is unaffected).
  std::shared_future<Status> replicated;
};

struct SaveStats {
  uint64_t step = 0;
  uint64_t raw_bytes = 0;
  uint64_t stored_bytes = 0;  // written by this save (referenced chunks not counted)
  uint64_t referenced_bytes = 0;  // incremental: raw bytes referenced, not written
  // Incremental: of referenced_bytes, those found unchanged by hashing the
  // tensors' own memory, so never copied into staging.
  uint64_t matched_in_place_bytes = 0;
  bool compressed = false;        // zstd was used (compress, or compress_auto chose it)
  std::string compress_decision;  // compress_auto: what it chose and the figures why
  double snapshot_seconds = 0;  // in Save(): the training thread's stall
  double persist_seconds = 0;   // data written and fdatasync'ed
  double commit_seconds = 0;    // manifest, renames, LATEST
  std::string engine;           // "io_uring" or "posix"
  // Device tensors: from Save() until their device-to-host copies completed.
  // 0 without device tensors.
  double device_copy_seconds = 0;
  // From Save() until every copy (host and device) completed: when the
  // staged future became ready.
  double staged_seconds = 0;
};

struct ReplicaStats {
  uint64_t step = 0;
  uint64_t bytes = 0;            // copied to tier 2
  double replicate_seconds = 0;  // copy + verify + commit on tier 2
  double durable_seconds = 0;    // from Save() until committed on tier 2
};

struct CheckpointerStats {
  uint64_t saves = 0, skipped = 0, failed = 0, committed = 0;
  std::optional<SaveStats> last;  // last committed save
  // Tier 2.
  uint64_t replicated = 0, replica_failed = 0, replica_superseded = 0;
  std::optional<ReplicaStats> last_replica;  // last committed on tier 2
  std::string last_replica_error;            // empty if none yet
  // Peer replicas (node-local roots; this rank leads its node): the other
  // nodes' parts this node copied and committed, and its failures.
  uint64_t peer_replicated = 0, peer_replica_failed = 0;
  std::optional<ReplicaStats> last_peer_replica;  // durable_seconds: from this node's Save()
  std::string last_peer_replica_error;            // empty if none yet
  // Tier 0: the step held in memory, if any.
  std::optional<uint64_t> in_memory_step;
  // Why the last tier-1 retention deleted nothing though steps were due
  // (a manifest it could not read, or of a newer format: what the kept
  // checkpoints reference is then unknown); empty when it ran.
  std::string retention_held_back;
};

struct LoadOptions {
  // Default: the newest checkpoint that verifies. A step no tier holds is
  // kNotFound; one that does not load is its own error, not a fallback.
  std::optional<uint64_t> step;
  bool verify_all = false;       // full checksum pass before reading. Default: false
};

struct LoadResult {
  uint64_t step = 0;
  int tier = 1;     // where it came from: 0 memory, 1 root, 2 replica_root
  std::string dir;  // tier 0: "memory:step-..."
  std::map<std::string, std::string> blobs;
  // Newer checkpoints passed over, each "[tier N] step-... : <error>" (the
  // tier tag only with several tiers): never silent. Load passes over a
  // checkpoint that is damaged (kDataLoss: a checksum, a size, a MANIFEST
  // whose step is not its directory's, a referenced checkpoint gone), that
  // cannot be read (an I/O error, a step-* entry that is not a directory) or
  // that is of a format version this build does not know (written by a newer
  // stint); a destination that does not match is the caller's error.
  std::vector<std::string> skipped;
  // The damaged ones among them, as steps: what Quarantine is for. Not the
  // unreadable ones nor those of an unknown format version: they are left
  // where they are.
  std::vector<uint64_t> skipped_steps;
};

// Chooses destinations once the checkpoint to load is known (e.g. allocate
// optimizer state for the tensors it holds).
using DestPlanner = std::function<Result<std::vector<TensorDest>>(const CheckpointReader&)>;

// A finished run's marker in its root (Checkpointer::MarkComplete).
struct CompletionMarker {
  uint64_t step = 0;  // the run's final step
  std::string info;   // the JSON object MarkComplete was given
};

class Checkpointer {
 public:
  // Waits for pending saves (their copies at most copy_timeout).
  virtual ~Checkpointer() = default;
  static Result<std::unique_ptr<Checkpointer>> Open(const CheckpointOptions& options);

  // Snapshots `state` and queues it to persist. kAlreadyExists, at once, when
  // `step` is committed already or a save of it is still in flight (that
  // save goes on; later saves are unaffected). An earlier save's failure is
  // never returned here: see its durable future and Flush().
  virtual Result<SaveHandle> Save(uint64_t step, const State& state) = 0;
  // Instead of Save(), when this rank could not build the State of `step`
  // (a TorchStateBuilder call failed): with several ranks, counts it as this
  // rank's Save() and tells the other ranks at once, so their Save() of the
  // step fails promptly, naming this rank, instead of waiting out the commit
  // deadline, and every rank's next Save() lines up. Returns `why` with
  // context (one rank: nothing else to do).
  virtual Status AbandonSave(uint64_t step, const Status& why) = 0;

  // The stream the training loop will write on, on `device`, asked at the
  // barrier (e.g. CurrentCudaStream in runtime/torch/torch_device.h: what
  // torch.cuda.current_stream(device) returns at that moment), as a
  // cudaStream_t.
  using WriterStream = std::function<Result<void*>(int device)>;

  // The lazy barrier. Call right before the training loop writes saved
  // tensors again: kForward before the forward pass (it waits for the shards
  // marked kForward), kOptimizerStep before the optimizer step (every shard).
  // Host copies still running: blocks until they are done. Device copies:
  // the stream that will write waits for the copy on the device, the host
  // does not: `writer_stream(device)` asked now, for each device with copies
  // in flight (the optimizer may run on another stream than the one the
  // shard was saved from); without it, the stream each shard was saved from.
  // Cheap when nothing is in flight. kDeadlineExceeded after `timeout`; an
  // error `writer_stream` returns is returned; a failed copy is reported by
  // its save's futures, not here.
  virtual Status BeforeWrite(WriteBarrier barrier,
                             std::chrono::milliseconds timeout = std::chrono::minutes(10),
                             const WriterStream& writer_stream = nullptr) = 0;
  // Blocks until every save's copies completed (host and device): anything
  // may write the state then. kDeadlineExceeded after `timeout`.
  virtual Status WaitStaged(std::chrono::milliseconds timeout = std::chrono::minutes(10)) = 0;
  // Waits until every pending save is durable or failed; returns the first
  // background error since the previous Flush() (each is returned by one
  // Flush only), OK if none. kDeadlineExceeded on timeout, naming the steps
  // still in flight (a save whose copies are stuck fails by itself after
  // copy_timeout).
  virtual Status Flush(std::chrono::milliseconds timeout = std::chrono::minutes(10)) = 0;
  // Waits until tier-2 replication is idle; returns the first tier-2 error
  // not yet returned (tier-2 errors are never returned by Save or Flush).
  // kDeadlineExceeded on timeout. OK at once without a replica_root.
  virtual Status FlushReplication(std::chrono::milliseconds timeout = std::chrono::minutes(10)) = 0;

  virtual Result<LoadResult> Load(const DestPlanner& planner, const LoadOptions& options = {}) = 0;
  Result<LoadResult> Load(std::vector<TensorDest> dests, const LoadOptions& options = {}) {
    return Load([d = std::move(dests)](
                    const CheckpointReader&) -> Result<std::vector<TensorDest>> { return d; },
                options);
  }

  // Committed steps on tier 1, oldest first. (Tier 2 may hold more: see
  // ListReplicated; Load considers every tier.) With several ranks on
  // node-local roots: the steps the job's nodes hold.
  virtual Result<std::vector<uint64_t>> ListCommitted() = 0;
  // A reader of committed tier-1 `step` as Load sees it: on node-local
  // roots, the files this node lacks are read from the job's other nodes.
  // It must not outlive this Checkpointer.
  virtual Result<std::unique_ptr<CheckpointReader>> OpenReader(uint64_t step) = 0;
  // Committed steps on tier 2, oldest first; empty without a replica_root.
  virtual Result<std::vector<uint64_t>> ListReplicated() = 0;
  // Moves a tier-1 checkpoint that failed to load out of the way, to
  // "quarantine-step-<step>-<nonce>" (kept for inspection, never loaded or
  // deleted by retention), so a resumed run can save that step again, and
  // points LATEST at the newest one left if it named this step. OK when tier
  // 1 holds no such step (e.g. it failed on tier 2, or was moved already).
  // With several ranks on a shared root only rank 0 acts; the others return
  // OK. On node-local roots every node's root is tier 1: each rank calls it
  // (collectively, as Load), and the step is moved from every root that
  // holds it, once (by whichever rank of that node takes the root's lock).
  // Refused with kFailedPrecondition, nothing moved, for a step that a newer
  // committed step references (incremental: moving it would break that one
  // too; quarantine the newer one first, as LoadResult::skipped_steps, newest
  // first, does), or may reference (its manifest cannot be read), and for a
  // step of a format version this build does not know (not damage).
  virtual Status Quarantine(uint64_t step) = 0;

  // The run is complete at `step`, a committed step: writes the root's
  // COMPLETE marker durably with `info` (a JSON object: who finished it, e.g.
  // the Slurm job id), so that any later start of the same run can see it
  // and exit at once (ResumableTraining, stint.Resumable). With several
  // ranks only rank 0 writes; the others return OK. kFailedPrecondition on
  // a read_only Checkpointer or for a step that is not committed.
  virtual Status MarkComplete(uint64_t step, const std::string& info = "{}") = 0;
  // The root's marker; nullopt while the run is not complete. kDataLoss
  // naming the file when it is not a marker MarkComplete wrote.
  virtual Result<std::optional<CompletionMarker>> Completion() = 0;
  // Removes the marker, to train a finished run further on purpose (OK
  // when there is none; only rank 0 acts). kFailedPrecondition on a
  // read_only Checkpointer.
  virtual Status ClearCompletion() = 0;

  virtual CheckpointerStats stats() const = 0;
  virtual const CheckpointOptions& options() const = 0;
};

}  // namespace stint

#endif  // STINT_INCLUDE_STINT_CHECKPOINTER_H_
