// One writer per checkpoint root. The writing Checkpointer (rank 0 of a job;
// a tier-2 Replicator for its replica root) holds <root>/.writer.lock, an
// advisory lock (Env::LockFile, flock(2)) holding "pid <pid> on host <host>",
// for its whole life. Only the holder removes leftovers (.tmp-* directories,
// LATEST.tmp): whoever left them is provably gone, since its lock went with
// it. Readers (read_only Checkpointers, CheckpointReader, the `stint` CLI)
// never lock and never remove anything, so they may open a root beside its
// writer. The lock file itself stays (removing it would let two writers lock
// two different files of that name).
#ifndef STINT_RUNTIME_CHECKPOINT_ROOT_LOCK_H_
#define STINT_RUNTIME_CHECKPOINT_ROOT_LOCK_H_

#include <chrono>
#include <memory>
#include <string>

#include "stint/env.h"

namespace stint {

constexpr char kWriterLockName[] = ".writer.lock";

// Creates `root` with its parents if missing (kInvalidArgument when it is
// not a directory), takes its writer lock and removes the leftovers. While
// another writer holds the lock, tries again until `wait` has passed, then
// fails with kFailedPrecondition naming the holder's pid and host.
// `keep`: a leftover-looking entry not to remove (see CleanLeftovers).
Result<std::unique_ptr<FileLock>> OpenRootForWriting(Env* env, const std::string& root,
                                                     std::chrono::milliseconds wait,
                                                     const std::string& keep = "");

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_ROOT_LOCK_H_
