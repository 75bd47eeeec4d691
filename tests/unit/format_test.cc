// Manifest encoding and validation, and the chunk codec: pure functions, no I/O.
//
// The manifest is untrusted input on resume, so each kind of damage must come
// back as a Status (kDataLoss, or kUnimplemented for a future format) whose
// message names the field, never as a crash or an exception.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "format/chunk.h"
#include "format/manifest.h"
#include "util/status_matchers.h"

namespace stint {
namespace {

using json = nlohmann::json;

constexpr char kOrigin[] = "/ckpt/step-00000012/MANIFEST.json";
constexpr char kFile[] = "rank-00000.stint";

// One data file of three 4 KiB blocks: tensor "w" (float32 [4, 256] = 4096 B)
// in a raw chunk and a zstd chunk, then blob "rng" in a raw chunk.
Manifest SampleManifest() {
  Manifest m;
  m.job_id = "job-7";
  m.step = 12;
  m.fencing_token = 3;
  m.world_size = 2;
  m.chunk_size = 2048;
  m.created_unix_ms = 1714564800123;
  TensorRecord t;
  t.name = "w";
  t.dtype = DType::kFloat32;
  t.global_shape = {4, 256};
  ShardRecord s;
  s.offsets = {0, 0};
  s.extents = {4, 256};
  s.file = kFile;
  s.chunks = {ChunkRecord{0, 2048, 2048, Codec::kNone, 0x0123456789abcdefULL},
              ChunkRecord{4096, 1000, 2048, Codec::kZstd, 0xfedcba9876543210ULL}};
  t.shards.push_back(s);
  m.tensors.push_back(t);
  m.blobs.push_back(BlobRecord{"rng", kFile, {ChunkRecord{8192, 10, 10, Codec::kNone, 42}}});
  std::vector<ChunkRecord> in_file_order = m.tensors[0].shards[0].chunks;
  in_file_order.push_back(m.blobs[0].chunks[0]);
  m.files.push_back(FileRecord{kFile, 3 * 4096, FileDigest(in_file_order, 3 * 4096)});
  return m;
}

// The encoded manifest as JSON, to damage it field by field.
json SampleJson() { return json::parse(EncodeManifest(SampleManifest())); }

// Serialises `top` with a checksum that matches its (possibly damaged) body,
// so the decoder gets past the checksum to the field checks.
std::string Reseal(json top) {
  std::string canonical = top["manifest"].dump();
  top["manifest_xxh3"] = HashToHex(Xxh3(canonical.data(), canonical.size()));
  return top.dump(1);
}

Status DecodeStatus(const std::string& bytes) { return DecodeManifest(bytes, kOrigin).status(); }

#define EXPECT_STATUS(status_expr, code_value, substring)                               \
  do {                                                                                  \
    Status s_ = (status_expr);                                                          \
    EXPECT_STREQ(CodeName(s_.code()), CodeName(code_value)) << s_.ToString();           \
    EXPECT_NE(s_.message().find(substring), std::string::npos)                          \
        << "message '" << s_.message() << "' does not contain '" << (substring) << "'"; \
  } while (0)

// ---------------------------------------------------------------- round trip

TEST(ManifestTest, EncodeDecodeRoundTrip) {
  Manifest m = SampleManifest();
  std::string bytes = EncodeManifest(m);
  auto d = DecodeManifest(bytes, kOrigin);
  ASSERT_OK(d);
  EXPECT_EQ(d->version_major, kFormatMajor);
  EXPECT_EQ(d->version_minor, kFormatMinor);
  EXPECT_EQ(d->job_id, "job-7");
  EXPECT_EQ(d->step, 12u);
  EXPECT_EQ(d->fencing_token, 3u);
  EXPECT_EQ(d->world_size, 2);
  EXPECT_EQ(d->chunk_size, 2048u);
  EXPECT_EQ(d->created_unix_ms, 1714564800123);
  ASSERT_EQ(d->files.size(), 1u);
  EXPECT_EQ(d->files[0].name, kFile);
  EXPECT_EQ(d->files[0].size, 3u * 4096);
  EXPECT_EQ(d->files[0].digest, m.files[0].digest);
  ASSERT_EQ(d->tensors.size(), 1u);
  const TensorRecord& t = d->tensors[0];
  EXPECT_EQ(t.name, "w");
  EXPECT_EQ(t.dtype, DType::kFloat32);
  EXPECT_EQ(t.global_shape, (std::vector<int64_t>{4, 256}));
  ASSERT_EQ(t.shards.size(), 1u);
  EXPECT_EQ(t.shards[0].offsets, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(t.shards[0].extents, (std::vector<int64_t>{4, 256}));
  ASSERT_EQ(t.shards[0].chunks.size(), 2u);
  const ChunkRecord& c = t.shards[0].chunks[1];
  EXPECT_EQ(c.file_offset, 4096u);
  EXPECT_EQ(c.stored_len, 1000u);
  EXPECT_EQ(c.raw_len, 2048u);
  EXPECT_EQ(c.codec, Codec::kZstd);
  EXPECT_EQ(c.xxh3, 0xfedcba9876543210ULL);
  ASSERT_EQ(d->blobs.size(), 1u);
  EXPECT_EQ(d->blobs[0].name, "rng");
  EXPECT_EQ(d->blobs[0].chunks[0].raw_len, 10u);
  // Encoding is deterministic, so a decoded manifest re-encodes to the same bytes.
  EXPECT_EQ(EncodeManifest(*d), bytes);
  EXPECT_NE(d->FindTensor("w"), nullptr);
  EXPECT_EQ(d->FindTensor("nope"), nullptr);
  EXPECT_NE(d->FindBlob("rng"), nullptr);
  EXPECT_NE(d->FindFile(kFile), nullptr);
}

Status Validate(const Manifest& m) { return ValidateManifest(m, kOrigin); }

// Format 1.1: a chunk kept in an older checkpoint's file (incremental save).
Manifest IncrementalManifest() {
  Manifest m = SampleManifest();
  ChunkRecord& c = m.tensors[0].shards[0].chunks[1];
  c.ref = "step-00000010/rank-00001.stint";
  c.raw_hash = RawHash{0x0011223344556677ULL, 0x8899aabbccddeeffULL};
  m.refs.push_back(FileRecord{c.ref, 8192, 0});
  std::vector<ChunkRecord> own = {m.tensors[0].shards[0].chunks[0], m.blobs[0].chunks[0]};
  own[1].file_offset = 4096;
  m.blobs[0].chunks[0].file_offset = 4096;
  m.files[0] = FileRecord{kFile, 2 * 4096, FileDigest(own, 2 * 4096)};
  return m;
}

// EncodeManifest writes the body itself; DecodeManifest checks its hash
// against nlohmann's dump() of what it parsed. The two must agree byte for
// byte for every kind of field and character a name may hold.
TEST(ManifestTest, WrittenBodyIsExactlyTheCanonicalDump) {
  std::string every_control;
  for (char c = 1; c < 0x20; ++c) every_control += c;
  const std::string awkward =
      "q\"b\\s/ " + every_control + "\x7f caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
  for (Manifest m : {SampleManifest(), IncrementalManifest(), Manifest()}) {
    m.job_id = awkward;
    if (!m.tensors.empty()) m.tensors[0].name = awkward + "w";
    const std::string bytes = EncodeManifest(m);
    json top = json::parse(bytes);
    const std::string canonical = top["manifest"].dump();
    EXPECT_NE(bytes.find(canonical), std::string::npos) << bytes;
    EXPECT_EQ(top["manifest_xxh3"], HashToHex(Xxh3(canonical.data(), canonical.size())));
    auto d = DecodeManifest(bytes, kOrigin);
    ASSERT_OK(d);
    EXPECT_EQ(d->job_id, awkward);
    if (!m.tensors.empty()) EXPECT_EQ(d->tensors[0].name, awkward + "w");
    EXPECT_EQ(EncodeManifest(*d), bytes);
  }
}

TEST(ManifestTest, ReferencesRoundTrip) {
  Manifest m = IncrementalManifest();
  ASSERT_OK(Validate(m));
  std::string bytes = EncodeManifest(m);
  auto d = DecodeManifest(bytes, kOrigin);
  ASSERT_OK(d);
  const ChunkRecord& c = d->tensors[0].shards[0].chunks[1];
  EXPECT_EQ(c.ref, "step-00000010/rank-00001.stint");
  ASSERT_TRUE(c.raw_hash.has_value());
  EXPECT_EQ(RawHashToHex(*c.raw_hash), "00112233445566778899aabbccddeeff");
  ASSERT_EQ(d->refs.size(), 1u);
  EXPECT_EQ(d->refs[0].size, 8192u);
  EXPECT_EQ(d->ReferencedDirs(), std::vector<std::string>{"step-00000010"});
  EXPECT_EQ(EncodeManifest(*d), bytes);
}

TEST(ValidateManifestTest, ReferencesMustNameOlderCheckpointsInTheRoot) {
  for (const char* bad : {"../etc/passwd", "/abs/rank-00000.stint", "step-12/../x",
                          "step-00000010/.hidden", "step-/rank-00000.stint",
                          "step-00000010/a/b", "step-12345678901234567890/x"}) {
    EXPECT_FALSE(IsValidRefPath(bad)) << bad;
    Manifest m = IncrementalManifest();
    m.refs[0].name = bad;
    m.tensors[0].shards[0].chunks[1].ref = bad;
    EXPECT_STATUS(Validate(m), Code::kDataLoss, "referenced file");
  }
  Manifest m = IncrementalManifest();
  m.refs[0].name = m.tensors[0].shards[0].chunks[1].ref = "step-00000012/rank-00000.stint";
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "not older than step 12");
  m = IncrementalManifest();
  m.refs.clear();  // a chunk names a file the manifest does not list
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "not in the manifest refs");
  m = IncrementalManifest();
  m.refs[0].size = 4096;  // the referenced chunk lies past its end
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "extends past the end");
}

TEST(ManifestCorruptionTest, BadReferenceFieldsNameTheField) {
  json top = json::parse(EncodeManifest(IncrementalManifest()));
  json bad = top;
  bad["manifest"]["tensors"][0]["shards"][0]["chunks"][1]["ref"] = "../x";
  EXPECT_STATUS(DecodeStatus(Reseal(bad)), Code::kDataLoss, "chunks[1].ref");
  bad = top;
  bad["manifest"]["tensors"][0]["shards"][0]["chunks"][1]["raw_xxh128"] = "12";
  EXPECT_STATUS(DecodeStatus(Reseal(bad)), Code::kDataLoss, "raw_xxh128");
  bad = top;
  bad["manifest"]["refs"][0].erase("size");
  EXPECT_STATUS(DecodeStatus(Reseal(bad)), Code::kDataLoss, "refs[0].size is missing");
}

TEST(ManifestTest, RoundTripOfEmptyManifestAndExtremeValues) {
  Manifest m;
  m.step = std::numeric_limits<uint64_t>::max();
  m.fencing_token = std::numeric_limits<uint64_t>::max();
  m.created_unix_ms = -1;  // a clock before 1970 is odd, not corrupt
  m.job_id = "job with \"quotes\", \\ and \n newline";
  auto d = DecodeManifest(EncodeManifest(m), kOrigin);
  ASSERT_OK(d);
  EXPECT_EQ(d->step, m.step);
  EXPECT_EQ(d->fencing_token, m.fencing_token);
  EXPECT_EQ(d->created_unix_ms, -1);
  EXPECT_EQ(d->job_id, m.job_id);
  EXPECT_TRUE(d->tensors.empty());
}

TEST(ManifestTest, EveryDTypeRoundTrips) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                   DType::kInt8, DType::kUInt8, DType::kInt16, DType::kInt32, DType::kInt64,
                   DType::kBool, DType::kComplex64, DType::kComplex128}) {
    Manifest m = SampleManifest();
    m.tensors[0].dtype = dt;
    // 4096 bytes of any element size: [4096 / size].
    m.tensors[0].global_shape = {int64_t(4096 / DTypeSize(dt))};
    m.tensors[0].shards[0].offsets = {0};
    m.tensors[0].shards[0].extents = m.tensors[0].global_shape;
    auto d = DecodeManifest(EncodeManifest(m), kOrigin);
    ASSERT_OK(d) << DTypeName(dt);
    EXPECT_EQ(d->tensors[0].dtype, dt);
  }
}

TEST(ManifestTest, NewerMinorVersionIsAccepted) {
  json top = SampleJson();
  top["manifest"]["version"] = {kFormatMajor, 7};
  auto d = DecodeManifest(Reseal(top), kOrigin);
  ASSERT_OK(d);
  EXPECT_EQ(d->version_minor, 7);
}

TEST(ManifestTest, UnknownFieldsAreIgnored) {
  json top = SampleJson();
  top["manifest"]["added_in_1_1"] = "whatever";
  EXPECT_OK(DecodeManifest(Reseal(top), kOrigin));
}

// ---------------------------------------------------------------- corruption

TEST(ManifestCorruptionTest, NotJson) {
  for (const std::string bad :
       {"", "{", "{not json", "\x01\x02", "{\"manifest\": {}}}", "null x"}) {
    EXPECT_STATUS(DecodeStatus(bad), Code::kDataLoss, "not valid JSON");
    EXPECT_NE(DecodeStatus(bad).message().find(kOrigin), std::string::npos);
  }
}

TEST(ManifestCorruptionTest, TruncatedFile) {
  std::string bytes = EncodeManifest(SampleManifest());
  for (size_t n : {size_t(0), size_t(1), bytes.size() / 2, bytes.size() - 3}) {
    Status s = DecodeStatus(bytes.substr(0, n));
    EXPECT_EQ(s.code(), Code::kDataLoss) << n << ": " << s.ToString();
  }
}

TEST(ManifestCorruptionTest, TopLevelIsNotAnObject) {
  EXPECT_STATUS(DecodeStatus("[1, 2]"), Code::kDataLoss, "is not a JSON object");
  EXPECT_STATUS(DecodeStatus("42"), Code::kDataLoss, "is not a JSON object");
}

TEST(ManifestCorruptionTest, MissingEnvelopeFields) {
  json top = SampleJson();
  top.erase("manifest_xxh3");
  EXPECT_STATUS(DecodeStatus(top.dump()), Code::kDataLoss, "manifest_xxh3 is missing");
  top = SampleJson();
  top.erase("manifest");
  EXPECT_STATUS(DecodeStatus(top.dump()), Code::kDataLoss, ".manifest is missing");
  top = SampleJson();
  top["manifest"] = json::array();
  EXPECT_STATUS(DecodeStatus(top.dump()), Code::kDataLoss, ".manifest has type array");
  top = SampleJson();
  top["manifest_xxh3"] = "ABCDEF0123456789";  // uppercase is not what we write
  EXPECT_STATUS(DecodeStatus(top.dump()), Code::kDataLoss, "manifest_xxh3");
}

// Every body field, when missing, is reported by its dotted path.
TEST(ManifestCorruptionTest, MissingBodyField) {
  for (const char* key : {"version", "job_id", "step", "fencing_token", "world_size", "chunk_size",
                          "created_unix_ms", "files", "tensors", "blobs"}) {
    json top = SampleJson();
    top["manifest"].erase(key);
    EXPECT_STATUS(DecodeStatus(Reseal(top)), Code::kDataLoss,
                  std::string("manifest.") + key + " is missing");
  }
}

TEST(ManifestCorruptionTest, MissingNestedField) {
  struct Case {
    json::json_pointer where;
    const char* key;
    const char* field;
  };
  const Case cases[] = {
      {json::json_pointer("/manifest/files/0"), "name", "manifest.files[0].name is missing"},
      {json::json_pointer("/manifest/files/0"), "size", "manifest.files[0].size is missing"},
      {json::json_pointer("/manifest/files/0"), "digest", "manifest.files[0].digest is missing"},
      {json::json_pointer("/manifest/tensors/0"), "dtype", "manifest.tensors[0].dtype is missing"},
      {json::json_pointer("/manifest/tensors/0"), "shape", "manifest.tensors[0].shape is missing"},
      {json::json_pointer("/manifest/tensors/0"), "shards",
       "manifest.tensors[0].shards is missing"},
      {json::json_pointer("/manifest/tensors/0/shards/0"), "extents",
       "manifest.tensors[0].shards[0].extents is missing"},
      {json::json_pointer("/manifest/tensors/0/shards/0"), "file",
       "manifest.tensors[0].shards[0].file is missing"},
      {json::json_pointer("/manifest/tensors/0/shards/0/chunks/1"), "offset",
       "manifest.tensors[0].shards[0].chunks[1].offset is missing"},
      {json::json_pointer("/manifest/tensors/0/shards/0/chunks/1"), "xxh3",
       "manifest.tensors[0].shards[0].chunks[1].xxh3 is missing"},
      {json::json_pointer("/manifest/blobs/0"), "chunks", "manifest.blobs[0].chunks is missing"},
      {json::json_pointer("/manifest/blobs/0/chunks/0"), "codec",
       "manifest.blobs[0].chunks[0].codec is missing"},
  };
  for (const Case& c : cases) {
    json top = SampleJson();
    top[c.where].erase(c.key);
    EXPECT_STATUS(DecodeStatus(Reseal(top)), Code::kDataLoss, c.field);
  }
}

TEST(ManifestCorruptionTest, WrongType) {
  struct Case {
    const char* pointer;
    json value;
    const char* expect;
  };
  const Case cases[] = {
      {"/manifest/step", "12", "manifest.step has type string"},
      {"/manifest/step", -12, "manifest.step has type number"},
      {"/manifest/step", 12.5, "manifest.step has type number"},
      {"/manifest/job_id", 7, "manifest.job_id has type number"},
      {"/manifest/world_size", true, "manifest.world_size has type boolean"},
      {"/manifest/files", json::object(), "manifest.files has type object"},
      {"/manifest/tensors", nullptr, "manifest.tensors has type null"},
      {"/manifest/tensors/0", "w", "manifest.tensors[0] is not a JSON object"},
      {"/manifest/tensors/0/shape/0", -1, "manifest.tensors[0].shape holds a value"},
      {"/manifest/tensors/0/shape/0", 4.0, "manifest.tensors[0].shape holds a value"},
      {"/manifest/tensors/0/shards/0/chunks/0/stored", "2048",
       "manifest.tensors[0].shards[0].chunks[0].stored has type string"},
      {"/manifest/blobs/0/chunks/0/raw", -10, "manifest.blobs[0].chunks[0].raw has type number"},
      {"/manifest/blobs/0/chunks", json::object(), "manifest.blobs[0].chunks has type object"},
      {"/manifest/version", json::array({1}), "manifest.version is not [major, minor]"},
      {"/manifest/version", "1.0", "manifest.version has type string"},
  };
  for (const Case& c : cases) {
    json top = SampleJson();
    top[json::json_pointer(c.pointer)] = c.value;
    EXPECT_STATUS(DecodeStatus(Reseal(top)), Code::kDataLoss, c.expect);
  }
}

TEST(ManifestCorruptionTest, BadValues) {
  struct Case {
    const char* pointer;
    json value;
    const char* expect;
  };
  const Case cases[] = {
      {"/manifest/world_size", 0, "manifest.world_size is out of range"},
      {"/manifest/world_size", 1u << 30, "manifest.world_size is out of range"},
      {"/manifest/tensors/0/dtype", "float33", "manifest.tensors[0].dtype unknown dtype 'float33'"},
      {"/manifest/files/0/digest", "123",
       "manifest.files[0].digest checksum '123' is not 16 hex digits"},
      {"/manifest/tensors/0/shards/0/chunks/0/xxh3", "0123456789abcdeg",
       "manifest.tensors[0].shards[0].chunks[0].xxh3 checksum '0123456789abcdeg' is not lowercase "
       "hex"},
      {"/manifest/blobs/0/chunks/0/codec", "lz4", "unknown codec 'lz4'"},
  };
  for (const Case& c : cases) {
    json top = SampleJson();
    top[json::json_pointer(c.pointer)] = c.value;
    EXPECT_STATUS(DecodeStatus(Reseal(top)), Code::kDataLoss, c.expect);
  }
}

// Every error names where it came from, the codec too.
TEST(ManifestCorruptionTest, UnknownCodecNamesTheField) {
  json top = SampleJson();
  top[json::json_pointer("/manifest/blobs/0/chunks/0/codec")] = "lz4";
  EXPECT_STATUS(DecodeStatus(Reseal(top)), Code::kDataLoss, "manifest.blobs[0].chunks[0].codec");
  EXPECT_NE(DecodeStatus(Reseal(top)).message().find(kOrigin), std::string::npos);
}

// The checksum is what catches damage that still parses: a flipped digit in
// an offset, a length or the step.
TEST(ManifestCorruptionTest, FlippedDigitIsAChecksumMismatch) {
  const std::string bytes = EncodeManifest(SampleManifest());
  int flipped = 0, unimplemented = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] < '0' || bytes[i] > '9') continue;
    std::string bad = bytes;
    bad[i] = bad[i] == '9' ? '8' : char(bad[i] + 1);
    Status s = DecodeStatus(bad);
    ++flipped;
    // A digit in the stored checksum, or in the body: either way no valid
    // manifest. The one exception is the major version, which is read before
    // the checksum on purpose and so reads as a format from the future.
    ASSERT_FALSE(s.ok()) << "digit " << i << " flipped went unnoticed";
    if (s.code() == Code::kUnimplemented) {
      EXPECT_NE(s.message().find("unknown checkpoint format version"), std::string::npos);
      ++unimplemented;
    } else {
      EXPECT_EQ(s.code(), Code::kDataLoss) << i << ": " << s.ToString();
    }
  }
  EXPECT_EQ(unimplemented, 1);
  EXPECT_GT(flipped, 20);

  json top = SampleJson();
  top["manifest"]["tensors"][0]["shards"][0]["chunks"][1]["offset"] = 8192;  // not resealed
  EXPECT_STATUS(DecodeStatus(top.dump()), Code::kDataLoss, "manifest checksum mismatch");
  top = SampleJson();
  top["manifest"]["step"] = 13;
  EXPECT_STATUS(DecodeStatus(top.dump()), Code::kDataLoss, "manifest checksum mismatch");
  top = SampleJson();
  std::string hex = top["manifest_xxh3"];
  hex[0] = hex[0] == '0' ? '1' : '0';
  top["manifest_xxh3"] = hex;
  EXPECT_STATUS(DecodeStatus(top.dump()), Code::kDataLoss, "manifest checksum mismatch");
}

// Re-indenting or reordering keys keeps the canonical body, so it still verifies.
TEST(ManifestCorruptionTest, WhitespaceDoesNotMatter) {
  json top = SampleJson();
  EXPECT_OK(DecodeManifest(top.dump(), kOrigin));
  EXPECT_OK(DecodeManifest(top.dump(8), kOrigin));
  EXPECT_OK(DecodeManifest(top.dump(1) + "\n", kOrigin));  // how manifests were written before
  // The writer's envelope around a body that is not its canonical dump: the
  // stored bytes do not hash to manifest_xxh3, the canonical dump does.
  std::string hex = top["manifest_xxh3"];
  EXPECT_OK(DecodeManifest(
      "{\"manifest\":" + top["manifest"].dump(2) + ",\"manifest_xxh3\":\"" + hex + "\"}\n",
      kOrigin));
  // And a body changed inside that envelope is a mismatch either way.
  std::string bytes = EncodeManifest(SampleManifest());
  size_t at = bytes.find("\"job-7\"");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 5] = '8';
  auto d = DecodeManifest(bytes, kOrigin);
  EXPECT_EQ(d.status().code(), Code::kDataLoss);
  EXPECT_NE(d.status().message().find("checksum mismatch"), std::string::npos)
      << d.status().ToString();
}

TEST(ManifestCorruptionTest, UnknownMajorVersionIsUnimplemented) {
  for (int major : {0, 2, 99}) {
    json top = SampleJson();
    top["manifest"]["version"] = {major, 0};
    std::string expect = "unknown checkpoint format version " + std::to_string(major) + ".0";
    // Resealed or not: a future writer may checksum differently, and the
    // reader must say "version", not "checksum mismatch".
    EXPECT_STATUS(DecodeStatus(Reseal(top)), Code::kUnimplemented, expect);
    EXPECT_STATUS(DecodeStatus(top.dump()), Code::kUnimplemented, expect);
  }
  // A future body may look nothing like this one.
  json future = {{"manifest", {{"version", {2, 0}}, {"layout", "new"}}},
                 {"manifest_xxh3", "0000000000000000"}};
  EXPECT_STATUS(DecodeStatus(future.dump()), Code::kUnimplemented,
                "unknown checkpoint format version 2.0");
}

// Deep nesting is valid JSON but no manifest; it must be kDataLoss, not a
// stack overflow in the recursive dump() of the checksum pass.
TEST(ManifestCorruptionTest, DeeplyNestedJsonIsDataLoss) {
  const size_t depth = 200000;
  std::string bytes = "{\"manifest\": {\"x\": " + std::string(depth, '[') +
                      std::string(depth, ']') + "}, \"manifest_xxh3\": \"0000000000000000\"}";
  EXPECT_EQ(DecodeStatus(bytes).code(), Code::kDataLoss);
}

TEST(ManifestCorruptionTest, DecodeRunsValidation) {
  json top = SampleJson();
  top["manifest"]["tensors"][0]["shards"][0]["chunks"][1]["offset"] = 100;
  EXPECT_STATUS(DecodeStatus(Reseal(top)), Code::kDataLoss, "offset not 4 KiB aligned");
}

// ---------------------------------------------------------------- validation


TEST(ValidateManifestTest, SampleIsValid) { EXPECT_OK(Validate(SampleManifest())); }

TEST(ValidateManifestTest, ShardOutsideShape) {
  Manifest m = SampleManifest();
  m.tensors[0].shards[0].offsets = {1, 0};
  EXPECT_STATUS(Validate(m), Code::kDataLoss,
                "tensor 'w' shard 0: lies outside the global shape in dim 0");
  m = SampleManifest();
  m.tensors[0].shards[0].offsets = {0, 1};
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "lies outside the global shape in dim 1");
  m = SampleManifest();
  m.tensors[0].global_shape = {4, 255};
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "lies outside the global shape in dim 1");
}

TEST(ValidateManifestTest, ShardRankDiffersFromShape) {
  Manifest m = SampleManifest();
  m.tensors[0].shards[0].offsets = {0};
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "rank of offsets/extents differs from the shape");
  m = SampleManifest();
  m.tensors[0].shards[0].extents = {4, 256, 1};
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "rank of offsets/extents differs from the shape");
}

TEST(ValidateManifestTest, HugeDimensions) {
  Manifest m = SampleManifest();
  m.tensors[0].global_shape = {int64_t{1} << 41, 256};
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "dimension too large");
  m = SampleManifest();
  m.tensors[0].global_shape = {int64_t{1} << 30, int64_t{1} << 30};
  m.tensors[0].shards[0].extents = {int64_t{1} << 30, int64_t{1} << 30};
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "too many elements");
}

// offsets + extents must not wrap around (signed overflow would slip past
// the shape check).
TEST(ValidateManifestTest, HugeShardOffsetIsOutsideShape) {
  Manifest m = SampleManifest();
  m.tensors[0].global_shape = {4, 256};
  m.tensors[0].shards[0].offsets = {std::numeric_limits<int64_t>::max(), 0};
  m.tensors[0].shards[0].extents = {4, 256};
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "lies outside the global shape in dim 0");
}

TEST(ValidateManifestTest, ChunkLengthsDoNotAddUp) {
  Manifest m = SampleManifest();
  m.tensors[0].shards[0].chunks[1].raw_len = 2000;
  EXPECT_STATUS(Validate(m), Code::kDataLoss,
                "tensor 'w' shard 0: chunks hold 4048 bytes, expected 4096");
  m = SampleManifest();
  m.tensors[0].shards[0].chunks.pop_back();
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "chunks hold 2048 bytes, expected 4096");
  m = SampleManifest();
  m.tensors[0].dtype = DType::kFloat64;  // twice the bytes for the same shape
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "expected 8192");
  m = SampleManifest();
  m.tensors[0].shards[0].chunks.clear();
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "has no chunks");
  m = SampleManifest();
  m.blobs[0].chunks.clear();
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "blob 'rng' has no chunks");
}

TEST(ValidateManifestTest, UnalignedOffset) {
  Manifest m = SampleManifest();
  m.tensors[0].shards[0].chunks[1].file_offset = 4097;
  EXPECT_STATUS(Validate(m), Code::kDataLoss,
                "tensor 'w' shard 0 chunk 1: offset not 4 KiB aligned");
  m = SampleManifest();
  m.blobs[0].chunks[0].file_offset = 8;
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "blob 'rng' chunk 0: offset not 4 KiB aligned");
}

TEST(ValidateManifestTest, ChunkPastEndOfFile) {
  Manifest m = SampleManifest();
  m.blobs[0].chunks[0].file_offset = 3 * 4096;
  EXPECT_STATUS(Validate(m), Code::kDataLoss,
                "blob 'rng' chunk 0: extends past the end of rank-00000.stint");
  m = SampleManifest();
  m.files[0].size = 8192 + 9;  // the blob's 10 bytes do not fit
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "extends past the end");
  m = SampleManifest();
  m.files[0].size = 8192 + 10;  // they fit, but the 4 KiB padding does not
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "extends past the end");
  m = SampleManifest();
  m.tensors[0].shards[0].chunks[0].stored_len = std::numeric_limits<uint64_t>::max();
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "extends past the end");
  m = SampleManifest();
  // offset + stored would wrap to a small number.
  m.tensors[0].shards[0].chunks[0].file_offset = std::numeric_limits<uint64_t>::max() - 4095;
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "extends past the end");
}

TEST(ValidateManifestTest, HugeRawLength) {
  Manifest m = SampleManifest();
  m.blobs[0].chunks[0].raw_len = (uint64_t{1} << 40) + 1;
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "raw length too large");
}

TEST(ValidateManifestTest, UnknownDataFile) {
  Manifest m = SampleManifest();
  m.tensors[0].shards[0].file = "rank-00001.stint";
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "refers to a data file not in the manifest");
  m = SampleManifest();
  m.blobs[0].file = "";
  EXPECT_STATUS(Validate(m), Code::kDataLoss,
                "blob 'rng' chunk 0 refers to a data file not in the manifest");
}

TEST(ValidateManifestTest, BadFileNames) {
  for (const char* name : {"", "../rank-00000.stint", "a/b", ".hidden", "/abs"}) {
    Manifest m = SampleManifest();
    m.files[0].name = name;
    EXPECT_STATUS(Validate(m), Code::kDataLoss, "bad data file name");
  }
}

TEST(ValidateManifestTest, DuplicateNames) {
  Manifest m = SampleManifest();
  m.tensors.push_back(m.tensors[0]);
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "tensor 'w' appears twice");
  m = SampleManifest();
  m.blobs.push_back(m.blobs[0]);
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "blob 'rng' appears twice");
  m = SampleManifest();
  m.files.push_back(m.files[0]);
  EXPECT_STATUS(Validate(m), Code::kDataLoss, "duplicate file rank-00000.stint");
  // A tensor and a blob may share a name: they live in different namespaces.
  m = SampleManifest();
  m.blobs[0].name = "w";
  EXPECT_OK(Validate(m));
}

TEST(ValidateManifestTest, EmptyAndScalarTensors) {
  Manifest m = SampleManifest();
  TensorRecord empty{"empty", DType::kFloat32, {0, 4}, {}};
  empty.shards.push_back(
      ShardRecord{{0, 0}, {0, 4}, kFile, {ChunkRecord{8192, 0, 0, Codec::kNone, 0}}});
  TensorRecord scalar{"scalar", DType::kFloat64, {}, {}};
  scalar.shards.push_back(ShardRecord{{}, {}, kFile, {ChunkRecord{8192, 8, 8, Codec::kNone, 0}}});
  m.tensors.push_back(empty);
  m.tensors.push_back(scalar);
  EXPECT_OK(Validate(m));
  m.tensors.back().shards[0].chunks[0].raw_len = 4;
  m.tensors.back().shards[0].chunks[0].stored_len = 4;  // a raw chunk stores what it holds
  EXPECT_STATUS(Validate(m), Code::kDataLoss,
                "tensor 'scalar' shard 0: chunks hold 4 bytes, expected 8");
}

// ---------------------------------------------------------------- chunk codec

TEST(ChunkTest, Xxh3KnownValue) {
  // XXH3-64 with seed 0 of the empty input: fixed by the xxHash spec.
  EXPECT_EQ(Xxh3("", 0), 0x2D06800538D394C2ULL);
  EXPECT_EQ(Xxh3("abc", 3), Xxh3(std::string("abc").data(), 3));
  EXPECT_NE(Xxh3("abc", 3), Xxh3("abd", 3));
}

TEST(ChunkTest, HexRoundTrip) {
  EXPECT_EQ(HashToHex(0), "0000000000000000");
  EXPECT_EQ(HashToHex(0xdeadbeefULL), "00000000deadbeef");
  EXPECT_EQ(HashToHex(std::numeric_limits<uint64_t>::max()), "ffffffffffffffff");
  std::mt19937_64 rng(1);
  for (int i = 0; i < 1000; ++i) {
    uint64_t h = rng();
    std::string hex = HashToHex(h);
    ASSERT_EQ(hex.size(), 16u);
    auto back = HexToHash(hex);
    ASSERT_OK(back) << hex;
    EXPECT_EQ(*back, h);
  }
}

TEST(ChunkTest, HexToHashRejectsJunk) {
  for (const char* bad :
       {"", "0", "000000000000000", "00000000000000000", "ABCDEF0123456789", "0x23456789abcdef",
        "g000000000000000", " 000000000000000", "000000000000000-"}) {
    auto r = HexToHash(bad);
    EXPECT_EQ(r.status().code(), Code::kDataLoss) << "'" << bad << "'";
  }
  EXPECT_EQ(HexToHash(std::string_view("0000000\0"
                                       "00000000",
                                       16))
                .status()
                .code(),
            Code::kDataLoss);
}

TEST(ChunkTest, CodecNames) {
  EXPECT_STREQ(CodecName(Codec::kNone), "none");
  EXPECT_STREQ(CodecName(Codec::kZstd), "zstd");
  EXPECT_EQ(*ParseCodec("none"), Codec::kNone);
  EXPECT_EQ(*ParseCodec("zstd"), Codec::kZstd);
  EXPECT_EQ(ParseCodec("ZSTD").status().code(), Code::kDataLoss);
  EXPECT_EQ(ParseCodec("").status().code(), Code::kDataLoss);
}

TEST(ChunkTest, AlignUp) {
  EXPECT_EQ(AlignUp(0), 0u);
  EXPECT_EQ(AlignUp(1), 4096u);
  EXPECT_EQ(AlignUp(4096), 4096u);
  EXPECT_EQ(AlignUp(4097), 8192u);
  EXPECT_EQ(AlignUp(5, 8), 8u);
}

TEST(ChunkTest, SplitIntoChunks) {
  using V = std::vector<uint64_t>;
  EXPECT_EQ(SplitIntoChunks(0, 4096), V{0});  // an empty entry still gets a checksummed chunk
  EXPECT_EQ(SplitIntoChunks(1, 4096), V{1});
  EXPECT_EQ(SplitIntoChunks(4095, 4096), V{4095});
  EXPECT_EQ(SplitIntoChunks(4096, 4096), V{4096});
  EXPECT_EQ(SplitIntoChunks(4097, 4096), (V{4096, 1}));
  EXPECT_EQ(SplitIntoChunks(3 * 4096, 4096), (V{4096, 4096, 4096}));
  EXPECT_EQ(SplitIntoChunks(10, 3), (V{3, 3, 3, 1}));
  EXPECT_EQ(SplitIntoChunks(5, 1), (V{1, 1, 1, 1, 1}));
  EXPECT_EQ(SplitIntoChunks(7, std::numeric_limits<uint64_t>::max()), V{7});
  // Large lengths: the chunks still sum to the length, none larger than chunk_size.
  const uint64_t len = (uint64_t{1} << 40) + 12345, cs = uint64_t{1} << 30;
  V parts = SplitIntoChunks(len, cs);
  EXPECT_EQ(parts.size(), 1025u);
  uint64_t sum = 0;
  for (uint64_t p : parts) {
    EXPECT_LE(p, cs);
    sum += p;
  }
  EXPECT_EQ(sum, len);
  EXPECT_EQ(parts.back(), 12345u);
}

// A stored record for `stored` bytes, as persist writes it.
ChunkRecord RecordFor(const std::string& stored, uint64_t raw_len, Codec codec) {
  return ChunkRecord{0, stored.size(), raw_len, codec, Xxh3(stored.data(), stored.size())};
}

std::string Compress(const std::string& raw, int level = 3) {
  std::string buf(ZstdBound(raw.size()), '\0');
  auto n = ZstdCompress(raw.data(), raw.size(), buf.data(), buf.size(), level);
  EXPECT_OK(n);
  buf.resize(n.ok() ? *n : 0);
  return buf;
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = char(rng());
  return s;
}

std::string Compressible(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = char("stint checkpoint "[i % 17]);
  return s;
}

TEST(ChunkTest, ZstdRoundTrip) {
  for (const std::string& raw :
       {Compressible(100000), RandomBytes(5000, 3), std::string("x"), std::string()}) {
    for (int level : {1, 3, 19}) {
      std::string stored = Compress(raw, level);
      ASSERT_FALSE(stored.empty());
      std::string out(raw.size(), '\0');
      Status s =
          DecodeChunk(RecordFor(stored, raw.size(), Codec::kZstd), stored.data(), out.data(), "c");
      ASSERT_OK(s);
      EXPECT_EQ(out, raw);
    }
  }
}

TEST(ChunkTest, ZstdCompresses) {
  EXPECT_LT(Compress(Compressible(100000)).size(), 1000u);
  EXPECT_LE(Compress(RandomBytes(5000, 3)).size(), ZstdBound(5000));
}

TEST(ChunkTest, ZstdCompressRejectsSmallBuffer) {
  std::string raw = RandomBytes(4096, 1);
  std::string dst(100, '\0');
  auto n = ZstdCompress(raw.data(), raw.size(), dst.data(), dst.size(), 1);
  EXPECT_FALSE(n.ok());
}

TEST(ChunkTest, RawRoundTrip) {
  std::string raw = RandomBytes(4096, 2);
  std::string out(raw.size(), '\0');
  Status s = DecodeChunk(RecordFor(raw, raw.size(), Codec::kNone), raw.data(), out.data(), "c");
  ASSERT_OK(s);
  EXPECT_EQ(out, raw);
  // Zero-length chunk: nothing is read or written.
  EXPECT_OK(DecodeChunk(RecordFor("", 0, Codec::kNone), "", nullptr, "c"));
}

TEST(ChunkTest, FlippedBitIsChecksumMismatch) {
  const char* where = "step-00000010/rank-00000.stint chunk 3 (tensor w)";
  for (Codec codec : {Codec::kNone, Codec::kZstd}) {
    std::string raw = Compressible(10000);
    std::string stored = codec == Codec::kZstd ? Compress(raw) : raw;
    ChunkRecord rec = RecordFor(stored, raw.size(), codec);
    for (size_t pos : {size_t(0), stored.size() / 2, stored.size() - 1}) {
      for (int bit : {0, 7}) {
        std::string bad = stored;
        bad[pos] = char(bad[pos] ^ (1 << bit));
        std::string out(raw.size(), '\0');
        Status s = DecodeChunk(rec, bad.data(), out.data(), where);
        EXPECT_STATUS(s, Code::kDataLoss, "checksum mismatch");
        EXPECT_NE(s.message().find(where), std::string::npos) << s.message();
      }
    }
  }
}

TEST(ChunkTest, WrongRawLength) {
  std::string raw = Compressible(10000);
  std::string out(raw.size() + 1, '\0');
  // Raw chunk whose lengths disagree.
  EXPECT_STATUS(
      DecodeChunk(RecordFor(raw, raw.size() + 1, Codec::kNone), raw.data(), out.data(), "c"),
      Code::kDataLoss, "raw chunk has stored length 10000 but raw length 10001");
  // zstd frame that declares another length than the record.
  std::string stored = Compress(raw);
  for (uint64_t wrong : {raw.size() - 1, raw.size() + 1, uint64_t(0)}) {
    EXPECT_STATUS(
        DecodeChunk(RecordFor(stored, wrong, Codec::kZstd), stored.data(), out.data(), "c"),
        Code::kDataLoss, "zstd frame does not declare raw length " + std::to_string(wrong));
  }
}

// Damage the checksum cannot see (the record's xxh3 recomputed over the
// damaged bytes, as a buggy writer would): zstd's own checks catch it.
TEST(ChunkTest, DamagedFrameWithMatchingChecksum) {
  std::string raw = RandomBytes(20000, 4) + Compressible(20000);
  std::string stored = Compress(raw);
  std::string out(raw.size(), '\0');
  int caught = 0;
  for (size_t pos = 0; pos < stored.size(); pos += 97) {
    std::string bad = stored;
    bad[pos] = char(bad[pos] ^ 0x5a);
    Status s = DecodeChunk(RecordFor(bad, raw.size(), Codec::kZstd), bad.data(), out.data(), "c");
    if (!s.ok()) {
      EXPECT_EQ(s.code(), Code::kDataLoss) << s.ToString();
      ++caught;
    } else {
      // Only acceptable if the damage was in a byte zstd ignores, yielding the same output.
      EXPECT_EQ(out, raw) << "flip at " << pos << " decoded to different bytes without error";
    }
  }
  EXPECT_GT(caught, 0);
  // Not a zstd frame at all.
  std::string junk = "this is not a zstd frame";
  EXPECT_STATUS(DecodeChunk(RecordFor(junk, 10, Codec::kZstd), junk.data(), out.data(), "c"),
                Code::kDataLoss, "zstd frame does not declare raw length");
  // Truncated frame.
  std::string cut = stored.substr(0, stored.size() / 2);
  EXPECT_EQ(
      DecodeChunk(RecordFor(cut, raw.size(), Codec::kZstd), cut.data(), out.data(), "c").code(),
      Code::kDataLoss);
}

TEST(ChunkTest, FileDigestChangesWithAnyField) {
  const std::vector<ChunkRecord> base = {ChunkRecord{0, 100, 4096, Codec::kZstd, 11},
                                         ChunkRecord{4096, 4096, 4096, Codec::kNone, 22}};
  const uint64_t size = 8192;
  const uint64_t d0 = FileDigest(base, size);
  EXPECT_EQ(FileDigest(base, size), d0);  // deterministic
  EXPECT_NE(FileDigest(base, size + 4096), d0);
  for (size_t i = 0; i < base.size(); ++i) {
    auto c = base;
    c[i].file_offset += 4096;
    EXPECT_NE(FileDigest(c, size), d0) << "offset of chunk " << i;
    c = base;
    c[i].stored_len += 1;
    EXPECT_NE(FileDigest(c, size), d0) << "stored_len of chunk " << i;
    c = base;
    c[i].xxh3 ^= 1;
    EXPECT_NE(FileDigest(c, size), d0) << "xxh3 of chunk " << i;
  }
  auto swapped = base;
  std::swap(swapped[0], swapped[1]);
  EXPECT_NE(FileDigest(swapped, size), d0);
  EXPECT_NE(FileDigest({base[0]}, size), d0);  // a dropped chunk
  EXPECT_NE(FileDigest({}, size), d0);
  // raw_len and codec are bound by the chunk checksum and zstd's frame
  // header instead: the digest covers only where the bytes are.
  auto c = base;
  c[0].raw_len = 1;
  EXPECT_EQ(FileDigest(c, size), d0);
}

}  // namespace
}  // namespace stint
