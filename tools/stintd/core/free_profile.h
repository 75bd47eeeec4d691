// FreeProfile: the free GPUs of one window as a step function of time.
//
// The policy keeps one per window. It starts as the window's capacity over
// [start, end) (0 before and after), running segments and the reservations
// of jobs planned so far are subtracted from it, and every job is fitted
// against what is left. Times before the origin (the plan's "now") are never
// asked for. Internal to core/: the Planner (planner.h) is its only user.
#ifndef STINT_TOOLS_STINTD_CORE_FREE_PROFILE_H_
#define STINT_TOOLS_STINTD_CORE_FREE_PROFILE_H_

#include <cstddef>
#include <vector>

#include "stintd/core/model.h"

namespace stint::stintd {

// a + b, saturating at kNever (kNever means "no end", never a real time).
inline TimeMs AddMs(TimeMs a, TimeMs b) {
  if (a == kNever || b == kNever || a > kNever - b) return kNever;
  return a + b;
}

class FreeProfile {
 public:
  // `gpus` free over [start, end) intersected with [origin, kNever), 0 elsewhere.
  FreeProfile(TimeMs origin, TimeMs start, TimeMs end, int gpus);

  // Free GPUs at t (t >= origin).
  int At(TimeMs t) const;

  // Fewest free GPUs over [from, to). REQUIRES: origin <= from < to.
  int Min(TimeMs from, TimeMs to) const;

  // The first time >= from where fewer than `gpus` are free; kNever if none.
  TimeMs FirstBelow(TimeMs from, int gpus) const;

  // The earliest t >= from with at least `gpus` free over all of
  // [t, t + length); kNever if there is none.
  TimeMs EarliestFit(TimeMs from, TimeMs length, int gpus) const;

  // Adds `delta` (negative: takes GPUs) over [from, to); to may be kNever.
  void Add(TimeMs from, TimeMs to, int delta);

  // The most GPUs free at any time >= from (t >= origin).
  int MaxFrom(TimeMs from) const;

  // Appends the times > from at which the free count rises: the only
  // places (besides `from`) where a job that does not fit at `from` can
  // start to fit.
  void AppendRises(TimeMs from, std::vector<TimeMs>* out) const;

 private:
  // Index of the step that contains t.
  size_t StepAt(TimeMs t) const;
  // Makes t a step boundary; returns the index of the step starting at t.
  size_t Split(TimeMs t);

  // free_[i] GPUs over [times_[i], times_[i + 1]); the last step lasts
  // forever. times_[0] is the origin; times_ is strictly increasing.
  std::vector<TimeMs> times_;
  std::vector<int> free_;
};

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_CORE_FREE_PROFILE_H_
