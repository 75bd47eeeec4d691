// PlacementIndex: the active segments placed on each node window.
//
// A node's heartbeat answers with the segments placed on it (Assignments,
// node_routes.cc). Without an index that is a walk over every segment for every
// beat. The coordinator keeps this index beside its ClusterState: built from
// the state when it is loaded or reloaded, and brought up to date with the
// segment ids of every change it writes (Changes::segments: a segment whose
// placement or state changes is always among them, or the store would not
// persist it).
//
// Not thread-safe: the coordinator reads it under its shared lock and
// changes it under its exclusive one, like the state.
#ifndef STINT_TOOLS_STINTD_SERVER_PLACEMENT_INDEX_H_
#define STINT_TOOLS_STINTD_SERVER_PLACEMENT_INDEX_H_

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "stintd/core/model.h"

namespace stint::stintd {

class PlacementIndex {
 public:
  // Forgets everything and indexes every active, placed segment of `s`.
  void Rebuild(const ClusterState& s);

  // Re-indexes the segments `ids` as `s` now holds them (a segment that
  // ended, lost its placement or is gone from `s` leaves the index).
  void Update(const ClusterState& s, const std::set<int64_t>& ids);

  // The ids (ascending) of the active segments placed on `window_id`.
  const std::set<int64_t>& On(int64_t window_id) const;

  // Every (window, segment) pair, for tests.
  std::vector<std::pair<int64_t, int64_t>> Pairs() const;

 private:
  void Remove(int64_t segment_id);
  void Add(int64_t id, const Segment& seg);

  std::map<int64_t, std::set<int64_t>> by_window_;      // window -> segments placed on it
  std::map<int64_t, std::vector<int64_t>> windows_of_;  // segment -> the windows it is under
};

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SERVER_PLACEMENT_INDEX_H_
