// stintctl's argument parsing: GPU ranges and the names stintd accepts,
// with the times and durations of common/time_parse.h. Pure functions, so
// they are unit-tested without a server.
#ifndef STINT_TOOLS_STINTCTL_PARSE_H_
#define STINT_TOOLS_STINTCTL_PARSE_H_

#include <cstdint>
#include <string>

#include "common/time_parse.h"
#include "stint/status.h"

namespace stint {
namespace ctl {

// Times and durations are read as stint-agent reads them (common/).
using tools::CivilFromDays;
using tools::DaysFromCivil;
using tools::ParseDuration;
using tools::ParseTime;

// "4" (min = max = 4) or "2:8". REQUIRES of the answer: 1 <= min <= max.
struct GpuRange {
  int min = 0;
  int max = 0;
};
Result<GpuRange> ParseGpuRange(const std::string& text);

// Case-insensitive; returns the canonical upper-case name.
Result<std::string> ParsePriority(const std::string& text);  // LOW MEDIUM HIGH CRITICAL
Result<std::string> ParseJobState(
    const std::string& text);  // PENDING RUNNING DONE CANCELLED FAILED

}  // namespace ctl
}  // namespace stint

#endif  // STINT_TOOLS_STINTCTL_PARSE_H_
