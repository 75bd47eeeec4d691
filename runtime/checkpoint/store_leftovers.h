// What uploads into an object store leave behind, and its removal: an
// upload commits in place with its manifest last (commit.h, CommitInPlace),
// so a killed or failed one leaves a step prefix without a manifest, and
// multipart uploads nobody completed (invisible, but stored and billed).
// Apart from commit.cc, which stays free of the store (tools/fuzz.sh
// compiles it into the reader's fuzzer).
#ifndef STINT_RUNTIME_CHECKPOINT_STORE_LEFTOVERS_H_
#define STINT_RUNTIME_CHECKPOINT_STORE_LEFTOVERS_H_

#include <string>

#include "stint/env.h"
#include "stint/status.h"

namespace stint {

// For the holder of a store root's writer lock, before it writes: removes
// the step-* prefixes without a manifest (uploads that never committed,
// deletions cut short) and aborts the multipart uploads under the root
// (AbortUploadsLeftBehind). `keep` (a step-* name, or ""): a prefix left as
// it is, the upload this writer is about to resume (upload_resume.h).
Status CleanStoreLeftovers(Env* env, const std::string& root, const std::string& keep = "");

// In a store root (`env` an ObjectStoreEnv): aborts the multipart uploads
// under it that nobody completed; REQUIRES none of this process in flight
// there. OK at once elsewhere (see store_leftovers.cc for the limits).
Status AbortUploadsLeftBehind(Env* env, const std::string& root);

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_STORE_LEFTOVERS_H_
