#include "checkpoint/retention.h"

#include <algorithm>

#include "checkpoint/commit.h"

namespace stint {

std::vector<uint64_t> StepsToDelete(std::vector<uint64_t> steps, int keep_last, uint64_t keep_every,
                                    std::optional<uint64_t> protect) {
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  std::vector<uint64_t> doomed;
  if (keep_last <= 0) return doomed;
  size_t keep_from = steps.size() > size_t(keep_last) ? steps.size() - size_t(keep_last) : 0;
  for (size_t i = 0; i < keep_from; ++i) {
    uint64_t s = steps[i];
    if (keep_every > 0 && s % keep_every == 0) continue;
    if (protect && *protect == s) continue;
    doomed.push_back(s);
  }
  return doomed;
}

Status DeleteCheckpoint(Env* env, const std::string& root, uint64_t step) {
  std::string dir = root + "/" + StepDirName(step);
  std::string doomed = root + "/" + kTmpPrefix + "deleting-" + StepDirName(step);
  STINT_RETURN_IF_ERROR(env->RenameFile(dir, doomed));
  STINT_RETURN_IF_ERROR(env->SyncDir(root));
  return RemoveRecursively(env, doomed);
}

void RetentionGuard::Hold(uint64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  held_ = step;
}

void RetentionGuard::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  held_.reset();
}

Status RetentionGuard::DeleteUnlessHeld(Env* env, const std::string& root, uint64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  if (held_ == step) return Status::OK();
  return DeleteCheckpoint(env, root, step);
}

Status ApplyRetention(Env* env, const std::string& root, int keep_last, uint64_t keep_every,
                      RetentionGuard* guard) {
  STINT_ASSIGN_OR_RETURN(auto steps, ListCheckpointSteps(env, root));
  std::optional<uint64_t> protect;
  auto latest = ReadLatest(env, root);
  if (latest.ok() && latest->has_value()) protect = ParseStepDirName(**latest);
  for (uint64_t step : StepsToDelete(steps, keep_last, keep_every, protect)) {
    Status deleted = guard != nullptr ? guard->DeleteUnlessHeld(env, root, step)
                                      : DeleteCheckpoint(env, root, step);
    STINT_RETURN_IF_ERROR(deleted.WithContext("retention"));
  }
  return Status::OK();
}

}  // namespace stint
