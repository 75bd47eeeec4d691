#include "stintd/server/request_params.h"

#include <httplib.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace stint::stintd {

Result<int64_t> PathId(const httplib::Request& req, size_t i, const char* what) {
  const std::string& m = req.matches[i];
  int64_t v = 0;
  auto [p, ec] = std::from_chars(m.data(), m.data() + m.size(), v);
  if (ec != std::errc() || p != m.data() + m.size() || v <= 0) {
    return Status::InvalidArgument(std::string(what) + " id \"" + m + "\" is not a valid id");
  }
  return v;
}

Result<double> QuerySeconds(const httplib::Request& req, const char* name, double dflt,
                            double max) {
  if (!req.has_param(name)) return dflt;
  const std::string v = req.get_param_value(name);
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !(d >= 0)) {
    return Status::InvalidArgument(std::string(name) + " must be a number of seconds >= 0 (got \"" +
                                   v + "\")");
  }
  return std::min(d, max);
}

Result<int64_t> QueryInt(const httplib::Request& req, const char* name, int64_t dflt, int64_t min) {
  if (!req.has_param(name)) return dflt;
  const std::string v = req.get_param_value(name);
  int64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size() || out < min) {
    return Status::InvalidArgument(std::string(name) + " must be an integer >= " +
                                   std::to_string(min) + " (got \"" + v + "\")");
  }
  return out;
}

Result<std::optional<double>> OptionalSeconds(const RequestBody& b, const char* name) {
  STINT_ASSIGN_OR_RETURN(std::optional<double> v, b.OptionalNumber(name));
  if (v && !(*v >= 0 && *v <= kMaxReportedSeconds)) {
    char got[32];
    std::snprintf(got, sizeof(got), "%g", *v);
    return Status::InvalidArgument(std::string(name) +
                                   " must be a number of seconds in [0, 1e9] (got " + got + ")");
  }
  return v;
}

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace stint::stintd
