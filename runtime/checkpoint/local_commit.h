// LocalCommit: the single-rank path of SaveCommit. This process creates the
// tmp directory, writes the manifest of its one data file there and commits
// it (commit.h), unless its writer was fenced (writer_fence.h) or a file the
// save references (incremental) is gone.
#ifndef STINT_RUNTIME_CHECKPOINT_LOCAL_COMMIT_H_
#define STINT_RUNTIME_CHECKPOINT_LOCAL_COMMIT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "checkpoint/save_commit.h"
#include "checkpoint/writer_fence.h"
#include "stint/checkpointer.h"
#include "stint/env.h"

namespace stint {

class LocalCommit final : public SaveCommit {
 public:
  // `options`, `env` and `fence` outlive this object.
  LocalCommit(const CheckpointOptions& options, Env* env, const WriterFence* fence, uint64_t step)
      : options_(options), env_(env), fence_(fence), step_(step) {}

  Result<std::string> Start() override;
  Status Finish(const Status& persisted, const Manifest& part, double persist_seconds) override;
  std::shared_ptr<const IncrementalBase> CommittedBase(const Manifest& part) override;
  double slowest_persist_seconds() const override { return persist_seconds_; }

 private:
  const CheckpointOptions& options_;
  Env* const env_;
  const WriterFence* const fence_;
  const uint64_t step_;
  std::string tmp_;  // set by Start()
  double persist_seconds_ = 0;
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_LOCAL_COMMIT_H_
