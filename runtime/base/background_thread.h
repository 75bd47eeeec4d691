// Background threads (copies to peers and tier 2, the peer file service)
// run at a lower CPU and I/O priority than the training process's own
// threads: on a node whose cores they share, the training thread's
// collectives and its snapshot copies must not wait for them.
#ifndef STINT_RUNTIME_BASE_BACKGROUND_THREAD_H_
#define STINT_RUNTIME_BASE_BACKGROUND_THREAD_H_

#include "stint/status.h"

namespace stint {

// The nice value background threads run at (relative to 0).
constexpr int kBackgroundNice = 10;

// Lowers the calling thread's CPU priority to kBackgroundNice (Linux nice
// values are per thread) and its I/O priority to best-effort 7 (the lowest
// of its class; honoured by the BFQ and mq-deadline-with-priorities
// schedulers, ignored by "none"; left alone where a sandbox forbids it).
// Never raises a priority. Best effort: the errno of a failing call, naming
// it; the thread then runs as before.
Status LowerCurrentThreadPriority();

}  // namespace stint

#endif  // STINT_RUNTIME_BASE_BACKGROUND_THREAD_H_
