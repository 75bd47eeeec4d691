#include "checkpoint/quarantine.h"

#include <cstdio>

#include "checkpoint/commit.h"
#include "checkpoint/retention.h"
#include "format/manifest.h"

namespace stint {
namespace {

// kFailedPrecondition, naming why, unless step-<step> may move (see
// MoveToQuarantine).
Status CheckQuarantinable(Env* env, const std::string& root, uint64_t step) {
  const std::string name = StepDirName(step);
  const std::string why = root + ": not quarantining " + name + ": ";
  const std::string path = root + "/" + name + "/" + kManifestName;
  auto bytes = ReadFileToString(env, path);
  if (bytes.ok()) {
    Status decoded = DecodeManifest(*bytes, path).status();
    if (decoded.code() == Code::kUnimplemented) {
      return Status::FailedPrecondition(why + decoded.message() +
                                        "; a newer format is left in place");
    }
  }
  STINT_ASSIGN_OR_RETURN(auto steps, ListCheckpointSteps(env, root));
  for (uint64_t newer : steps) {
    if (newer <= step) continue;
    auto referenced = ReferencedSteps(env, root, {newer});
    if (!referenced.ok()) {
      return Status::FailedPrecondition(why + "cannot tell whether " + StepDirName(newer) +
                                        " references it: " + referenced.status().ToString());
    }
    if (referenced->count(step) != 0) {
      return Status::FailedPrecondition(why + StepDirName(newer) +
                                        " references its data (incremental); quarantine " +
                                        StepDirName(newer) + " first");
    }
  }
  return Status::OK();
}

}  // namespace

Status MoveToQuarantine(Env* env, const std::string& root, uint64_t step) {
  STINT_RETURN_IF_ERROR(CheckQuarantinable(env, root, step));
  char suffix[24];
  std::snprintf(suffix, sizeof(suffix), "-%016llx", static_cast<unsigned long long>(RandomNonce()));
  STINT_RETURN_IF_ERROR(env->RenameFile(root + "/" + StepDirName(step),
                                        root + "/quarantine-" + StepDirName(step) + suffix));
  return env->SyncDir(root);
}

Status StopNamingInLatest(Env* env, const std::string& root, uint64_t step) {
  STINT_ASSIGN_OR_RETURN(auto latest, ReadLatest(env, root));
  if (!latest || *latest != StepDirName(step)) return Status::OK();
  STINT_ASSIGN_OR_RETURN(auto steps, ListCheckpointSteps(env, root));
  if (!steps.empty()) return WriteLatest(env, root, StepDirName(steps.back()));
  STINT_RETURN_IF_ERROR(env->RemoveFile(root + "/" + kLatestName));
  return env->SyncDir(root);
}

}  // namespace stint
