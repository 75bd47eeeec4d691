// The parts of a request that several stintd routes read the same way: a
// path id, a query parameter, a number of seconds a caller reports.
// Each refusal is kInvalidArgument naming the parameter.
#ifndef STINT_TOOLS_STINTD_SERVER_REQUEST_PARAMS_H_
#define STINT_TOOLS_STINTD_SERVER_REQUEST_PARAMS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "stint/status.h"
#include "stintd/server/json_model.h"

namespace httplib {
struct Request;
}

namespace stint::stintd {

// The positive id in the path's `i`th match; `what` names it ("job").
Result<int64_t> PathId(const httplib::Request& req, size_t i, const char* what);

// Query parameter `name` as seconds >= 0 (`dflt` when absent), capped at `max`.
Result<double> QuerySeconds(const httplib::Request& req, const char* name, double dflt,
                            double max);

// Query parameter `name` as an integer >= `min` (`dflt` when absent).
Result<int64_t> QueryInt(const httplib::Request& req, const char* name, int64_t dflt, int64_t min);

// Seconds a caller reports (estimates, measured durations, work left):
// refused unless finite, >= 0 and at most kMaxReportedSeconds (31 years),
// so that no sum or product of them the policy makes overflows a TimeMs
// (SecondsToMs) or outweighs every other job's numbers (API.md).
constexpr double kMaxReportedSeconds = 1e9;

Result<std::optional<double>> OptionalSeconds(const RequestBody& b, const char* name);

std::chrono::milliseconds Millis(double seconds);

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SERVER_REQUEST_PARAMS_H_
