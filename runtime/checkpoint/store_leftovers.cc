#include "checkpoint/store_leftovers.h"

#include "checkpoint/commit.h"
#include "format/manifest.h"
#include "objstore/object_store_env.h"

namespace stint {

// Multipart uploads under a store root that a killed writer never completed
// nor aborted: invisible, but stored (and billed) until aborted. None of
// them can be this process's: this runs when the writer takes the root's
// lock, before its first upload, or between a Replicator's steps, and the
// lock excludes every other writer of this process on the root (LockFile).
// A writer of another process is not excluded (a store has no locks): its
// uploads in flight go, as its manifest-less step prefixes do below. Best
// effort where the store is reached through a wrapper of ObjectStoreEnv
// (the cast fails, nothing is aborted), and where the server or the
// credential cannot list uploads (kUnimplemented; kPermissionDenied: a
// policy without s3:ListBucketMultipartUploads): a bucket lifecycle rule
// (AbortIncompleteMultipartUpload) then collects them.
Status AbortUploadsLeftBehind(Env* env, const std::string& root) {
  auto* store = dynamic_cast<ObjectStoreEnv*>(env);
  if (store == nullptr) return Status::OK();
  Status s = store->AbortUploadsUnder(root);
  if (s.code() == Code::kUnimplemented || s.code() == Code::kPermissionDenied) {
    return Status::OK();
  }
  return s.WithContext("cleaning an upload left behind");
}

Status CleanStoreLeftovers(Env* env, const std::string& root, const std::string& keep) {
  STINT_RETURN_IF_ERROR(AbortUploadsLeftBehind(env, root));
  STINT_ASSIGN_OR_RETURN(auto children, env->GetChildren(root));
  for (const auto& name : children) {
    if (name == keep) continue;
    if (ParseStepDirName(name) && !env->FileExists(root + "/" + name + "/" + kManifestName)) {
      STINT_RETURN_IF_ERROR(
          RemoveRecursively(env, root + "/" + name).WithContext("cleaning an upload left behind"));
    }
  }
  return Status::OK();
}

}  // namespace stint
