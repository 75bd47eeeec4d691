#include "format/shard_layout.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace stint {
namespace {

std::string DimsString(const std::vector<int64_t>& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

int64_t End(const Box& b, size_t d) { return b.offsets[d] + b.extents[d]; }

// Boxes of one rank share at least one element.
bool Meet(const Box& a, const Box& b) {
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    if (std::max(a.offsets[d], b.offsets[d]) >= std::min(End(a, d), End(b, d))) return false;
  }
  return true;
}

// Same, ignoring dimension `skip`.
bool MeetOutside(const Box& a, const Box& b, size_t skip) {
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    if (d != skip && std::max(a.offsets[d], b.offsets[d]) >= std::min(End(a, d), End(b, d))) {
      return false;
    }
  }
  return true;
}

uint64_t CoveredVolume(const Box& region, const std::vector<const Box*>& boxes) {
  uint64_t sum = 0;
  for (const Box* b : boxes) sum += BoxVolume(Intersect(region, *b));
  return sum;
}

// The dimension whose shard offsets take the most distinct values: sweeping
// along it keeps the set of shards alive at one coordinate small (one for a
// layout cut along one dimension, a row of a grid otherwise).
size_t SweepDim(const std::vector<Box>& boxes, const std::vector<size_t>& live, size_t rank) {
  size_t best = 0, best_count = 0;
  std::vector<int64_t> starts;
  for (size_t d = 0; d < rank; ++d) {
    starts.clear();
    for (size_t i : live) starts.push_back(boxes[i].offsets[d]);
    std::sort(starts.begin(), starts.end());
    size_t count = size_t(std::unique(starts.begin(), starts.end()) - starts.begin());
    if (count > best_count) best = d, best_count = count;
  }
  return best;
}

}  // namespace

Box ShardBox(const ShardRecord& s) { return Box{s.offsets, s.extents}; }

uint64_t BoxVolume(const Box& b) {
  uint64_t v = 1;
  for (int64_t e : b.extents) v *= uint64_t(e);
  return v;
}

std::optional<uint64_t> ShapeVolume(const std::vector<int64_t>& shape) {
  uint64_t v = 1;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d != 0 && v > uint64_t(std::numeric_limits<int64_t>::max()) / uint64_t(d)) {
      return std::nullopt;
    }
    v *= uint64_t(d);
  }
  return v;
}

Box Intersect(const Box& a, const Box& b) {
  Box out;
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    int64_t hi = std::min(End(a, d), End(b, d));
    out.offsets.push_back(lo);
    out.extents.push_back(hi > lo ? hi - lo : 0);
  }
  return out;
}

std::string BoxString(const Box& b) { return DimsString(b.offsets) + "+" + DimsString(b.extents); }

std::string ShardFileLabel(std::string_view file) {
  constexpr std::string_view kPrefix = "rank-", kSuffix = ".stint";
  if (file.size() > kPrefix.size() + kSuffix.size() && file.substr(0, kPrefix.size()) == kPrefix &&
      file.substr(file.size() - kSuffix.size()) == kSuffix) {
    std::string_view digits =
        file.substr(kPrefix.size(), file.size() - kPrefix.size() - kSuffix.size());
    if (digits.size() <= 9 &&
        std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return "rank " + std::to_string(std::atoi(std::string(digits).c_str()));
    }
  }
  return std::string(file);
}

std::string FindShardLayoutProblem(const TensorRecord& t, bool require_cover) {
  const std::string ctx = "tensor '" + t.name + "'";
  const size_t rank = t.global_shape.size();
  std::optional<uint64_t> volume = ShapeVolume(t.global_shape);
  if (!volume) return ctx + ": shape " + DimsString(t.global_shape) + " has no valid volume";
  std::vector<Box> boxes;
  boxes.reserve(t.shards.size());
  for (const ShardRecord& s : t.shards) boxes.push_back(ShardBox(s));
  auto describe = [&](size_t k) {
    return "shard " + BoxString(boxes[k]) + " (" + ShardFileLabel(t.shards[k].file) + ")";
  };

  std::vector<size_t> live;  // shards holding at least one element
  for (size_t k = 0; k < boxes.size(); ++k) {
    const Box& b = boxes[k];
    if (b.offsets.size() != rank || b.extents.size() != rank) {
      return ctx + ": " + describe(k) + " has rank " + std::to_string(b.offsets.size()) + "/" +
             std::to_string(b.extents.size()) + ", the shape " + DimsString(t.global_shape) +
             " has rank " + std::to_string(rank);
    }
    for (size_t d = 0; d < rank; ++d) {
      if (b.offsets[d] < 0 || b.extents[d] < 0) {
        return ctx + ": " + describe(k) + " has a negative offset or extent";
      }
      // Written so that offsets + extents cannot overflow.
      if (b.offsets[d] > t.global_shape[d] || b.extents[d] > t.global_shape[d] - b.offsets[d]) {
        return ctx + ": " + describe(k) + " lies outside the shape " + DimsString(t.global_shape) +
               " in dim " + std::to_string(d);
      }
    }
    if (BoxVolume(b) > 0) live.push_back(k);
  }

  if (rank == 0) {  // every rank-0 shard is the one element
    if (live.size() > 1) {
      return ctx + ": " + describe(live[0]) + " overlaps " + describe(live[1]) +
             " (a scalar has exactly one shard)";
    }
  } else if (live.size() > 1) {
    // Sweep along one dimension: a shard can only meet the shards whose
    // range in that dimension is still open where it starts.
    const size_t d = SweepDim(boxes, live, rank);
    std::sort(live.begin(), live.end(),
              [&](size_t a, size_t b) { return boxes[a].offsets[d] < boxes[b].offsets[d]; });
    std::vector<size_t> open;
    for (size_t k : live) {
      const int64_t start = boxes[k].offsets[d];
      open.erase(std::remove_if(open.begin(), open.end(),
                                [&](size_t j) { return End(boxes[j], d) <= start; }),
                 open.end());
      for (size_t j : open) {
        if (Meet(boxes[j], boxes[k])) {
          return ctx + ": " + describe(j) + " overlaps " + describe(k) + " in " +
                 BoxString(Intersect(boxes[j], boxes[k]));
        }
      }
      open.push_back(k);
    }
  }
  if (!require_cover) return "";

  if (rank == 0 && live.empty()) return ctx + ": a scalar needs exactly one shard, it has none";
  uint64_t covered = 0;  // no overlaps: the volumes add up
  for (size_t k : live) covered += BoxVolume(boxes[k]);
  if (covered == *volume) return "";
  Box whole{std::vector<int64_t>(rank, 0), t.global_shape};
  std::optional<Box> gap = FindUncovered(whole, boxes);
  return ctx + ": region " + (gap ? BoxString(*gap) : BoxString(whole)) +
         " is covered by no shard (the shards cover " + std::to_string(covered) + " of " +
         std::to_string(*volume) + " elements)";
}

Status CheckShardLayout(const TensorRecord& t, std::string_view origin) {
  std::string problem = FindShardLayoutProblem(t, /*require_cover=*/true);
  if (problem.empty()) return Status::OK();
  return Status::InvalidArgument(std::string(origin) + ": " + problem);
}

std::optional<Box> FindUncovered(const Box& region, const std::vector<Box>& boxes) {
  std::vector<const Box*> hits;
  for (const Box& b : boxes) {
    if (BoxVolume(region) > 0 && Meet(region, b)) hits.push_back(&b);
  }
  const uint64_t region_volume = BoxVolume(region);
  if (CoveredVolume(region, hits) == region_volume) return std::nullopt;

  // Bisect: of the two halves of the longest dimension, one is short of
  // elements; keep it until no box meets it. Each step halves a dimension,
  // so this ends after at most sum(log2(extent)) steps.
  Box cur = region;
  while (!hits.empty()) {
    size_t d =
        size_t(std::max_element(cur.extents.begin(), cur.extents.end()) - cur.extents.begin());
    Box lo = cur, hi = cur;
    lo.extents[d] = cur.extents[d] / 2;
    hi.offsets[d] += lo.extents[d];
    hi.extents[d] -= lo.extents[d];
    std::vector<const Box*> lo_hits, hi_hits;
    for (const Box* b : hits) {
      if (Meet(lo, *b)) lo_hits.push_back(b);
      if (Meet(hi, *b)) hi_hits.push_back(b);
    }
    if (CoveredVolume(lo, lo_hits) < BoxVolume(lo)) {
      cur = std::move(lo);
      hits = std::move(lo_hits);
    } else {
      cur = std::move(hi);
      hits = std::move(hi_hits);
    }
  }
  // Grow the uncovered box up to the nearest box (or the region's edge) on
  // each side, one dimension after the other, so a report names the whole
  // hole rather than a sliver of it.
  for (size_t d = 0; d < cur.offsets.size(); ++d) {
    int64_t lo = region.offsets[d], hi = End(region, d);
    for (const Box& b : boxes) {
      if (BoxVolume(b) == 0 || !MeetOutside(cur, b, d)) continue;
      if (End(b, d) <= cur.offsets[d]) lo = std::max(lo, End(b, d));
      if (b.offsets[d] >= End(cur, d)) hi = std::min(hi, b.offsets[d]);
    }
    cur.offsets[d] = lo;
    cur.extents[d] = hi - lo;
  }
  return cur;
}

}  // namespace stint
