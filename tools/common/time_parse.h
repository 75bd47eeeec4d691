// Times and durations as the tools' command lines take them (stintctl's
// --end and --duration, stint-agent's --for and --until). Pure functions
// (the clock is a parameter), so they are unit-tested without a server.
#ifndef STINT_TOOLS_COMMON_TIME_PARSE_H_
#define STINT_TOOLS_COMMON_TIME_PARSE_H_

#include <cstdint>
#include <string>

#include "stint/status.h"

namespace stint {
namespace tools {

// "90s", "15m", "2h", "1d", "1h30m", "1d2h", or "0": whole seconds. Units
// d, h, m, s, each at most once and largest first; a bare number other than
// 0 is refused (is "90" minutes or seconds?). kInvalidArgument otherwise.
Result<int64_t> ParseDuration(const std::string& text);

// A point in time, as ms since the Unix epoch:
//   now | now+D | now-D | +D          D a duration as above, from now_ms
//   1764698400                        unix seconds
//   2026-12-02T18:00:00Z, 2026-12-02T18:00Z   ISO-8601, UTC only ("Z")
// kInvalidArgument otherwise, listing the accepted forms.
Result<int64_t> ParseTime(const std::string& text, int64_t now_ms);

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
// algorithm), and back. Exposed for stintctl's FormatUtc and the tests.
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d);
void CivilFromDays(int64_t days, int64_t* y, unsigned* m, unsigned* d);

}  // namespace tools
}  // namespace stint

#endif  // STINT_TOOLS_COMMON_TIME_PARSE_H_
