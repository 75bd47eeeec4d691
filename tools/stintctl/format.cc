#include "stintctl/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "stintctl/parse.h"

namespace stint {
namespace ctl {
namespace {

// Display width: UTF-8 continuation bytes take no column.
size_t Width(const std::string& s) {
  size_t w = 0;
  for (unsigned char c : s) w += (c & 0xC0) != 0x80;
  return w;
}

}  // namespace

std::string FormatUtc(int64_t ms) {
  int64_t secs = ms >= 0 ? ms / 1000 : -((-ms + 999) / 1000);
  int64_t days = secs >= 0 ? secs / 86400 : -((-secs + 86399) / 86400);
  int64_t rem = secs - days * 86400;
  int64_t y;
  unsigned m, d;
  CivilFromDays(days, &y, &m, &d);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04lld-%02u-%02uT%02lld:%02lld:%02lldZ",
                static_cast<long long>(y), m, d, static_cast<long long>(rem / 3600),
                static_cast<long long>(rem / 60 % 60), static_cast<long long>(rem % 60));
  return buf;
}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds)) return "?";
  const char* sign = seconds < 0 ? "-" : "";
  int64_t s = std::llround(std::fabs(seconds));
  const int64_t units[] = {86400, 3600, 60, 1};
  const char names[] = {'d', 'h', 'm', 's'};
  for (int i = 0; i < 4; ++i) {
    if (s < units[i] && i < 3) continue;
    int64_t major = s / units[i];
    int64_t minor = i < 3 ? (s % units[i]) / units[i + 1] : 0;
    char buf[64];
    if (minor == 0) {
      std::snprintf(buf, sizeof(buf), "%s%lld%c", sign, static_cast<long long>(major), names[i]);
    } else {
      std::snprintf(buf, sizeof(buf), "%s%lld%c%02lld%c", sign, static_cast<long long>(major),
                    names[i], static_cast<long long>(minor), names[i + 1]);
    }
    return buf;
  }
  return "0s";
}

std::string FormatRelative(int64_t ms, int64_t now_ms) {
  const int64_t delta = ms - now_ms;
  if (delta > -1000 && delta < 1000) return "now";
  std::string d = FormatDuration(std::fabs(double(delta)) / 1000);
  return delta > 0 ? "in " + d : d + " ago";
}

std::string FormatWhen(int64_t ms, int64_t now_ms) {
  return FormatRelative(ms, now_ms) + " (" + FormatUtc(ms) + ")";
}

std::string Table::Render() const {
  const size_t columns = std::max(header_.size(), [&] {
    size_t n = 0;
    for (const auto& r : rows_) n = std::max(n, r.size());
    return n;
  }());
  std::vector<size_t> width(columns, 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], Width(row[c]));
  };
  measure(header_);
  for (const auto& r : rows_) measure(r);
  std::string out;
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < columns; ++c) {
      const std::string cell = c < row.size() ? row[c] : "";
      line += cell;
      if (c + 1 < columns) line.append(width[c] - Width(cell) + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  emit(header_);
  for (const auto& r : rows_) emit(r);
  return out;
}

}  // namespace ctl
}  // namespace stint
