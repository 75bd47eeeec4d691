// What Checkpointer::Open checks and prepares before a Checkpointer exists:
// the options it refuses (alone or in combination), and the roots it makes
// ready for writing, the committer taking the root's writer lock.
#ifndef STINT_RUNTIME_CHECKPOINT_OPEN_CHECKS_H_
#define STINT_RUNTIME_CHECKPOINT_OPEN_CHECKS_H_

#include <memory>

#include "stint/checkpointer.h"
#include "stint/env.h"

namespace stint {

// kInvalidArgument naming the option(s) for options that cannot work:
// no root, a chunk_size that is not a positive multiple of 4096, a rank
// outside the world, several ranks without a commit_channel, tier 0 with
// incremental saves or with several ranks.
Status CheckOpenOptions(const CheckpointOptions& options);

// Creates the root with its parents. Rank 0 (the committer) takes the
// root's writer lock, returned, and removes leftovers; the other ranks write
// into its tmp directories and touch nothing else (null lock). Tier 2 is
// prepared by the Replicator.
Result<std::unique_ptr<FileLock>> PrepareRoots(Env* env, const CheckpointOptions& options);

// An s3:// root or replica root without an Env of the caller's: the store's
// Env, configured the AWS way over options->env (or the default), set as
// options->env / replica_env and returned for the Checkpointer to own
// (they point into it). Null when neither is in a store.
Result<std::unique_ptr<Env>> OpenObjectStoreEnv(CheckpointOptions* options);

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_OPEN_CHECKS_H_
