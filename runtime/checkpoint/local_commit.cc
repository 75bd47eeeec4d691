#include "checkpoint/local_commit.h"

#include "checkpoint/commit.h"

namespace stint {

Result<std::string> LocalCommit::Start() {
  // Queued before this writer was fenced: the root is not its own any more.
  STINT_RETURN_IF_ERROR(fence_->status());
  tmp_ = options_.root + "/" + TmpDirName(step_, RandomNonce());
  Status s = env_->CreateDir(tmp_);
  if (!s.ok()) {
    RemoveRecursively(env_, tmp_).IgnoreError();
    return s;
  }
  return tmp_;
}

Status LocalCommit::Finish(const Status& persisted, const Manifest& part, double persist_seconds) {
  persist_seconds_ = persist_seconds;
  Status s = persisted;
  if (s.ok()) {
    auto guard = [&](uint64_t at) -> Status {
      STINT_RETURN_IF_ERROR(CheckReferencedFiles(env_, options_.root, part));
      return options_.commit_guard ? options_.commit_guard(at) : Status::OK();
    };
    s = CommitCheckpoint(env_, options_.root, tmp_, step_, EncodeManifest(part), guard);
  }
  if (!s.ok()) {
    // Best effort: a crash here leaves a .tmp- dir that the next Open removes.
    RemoveRecursively(env_, tmp_).IgnoreError();
  }
  return s;
}

std::shared_ptr<const IncrementalBase> LocalCommit::CommittedBase(const Manifest& part) {
  return std::make_shared<IncrementalBase>(part, StepDirName(step_));
}

}  // namespace stint
