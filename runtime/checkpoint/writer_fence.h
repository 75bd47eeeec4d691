// WriterFence: the fenced-writer contract of a writing Checkpointer. A commit
// guard (or, on the committer, a token guard for this writer's own token)
// answering kAborted means this writer incarnation is stale, e.g. its
// segment was requeued elsewhere. It can never commit again, so it refuses
// every later save and lets go of the root's writer lock at once: the
// writer that replaced it may be waiting for the lock (lock_wait).
//
// Thread-safe.
#ifndef STINT_RUNTIME_CHECKPOINT_WRITER_FENCE_H_
#define STINT_RUNTIME_CHECKPOINT_WRITER_FENCE_H_

#include <memory>
#include <mutex>

#include "stint/checkpointer.h"
#include "stint/env.h"
#include "stint/status.h"

namespace stint {

class WriterFence {
 public:
  // `root_lock`: the root's writer lock (null on ranks other than 0 and on
  // readers), held until this object goes or the writer is fenced.
  explicit WriterFence(std::unique_ptr<FileLock> root_lock) : root_lock_(std::move(root_lock)) {}
  WriterFence(const WriterFence&) = delete;
  WriterFence& operator=(const WriterFence&) = delete;

  // Wraps options->commit_guard and options->token_guard (those set) so that
  // kAborted fences this writer; from the token guard only for
  // options->fencing_token (a stale peer's token fails that commit only).
  // REQUIRES: this object outlives every call of the wrapped guards.
  void GuardCommits(CheckpointOptions* options);

  // OK, or what fenced this writer.
  Status status() const;
  // Refuses every later save and releases the root's writer lock.
  void Fence(const Status& why);

 private:
  mutable std::mutex mu_;
  std::unique_ptr<FileLock> root_lock_;  // guarded by mu_
  Status fenced_;                        // guarded by mu_
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_WRITER_FENCE_H_
