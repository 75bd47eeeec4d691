#include "checkpoint/open_checks.h"

#include <string>
#include <utility>

#include "checkpoint/replica.h"
#include "checkpoint/root_lock.h"
#include "format/chunk.h"
#include "objstore/object_store_env.h"

namespace stint {

Status CheckOpenOptions(const CheckpointOptions& options) {
  if (options.root.empty()) return Status::InvalidArgument("CheckpointOptions.root is empty");
  if (options.chunk_size == 0 || options.chunk_size % kChunkAlignment != 0) {
    return Status::InvalidArgument("chunk_size must be a positive multiple of 4096, got " +
                                   std::to_string(options.chunk_size));
  }
  if (options.rank < 0 || options.world_size < 1 || options.rank >= options.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(options.rank) + " is not in world of " +
                                   std::to_string(options.world_size));
  }
  if (options.world_size > 1 && options.commit_channel == nullptr) {
    return Status::InvalidArgument("world_size " + std::to_string(options.world_size) +
                                   " needs CheckpointOptions.commit_channel (the job's store) for "
                                   "the commit across ranks");
  }
  if (options.incremental && options.keep_in_memory) {
    // A tier-0 image holds only what was written, not the referenced chunks.
    return Status::InvalidArgument("incremental and keep_in_memory (tier 0) cannot be combined");
  }
  if (IsObjectStorePath(options.root) && !options.read_only) {
    // Saves stage, write and commit on a disk; the store is where they go next.
    return Status::InvalidArgument(
        "root " + options.root + " is in an object store: open it read_only, or save to a "
        "local root with replica_root=\"" + options.root + "\" (uploaded after each commit)");
  }
  if (options.world_size > 1 && options.keep_in_memory) {
    // One rank's image is not a checkpoint of the job; tier 1/2 are.
    return Status::InvalidArgument(
        "keep_in_memory (tier 0) holds one process's image and is not "
        "available with world_size > 1");
  }
  return Status::OK();
}

Result<std::unique_ptr<FileLock>> PrepareRoots(Env* env, const CheckpointOptions& options) {
  if (!options.replica_root.empty()) {
    STINT_RETURN_IF_ERROR(CheckReplicaRoot(options.root, options.replica_root));
  }
  if (options.rank == 0) return OpenRootForWriting(env, options.root, options.lock_wait);
  STINT_RETURN_IF_ERROR(CreateDirWithParents(env, options.root));
  if (!env->IsDirectory(options.root)) {
    return Status::InvalidArgument(options.root + " exists and is not a directory");
  }
  return std::unique_ptr<FileLock>();
}

Result<std::unique_ptr<Env>> OpenObjectStoreEnv(CheckpointOptions* options) {
  const bool root_in_store = IsObjectStorePath(options->root) && options->env == nullptr;
  const bool replica_in_store =
      IsObjectStorePath(options->replica_root) && options->replica_env == nullptr;
  if (!root_in_store && !replica_in_store) return std::unique_ptr<Env>();
  STINT_ASSIGN_OR_RETURN(std::unique_ptr<ObjectStoreEnv> store,
                         ObjectStoreEnv::FromEnvironment(
                             options->env != nullptr ? options->env : Env::Default()));
  if (root_in_store) options->env = store.get();
  if (replica_in_store) options->replica_env = store.get();
  return std::unique_ptr<Env>(std::move(store));
}

}  // namespace stint
