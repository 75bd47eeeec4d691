#include "checkpoint/writer_fence.h"

#include <cstdint>

namespace stint {

void WriterFence::GuardCommits(CheckpointOptions* options) {
  if (options->commit_guard) {
    options->commit_guard = [this, guard = options->commit_guard](uint64_t step) {
      Status s = guard(step);
      if (s.code() == Code::kAborted) Fence(s);
      return s;
    };
  }
  if (options->token_guard) {
    options->token_guard = [this, guard = options->token_guard,
                            own = options->fencing_token](uint64_t token) {
      Status s = guard(token);
      if (s.code() == Code::kAborted && token == own) Fence(s);
      return s;
    };
  }
}

Status WriterFence::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fenced_;
}

void WriterFence::Fence(const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fenced_.ok()) fenced_ = why;
  root_lock_.reset();
}

}  // namespace stint
