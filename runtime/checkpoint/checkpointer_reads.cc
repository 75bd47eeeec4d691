// Checkpointer, the side that reads a root or marks what is in it: Load()
// through the tiers, the lists of steps, a reader of one step, quarantine
// of a damaged step, the COMPLETE marker, and the stats. The save spine is
// checkpointer.cc; the class and its parts: checkpointer_impl.h.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpointer_impl.h"
#include "checkpoint/completion.h"
#include "checkpoint/quarantine.h"
#include "checkpoint/root_lock.h"
#include "format/manifest.h"

namespace stint {

// The newest checkpoint that loads, on every rank the same step
// (load_fallback.h).
Result<LoadResult> CheckpointerImpl::Load(const DestPlanner& planner, const LoadOptions& options) {
  if (peers_ != nullptr) {
    // Every rank's file service, so a node that lacks a file (a replacement
    // for a lost one) reads it from the node that has it.
    STINT_RETURN_IF_ERROR(peers_->Refresh().WithContext("load"));
  }
  return loader_.Load(planner, options);
}

Result<std::vector<uint64_t>> CheckpointerImpl::ListCommitted() {
  auto here = ListCheckpointSteps(env_, options_.root);
  if (peers_ == nullptr) return here;
  return peers_->ListCommitted(std::move(here));
}

Result<std::unique_ptr<CheckpointReader>> CheckpointerImpl::OpenReader(uint64_t step) {
  if (peers_ != nullptr) STINT_RETURN_IF_ERROR(peers_->Refresh());
  ReaderOptions ro;
  ro.env = peers_ != nullptr ? peers_->read_env() : env_;
  ro.io_engine = options_.io_engine;
  ro.direct_io = options_.direct_io;
  ro.queue_depth = options_.io_queue_depth;
  return CheckpointReader::Open(options_.root + "/" + StepDirName(step), ro);
}

Result<std::vector<uint64_t>> CheckpointerImpl::ListReplicated() {
  if (options_.replica_root.empty()) return std::vector<uint64_t>();
  return ListCheckpointSteps(replica_env_, options_.replica_root);
}

Status CheckpointerImpl::Quarantine(uint64_t step) {
  // A shared root: the committer (rank 0) moves it, once. Node-local roots:
  // each node's root holds the step too, and a skipped step left in one of
  // them refuses the next save of that step there ("already committed"), so
  // the rank whose root it is moves it as well. Its keeper's lock is taken
  // only by its first save, after the load: here the root's writer lock is
  // tried without waiting and held for the move alone. Another holder
  // (rank 0 of a shared root, this node's keeper, another rank of this
  // node quarantining it) moves it itself.
  std::unique_ptr<FileLock> this_node;
  if (options_.rank != 0 && !node_lock_.held()) {
    if (!env_->FileExists(options_.root + "/" + StepDirName(step))) return Status::OK();
    auto lock = OpenRootForWriting(env_, options_.root, std::chrono::milliseconds(0));
    if (!lock.ok()) {
      return lock.status().code() == Code::kFailedPrecondition ? Status::OK() : lock.status();
    }
    this_node = std::move(*lock);
  }
  if (env_->FileExists(options_.root + "/" + StepDirName(step))) {
    STINT_RETURN_IF_ERROR(MoveToQuarantine(env_, options_.root, step));
    if (options_.incremental) {
      // The next save must not reference what was moved away.
      auto base = IncrementalBase::LoadNewest(env_, options_.root);
      SetBase(base.ok() ? std::move(*base) : nullptr);
    }
  }
  return StopNamingInLatest(env_, options_.root, step);
}

Status CheckpointerImpl::MarkComplete(uint64_t step, const std::string& info) {
  if (options_.read_only) {
    return Status::FailedPrecondition(options_.root + ": opened read_only; not marking step " +
                                      std::to_string(step) + " complete");
  }
  // The committer writes it, once, and on node-local roots every node's keeper.
  if (options_.rank != 0 && !node_lock_.held()) return Status::OK();
  if (!env_->FileExists(options_.root + "/" + StepDirName(step) + "/" + kManifestName)) {
    return Status::FailedPrecondition(options_.root + ": step " + std::to_string(step) +
                                      " is not committed; a run completes at a durable step");
  }
  return WriteCompletion(env_, options_.root, step, info);
}

Result<std::optional<CompletionMarker>> CheckpointerImpl::Completion() {
  return ReadCompletion(env_, options_.root);
}

Status CheckpointerImpl::ClearCompletion() {
  if (options_.read_only) {
    return Status::FailedPrecondition(options_.root + ": opened read_only; not clearing COMPLETE");
  }
  if (options_.rank != 0 && !node_lock_.held()) return Status::OK();
  return RemoveCompletion(env_, options_.root);
}

CheckpointerStats CheckpointerImpl::stats() const {
  CheckpointerStats stats;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats = stats_;
  }
  stats.in_memory_step = memory_.step();
  if (peers_ != nullptr) peers_->FillStats(&stats);
  if (replicator_ != nullptr) {
    Replicator::Counts c = replicator_->counts();
    stats.replicated = c.replicated;
    stats.replica_failed = c.failed;
    stats.replica_superseded = c.superseded;
    stats.last_replica = std::move(c.last);
    stats.last_replica_error = std::move(c.last_error);
  }
  return stats;
}

}  // namespace stint
