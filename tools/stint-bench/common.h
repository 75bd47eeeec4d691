// Small definitions every part of stint-bench shares: the clock its timings
// use, and (from runtime/base) SecondsSince and the Median its figures are
// reported as.
#ifndef STINT_TOOLS_STINT_BENCH_COMMON_H_
#define STINT_TOOLS_STINT_BENCH_COMMON_H_

#include <chrono>

#include "base/clock.h"
#include "base/stats.h"

namespace stint {
namespace bench {

using Clock = std::chrono::steady_clock;

constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace bench
}  // namespace stint

#endif  // STINT_TOOLS_STINT_BENCH_COMMON_H_
