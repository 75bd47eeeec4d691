// `stintd migrate`: the whole state of one store copied into another (an
// SQLite file into PostgreSQL, or back), in one transaction of the target.
#ifndef STINT_TOOLS_STINTD_STORE_STORE_COPY_H_
#define STINT_TOOLS_STINTD_STORE_STORE_COPY_H_

#include <cstdint>

#include "stint/status.h"
#include "stintd/store/store.h"

namespace stint::stintd {

struct StoreCopyStats {
  int64_t pools = 0, windows = 0, teams = 0, jobs = 0, segments = 0, workers = 0, evals = 0;
  int64_t kv = 0;
};

// Copies everything `from` holds into `to`, which must be empty (no object
// and no kv entry: kFailedPrecondition, and nothing written). The objects
// and counters go in one Save; kv entries follow, one write each. `from`
// is only read.
Result<StoreCopyStats> CopyStore(Store& from, Store& to);

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_STORE_STORE_COPY_H_
