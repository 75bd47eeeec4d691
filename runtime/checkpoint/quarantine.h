// Quarantine: a damaged checkpoint (LoadResult::skipped_steps) is moved
// aside to <root>/quarantine-step-<step>-<nonce>, where no Load tries it
// again and retention never deletes it, and LATEST stops naming it. Only the
// holder of the root's writer lock (the committer) does this.
#ifndef STINT_RUNTIME_CHECKPOINT_QUARANTINE_H_
#define STINT_RUNTIME_CHECKPOINT_QUARANTINE_H_

#include <cstdint>
#include <string>

#include "stint/env.h"

namespace stint {

// Moves step-<step> aside and fsyncs the root. Only what is damaged and
// what nothing left behind needs moves: kFailedPrecondition, naming why,
// for a step of a format this build does not know (a newer stint's
// checkpoint is not damage) and for one a newer committed step references
// (moving it would break that one too), or may reference (its manifest
// cannot be read).
Status MoveToQuarantine(Env* env, const std::string& root, uint64_t step);

// When LATEST names step-<step>, points it at the newest committed step, or
// removes it when there is none: LATEST must not go on naming what is gone,
// or every later Load tries (and every later Quarantine moves) it again.
Status StopNamingInLatest(Env* env, const std::string& root, uint64_t step);

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_QUARANTINE_H_
