// PlacementIndex (tools/stintd/server/placement_index.h) against a walk over
// every segment, as a segment starts, grows onto another node, shrinks off
// one, ends, and as the state is reloaded. The index is kept up to date
// only with the ids of changed segments, as the coordinator does with
// Changes::segments.
#include "stintd/server/placement_index.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace stint::stintd {
namespace {

// Every (window, segment) pair of the active, placed segments, by walking them all.
std::vector<std::pair<int64_t, int64_t>> Walk(const ClusterState& s) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& [wid, w] : s.windows) {
    for (const auto& [sid, seg] : s.segments) {
      if (!SegmentActive(seg.state)) continue;
      for (const Placement& p : seg.placement) {
        if (p.window_id == wid) out.emplace_back(wid, sid);
      }
    }
  }
  return out;
}

Segment Placed(int64_t id, std::vector<Placement> placement) {
  Segment seg;
  seg.id = id;
  seg.job_id = 100 + id;
  seg.placement = std::move(placement);
  return seg;
}

TEST(PlacementIndex, FollowsStartsGrowsShrinksAndEnds) {
  ClusterState s;
  for (int64_t w : {1, 2, 3}) s.windows[w].id = w;
  PlacementIndex index;
  index.Rebuild(s);
  EXPECT_TRUE(index.On(1).empty());

  // Starts: one segment per node, one spanning two, one not placed (a
  // window without a node).
  s.segments[10] = Placed(10, {{1, {0, 1}}});
  s.segments[11] = Placed(11, {{2, {0}}, {3, {0}}});
  s.segments[12] = Placed(12, {});
  index.Update(s, {10, 11, 12});
  EXPECT_EQ(index.Pairs(), Walk(s));
  EXPECT_EQ(index.On(2), (std::set<int64_t>{11}));

  // Grow onto node 1, shrink off node 3.
  s.segments[11].placement = {{2, {0}}, {1, {2}}};
  index.Update(s, {11});
  EXPECT_EQ(index.Pairs(), Walk(s));
  EXPECT_TRUE(index.On(3).empty());
  EXPECT_EQ(index.On(1), (std::set<int64_t>{10, 11}));

  // A notified segment stays; an ended one leaves; a removed one leaves.
  s.segments[10].state = SegmentState::kNotified;
  s.segments[11].state = SegmentState::kCompleted;
  index.Update(s, {10, 11});
  EXPECT_EQ(index.Pairs(), Walk(s));
  EXPECT_EQ(index.On(1), (std::set<int64_t>{10}));
  s.segments.erase(10);
  index.Update(s, {10});
  EXPECT_TRUE(index.Pairs().empty());

  // Ids that name no segment and never did change nothing.
  s.segments[13] = Placed(13, {{3, {1, 2}}});
  index.Update(s, {13, 99});
  EXPECT_EQ(index.Pairs(), Walk(s));

  // A reload: the index is built from the state alone.
  PlacementIndex rebuilt;
  rebuilt.Rebuild(s);
  EXPECT_EQ(rebuilt.Pairs(), index.Pairs());
}

}  // namespace
}  // namespace stint::stintd
