#include "checkpoint/commit.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "checkpoint/completion.h"
#include "format/manifest.h"

namespace stint {

std::string StepDirName(uint64_t step) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "step-%08llu", static_cast<unsigned long long>(step));
  return buf;
}

std::optional<uint64_t> ParseStepDirName(const std::string& name) {
  if (name.size() < 6 || name.compare(0, 5, "step-") != 0 || name.size() > 5 + 20)
    return std::nullopt;
  uint64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    uint64_t next = v * 10 + uint64_t(name[i] - '0');
    if (next / 10 != v) return std::nullopt;  // overflow
    v = next;
  }
  if (StepDirName(v) != name) return std::nullopt;  // only the canonical spelling names a step
  return v;
}

std::string RankFileName(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank-%05d.stint", rank);
  return buf;
}

uint64_t RandomNonce() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd() ^
         uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
}

std::string TmpDirName(uint64_t step, uint64_t nonce) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s%llu-%016llx", kTmpPrefix,
                static_cast<unsigned long long>(step), static_cast<unsigned long long>(nonce));
  return buf;
}

std::optional<uint64_t> ParseTmpDirStep(const std::string& name) {
  const std::string prefix = kTmpPrefix;
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  std::string rest = name.substr(prefix.size());
  const std::string deleting = "deleting-";
  if (rest.compare(0, deleting.size(), deleting) == 0)
    return ParseStepDirName(rest.substr(deleting.size()));
  size_t dash = rest.find('-');
  if (dash == 0 || dash == std::string::npos || dash > 20) return std::nullopt;
  uint64_t v = 0;
  for (size_t i = 0; i < dash; ++i) {
    if (rest[i] < '0' || rest[i] > '9') return std::nullopt;
    uint64_t next = v * 10 + uint64_t(rest[i] - '0');
    if (next / 10 != v) return std::nullopt;
    v = next;
  }
  return v;
}

Status CleanLeftovers(Env* env, const std::string& root, const std::string& keep) {
  STINT_ASSIGN_OR_RETURN(auto children, env->GetChildren(root));
  for (const auto& name : children) {
    if (name == keep) continue;
    if (name.compare(0, sizeof(kTmpPrefix) - 1, kTmpPrefix) == 0 ||
        name == std::string(kLatestName) + ".tmp" || name == std::string(kCompleteName) + ".tmp") {
      STINT_RETURN_IF_ERROR(
          RemoveRecursively(env, root + "/" + name).WithContext("cleaning leftovers"));
    }
  }
  return Status::OK();
}

Status CommitCheckpoint(Env* env, const std::string& root, const std::string& tmp_dir,
                        uint64_t step, const std::string& manifest_bytes,
                        const std::function<Status(uint64_t step)>& guard) {
  STINT_RETURN_IF_ERROR(WriteTmpManifest(env, tmp_dir, manifest_bytes));
  return RenameToStep(env, root, tmp_dir, step, guard);
}

Status WriteTmpManifest(Env* env, const std::string& tmp_dir, const std::string& manifest_bytes) {
  STINT_RETURN_IF_ERROR(WriteStringToFileSync(env, tmp_dir + "/" + kManifestName, manifest_bytes));
  // The data files' and manifest's entries must be durable before the rename
  // makes the directory visible as committed.
  return env->SyncDir(tmp_dir);
}

Status RenameToStep(Env* env, const std::string& root, const std::string& tmp_dir, uint64_t step,
                    const std::function<Status(uint64_t step)>& guard) {
  std::string final_dir = root + "/" + StepDirName(step);
  if (env->FileExists(final_dir)) {
    return Status::AlreadyExists(final_dir + " is already committed; refusing to overwrite it");
  }
  // As late as possible: a fencing check answered before the data was
  // written would leave the whole persist time for a newer incarnation to
  // start in between.
  if (guard) STINT_RETURN_IF_ERROR(guard(step));
  STINT_RETURN_IF_ERROR(env->RenameFile(tmp_dir, final_dir));
  STINT_RETURN_IF_ERROR(env->SyncDir(root));
  return WriteLatest(env, root, StepDirName(step));
}

Status CommitInPlace(Env* env, const std::string& root, uint64_t step,
                     const std::string& manifest_bytes,
                     const std::function<Status(uint64_t step)>& guard) {
  const std::string dir = root + "/" + StepDirName(step);
  if (env->FileExists(dir + "/" + kManifestName)) {
    return Status::AlreadyExists(dir + " is already committed; refusing to overwrite it");
  }
  if (guard) STINT_RETURN_IF_ERROR(guard(step));
  STINT_RETURN_IF_ERROR(WriteStringToFileSync(env, dir + "/" + kManifestName, manifest_bytes));
  return WriteLatest(env, root, StepDirName(step));
}

Status WriteLatest(Env* env, const std::string& root, const std::string& dir_name) {
  std::string tmp = root + "/" + kLatestName + ".tmp";
  STINT_RETURN_IF_ERROR(WriteStringToFileSync(env, tmp, dir_name + "\n"));
  STINT_RETURN_IF_ERROR(env->RenameFile(tmp, root + "/" + kLatestName));
  return env->SyncDir(root);
}

Result<std::optional<std::string>> ReadLatest(Env* env, const std::string& root) {
  const std::string path = root + "/" + kLatestName;
  auto file = env->NewRandomAccessFile(path, FileOptions{});
  if (!file.ok()) {
    if (file.status().code() == Code::kNotFound) return std::optional<std::string>();
    return file.status();
  }
  // "step-" and 20 digits, a line end. Whatever else LATEST holds (or, as a
  // link, points at) is neither read whole nor repeated: it may be any file.
  constexpr size_t kMaxLatestBytes = 32;
  STINT_ASSIGN_OR_RETURN(uint64_t size, (*file)->Size());
  std::string name(std::min<uint64_t>(size, kMaxLatestBytes), '\0');
  STINT_ASSIGN_OR_RETURN(size_t n, (*file)->Read(0, name.size(), name.data()));
  name.resize(n);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
  if (size > kMaxLatestBytes || !ParseStepDirName(name)) {
    return Status::DataLoss(path + " does not hold a step-* name (" + std::to_string(size) +
                            " bytes, not shown)");
  }
  return std::optional<std::string>(name);
}

Result<std::vector<uint64_t>> ListCheckpointSteps(Env* env, const std::string& root) {
  STINT_ASSIGN_OR_RETURN(auto children, env->GetChildren(root));
  std::vector<uint64_t> steps;
  for (const auto& name : children) {
    auto step = ParseStepDirName(name);
    if (step && env->FileExists(root + "/" + name + "/" + kManifestName)) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

}  // namespace stint
