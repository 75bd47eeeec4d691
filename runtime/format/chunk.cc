#include "format/chunk.h"

#include <xxhash.h>
#include <zstd.h>

#include <cstring>
#include <memory>

namespace stint {

const char* CodecName(Codec codec) { return codec == Codec::kZstd ? "zstd" : "none"; }

Result<Codec> ParseCodec(std::string_view name) {
  if (name == "none") return Codec::kNone;
  if (name == "zstd") return Codec::kZstd;
  return Status::DataLoss("unknown codec '" + std::string(name) + "'");
}

uint64_t Xxh3(const void* data, size_t n) { return XXH3_64bits(data, n); }

uint64_t Xxh3Copy(void* dst, const void* src, size_t n) {
  constexpr size_t kBlock = 64u << 10;  // in L2 between the hash and the copy
  if (n <= kBlock) {
    std::memcpy(dst, src, n);
    return XXH3_64bits(src, n);
  }
  // Streaming XXH3 over consecutive blocks equals XXH3_64bits of the whole.
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state(XXH3_createState(),
                                                                         &XXH3_freeState);
  if (state == nullptr) {  // no memory for the state: hash, then copy
    std::memcpy(dst, src, n);
    return XXH3_64bits(src, n);
  }
  XXH3_64bits_reset(state.get());
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t len = n - off < kBlock ? n - off : kBlock;
    XXH3_64bits_update(state.get(), s + off, len);
    std::memcpy(d + off, s + off, len);
  }
  return XXH3_64bits_digest(state.get());
}

RawHash Xxh128(const void* data, size_t n) {
  XXH128_hash_t h = XXH3_128bits(data, n);
  return RawHash{h.high64, h.low64};
}

std::string RawHashToHex(const RawHash& h) { return HashToHex(h.high) + HashToHex(h.low); }

Result<RawHash> HexToRawHash(std::string_view hex) {
  if (hex.size() != 32)
    return Status::DataLoss("hash '" + std::string(hex) + "' is not 32 hex digits");
  STINT_ASSIGN_OR_RETURN(uint64_t high, HexToHash(hex.substr(0, 16)));
  STINT_ASSIGN_OR_RETURN(uint64_t low, HexToHash(hex.substr(16)));
  return RawHash{high, low};
}

std::string HashToHex(uint64_t h) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) s[size_t(i)] = kDigits[h & 0xf];
  return s;
}

Result<uint64_t> HexToHash(std::string_view hex) {
  if (hex.size() != 16)
    return Status::DataLoss("checksum '" + std::string(hex) + "' is not 16 hex digits");
  uint64_t h = 0;
  for (char c : hex) {
    int v;
    if (c >= '0' && c <= '9')
      v = c - '0';
    else if (c >= 'a' && c <= 'f')
      v = c - 'a' + 10;
    else
      return Status::DataLoss("checksum '" + std::string(hex) + "' is not lowercase hex");
    h = (h << 4) | uint64_t(v);
  }
  return h;
}

std::vector<uint64_t> SplitIntoChunks(uint64_t len, uint64_t chunk_size) {
  std::vector<uint64_t> out;
  if (chunk_size == 0) chunk_size = len;  // one chunk: never loop forever
  if (len == 0) {
    out.push_back(0);
    return out;
  }
  for (uint64_t done = 0; done < len;) {
    uint64_t n = len - done < chunk_size ? len - done : chunk_size;
    out.push_back(n);
    done += n;  // cannot wrap: done + n <= len
  }
  return out;
}

size_t ZstdBound(size_t n) { return ZSTD_compressBound(n); }

Result<size_t> ZstdCompress(const void* src, size_t n, void* dst, size_t dst_capacity, int level) {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  if (cctx == nullptr) return Status::ResourceExhausted("ZSTD_createCCtx failed");
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  size_t r = ZSTD_compress2(cctx, dst, dst_capacity, src, n);
  ZSTD_freeCCtx(cctx);
  if (ZSTD_isError(r))
    return Status::Internal(std::string("zstd compress: ") + ZSTD_getErrorName(r));
  return r;
}

Status DecodeChunk(const ChunkRecord& rec, const void* stored, void* dst, std::string_view where) {
  uint64_t h = Xxh3(stored, rec.stored_len);
  if (h != rec.xxh3) {
    return Status::DataLoss(std::string(where) + ": checksum mismatch (stored " +
                            HashToHex(rec.xxh3) + ", computed " + HashToHex(h) + ")");
  }
  if (rec.codec == Codec::kNone) {
    if (rec.stored_len != rec.raw_len) {
      return Status::DataLoss(std::string(where) + ": raw chunk has stored length " +
                              std::to_string(rec.stored_len) + " but raw length " +
                              std::to_string(rec.raw_len));
    }
    if (rec.raw_len > 0) std::memcpy(dst, stored, rec.raw_len);
    return Status::OK();
  }
  unsigned long long frame = ZSTD_getFrameContentSize(stored, rec.stored_len);
  if (frame == ZSTD_CONTENTSIZE_ERROR || frame == ZSTD_CONTENTSIZE_UNKNOWN ||
      frame != rec.raw_len) {
    return Status::DataLoss(std::string(where) + ": zstd frame does not declare raw length " +
                            std::to_string(rec.raw_len));
  }
  size_t r = ZSTD_decompress(dst, rec.raw_len, stored, rec.stored_len);
  if (ZSTD_isError(r)) {
    return Status::DataLoss(std::string(where) + ": zstd: " + ZSTD_getErrorName(r));
  }
  if (r != rec.raw_len) {
    return Status::DataLoss(std::string(where) + ": zstd produced " + std::to_string(r) +
                            " bytes, expected " + std::to_string(rec.raw_len));
  }
  return Status::OK();
}

uint64_t FileDigest(const std::vector<ChunkRecord>& chunks, uint64_t file_size) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  for (const auto& c : chunks) {
    uint64_t fields[3] = {c.file_offset, c.stored_len, c.xxh3};
    XXH3_64bits_update(st, fields, sizeof(fields));
  }
  XXH3_64bits_update(st, &file_size, sizeof(file_size));
  uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

}  // namespace stint
