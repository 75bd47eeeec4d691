// Shrink before preempt: elastic segments above their job's min_gpus give
// GPUs back (a shrink notice to the ranks that leave) so that a job ahead
// can start, tried before any segment is preempted whole.
#include "stintd/core/planner.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace stint::stintd::internal {

// What victim `v` can give up and keep >= its job's min_gpus: GPUs from
// its last allocation backwards (the highest ranks leave), at most
// `wanted`; a node window's part only whole (its ranks leave the node).
std::vector<Planner::VictimPart> Planner::Shrinkable(const Victim& v, int wanted) const {
  std::vector<VictimPart> out;
  int spare = v.seg->gpus() - v.job->min_gpus;
  for (size_t i = v.parts.size(); i-- > 0 && spare > 0 && wanted > 0;) {
    const VictimPart& part = v.parts[i];
    const bool node = !slots_[part.slot].w->node.empty();
    if (node && part.gpus > spare) continue;
    const int n = node ? part.gpus : std::min({part.gpus, spare, wanted});
    out.push_back(VictimPart{part.slot, n, part.hold_end});
    spare -= n;
    wanted -= n;
  }
  return out;
}

// Shrink before preempt: elastic segments the job may preempt, running
// above their min_gpus, give up GPUs (in preemption order, each as few as
// the job still needs) until the job fits at the latest shrink deadline,
// if that is before `unassisted`. On success records the shrinks, counts
// the GPUs free from their deadlines on and returns the job's fit.
bool Planner::TryShrink(const JobCtx& j, TimeMs unassisted, Fit* out) {
  const Job& job = *j.job;
  if (!c_.shrink_before_preempt || victims_.empty()) return false;
  const int job_class = j.info->service_class;
  std::vector<int> cands;
  for (size_t v = 0; v < victims_.size(); v++) {
    const Victim& victim = victims_[v];
    if (!victim.taken && victim.seg->gpus() > victim.job->min_gpus &&
        victim.workers >= c_.shrink_min_workers && MayPreempt(job, job_class, victim))
      cands.push_back(static_cast<int>(v));
  }
  if (cands.empty()) return false;
  std::sort(cands.begin(), cands.end(), [this](int a, int b) { return VictimBefore(a, b); });
  const Profiles saved = profiles_;
  std::vector<std::pair<int, std::vector<VictimPart>>> shrinks;
  TimeMs start = now_;
  for (int v : cands) {
    const Victim& victim = victims_[v];
    // GPUs still missing at the shrink's deadline in the job's best pool.
    const TimeMs at = std::max(start, victim.deadline);
    int have = 0;
    for (int g : j.groups) {
      int sum = 0;
      for (int slot : groups_[g])
        sum += std::max(0, profiles_.windows[slot].Min(at, AddMs(at, j.len)));
      have = std::max(have, sum);
    }
    std::vector<VictimPart> parts = Shrinkable(victim, std::max(1, job.min_gpus - have));
    if (parts.empty()) continue;
    for (const VictimPart& part : parts)
      profiles_.windows[part.slot].Add(victim.deadline, part.hold_end, part.gpus);
    start = at;
    shrinks.emplace_back(v, std::move(parts));
    Fit fit = FitAt(j, start, profiles_);
    if (fit.start != start) continue;
    if (start >= unassisted) break;
    for (auto& [sv, released] : shrinks) {
      Victim& shrunk = victims_[sv];
      shrunk.taken = true;
      ShrinkDecision d{shrunk.seg->id, {}, shrunk.deadline, job.id};
      for (const VictimPart& part : released)
        d.release.push_back(Allocation{slots_[part.slot].w->id, part.gpus});
      plan_.shrinks.push_back(std::move(d));
    }
    preempting_[job.id] = start;
    *out = std::move(fit);
    return true;
  }
  profiles_ = saved;
  return false;
}

}  // namespace stint::stintd::internal
