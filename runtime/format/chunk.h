// Chunks: the unit of storage, checksumming and compression in a data file.
//
// A chunk holds up to chunk_size raw bytes of one tensor shard or blob. It is
// stored at a 4 KiB-aligned file offset, either raw or as one independent
// zstd frame (with zstd's own content checksum), and zero-padded to 4 KiB.
// Its XXH3-64 covers the stored bytes, so `stint verify` needs no decoding.
// Pure functions: fuzzable, no I/O.
#ifndef STINT_RUNTIME_FORMAT_CHUNK_H_
#define STINT_RUNTIME_FORMAT_CHUNK_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stint/status.h"

namespace stint {

enum class Codec : uint8_t { kNone, kZstd };
const char* CodecName(Codec codec);
Result<Codec> ParseCodec(std::string_view name);

// XXH3-128 of a chunk's raw bytes: how an incremental save recognises a
// chunk it need not write again (128 bits, so a collision is not a concern).
struct RawHash {
  uint64_t high = 0, low = 0;
  bool operator==(const RawHash& o) const { return high == o.high && low == o.low; }
  bool operator!=(const RawHash& o) const { return !(*this == o); }
};

struct ChunkRecord {
  uint64_t file_offset = 0;  // multiple of kChunkAlignment
  uint64_t stored_len = 0;   // bytes on disk before padding
  uint64_t raw_len = 0;      // bytes after decoding
  Codec codec = Codec::kNone;
  uint64_t xxh3 = 0;  // XXH3-64 of the stored bytes
  // Incremental checkpoints (format 1.1). `ref`: the chunk lives in another
  // committed checkpoint's data file, "step-<step>/<file>" relative to the
  // checkpoint root; empty: in its entry's own file. `raw_hash`: recorded by
  // incremental saves so the next one can compare.
  std::string ref{};
  std::optional<RawHash> raw_hash{};
};

constexpr uint64_t kChunkAlignment = 4096;
inline uint64_t AlignUp(uint64_t n, uint64_t a = kChunkAlignment) { return (n + a - 1) / a * a; }

uint64_t Xxh3(const void* data, size_t n);
// Copies n bytes from src to dst and returns Xxh3 of them, block by block,
// so each block is hashed and copied while it is in cache: one pass over
// src in memory instead of two.
uint64_t Xxh3Copy(void* dst, const void* src, size_t n);
RawHash Xxh128(const void* data, size_t n);
std::string HashToHex(uint64_t h);  // 16 lowercase hex digits
Result<uint64_t> HexToHash(std::string_view hex);
std::string RawHashToHex(const RawHash& h);  // 32 lowercase hex digits, high half first
Result<RawHash> HexToRawHash(std::string_view hex);

// Splits `len` raw bytes into chunk lengths of at most `chunk_size` (one
// zero-length chunk for len == 0 so every entry has a checksum).
std::vector<uint64_t> SplitIntoChunks(uint64_t len, uint64_t chunk_size);

// Worst-case compressed size of `n` bytes.
size_t ZstdBound(size_t n);
// Compresses into one independent frame with a content checksum; returns the
// frame size. `dst_capacity` must be at least ZstdBound(n).
Result<size_t> ZstdCompress(const void* src, size_t n, void* dst, size_t dst_capacity, int level);

// Checks `stored` (stored_len bytes) against the record and writes raw_len
// decoded bytes to `dst`. `where` names the file and chunk in errors, e.g.
// "step-00000010/rank-00000.stint chunk 3 (tensor w)".
Status DecodeChunk(const ChunkRecord& rec, const void* stored, void* dst, std::string_view where);

// Digest of a data file: XXH3-64 over (offset, stored_len, xxh3) of its chunks
// in file order and the file size. Chunk checksums cover the bytes, so this
// binds the whole file without a second pass over the data.
uint64_t FileDigest(const std::vector<ChunkRecord>& chunks_in_file_order, uint64_t file_size);

}  // namespace stint

#endif  // STINT_RUNTIME_FORMAT_CHUNK_H_
