#include "stintd/server/placement_index.h"

namespace stint::stintd {

void PlacementIndex::Rebuild(const ClusterState& s) {
  by_window_.clear();
  windows_of_.clear();
  for (const auto& [id, seg] : s.segments) Add(id, seg);
}

void PlacementIndex::Update(const ClusterState& s, const std::set<int64_t>& ids) {
  for (int64_t id : ids) {
    Remove(id);
    auto it = s.segments.find(id);
    if (it != s.segments.end()) Add(id, it->second);
  }
}

const std::set<int64_t>& PlacementIndex::On(int64_t window_id) const {
  static const std::set<int64_t>* const kNone = new std::set<int64_t>();
  auto it = by_window_.find(window_id);
  return it == by_window_.end() ? *kNone : it->second;
}

std::vector<std::pair<int64_t, int64_t>> PlacementIndex::Pairs() const {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& [window, segments] : by_window_) {
    for (int64_t seg : segments) out.emplace_back(window, seg);
  }
  return out;
}

void PlacementIndex::Remove(int64_t segment_id) {
  auto it = windows_of_.find(segment_id);
  if (it == windows_of_.end()) return;
  for (int64_t window : it->second) {
    auto w = by_window_.find(window);
    if (w == by_window_.end()) continue;
    w->second.erase(segment_id);
    if (w->second.empty()) by_window_.erase(w);
  }
  windows_of_.erase(it);
}

void PlacementIndex::Add(int64_t id, const Segment& seg) {
  if (!SegmentActive(seg.state) || seg.placement.empty()) return;
  std::vector<int64_t>& windows = windows_of_[id];
  for (const Placement& p : seg.placement) {
    by_window_[p.window_id].insert(id);
    windows.push_back(p.window_id);
  }
}

}  // namespace stint::stintd
