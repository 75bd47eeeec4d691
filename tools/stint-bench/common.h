// Small definitions every part of stint-bench shares: the clock its timings
// use and the median its figures are reported as.
#ifndef STINT_TOOLS_STINT_BENCH_COMMON_H_
#define STINT_TOOLS_STINT_BENCH_COMMON_H_

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

namespace stint {
namespace bench {

using Clock = std::chrono::steady_clock;

constexpr double kMiB = 1024.0 * 1024.0;

inline double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

inline double Median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace bench
}  // namespace stint

#endif  // STINT_TOOLS_STINT_BENCH_COMMON_H_
