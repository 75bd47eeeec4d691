// Elapsed time on the steady clock, for the runtime's and the tools' own
// timings (SaveStats, re-form time, benchmarks). Thread-safe.
#ifndef STINT_RUNTIME_BASE_CLOCK_H_
#define STINT_RUNTIME_BASE_CLOCK_H_

#include <chrono>

namespace stint {

// Seconds from `t0` to now.
inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace stint

#endif  // STINT_RUNTIME_BASE_CLOCK_H_
