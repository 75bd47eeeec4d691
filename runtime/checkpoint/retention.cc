#include "checkpoint/retention.h"

#include <algorithm>

#include "checkpoint/commit.h"
#include "format/manifest.h"
#include "objstore/object_store_env.h"

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
  if (IsObjectStorePath(root)) {
    // A store renames no directory: removing the manifest first uncommits
    // the step at once (listings show only steps with one), then the rest
    // goes (what a crash leaves is CleanLeftovers').
    STINT_RETURN_IF_ERROR(env->RemoveFile(dir + "/" + kManifestName));
    return RemoveRecursively(env, dir);
  }
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

std::optional<uint64_t> RetentionGuard::held() {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

Status RetentionGuard::DeleteUnlessHeld(Env* env, const std::string& root, uint64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  if (held_ == step) return Status::OK();
  return DeleteCheckpoint(env, root, step);
}

namespace {

// The manifest of `step`; nullopt when the step or its MANIFEST is gone.
Result<std::optional<Manifest>> ReadStepManifest(Env* env, const std::string& root,
                                                 uint64_t step) {
  const std::string path = root + "/" + StepDirName(step) + "/" + kManifestName;
  auto bytes = ReadFileToString(env, path);
  if (!bytes.ok()) {
    if (bytes.status().code() == Code::kNotFound) return std::optional<Manifest>();
    return bytes.status();
  }
  STINT_ASSIGN_OR_RETURN(Manifest m, DecodeManifest(*bytes, path));
  return std::optional<Manifest>(std::move(m));
}

}  // namespace

Result<std::set<uint64_t>> ReferencedSteps(Env* env, const std::string& root,
                                           const std::set<uint64_t>& kept) {
  std::set<uint64_t> seen = kept, found;
  std::vector<uint64_t> todo(kept.begin(), kept.end());
  while (!todo.empty()) {
    const uint64_t step = todo.back();
    todo.pop_back();
    auto m = ReadStepManifest(env, root, step);
    if (!m.ok()) {
      return m.status().WithContext("what " + StepDirName(step) + " references is unknown");
    }
    if (!m->has_value()) continue;
    for (const std::string& dir : (*m)->ReferencedDirs()) {
      std::optional<uint64_t> referenced = ParseStepDirName(dir);
      if (!referenced) continue;
      found.insert(*referenced);
      if (seen.insert(*referenced).second) todo.push_back(*referenced);
    }
  }
  return found;
}

Status ApplyRetention(Env* env, const std::string& root, int keep_last, uint64_t keep_every,
                      RetentionGuard* guard, const std::set<uint64_t>& pinned,
                      std::string* held_back, const RetentionPins& pins) {
  if (held_back != nullptr) held_back->clear();
  STINT_ASSIGN_OR_RETURN(auto steps, ListCheckpointSteps(env, root));
  std::optional<uint64_t> protect;
  auto latest = ReadLatest(env, root);
  if (latest.ok() && latest->has_value()) protect = ParseStepDirName(**latest);
  std::vector<uint64_t> doomed = StepsToDelete(steps, keep_last, keep_every, protect);
  if (doomed.empty()) return Status::OK();
  auto hold_back = [&](const Status& why) {
    if (held_back != nullptr) *held_back = "retention deleted nothing: " + why.ToString();
    return Status::OK();
  };
  for (uint64_t step : doomed) {
    // A damaged manifest is deleted like any old step; one of a format this
    // build does not know, or one it cannot read now, is left alone.
    auto m = ReadStepManifest(env, root, step);
    if (!m.ok() && m.status().code() != Code::kDataLoss) {
      return hold_back(m.status().WithContext(StepDirName(step) + " cannot be judged"));
    }
  }
  std::set<uint64_t> keep = pinned;  // whatever StepsToDelete says
  if (pins) {
    Result<std::set<uint64_t>> named = pins();
    if (!named.ok()) return hold_back(named.status().WithContext("the pinned steps are unknown"));
    keep.insert(named->begin(), named->end());
  }
  std::set<uint64_t> kept(steps.begin(), steps.end());
  for (uint64_t s : doomed) kept.erase(s);
  kept.insert(keep.begin(), keep.end());
  if (guard != nullptr) {
    if (auto held = guard->held()) kept.insert(*held);
  }
  auto referenced = ReferencedSteps(env, root, kept);
  if (!referenced.ok()) return hold_back(referenced.status());
  for (uint64_t step : doomed) {
    if (keep.count(step) != 0) continue;
    if (referenced->count(step) != 0) continue;  // a kept checkpoint's chunks live there
    Status deleted = guard != nullptr ? guard->DeleteUnlessHeld(env, root, step)
                                      : DeleteCheckpoint(env, root, step);
    STINT_RETURN_IF_ERROR(deleted.WithContext("retention"));
  }
  return Status::OK();
}

}  // namespace stint
