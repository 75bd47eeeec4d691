// libFuzzer target: DecodeManifest on arbitrary bytes.
//
// Properties: it never crashes, throws or trips a sanitizer; whatever it
// accepts passes ValidateManifest and survives Encode -> Decode unchanged.
//
// Each input that parses as JSON with a "manifest" object is decoded a second
// time with the checksum recomputed (reseal.h): that reaches the field readers
// and ValidateManifest.
//
// Built and run by tools/fuzz.sh. With STINT_FUZZ_WRITE_SEEDS=<dir> the binary
// writes a seed corpus of real manifests to <dir> and exits.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

#include "format/chunk.h"
#include "format/manifest.h"
#include "reseal.h"

namespace stint {
namespace {


[[noreturn]] void Die(const char* what, const std::string& detail) {
  std::fprintf(stderr, "manifest_fuzz: %s\n%s\n", what, detail.c_str());
  std::abort();
}

void CheckOne(std::string_view bytes) {
  Result<Manifest> m = DecodeManifest(bytes, "fuzz");
  if (!m.ok()) {
    if (m.status().code() != Code::kDataLoss && m.status().code() != Code::kUnimplemented) {
      Die("decode failed with an unexpected code", m.status().ToString());
    }
    return;
  }
  Status valid = ValidateManifest(*m, "fuzz");
  if (!valid.ok()) Die("decoded manifest fails ValidateManifest", valid.ToString());
  std::string encoded = EncodeManifest(*m);
  Result<Manifest> again = DecodeManifest(encoded, "fuzz-reencoded");
  if (!again.ok())
    Die("re-encoded manifest does not decode", again.status().ToString() + "\n" + encoded);
  if (EncodeManifest(*again) != encoded) Die("Encode(Decode(Encode(m))) != Encode(m)", encoded);
}

Manifest SeedManifest(bool compressed, int shards) {
  Manifest m;
  m.job_id = "seed";
  m.step = 42;
  m.fencing_token = 7;
  m.world_size = shards;
  m.chunk_size = 8192;
  m.created_unix_ms = 1714564800000;
  uint64_t offset = 0;
  std::vector<ChunkRecord> all;
  auto chunk = [&](uint64_t raw) {
    ChunkRecord c{offset, compressed && raw > 0 ? raw / 3 : raw, raw,
                  compressed && raw > 0 ? Codec::kZstd : Codec::kNone,
                  Xxh3(&offset, sizeof(offset))};
    offset += AlignUp(c.stored_len == 0 ? 1 : c.stored_len);
    all.push_back(c);
    return c;
  };
  TensorRecord t{"layer.w", DType::kFloat32, {int64_t(4 * shards), 1024}, {}};
  for (int s = 0; s < shards; ++s) {
    t.shards.push_back(ShardRecord{
        {int64_t(4 * s), 0}, {4, 1024}, "rank-00000.stint", {chunk(8192), chunk(8192)}});
  }
  m.tensors.push_back(t);
  TensorRecord scalar{"step", DType::kInt64, {}, {}};
  scalar.shards.push_back(ShardRecord{{}, {}, "rank-00000.stint", {chunk(8)}});
  m.tensors.push_back(scalar);
  TensorRecord empty{"empty", DType::kBFloat16, {0, 3}, {}};
  empty.shards.push_back(ShardRecord{{0, 0}, {0, 3}, "rank-00000.stint", {chunk(0)}});
  m.tensors.push_back(empty);
  m.blobs.push_back(BlobRecord{"rng", "rank-00000.stint", {chunk(20)}});
  m.files.push_back(FileRecord{"rank-00000.stint", offset, FileDigest(all, offset)});
  return m;
}

void WriteSeeds(const std::string& dir) {
  int n = 0;
  auto put = [&](const std::string& bytes) {
    std::ofstream(dir + "/seed-" + std::to_string(n++), std::ios::binary) << bytes;
  };
  for (bool compressed : {false, true}) {
    for (int shards : {1, 3}) {
      Manifest m = SeedManifest(compressed, shards);
      Status s = ValidateManifest(m, "seed");
      if (!s.ok()) Die("seed manifest is invalid", s.ToString());
      put(EncodeManifest(m));
    }
  }
  // Format 1.1: an incremental save's chunk referenced in an older step's file.
  Manifest incremental = SeedManifest(false, 1);
  for (ChunkRecord& c : incremental.tensors[0].shards[0].chunks) c.raw_hash = RawHash{1, 2};
  ChunkRecord& ref = incremental.tensors[0].shards[0].chunks[1];
  ref.ref = "step-00000041/rank-00000.stint";
  incremental.refs.push_back(FileRecord{ref.ref, 1 << 20, 0});
  Status s = ValidateManifest(incremental, "seed");
  if (!s.ok()) Die("incremental seed manifest is invalid", s.ToString());
  put(EncodeManifest(incremental));
  put(EncodeManifest(Manifest{}));
  put(R"({"manifest":{"version":[2,0]},"manifest_xxh3":"0000000000000000"})");
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
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  stint::CheckOne(bytes);
  if (auto resealed = stint::Reseal(bytes)) stint::CheckOne(*resealed);
  return 0;
}
