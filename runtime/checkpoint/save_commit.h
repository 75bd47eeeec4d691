// SaveCommit: how the data file one save wrote becomes a committed
// checkpoint, on the persist thread. The Checkpointer takes one path per
// save and drives it alike: Start() names the tmp directory to write into,
// Finish() turns what was written into the save's outcome.
//
//   LocalCommit     (local_commit.h)  world_size 1: this process commits.
//   RankSaveCommit  (rank_commit.h)   several ranks each write their file;
//                                     the committer commits them together.
#ifndef STINT_RUNTIME_CHECKPOINT_SAVE_COMMIT_H_
#define STINT_RUNTIME_CHECKPOINT_SAVE_COMMIT_H_

#include <memory>
#include <string>

#include "checkpoint/incremental_base.h"
#include "format/manifest.h"
#include "stint/status.h"

namespace stint {

class SaveCommit {
 public:
  virtual ~SaveCommit() = default;

  // The tmp directory (full path) to write this rank's data file into.
  virtual Result<std::string> Start() = 0;
  // `persisted` OK: this rank's file is durable in the tmp directory, `part`
  // (BuildManifest) describes it, written in `persist_seconds`; else why
  // not. Returns the save's outcome; unless committed, the tmp directory is
  // removed.
  virtual Status Finish(const Status& persisted, const Manifest& part, double persist_seconds) = 0;
  // After Finish() committed an incremental save: what the next save
  // compares against; null when it cannot be had (the previous one stays).
  virtual std::shared_ptr<const IncrementalBase> CommittedBase(const Manifest& part) = 0;
  // After Finish(): the slowest rank's persist time, for the next save's
  // commit deadline (CommitTimeout).
  virtual double slowest_persist_seconds() const = 0;
  // After Finish() committed: whether the step's files are on several
  // nodes' roots (node_commit.h) and this rank leads its node there.
  virtual bool leads_node_part() const { return false; }
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_SAVE_COMMIT_H_
