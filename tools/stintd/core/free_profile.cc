#include "stintd/core/free_profile.h"

#include <algorithm>

namespace stint::stintd {

FreeProfile::FreeProfile(TimeMs origin, TimeMs start, TimeMs end, int gpus) {
  times_.push_back(origin);
  free_.push_back(0);
  if (end <= origin || end <= start || gpus <= 0) return;
  if (start <= origin) {
    free_[0] = gpus;
  } else {
    times_.push_back(start);
    free_.push_back(gpus);
  }
  if (end != kNever) {
    times_.push_back(end);
    free_.push_back(0);
  }
}

size_t FreeProfile::StepAt(TimeMs t) const {
  // The last boundary <= t; t < origin is clamped to the first step.
  auto it = std::upper_bound(times_.begin(), times_.end(), t);
  return it == times_.begin() ? 0 : static_cast<size_t>(it - times_.begin()) - 1;
}

size_t FreeProfile::Split(TimeMs t) {
  const size_t i = StepAt(t);
  if (times_[i] == t) return i;
  times_.insert(times_.begin() + i + 1, t);
  free_.insert(free_.begin() + i + 1, free_[i]);
  return i + 1;
}

int FreeProfile::At(TimeMs t) const { return free_[StepAt(t)]; }

int FreeProfile::Min(TimeMs from, TimeMs to) const {
  size_t i = StepAt(from);
  int m = free_[i];
  for (++i; i < times_.size() && times_[i] < to; ++i) m = std::min(m, free_[i]);
  return m;
}

TimeMs FreeProfile::FirstBelow(TimeMs from, int gpus) const {
  size_t i = StepAt(from);
  if (free_[i] < gpus) return from;
  for (++i; i < times_.size(); ++i) {
    if (free_[i] < gpus) return times_[i];
  }
  return kNever;
}

TimeMs FreeProfile::EarliestFit(TimeMs from, TimeMs length, int gpus) const {
  // One pass over the steps: the first run of steps that all have `gpus`
  // free and together last `length` starts at the answer.
  TimeMs run_start = kNever;
  for (size_t i = StepAt(from); i < times_.size(); ++i) {
    if (free_[i] < gpus) {
      run_start = kNever;
      continue;
    }
    if (run_start == kNever) run_start = std::max(times_[i], from);
    const TimeMs step_end = i + 1 < times_.size() ? times_[i + 1] : kNever;
    if (step_end == kNever || step_end - run_start >= length) return run_start;
  }
  return kNever;
}

void FreeProfile::Add(TimeMs from, TimeMs to, int delta) {
  from = std::max(from, times_[0]);
  if (delta == 0 || to <= from) return;
  const size_t first = Split(from);
  const size_t last = to == kNever ? times_.size() : Split(to);
  for (size_t i = first; i < last; ++i) free_[i] += delta;
  // Merge equal neighbours so the profile stays as short as its shape:
  // every fit walks it, and reservations that end where another starts
  // would otherwise leave dead boundaries behind.
  size_t out = 0;
  for (size_t i = 1; i < times_.size(); ++i) {
    if (free_[i] == free_[out]) continue;
    ++out;
    times_[out] = times_[i];
    free_[out] = free_[i];
  }
  times_.resize(out + 1);
  free_.resize(out + 1);
}

int FreeProfile::MaxFrom(TimeMs from) const {
  size_t i = StepAt(from);
  int m = free_[i];
  for (++i; i < times_.size(); ++i) m = std::max(m, free_[i]);
  return m;
}

void FreeProfile::AppendRises(TimeMs from, std::vector<TimeMs>* out) const {
  for (size_t i = StepAt(from) + 1; i < times_.size(); ++i) {
    if (free_[i] > free_[i - 1]) out->push_back(times_[i]);
  }
}

}  // namespace stint::stintd
