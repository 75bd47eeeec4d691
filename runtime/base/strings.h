// Small string helpers shared by the runtime's tools: byte counts for people,
// and whitespace trimming for hand-written files (token files, traces).
// Pure functions.
#ifndef STINT_RUNTIME_BASE_STRINGS_H_
#define STINT_RUNTIME_BASE_STRINGS_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace stint {

// "512 B", "1.50 KiB", "8.00 MiB", ... up to PiB: binary units, two decimals.
std::string HumanBytes(uint64_t n);

// `s` without leading and trailing spaces, tabs, CRs and LFs.
std::string Trim(const std::string& s);

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code
// points past U+10FFFF): what a JSON string may hold.
bool IsValidUtf8(std::string_view s);

}  // namespace stint

#endif  // STINT_RUNTIME_BASE_STRINGS_H_
