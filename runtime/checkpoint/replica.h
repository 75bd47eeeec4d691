// Tier 2: copying one committed checkpoint to a second root (a shared durable
// path), committed there with the same protocol as tier 1:
//
//   <dst>/.tmp-<step>-<nonce>/<data files>   copied, fdatasync'ed
//   <dst>/.tmp-<step>-<nonce>/MANIFEST.json  the source's bytes, fsync'ed
//   [verify: every chunk of the copy read back and checked]
//   rename -> <dst>/step-<step>; fsync <dst>; LATEST
//
// A failure leaves <dst> as it was (a crash leaves a .tmp- dir, removed by the
// next writer to lock <dst>, see root_lock.h), and never touches the source.
//
// Replicator runs that copy for a Checkpointer on a thread of its own.
#ifndef STINT_RUNTIME_CHECKPOINT_REPLICA_H_
#define STINT_RUNTIME_CHECKPOINT_REPLICA_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "checkpoint/foreground_gate.h"
#include "checkpoint/retention.h"
#include "format/manifest.h"
#include "stint/checkpointer.h"
#include "stint/env.h"

namespace stint {

struct ReplicateOptions {
  bool verify = true;            // read the copy back and check every checksum
  size_t copy_bytes = 8u << 20;  // bytes per read/write
  // Set: copy only these data files of the step (a node's part, for a peer
  // replica: node_commit.h), with the whole manifest; verify checks every
  // chunk stored in them. Unset: every file the manifest lists.
  std::optional<std::set<std::string>> only_files;
  // Set: waited on before each piece read (copying and verifying).
  const ForegroundGate* gate = nullptr;
};

// Copies <src_root>/step-<step> to <dst_root>/step-<step> (see above).
// kNotFound when the source is not committed (anymore); OK without copying
// when the destination already holds that step. `copied` (may be null) gets
// the bytes written.
Status ReplicateCheckpoint(Env* src_env, const std::string& src_root, Env* dst_env,
                           const std::string& dst_root, uint64_t step,
                           const ReplicateOptions& options, uint64_t* copied = nullptr);

// Every chunk stored in `files` of `dir` (not those they reference), read
// back and checked against `m`'s XXH3, and each file's size and digest:
// kDataLoss naming the file and offset of the first that is wrong.
// `gate` (may be null) is waited on before each chunk.
Status VerifyStoredChunks(Env* env, const std::string& dir, const Manifest& m,
                          const std::set<std::string>& files,
                          const ForegroundGate* gate = nullptr);

// Checkpointer::Open's checks of a replica root: kInvalidArgument when it is
// `root` or inside it. Pure.
Status CheckReplicaRoot(const std::string& root, const std::string& replica_root);

// Tier 2 for a Checkpointer: it holds the replica root's writer lock (see
// root_lock.h), taken at construction or, while the path is down or another
// writer holds it, at each replication until it is held; an error there is
// that replication's and never fails Open. Each tier-1 commit is queued, and one thread
// copies only the newest queued step (a backlog means the shared path is
// slower than the saves, and an older step there is worth nothing once a
// newer one is), then applies tier-2 retention. Tier-2 errors never reach
// tier 1: they are counted in the stats and kept for TakeError().
//
// Thread-safe. The thread starts in the constructor; the destructor lets it
// replicate the newest queued step, then joins it.
class Replicator {
 public:
  using Clock = std::chrono::steady_clock;

  // Copies from options.root in options.env to options.replica_root in
  // options.replica_env, verifying as options.replica_verify says and
  // keeping replica_keep_last/replica_keep_every there. REQUIRES: env and
  // replica_env set; both outlive this object. `source_guard` keeps tier-1
  // retention off the step being copied; it must outlive this object.
  // `source_env`: tier 1 as the loads read it (PeerReadEnv on node-local
  // roots, whose files are on several nodes); null: options.env.
  // `gate` (may be null; outlives this object): the copies give way to
  // the Checkpointer's saves.
  Replicator(const CheckpointOptions& options, RetentionGuard* source_guard,
             Env* source_env = nullptr, const ForegroundGate* gate = nullptr);
  // Where else a Replicator copies to: a peer-replica directory
  // (peer_replicator.h) takes a chosen part of each step.
  struct Target {
    Env* env = nullptr;
    std::string root;
    int keep_last = 3;
    uint64_t keep_every = 0;
    bool verify = true;
    std::string what = "tier 2";  // names it in errors
    // The files of a step (its committed manifest) to copy: nullopt for all;
    // an empty set for none (the step is then done at once).
    std::function<std::optional<std::set<std::string>>(const Manifest&)> select;
    // After a step is committed at the target.
    std::function<void(uint64_t step)> committed;
    // How long a file missing at the source is waited for before the step
    // counts as removed by retention: a peer node publishes its part of a
    // step only after the commit that queued it here.
    std::chrono::milliseconds source_patience{0};
    // The copies give way to these saves (may be null; outlives the Replicator).
    const ForegroundGate* gate = nullptr;
    // At construction, queue the newest step committed at the source that
    // the target lacks (a restart after the last replication failed or was
    // cut off: upload_resume.h reuses what an upload into a store left),
    // keeping its leftovers at the target from the open's cleanup.
    bool catch_up = false;
  };
  Replicator(const CheckpointOptions& options, RetentionGuard* source_guard, Env* source_env,
             Target target);
  ~Replicator();
  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  // Queues committed `step`, whose save began at `saved_at`. `done` is set
  // to OK once it is committed on tier 2; kCancelled when a newer step was
  // replicated instead or tier-1 retention deleted it first; the tier-2
  // error otherwise.
  void Enqueue(uint64_t step, Clock::time_point saved_at, std::promise<Status> done);

  // Waits until nothing is queued or replicating; false at the deadline.
  bool WaitUntilIdle(Clock::time_point deadline);
  // The first error since the last call (OK if none); clears it.
  Status TakeError();
  struct Counts {
    uint64_t replicated = 0, failed = 0, superseded = 0;
    std::optional<ReplicaStats> last;
    std::string last_error;
  };
  Counts counts() const;

 private:
  struct Job {
    uint64_t step;
    Clock::time_point saved_at;
    std::promise<Status> done;
  };

  void Loop();
  // Copies one step and applies tier-2 retention; the step's outcome.
  Status Replicate(const Job& job);
  void RecordError(const Status& s);
  // Whether a newer step waits (this one is superseded) or the loop stops.
  bool NewerQueuedOrStopping();
  // Takes the replica root's writer lock unless held (creating the root and
  // removing leftovers but resume_dir_, as Checkpointer::Open does for `root`).
  Status LockReplicaRoot();
  // The newest step committed at the source that the target lacks; nullopt
  // when there is none (or the source cannot be listed).
  std::optional<uint64_t> NewestMissingAtTarget();

  // Immutable after construction.
  Env* const src_env_;
  const std::string src_root_;
  const Target target_;
  const RetentionPins pins_;  // options.retention_pins: kept in tier 2 too
  RetentionGuard* const source_guard_;
  // The step directory a catch-up replication resumes ("" for none).
  std::string resume_dir_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_, idle_cv_;
  // Guarded by mu_.
  std::deque<Job> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  Status error_;  // first error not yet returned by TakeError
  uint64_t replicated_ = 0, failed_ = 0, superseded_ = 0;
  std::optional<ReplicaStats> last_;
  std::string last_error_;

  std::unique_ptr<FileLock> replica_lock_;  // the constructor's, then the thread's

  std::thread thread_;  // started in the constructor, joined in the destructor
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_REPLICA_H_
