// Small string helpers shared by the runtime's tools: byte counts for people,
// whitespace trimming for hand-written files (token files, traces), strict
// decimal numbers (URLs, ranges, step names), URL encoding and HTTP ranges
// (the peer file client, the S3 client), and UTF-8 checks and repair
// for text JSON must carry.
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

// Whether `s` is a non-empty run of ASCII digits.
bool AllDigits(std::string_view s);

// `s` as a whole decimal number: digits only (no sign, space or "0x"), at
// most 20 of them, fitting in uint64_t. False, `*out` untouched, otherwise.
bool ParseDecimalU64(std::string_view s, uint64_t* out);

// `s` percent-encoded for a URL path or query: every byte but RFC 3986's
// unreserved ones (A-Z a-z 0-9 - . _ ~), and '/' unless `keep_slash`,
// becomes %XX (upper-case hex), each byte of a UTF-8 character on its own.
std::string PercentEncode(std::string_view s, bool keep_slash = false);

// An HTTP Content-Range "bytes first-last/total": false unless all three
// are decimal numbers (total may not be "*"); `total` may be null.
bool ParseContentRange(std::string_view v, uint64_t* first, uint64_t* last, uint64_t* total);

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code
// points past U+10FFFF): what a JSON string may hold.
bool IsValidUtf8(std::string_view s);

// `s` as well-formed UTF-8 of at most `max_bytes` bytes: each byte that
// does not begin a well-formed character becomes U+FFFD, and the cut falls
// on a character boundary (a character that would cross it is left out).
// For text from outside (a worker's output) that JSON must carry.
std::string ValidUtf8Prefix(std::string_view s, size_t max_bytes = std::string_view::npos);

}  // namespace stint

#endif  // STINT_RUNTIME_BASE_STRINGS_H_
