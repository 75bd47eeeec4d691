// Wall-clock milliseconds (what stintd sends) to steady_clock time points
// (what PreemptionWatcher keeps). The conversion is done once, when a notice
// arrives, from the offset between the two clocks at that moment: a later
// NTP step of the wall clock then cannot move a deadline already taken.
#ifndef STINT_RUNTIME_COORD_WALL_CLOCK_H_
#define STINT_RUNTIME_COORD_WALL_CLOCK_H_

#include <chrono>
#include <cstdint>

#include "stint/preemption.h"

namespace stint {
namespace internal {

inline int64_t WallNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// now_steady + (wall_ms - now_wall_ms), the difference clamped to +-10 years
// so a garbage value cannot overflow the time point.
inline SteadyTime SteadyFromWallMs(int64_t wall_ms, int64_t now_wall_ms, SteadyTime now_steady) {
  constexpr int64_t kLimit = int64_t(10) * 366 * 24 * 3600 * 1000;
  // Clamped before subtracting: wall_ms - now_wall_ms itself could overflow.
  if (wall_ms > now_wall_ms + kLimit) wall_ms = now_wall_ms + kLimit;
  if (wall_ms < now_wall_ms - kLimit) wall_ms = now_wall_ms - kLimit;
  return now_steady + std::chrono::milliseconds(wall_ms - now_wall_ms);
}

inline SteadyTime SteadyFromWallMs(int64_t wall_ms) {
  return SteadyFromWallMs(wall_ms, WallNowMs(), std::chrono::steady_clock::now());
}

}  // namespace internal
}  // namespace stint

#endif  // STINT_RUNTIME_COORD_WALL_CLOCK_H_
