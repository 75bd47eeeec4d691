// Tier 2: copying one committed checkpoint to a second root (a shared durable
// path), committed there with the same protocol as tier 1:
//
//   <dst>/.tmp-<step>-<nonce>/<data files>   copied, fdatasync'ed
//   <dst>/.tmp-<step>-<nonce>/MANIFEST.json  the source's bytes, fsync'ed
//   [verify: every chunk of the copy read back and checked]
//   rename -> <dst>/step-<step>; fsync <dst>; LATEST
//
// A failure leaves <dst> as it was (a crash leaves a .tmp- dir, removed by the
// next Checkpointer::Open or replication), and never touches the source.
#ifndef STINT_RUNTIME_CHECKPOINT_REPLICA_H_
#define STINT_RUNTIME_CHECKPOINT_REPLICA_H_

#include <cstdint>
#include <string>

#include "stint/env.h"

namespace stint {

struct ReplicateOptions {
  bool verify = true;           // read the copy back and check every checksum
  size_t copy_bytes = 8u << 20; // bytes per read/write
};

// Copies <src_root>/step-<step> to <dst_root>/step-<step> (see above).
// kNotFound when the source is not committed (anymore); OK without copying
// when the destination already holds that step. `copied` (may be null) gets
// the bytes written.
Status ReplicateCheckpoint(Env* src_env, const std::string& src_root, Env* dst_env,
                           const std::string& dst_root, uint64_t step, const ReplicateOptions& options,
                           uint64_t* copied = nullptr);

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_REPLICA_H_
