#include "common/time_parse.h"

#include <cctype>
#include <limits>

namespace stint {
namespace tools {
namespace {

// A hundred years: far above any window or job, far from int64 overflow in ms.
constexpr int64_t kMaxSeconds = int64_t(100) * 366 * 24 * 3600;

bool IsLeap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

unsigned DaysInMonth(int64_t y, unsigned m) {
  static const unsigned kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && IsLeap(y) ? 29 : kDays[m - 1];
}

// Reads exactly `n` digits at text[*pos].
bool Digits(const std::string& text, size_t* pos, size_t n, int64_t* out) {
  if (*pos + n > text.size()) return false;
  int64_t v = 0;
  for (size_t i = 0; i < n; ++i) {
    char c = text[*pos + i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *pos += n;
  *out = v;
  return true;
}

bool Expect(const std::string& text, size_t* pos, char c) {
  if (*pos >= text.size() || std::toupper(static_cast<unsigned char>(text[*pos])) != c)
    return false;
  ++*pos;
  return true;
}

// YYYY-MM-DDTHH:MM[:SS]Z; nullopt-like false when it is not that shape.
bool ParseIso(const std::string& text, int64_t* ms, std::string* why) {
  size_t pos = 0;
  int64_t y, mo, d, h, mi, s = 0;
  if (!Digits(text, &pos, 4, &y) || !Expect(text, &pos, '-') || !Digits(text, &pos, 2, &mo) ||
      !Expect(text, &pos, '-') || !Digits(text, &pos, 2, &d)) {
    return false;
  }
  if (pos >= text.size() || (text[pos] != 'T' && text[pos] != 't' && text[pos] != ' ')) {
    *why = "needs a time of day: 2026-12-02T18:00:00Z";
    return true;
  }
  ++pos;
  if (!Digits(text, &pos, 2, &h) || !Expect(text, &pos, ':') || !Digits(text, &pos, 2, &mi)) {
    *why = "the time of day must be HH:MM or HH:MM:SS";
    return true;
  }
  if (pos < text.size() && text[pos] == ':' && (++pos, !Digits(text, &pos, 2, &s))) {
    *why = "the time of day must be HH:MM or HH:MM:SS";
    return true;
  }
  if (pos == text.size() || !Expect(text, &pos, 'Z') || pos != text.size()) {
    *why = "must be UTC and end in Z (2026-12-02T18:00:00Z)";
    return true;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > DaysInMonth(y, unsigned(mo)) || h > 23 || mi > 59 ||
      s > 59) {
    *why = "no such date or time";
    return true;
  }
  *ms = ((DaysFromCivil(y, unsigned(mo), unsigned(d)) * 24 + h) * 60 + mi) * 60000 + s * 1000;
  return true;
}

}  // namespace

int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = unsigned(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + int64_t(doe) - 719468;
}

void CivilFromDays(int64_t z, int64_t* y, unsigned* m, unsigned* d) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const unsigned doe = unsigned(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  *d = doy - (153 * mp + 2) / 5 + 1;
  *m = mp < 10 ? mp + 3 : mp - 9;
  *y = int64_t(yoe) + era * 400 + (*m <= 2);
}

Result<int64_t> ParseDuration(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("'" + text + "' is not a duration (" + why +
                                   "; use e.g. 90s, 15m, 2h, 1h30m, 1d)");
  };
  if (text == "0") return int64_t(0);
  if (text.empty()) return bad("empty");
  static const struct {
    char unit;
    int64_t seconds;
  } kUnits[] = {{'d', 86400}, {'h', 3600}, {'m', 60}, {'s', 1}};
  int64_t total = 0;
  size_t next_unit = 0;  // units must come largest first, each once
  size_t pos = 0;
  while (pos < text.size()) {
    int64_t n = 0;
    size_t start = pos;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
      n = n * 10 + (text[pos] - '0');
      if (n > kMaxSeconds) return bad("too long");
      ++pos;
    }
    if (pos == start) return bad("expected a number");
    if (pos == text.size()) return bad("missing unit after " + text.substr(start));
    const char unit = char(std::tolower(static_cast<unsigned char>(text[pos++])));
    size_t u = next_unit;
    while (u < 4 && kUnits[u].unit != unit) ++u;
    if (u == 4) {
      bool known = unit == 'd' || unit == 'h' || unit == 'm' || unit == 's';
      return bad(known ? "units must be largest first, each once"
                       : std::string("unknown unit '") + unit + "'");
    }
    next_unit = u + 1;
    total += n * kUnits[u].seconds;
    if (total > kMaxSeconds) return bad("too long");
  }
  return total;
}

Result<int64_t> ParseTime(const std::string& text, int64_t now_ms) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(
        "'" + text + "' is not a time (" + why +
        "; use now, now+90m, +2h, unix seconds or 2026-12-02T18:00:00Z)");
  };
  if (text.empty()) return bad("empty");
  std::string offset;
  int sign = 1;
  if (text == "now") return now_ms;
  if (text.compare(0, 4, "now+") == 0 || text.compare(0, 4, "now-") == 0) {
    sign = text[3] == '+' ? 1 : -1;
    offset = text.substr(4);
  } else if (text[0] == '+') {
    offset = text.substr(1);
  }
  if (!offset.empty() || text == "+" || text == "now+" || text == "now-") {
    auto d = ParseDuration(offset);
    if (!d.ok()) return bad(d.status().message());
    return now_ms + sign * *d * 1000;
  }
  bool digits = true;
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  if (digits) {
    if (text.size() > 12) return bad("unix seconds out of range");
    return int64_t(std::stoll(text)) * 1000;
  }
  int64_t ms = 0;
  std::string why;
  if (ParseIso(text, &ms, &why)) {
    if (!why.empty()) return bad(why);
    return ms;
  }
  return bad("unrecognized");
}

}  // namespace tools
}  // namespace stint
