// Reseal: random bytes almost never carry a matching manifest_xxh3, which
// would leave everything behind the checksum unfuzzed. For input that parses
// as JSON with a "manifest" object, the same document with the checksum
// recomputed; nullopt otherwise. Shared by the fuzz targets (header-only).
#ifndef STINT_TESTS_FUZZ_RESEAL_H_
#define STINT_TESTS_FUZZ_RESEAL_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "format/chunk.h"

namespace stint {

inline std::optional<std::string> Reseal(std::string_view bytes) {
  nlohmann::json top =
      nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (top.is_discarded() || !top.is_object()) return std::nullopt;
  auto body = top.find("manifest");
  if (body == top.end() || !body->is_object()) return std::nullopt;
  // Parsed strings are valid UTF-8, so dump() cannot throw here.
  std::string canonical = body->dump();
  top["manifest_xxh3"] = HashToHex(Xxh3(canonical.data(), canonical.size()));
  return top.dump();
}

}  // namespace stint

#endif  // STINT_TESTS_FUZZ_RESEAL_H_
