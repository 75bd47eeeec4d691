#include "stintd/core/storage.h"

#include <algorithm>
#include <limits>
#include <string_view>

namespace stint::stintd {
namespace {

constexpr size_t kMaxLocationBytes = 1024;
constexpr std::string_view kS3Scheme = "s3://";

bool Declares(const Pool& pool, const std::string& location) {
  return std::any_of(pool.storage.begin(), pool.storage.end(),
                     [&](const std::string& prefix) { return LocationUnder(prefix, location); });
}

// Of the locations `take` accepts, those `pool` reaches: the newest step's
// cheapest to read (one on a path before one in an object store).
template <typename Take>
StepReach Reach(const ClusterState& s, const Job& job, const Pool* pool, Take take) {
  StepReach r;
  bool any = false;
  uint64_t best = std::numeric_limits<uint64_t>::max();
  for (const auto& [location, at] : job.stored) {
    if (!take(at)) continue;
    any = true;
    r.step = std::max(r.step, at.step);
    if (!r.where.empty()) r.where += ", ";
    r.where += location + " (step " + std::to_string(at.step) +
               (at.pool.empty() ? "" : ", pool " + at.pool) + ")";
    if (!PoolReaches(s, pool, location, at)) continue;
    best = std::min<uint64_t>(best, IsObjectStoreLocation(location) ? at.bytes : 0);
  }
  r.reachable = !any || best != std::numeric_limits<uint64_t>::max();
  if (any && r.reachable) r.transfer_bytes = best;
  return r;
}

}  // namespace

Result<std::string> NormalizeLocation(const char* what, const std::string& location) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(std::string(what) + " \"" + location.substr(0, 200) +
                                   "\": " + why);
  };
  if (location.size() > kMaxLocationBytes)
    return bad("longer than " + std::to_string(kMaxLocationBytes) + " bytes");
  for (char c : location) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= ' ' || u == 0x7f) return bad("holds whitespace or a control character");
    if (c == '?' || c == '#') return bad("holds a query or a fragment");
  }
  std::string out = location;
  const bool s3 = out.compare(0, kS3Scheme.size(), kS3Scheme) == 0;
  if (!s3 && (out.empty() || out[0] != '/'))
    return bad("is neither an absolute path nor an s3://bucket[/prefix] URL");
  const size_t keep = s3 ? kS3Scheme.size() + 1 : 1;  // "s3://b" or "/"
  while (out.size() > keep && out.back() == '/') out.pop_back();
  if (s3 && (out.size() <= kS3Scheme.size() || out[kS3Scheme.size()] == '/'))
    return bad("names no bucket");
  if (s3 && out.find('@') != std::string::npos)
    return bad("holds an '@' (credentials never go into a location)");
  const std::string_view rest = std::string_view(out).substr(s3 ? kS3Scheme.size() : 0);
  size_t from = 0;
  while (from <= rest.size()) {
    const size_t slash = std::min(rest.find('/', from), rest.size());
    if (rest.substr(from, slash - from) == "..") return bad("holds \"..\"");
    from = slash + 1;
  }
  return out;
}

Result<std::vector<std::string>> NormalizeStorage(const std::vector<std::string>& storage) {
  std::vector<std::string> out;
  for (const std::string& prefix : storage) {
    STINT_ASSIGN_OR_RETURN(std::string p, NormalizeLocation("storage", prefix));
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(std::move(p));
  }
  if (out.size() > kMaxStoredLocations) {
    return Status::InvalidArgument("a pool declares at most " +
                                   std::to_string(kMaxStoredLocations) + " storage prefixes");
  }
  return out;
}

bool LocationUnder(const std::string& prefix, const std::string& location) {
  if (location.compare(0, prefix.size(), prefix) != 0) return false;
  return location.size() == prefix.size() || prefix.back() == '/' ||
         location[prefix.size()] == '/';
}

bool IsObjectStoreLocation(const std::string& location) {
  return location.compare(0, kS3Scheme.size(), kS3Scheme) == 0;
}

bool PoolReaches(const ClusterState&, const Pool* pool, const std::string& location,
                 const StoredStep& at) {
  if (pool == nullptr || pool->storage.empty()) return true;
  if (Declares(*pool, location)) return true;
  // Storage nobody declared (a node's disk, a path of its own): only from
  // the pool that wrote it.
  return !at.pool.empty() && at.pool == pool->name;
}

StepReach NewestStepReach(const ClusterState& s, const Job& job, const Pool* pool) {
  int64_t newest = -1;
  for (const auto& [location, at] : job.stored) newest = std::max(newest, at.step);
  return Reach(s, job, pool, [newest](const StoredStep& at) { return at.step == newest; });
}

StepReach SegmentReach(const ClusterState& s, const Job& job, int64_t segment_id,
                       const Pool* pool) {
  return Reach(s, job, pool,
               [segment_id](const StoredStep& at) { return at.segment_id == segment_id; });
}

}  // namespace stint::stintd
