#include "nccl_unique_id.h"

#include <cstring>

namespace stint {
namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string EncodeNcclUniqueId(const ncclUniqueId& id) {
  std::string hex;
  hex.reserve(2 * NCCL_UNIQUE_ID_BYTES);
  for (char c : id.internal) {
    const auto byte = static_cast<unsigned char>(c);
    hex.push_back(kHexDigits[byte >> 4]);
    hex.push_back(kHexDigits[byte & 0xf]);
  }
  return hex;
}

Result<ncclUniqueId> DecodeNcclUniqueId(std::string_view hex, std::string_view key) {
  const std::string where = "kv key \"" + std::string(key) + "\": malformed ncclUniqueId: ";
  if (hex.size() != 2 * NCCL_UNIQUE_ID_BYTES) {
    return Status::DataLoss(where + std::to_string(hex.size()) + " characters, expected " +
                            std::to_string(2 * NCCL_UNIQUE_ID_BYTES) + " hex digits");
  }
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  for (size_t i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) {
    const int hi = HexValue(hex[2 * i]);
    const int lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return Status::DataLoss(where + "not a hex digit at offset " +
                              std::to_string(2 * i + (hi < 0 ? 0 : 1)));
    }
    id.internal[i] = static_cast<char>((hi << 4) | lo);
  }
  return id;
}

}  // namespace stint
