// CheckpointerImpl: the Checkpointer that Checkpointer::Open returns; its
// flow (Save -> snapshot -> persist -> commit, and Load) is in
// checkpointer.cc. Its parts each have their own unit: the copies that
// outlast Save() (lazy_barrier.h), the commit paths (save_commit.h), tier 0
// (memory_tier.h), the load fallback (load_fallback.h), the fenced-writer
// contract (writer_fence.h), tier 2 (replica.h) and the job's other nodes
// (peer_tier.h).
//
// Threads: the training thread calls Save/Load/Flush (thread-compatible);
// one persist thread, started in the constructor, persists and commits each
// queued save in turn and owns the write engine.
#ifndef STINT_RUNTIME_CHECKPOINT_CHECKPOINTER_IMPL_H_
#define STINT_RUNTIME_CHECKPOINT_CHECKPOINTER_IMPL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "base/thread_pool.h"
#include "checkpoint/commit.h"
#include "checkpoint/compress_policy.h"
#include "checkpoint/foreground_gate.h"
#include "checkpoint/incremental_base.h"
#include "checkpoint/lazy_barrier.h"
#include "checkpoint/load_fallback.h"
#include "checkpoint/memory_tier.h"
#include "checkpoint/node_commit.h"
#include "checkpoint/peer_tier.h"
#include "checkpoint/persist.h"
#include "checkpoint/replica.h"
#include "checkpoint/retention.h"
#include "checkpoint/save_commit.h"
#include "checkpoint/snapshot.h"
#include "checkpoint/snapshot_progress.h"
#include "checkpoint/staging_pool.h"
#include "checkpoint/writer_fence.h"
#include "io/io_engine.h"
#include "stint/checkpointer.h"

namespace stint {

// One save queued for the persist thread.
struct PersistJob {
  using Clock = std::chrono::steady_clock;

  Snapshot snapshot;
  uint64_t save_number = 0;  // this Checkpointer's count of Save() calls before this one
  std::promise<Status> durable;
  std::promise<Status> replicated;
  SaveStats stats;
  Clock::time_point saved_at;
  // Copies still running after Save() returned (lazy host, device); null if none.
  std::shared_ptr<SnapshotProgress> progress;
  size_t device_groups_waited = 0;  // the persist thread's place in progress's device groups
  PersistedFile file;  // set by a successful persist
  // Incremental: what this save compares against (its files are pinned
  // against retention until the save is done); null for a full save.
  std::shared_ptr<const IncrementalBase> base;
};

class CheckpointerImpl final : public Checkpointer {
 public:
  // `env` is options.env or the default; `store` (may be null) the object
  // store's Env that options.env or replica_env point at, owned here;
  // `root_lock` as PrepareRoots.
  CheckpointerImpl(const CheckpointOptions& options, Env* env, std::unique_ptr<Env> store,
                   std::unique_ptr<IoEngine> engine, std::unique_ptr<FileLock> root_lock);
  ~CheckpointerImpl() override;

  Result<SaveHandle> Save(uint64_t step, const State& state) override;
  Status BeforeWrite(WriteBarrier barrier, std::chrono::milliseconds timeout,
                     const WriterStream& writer_stream) override {
    return copies_.BeforeWrite(barrier, timeout, writer_stream);
  }
  Status WaitStaged(std::chrono::milliseconds timeout) override {
    return copies_.WaitStaged(timeout);
  }
  Status Flush(std::chrono::milliseconds timeout) override;
  Status FlushReplication(std::chrono::milliseconds timeout) override;
  Result<LoadResult> Load(const DestPlanner& planner, const LoadOptions& options) override;
  // Several ranks: starts this rank's file service for the job's other
  // nodes (peer_tier.h). Called once, by Open.
  Status StartPeers();
  Result<std::vector<uint64_t>> ListCommitted() override;
  Result<std::unique_ptr<CheckpointReader>> OpenReader(uint64_t step) override;
  Result<std::vector<uint64_t>> ListReplicated() override;
  Status Quarantine(uint64_t step) override;
  Status MarkComplete(uint64_t step, const std::string& info) override;
  Result<std::optional<CompletionMarker>> Completion() override;
  Status ClearCompletion() override;
  CheckpointerStats stats() const override;
  const CheckpointOptions& options() const override { return options_; }
  Status AbandonSave(uint64_t step, const Status& why) override;

 private:
  using Clock = std::chrono::steady_clock;

  // The training thread's part of a save, in order.
  Result<SaveHandle> StartSave(uint64_t step, const State& state, uint64_t number);
  Status CheckCanSave(uint64_t step, const State& state);
  Result<SaveHandle> TakeSnapshot(const State& state, std::unique_ptr<PersistJob> job);

  // The persist thread's, in order.
  void PersistLoop();
  Status WaitForCopies(PersistJob* job);
  void WaitForSnapshot(PersistJob* job);
  Status PersistAndCommit(PersistJob* job, std::unique_ptr<SaveCommit>* commit);
  std::unique_ptr<SaveCommit> NewCommit(const PersistJob& job);
  Status Persist(PersistJob* job, const std::string& tmp, PersistedFile* file);
  void ReportOutcome(std::unique_ptr<PersistJob> job, const Status& s);
  void RecordUnchanged(const SnapshotLayout& layout, const PersistedFile& file);
  void ApplyRetentionAfter(uint64_t step);

  void SetBase(std::shared_ptr<const IncrementalBase> base) {
    std::lock_guard<std::mutex> lock(mu_);
    base_ = std::move(base);
  }
  // Steps whose files the queued saves and the next save may reference.
  std::set<uint64_t> PinnedSteps();

  // An s3:// root or replica root's Env (Open made it). First: it
  // outlives everything that reads or writes through it.
  std::unique_ptr<Env> store_;
  // Background copies (tier 2, peer replicas, the file service) give way
  // to a save until it is staged. First: it outlives every holder.
  ForegroundGate gate_;
  // Writers with rank 0: the root's writer lock, released last (see
  // root_lock.h), or when a commit guard fenced this writer.
  WriterFence fence_;
  // Node keepers (rank > 0 on a node-local root): that root's writer lock,
  // taken at the first commit there (node_commit.h); the persist thread's.
  NodeRootLock node_lock_;
  CheckpointOptions options_;
  Env* const env_;
  Env* const replica_env_;
  DeviceCopier* const copier_;        // may be null; outlives this object
  std::unique_ptr<IoEngine> engine_;  // the persist thread's; the pool only unregisters buffers
  ThreadPool pool_;
  StagingPool staging_;
  MemoryTier memory_;  // tier 0; a Load holds its own reference to the image
  LazyBarrier copies_{&pool_, copier_, options_.copy_timeout};
  FallbackLoader loader_{options_, copier_, &memory_};

  mutable std::mutex mu_;
  std::condition_variable work_cv_, idle_cv_;
  // Guarded by mu_.
  std::deque<std::unique_ptr<PersistJob>> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  Status background_error_;                  // first error since the last Flush
  std::multiset<uint64_t> steps_in_flight_;  // queued or persisting
  CheckpointerStats stats_;
  std::shared_ptr<const IncrementalBase> base_;          // incremental: the newest commit
  // Incremental: the ShardKeys of the shards the last save found whole in
  // its base; the next save hashes them before staging (SourceHashing).
  std::shared_ptr<const std::unordered_set<std::string>> unchanged_shards_;
  uint64_t saves_started_ = 0;                           // the training thread's
  double last_persist_seconds_ = 0;                      // the persist thread's
  CompressPolicy compress_policy_{options_.zstd_level};  // the persist thread's

  RetentionGuard tier1_guard_;              // tier-1 retention skips the step being replicated
  // Several ranks: the job's other nodes (peer_tier.h).
  std::unique_ptr<PeerTier> peers_;
  std::unique_ptr<Replicator> replicator_;  // tier 2; with a replica_root only
  std::thread persist_thread_;              // started in the constructor, joined in the destructor
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_CHECKPOINTER_IMPL_H_
