#include "base/strings.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>

namespace stint {

std::string HumanBytes(uint64_t n) {
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (n < 1024) return std::to_string(n) + " B";
  double v = double(n) / 1024;
  size_t u = 0;
  while (v >= 1024 && u + 1 < sizeof(kUnits) / sizeof(kUnits[0])) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f %s", v, kUnits[u]);
  return buf;
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

namespace {

// The length of the well-formed UTF-8 character at s[i], or 0 when s[i]
// does not begin one (no overlong forms, surrogates or code points past
// U+10FFFF).
size_t Utf8CharLength(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp, min;
  if ((c & 0xE0) == 0xC0) {
    n = 2, cp = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, cp = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

bool AllDigits(std::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

bool ParseDecimalU64(std::string_view s, uint64_t* out) {
  if (!AllDigits(s) || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8CharLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string ValidUtf8Prefix(std::string_view s, size_t max_bytes) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(std::min(s.size(), max_bytes));
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8CharLength(s, i);
    const std::string_view ch = n == 0 ? kReplacement : s.substr(i, n);
    if (out.size() + ch.size() > max_bytes) break;
    out.append(ch);
    i += n == 0 ? 1 : n;
  }
  return out;
}

std::string PercentEncode(std::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  return out;
}

bool ParseContentRange(std::string_view v, uint64_t* first, uint64_t* last, uint64_t* total) {
  constexpr std::string_view kUnit = "bytes ";
  if (v.substr(0, kUnit.size()) != kUnit) return false;
  const std::string_view spec = v.substr(kUnit.size());
  const size_t dash = spec.find('-');
  const size_t slash = spec.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || slash < dash) {
    return false;
  }
  uint64_t size = 0;
  if (!ParseDecimalU64(spec.substr(0, dash), first) ||
      !ParseDecimalU64(spec.substr(dash + 1, slash - dash - 1), last) ||
      !ParseDecimalU64(spec.substr(slash + 1), &size)) {
    return false;
  }
  if (total != nullptr) *total = size;
  return true;
}

}  // namespace stint
