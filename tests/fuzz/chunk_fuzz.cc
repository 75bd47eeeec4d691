// libFuzzer target: DecodeChunk on arbitrary stored bytes and records.
//
// Input layout:
//   byte 0      bit 0: codec (0 none, 1 zstd); bit 1: take xxh3 from the
//               input instead of computing the right one
//   bytes 1-2   raw_len, little endian (bounded: at most 64 KiB - 1)
//   bytes 3-10  xxh3 when bit 1 is set
//   rest        the stored bytes (stored_len = their count)
// Computing the right checksum by default lets the fuzzer past it into the
// raw-length checks and zstd. Property: never crashes or reads or writes out
// of bounds (the destination is exactly raw_len bytes, the stored bytes end
// where the input ends); a raw chunk that decodes equals its stored bytes.
//
// Built and run by tools/fuzz.sh. With STINT_FUZZ_WRITE_SEEDS=<dir> the binary
// writes seeds (real zstd frames among them) to <dir> and exits.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>

#include "format/chunk.h"

namespace stint {
namespace {

constexpr size_t kHeader = 11;

void WriteSeeds(const std::string& dir) {
  int n = 0;
  auto put = [&](uint8_t flags, uint16_t raw_len, const std::string& stored) {
    std::string in(kHeader, '\0');
    in[0] = char(flags);
    in[1] = char(raw_len & 0xff);
    in[2] = char(raw_len >> 8);
    std::ofstream(dir + "/seed-" + std::to_string(n++), std::ios::binary) << in << stored;
  };
  std::string text;
  for (int i = 0; i < 300; ++i) text += "checkpoint chunk " + std::to_string(i % 17) + " ";
  for (const std::string& raw : {text, std::string(4000, '\0'), std::string("x"), std::string()}) {
    std::string frame(ZstdBound(raw.size()), '\0');
    auto size = ZstdCompress(raw.data(), raw.size(), frame.data(), frame.size(), 3);
    if (!size.ok()) continue;
    frame.resize(*size);
    put(1, uint16_t(raw.size()), frame);
    put(0, uint16_t(raw.size()), raw);
  }
  put(3, 5, "hello");  // wrong checksum path
}

}  // namespace
}  // namespace stint

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  if (const char* dir = std::getenv("STINT_FUZZ_WRITE_SEEDS")) {
    stint::WriteSeeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stint;
  if (size >= 16) {  // the hex parser, on the input's first 16 bytes
    std::string_view hex(reinterpret_cast<const char*>(data), 16);
    auto h = HexToHash(hex);
    if (h.ok() && HashToHex(*h) != hex) std::abort();
  }
  if (size < kHeader) return 0;
  ChunkRecord rec;
  rec.codec = (data[0] & 1) ? Codec::kZstd : Codec::kNone;
  rec.raw_len = uint64_t(data[1]) | (uint64_t(data[2]) << 8);
  const uint8_t* stored = data + kHeader;
  rec.stored_len = size - kHeader;
  if (data[0] & 2) {
    std::memcpy(&rec.xxh3, data + 3, sizeof(rec.xxh3));
  } else {
    rec.xxh3 = Xxh3(stored, rec.stored_len);
  }
  // Exactly raw_len bytes (at least 1 so the pointer is real), so any
  // overrun is an ASan report.
  std::unique_ptr<uint8_t[]> dst(new uint8_t[rec.raw_len == 0 ? 1 : rec.raw_len]);
  Status s = DecodeChunk(rec, stored, dst.get(), "fuzz chunk 0");
  if (!s.ok()) {
    if (s.code() != Code::kDataLoss) {
      std::fprintf(stderr, "chunk_fuzz: unexpected code: %s\n", s.ToString().c_str());
      std::abort();
    }
    return 0;
  }
  if (rec.codec == Codec::kNone &&
      (rec.stored_len != rec.raw_len || std::memcmp(dst.get(), stored, rec.raw_len) != 0)) {
    std::fprintf(stderr, "chunk_fuzz: raw chunk decoded to other bytes\n");
    std::abort();
  }
  // The digest of a one-chunk file must not depend on anything but the record.
  (void)FileDigest({rec}, AlignUp(rec.stored_len));
  return 0;
}
