// Shard layout: a tensor's shards as N-dimensional boxes of its global shape.
//
// A box is (offsets, extents), one entry per dimension, and names the
// elements offsets[d] <= i[d] < offsets[d] + extents[d]. A layout is sound
// when every shard lies inside the shape and no two shards overlap; it is
// complete when the shards also cover every element. The committer of a save
// requires both (CheckShardLayout); a reader requires soundness of a manifest
// (ValidateManifest) and reports a region no shard covers when it is asked
// for (FindUncovered). Pure functions on offsets and extents: no chunks, no I/O.
#ifndef STINT_RUNTIME_FORMAT_SHARD_LAYOUT_H_
#define STINT_RUNTIME_FORMAT_SHARD_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/manifest.h"
#include "stint/status.h"

namespace stint {

struct Box {
  std::vector<int64_t> offsets;
  std::vector<int64_t> extents;
};

Box ShardBox(const ShardRecord& s);

// Elements in the box: the product of its extents, 1 for rank 0.
// REQUIRES: extents >= 0 and the product fits in uint64_t (true for any box
// inside a shape whose volume fits, see ShapeVolume).
uint64_t BoxVolume(const Box& b);
// The product of `shape`, or nullopt when it does not fit in int64_t or a
// dimension is negative.
std::optional<uint64_t> ShapeVolume(const std::vector<int64_t>& shape);

// The common part of two boxes of one rank; a box of volume 0 when they do
// not meet. REQUIRES: a and b have the same rank.
Box Intersect(const Box& a, const Box& b);

// "[0, 4]+[2, 4]": offsets, then extents.
std::string BoxString(const Box& b);
// "rank 3" for "rank-00003.stint", else the file name itself.
std::string ShardFileLabel(std::string_view file);

// What is wrong with a tensor's layout, as a sentence naming the boxes and
// files ("tensor 'w': shard [0, 0]+[2, 4] (rank 0) overlaps ..."); empty when
// nothing is. Checks rank, non-negative offsets and extents, inside the
// shape, no overlap and, with `require_cover`, that the shards cover the
// whole tensor (a rank-0 tensor needs exactly one shard). Runs in about
// O(n log n) for layouts cut along one dimension and O(n * sqrt(n)) for grids.
std::string FindShardLayoutProblem(const TensorRecord& t, bool require_cover);

// For the committer: the shards reported for `t` form one complete, sound
// layout. kInvalidArgument "<origin>: <problem>" otherwise.
Status CheckShardLayout(const TensorRecord& t, std::string_view origin);

// A sub-box of `region` that none of `boxes` covers, or nullopt when they
// cover all of it. REQUIRES: `boxes` do not overlap one another, have the
// rank of `region`, and lie inside a shape whose volume fits (ShapeVolume).
std::optional<Box> FindUncovered(const Box& region, const std::vector<Box>& boxes);

}  // namespace stint

#endif  // STINT_RUNTIME_FORMAT_SHARD_LAYOUT_H_
