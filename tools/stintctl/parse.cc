#include "stintctl/parse.h"

#include <cctype>

namespace stint {
namespace ctl {
namespace {

std::string Upper(std::string s) {
  for (auto& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Result<GpuRange> ParseGpuRange(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("--gpus '" + text + "': " + why +
                                   " (use N or MIN:MAX, e.g. 4 or 2:8)");
  };
  auto number = [](const std::string& s, int* out) {
    if (s.empty() || s.size() > 6) return false;
    int v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
    }
    *out = v;
    return true;
  };
  GpuRange r;
  size_t colon = text.find(':');
  if (colon == std::string::npos) {
    if (!number(text, &r.min)) return bad("not a number");
    r.max = r.min;
  } else if (!number(text.substr(0, colon), &r.min) || !number(text.substr(colon + 1), &r.max)) {
    return bad("not a number");
  }
  if (r.min < 1) return bad("at least 1 GPU");
  if (r.max < r.min) return bad("MAX is below MIN");
  return r;
}

Result<std::string> ParsePriority(const std::string& text) {
  std::string u = Upper(text);
  if (u == "LOW" || u == "MEDIUM" || u == "HIGH" || u == "CRITICAL") return u;
  return Status::InvalidArgument("priority '" + text + "': use LOW, MEDIUM, HIGH or CRITICAL");
}

Result<std::string> ParseJobState(const std::string& text) {
  std::string u = Upper(text);
  if (u == "PENDING" || u == "RUNNING" || u == "DONE" || u == "CANCELLED" || u == "FAILED")
    return u;
  return Status::InvalidArgument("state '" + text +
                                 "': use PENDING, RUNNING, DONE, CANCELLED or FAILED");
}

}  // namespace ctl
}  // namespace stint
