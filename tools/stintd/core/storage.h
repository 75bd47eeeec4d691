// Where a job's checkpoints are, and which pools can read them.
//
// Workers report each committed step's location (its root or replica root,
// as they name it: "/mnt/ckpt/job7", "s3://bucket/runs/job7"); an admin
// declares what storage each pool's nodes reach (Pool::storage: path and
// object-store prefixes). A pool reaches a location when one of its
// prefixes holds it: pools that list the same prefix share that storage.
// A location under none of its own pool's prefixes (a node's disk, a path
// nobody declared) is reached from that pool only. A pool that declares
// nothing reaches every location: before storage was declared, every pool
// saw one checkpoint directory.
//
// A pending job starts only in a pool that reaches its newest located step;
// a running segment moves only to a pool that reaches where it writes (its
// emergency checkpoint goes there before it acks). Reading the step from an
// object store costs transfer time, which the planner adds to the restart.
#ifndef STINT_TOOLS_STINTD_CORE_STORAGE_H_
#define STINT_TOOLS_STINTD_CORE_STORAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "stint/status.h"
#include "stintd/core/model.h"

namespace stint::stintd {

// An absolute path or an s3://bucket[/prefix] URL of at most 1024 bytes,
// without whitespace, control characters, a query or "..": the location or
// storage prefix named `what`, with trailing slashes dropped.
Result<std::string> NormalizeLocation(const char* what, const std::string& location);

// Validates and normalizes a pool's storage prefixes (duplicates dropped).
Result<std::vector<std::string>> NormalizeStorage(const std::vector<std::string>& storage);

// True when `location` is `prefix` or lies below it (whole path components).
bool LocationUnder(const std::string& prefix, const std::string& location);

bool IsObjectStoreLocation(const std::string& location);

// Whether `pool` (null: a window of a pool nobody registered) can read the
// step at `location`, which `at.pool` reported (see above).
bool PoolReaches(const ClusterState& s, const Pool* pool, const std::string& location,
                 const StoredStep& at);

// What a start of `job` in `pool` can resume from.
struct StepReach {
  bool reachable = true;  // false: not from this pool
  int64_t step = -1;      // the newest located step (-1: none reported: no constraint)
  // Bytes read from an object store first: the pool reaches the step only there.
  uint64_t transfer_bytes = 0;
  std::string where;  // the locations that hold it, for a reason's detail
};
// For a start of a pending job: its newest located step.
StepReach NewestStepReach(const ClusterState& s, const Job& job, const Pool* pool);
// For a move of the running `segment_id`: the locations that segment
// reported (its emergency checkpoint reaches them before it acks); no
// constraint before it reported one.
StepReach SegmentReach(const ClusterState& s, const Job& job, int64_t segment_id,
                       const Pool* pool);

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_CORE_STORAGE_H_
