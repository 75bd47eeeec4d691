// Order statistics of a handful of samples, for benchmark and trace figures.
// Pure functions; they sort a copy of the samples.
#ifndef STINT_RUNTIME_BASE_STATS_H_
#define STINT_RUNTIME_BASE_STATS_H_

#include <vector>

namespace stint {

// The median: the middle sample, or for an even count the mean of the two
// middle ones. NaN when `v` is empty.
double Median(std::vector<double> v);

// The upper median: the sample at index size/2 once sorted (for an even count
// the larger middle one), so the result is always one of the samples. 0 when
// `v` is empty.
double UpperMedian(std::vector<double> v);

}  // namespace stint

#endif  // STINT_RUNTIME_BASE_STATS_H_
