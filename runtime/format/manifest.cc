#include "format/manifest.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "base/json_fields.h"
#include "format/shard_layout.h"
#include "stint/version.h"

namespace stint {
namespace {

using json = nlohmann::json;

// A manifest is untrusted input: its fields are read with JsonFields (never
// a throw), null is a value of the wrong type, and every refusal is
// kDataLoss naming the field: "<origin>: manifest.files[0].size is missing",
// "... has type string".
Status ManifestFieldError(const internal::JsonFieldError& e) {
  using Problem = internal::JsonFieldError::Problem;
  switch (e.problem) {
    case Problem::kNotObject:
      return Status::DataLoss(e.path() + " is not a JSON object");
    case Problem::kMissing:
      return Status::DataLoss(e.path() + " is missing");
    case Problem::kWrongType:
      return Status::DataLoss(e.path() + " has type " + e.actual);
    case Problem::kBadElement:
      return Status::DataLoss(e.path() + " holds a value that is not " +
                              internal::JsonKindPhrase(e.expected));
    case Problem::kBadValue:
      return Status::DataLoss(e.path() + " " + e.detail);
  }
  return Status::DataLoss(e.path() + " is refused");
}

constexpr internal::JsonFieldPolicy kManifestFields{
    /*null_is_absent=*/false, internal::JsonFieldPolicy::Floats::kRefuse, ManifestFieldError};

using Fields = internal::JsonFields;

// offsets, extents, shape: integers >= 0.
Result<std::vector<int64_t>> Dims(const Fields& f, const char* key) {
  STINT_ASSIGN_OR_RETURN(const json* a, f.Array(key));
  std::vector<int64_t> dims;
  for (const auto& d : *a) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      return f.Refuse(internal::JsonFieldError::Problem::kBadElement, key,
                      internal::JsonKind::kUint64, &d);
    }
    dims.push_back(d.get<int64_t>());
  }
  return dims;
}

Result<ChunkRecord> DecodeChunkRecord(const Fields& f) {
  STINT_RETURN_IF_ERROR(f.CheckObject());
  ChunkRecord c;
  STINT_ASSIGN_OR_RETURN(c.file_offset, f.Uint64("offset"));
  STINT_ASSIGN_OR_RETURN(c.stored_len, f.Uint64("stored"));
  STINT_ASSIGN_OR_RETURN(c.raw_len, f.Uint64("raw"));
  STINT_ASSIGN_OR_RETURN(std::string codec, f.String("codec"));
  auto parsed_codec = ParseCodec(codec);
  if (!parsed_codec.ok()) return f.BadValue("codec", parsed_codec.status().message());
  c.codec = *parsed_codec;
  STINT_ASSIGN_OR_RETURN(std::string hex, f.String("xxh3"));
  auto h = HexToHash(hex);
  if (!h.ok()) return f.BadValue("xxh3", h.status().message());
  c.xxh3 = *h;
  STINT_ASSIGN_OR_RETURN(auto ref, f.OptionalString("ref"));
  if (ref) {
    if (!IsValidRefPath(*ref)) return f.BadValue("ref", "is not step-<step>/<data file>");
    c.ref = *ref;
  }
  STINT_ASSIGN_OR_RETURN(auto raw_hex, f.OptionalString("raw_xxh128"));
  if (raw_hex) {
    auto raw = HexToRawHash(*raw_hex);
    if (!raw.ok()) return f.BadValue("raw_xxh128", raw.status().message());
    c.raw_hash = *raw;
  }
  return c;
}

Result<std::vector<ChunkRecord>> DecodeChunkList(const Fields& f) {
  STINT_ASSIGN_OR_RETURN(const json* a, f.Array("chunks"));
  std::vector<ChunkRecord> chunks;
  for (size_t i = 0; i < a->size(); ++i) {
    STINT_ASSIGN_OR_RETURN(
        ChunkRecord c, DecodeChunkRecord(f.Child((*a)[i], "chunks[" + std::to_string(i) + "]")));
    chunks.push_back(c);
  }
  return chunks;
}

Result<Manifest> DecodeBody(const json& body, const std::string& origin) {
  Fields f(body, origin + ": manifest", kManifestFields);
  STINT_RETURN_IF_ERROR(f.CheckObject());
  Manifest m;
  STINT_ASSIGN_OR_RETURN(const json* version, f.Array("version"));
  if (version->size() != 2 || !(*version)[0].is_number_unsigned() ||
      !(*version)[1].is_number_unsigned()) {
    return f.BadValue("version", "is not [major, minor]");
  }
  uint64_t major = (*version)[0].get<uint64_t>(), minor = (*version)[1].get<uint64_t>();
  if (major != uint64_t(kFormatMajor)) {
    return Status::Unimplemented(origin + ": unknown checkpoint format version " +
                                 std::to_string(major) + "." + std::to_string(minor) +
                                 " (this reader supports " + std::to_string(kFormatMajor) + ".x)");
  }
  m.version_major = int(major);
  m.version_minor = int(minor > 1000000 ? 1000000 : minor);
  STINT_ASSIGN_OR_RETURN(m.job_id, f.String("job_id"));
  STINT_ASSIGN_OR_RETURN(m.step, f.Uint64("step"));
  STINT_ASSIGN_OR_RETURN(m.fencing_token, f.Uint64("fencing_token"));
  STINT_ASSIGN_OR_RETURN(uint64_t world, f.Uint64("world_size"));
  if (world == 0 || world > 1000000) return f.BadValue("world_size", "is out of range");
  m.world_size = int(world);
  STINT_ASSIGN_OR_RETURN(m.chunk_size, f.Uint64("chunk_size"));
  STINT_ASSIGN_OR_RETURN(m.created_unix_ms, f.Int64("created_unix_ms"));

  STINT_ASSIGN_OR_RETURN(const json* files, f.Array("files"));
  for (size_t i = 0; i < files->size(); ++i) {
    Fields ff = f.Child((*files)[i], "files[" + std::to_string(i) + "]");
    STINT_RETURN_IF_ERROR(ff.CheckObject());
    FileRecord fr;
    STINT_ASSIGN_OR_RETURN(fr.name, ff.String("name"));
    STINT_ASSIGN_OR_RETURN(fr.size, ff.Uint64("size"));
    STINT_ASSIGN_OR_RETURN(std::string hex, ff.String("digest"));
    auto h = HexToHash(hex);
    if (!h.ok()) return ff.BadValue("digest", h.status().message());
    fr.digest = *h;
    STINT_ASSIGN_OR_RETURN(auto node, ff.OptionalString("node"));
    if (node) fr.node = std::move(*node);
    m.files.push_back(std::move(fr));
  }
  STINT_ASSIGN_OR_RETURN(const json* refs, f.OptionalArray("refs"));
  for (size_t i = 0; refs != nullptr && i < refs->size(); ++i) {
    Fields rf = f.Child((*refs)[i], "refs[" + std::to_string(i) + "]");
    STINT_RETURN_IF_ERROR(rf.CheckObject());
    FileRecord fr;
    STINT_ASSIGN_OR_RETURN(fr.name, rf.String("name"));
    STINT_ASSIGN_OR_RETURN(fr.size, rf.Uint64("size"));
    m.refs.push_back(std::move(fr));
  }

  STINT_ASSIGN_OR_RETURN(const json* tensors, f.Array("tensors"));
  for (size_t i = 0; i < tensors->size(); ++i) {
    Fields tf = f.Child((*tensors)[i], "tensors[" + std::to_string(i) + "]");
    STINT_RETURN_IF_ERROR(tf.CheckObject());
    TensorRecord t;
    STINT_ASSIGN_OR_RETURN(t.name, tf.String("name"));
    STINT_ASSIGN_OR_RETURN(std::string dtype, tf.String("dtype"));
    auto dt = ParseDType(dtype);
    if (!dt.ok()) return tf.BadValue("dtype", dt.status().message());
    t.dtype = *dt;
    STINT_ASSIGN_OR_RETURN(t.global_shape, Dims(tf, "shape"));
    STINT_ASSIGN_OR_RETURN(const json* shards, tf.Array("shards"));
    for (size_t k = 0; k < shards->size(); ++k) {
      Fields sf = tf.Child((*shards)[k], "shards[" + std::to_string(k) + "]");
      STINT_RETURN_IF_ERROR(sf.CheckObject());
      ShardRecord s;
      STINT_ASSIGN_OR_RETURN(s.offsets, Dims(sf, "offsets"));
      STINT_ASSIGN_OR_RETURN(s.extents, Dims(sf, "extents"));
      STINT_ASSIGN_OR_RETURN(s.file, sf.String("file"));
      STINT_ASSIGN_OR_RETURN(s.chunks, DecodeChunkList(sf));
      t.shards.push_back(std::move(s));
    }
    m.tensors.push_back(std::move(t));
  }

  STINT_ASSIGN_OR_RETURN(const json* blobs, f.Array("blobs"));
  for (size_t i = 0; i < blobs->size(); ++i) {
    Fields bf = f.Child((*blobs)[i], "blobs[" + std::to_string(i) + "]");
    STINT_RETURN_IF_ERROR(bf.CheckObject());
    BlobRecord b;
    STINT_ASSIGN_OR_RETURN(b.name, bf.String("name"));
    STINT_ASSIGN_OR_RETURN(b.file, bf.String("file"));
    STINT_ASSIGN_OR_RETURN(b.chunks, DecodeChunkList(bf));
    m.blobs.push_back(std::move(b));
  }
  STINT_RETURN_IF_ERROR(ValidateManifest(m, origin));
  return m;
}

// The canonical BODY written directly, byte for byte what nlohmann's dump()
// writes for the same tree (keys in byte order, no spaces, integers in
// decimal, strings escaped alike), which DecodeManifest recomputes to check
// manifest_xxh3. Building that tree and dumping it took 25 ms for 2,300
// tensors, the larger part of a small incremental save's commit.
class CanonicalWriter {
 public:
  std::string Take() { return std::move(out_); }

  // Each object's keys must be given in byte order.
  void Open() {
    out_ += '{';
    first_ = true;
  }
  void Close() {
    out_ += '}';
    first_ = false;
  }
  void OpenArray() {
    out_ += '[';
    first_ = true;
  }
  void CloseArray() {
    out_ += ']';
    first_ = false;
  }
  void Key(const char* key) {
    Comma();
    out_ += '"';
    out_ += key;
    out_ += "\":";
    first_ = true;  // the value follows without a comma
  }
  void Element() { Comma(); }

  void Str(std::string_view v) {
    Comma();
    out_ += '"';
    for (char ch : v) {
      auto c = static_cast<unsigned char>(ch);
      switch (c) {
        case '"':
          out_ += "\\\"";
          break;
        case '\\':
          out_ += "\\\\";
          break;
        case '\b':
          out_ += "\\b";
          break;
        case '\f':
          out_ += "\\f";
          break;
        case '\n':
          out_ += "\\n";
          break;
        case '\r':
          out_ += "\\r";
          break;
        case '\t':
          out_ += "\\t";
          break;
        default:
          if (c < 0x20) {
            static const char kHex[] = "0123456789abcdef";
            out_ += "\\u00";
            out_ += kHex[c >> 4];
            out_ += kHex[c & 15];
          } else {
            out_ += ch;  // UTF-8 passes through (names are checked at Save())
          }
      }
    }
    out_ += '"';
  }
  template <typename Int>
  void Num(Int v) {
    Comma();
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
    out_.append(buf, end);
  }
  template <typename Int>
  void Nums(const std::vector<Int>& v) {
    Comma();
    OpenArray();
    for (Int x : v) Num(x);
    CloseArray();
  }

 private:
  void Comma() {
    if (!first_) out_ += ',';
    first_ = false;
  }

  std::string out_;
  bool first_ = true;
};

void WriteChunks(CanonicalWriter& w, const std::vector<ChunkRecord>& chunks) {
  w.Key("chunks");
  w.OpenArray();
  for (const ChunkRecord& c : chunks) {
    w.Element();
    w.Open();
    w.Key("codec"), w.Str(CodecName(c.codec));
    w.Key("offset"), w.Num(c.file_offset);
    w.Key("raw"), w.Num(c.raw_len);
    if (c.raw_hash) w.Key("raw_xxh128"), w.Str(RawHashToHex(*c.raw_hash));
    if (!c.ref.empty()) w.Key("ref"), w.Str(c.ref);
    w.Key("stored"), w.Num(c.stored_len);
    w.Key("xxh3"), w.Str(HashToHex(c.xxh3));
    w.Close();
  }
  w.CloseArray();
}

std::string CanonicalBody(const Manifest& m) {
  CanonicalWriter w;
  w.Open();
  w.Key("blobs");
  w.OpenArray();
  for (const auto& b : m.blobs) {
    w.Element();
    w.Open();
    WriteChunks(w, b.chunks);
    w.Key("file"), w.Str(b.file);
    w.Key("name"), w.Str(b.name);
    w.Close();
  }
  w.CloseArray();
  w.Key("chunk_size"), w.Num(m.chunk_size);
  w.Key("created_unix_ms"), w.Num(m.created_unix_ms);
  w.Key("fencing_token"), w.Num(m.fencing_token);
  w.Key("files");
  w.OpenArray();
  for (const auto& f : m.files) {
    w.Element();
    w.Open();
    w.Key("digest"), w.Str(HashToHex(f.digest));
    w.Key("name"), w.Str(f.name);
    if (!f.node.empty()) w.Key("node"), w.Str(f.node);
    w.Key("size"), w.Num(f.size);
    w.Close();
  }
  w.CloseArray();
  w.Key("job_id"), w.Str(m.job_id);
  if (!m.refs.empty()) {
    w.Key("refs");
    w.OpenArray();
    for (const auto& r : m.refs) {
      w.Element();
      w.Open();
      w.Key("name"), w.Str(r.name);
      w.Key("size"), w.Num(r.size);
      w.Close();
    }
    w.CloseArray();
  }
  w.Key("step"), w.Num(m.step);
  w.Key("tensors");
  w.OpenArray();
  for (const auto& t : m.tensors) {
    w.Element();
    w.Open();
    w.Key("dtype"), w.Str(DTypeName(t.dtype));
    w.Key("name"), w.Str(t.name);
    w.Key("shape"), w.Nums(t.global_shape);
    w.Key("shards");
    w.OpenArray();
    for (const auto& sh : t.shards) {
      w.Element();
      w.Open();
      WriteChunks(w, sh.chunks);
      w.Key("extents"), w.Nums(sh.extents);
      w.Key("file"), w.Str(sh.file);
      w.Key("offsets"), w.Nums(sh.offsets);
      w.Close();
    }
    w.CloseArray();
    w.Close();
  }
  w.CloseArray();
  w.Key("version");
  w.OpenArray();
  w.Num(m.version_major);
  w.Num(m.version_minor);
  w.CloseArray();
  w.Key("world_size"), w.Num(m.world_size);
  w.Key("writer"), w.Str(std::string("stint ") + kVersion);  // informational; readers ignore it
  w.Close();
  return w.Take();
}

// Checks chunks of one entry: aligned, inside their file (the entry's own,
// or the referenced one), lengths that a reader may trust before reading
// (a raw chunk stores exactly its raw bytes: they are read straight into the
// destination; a zstd chunk decodes to at most the manifest's chunk_size),
// raw lengths add up.
Status ValidateChunks(const Manifest& m, const std::vector<ChunkRecord>& chunks, uint64_t raw_bytes,
                      const std::string& own_file, const std::string& ctx) {
  if (chunks.empty()) return Status::DataLoss(ctx + " has no chunks");
  uint64_t sum = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ChunkRecord& c = chunks[i];
    std::string cctx = ctx + " chunk " + std::to_string(i);
    const FileRecord* file = c.ref.empty() ? m.FindFile(own_file) : m.FindRef(c.ref);
    if (file == nullptr) {
      return Status::DataLoss(cctx + " refers to a data file not in the manifest" +
                              (c.ref.empty() ? "" : " refs (" + c.ref + ")"));
    }
    if (c.file_offset % kChunkAlignment != 0)
      return Status::DataLoss(cctx + ": offset not 4 KiB aligned");
    if (c.stored_len > file->size || c.file_offset > file->size - c.stored_len ||
        AlignUp(c.file_offset + c.stored_len) > file->size) {
      return Status::DataLoss(cctx + ": extends past the end of " + file->name + " (" +
                              std::to_string(file->size) + " bytes)");
    }
    if (c.raw_len > (uint64_t{1} << 40)) return Status::DataLoss(cctx + ": raw length too large");
    if (c.codec == Codec::kNone && c.stored_len != c.raw_len) {
      return Status::DataLoss(cctx + " (in " + file->name + "): uncompressed chunk stores " +
                              std::to_string(c.stored_len) + " bytes but holds " +
                              std::to_string(c.raw_len));
    }
    if (c.codec != Codec::kNone && c.raw_len > m.chunk_size) {
      return Status::DataLoss(cctx + " (in " + file->name + "): compressed chunk holds " +
                              std::to_string(c.raw_len) + " bytes, more than the chunk size " +
                              std::to_string(m.chunk_size));
    }
    if (c.raw_len > UINT64_MAX - sum) return Status::DataLoss(ctx + ": chunk lengths overflow");
    sum += c.raw_len;
  }
  if (sum != raw_bytes) {
    return Status::DataLoss(ctx + ": chunks hold " + std::to_string(sum) + " bytes, expected " +
                            std::to_string(raw_bytes));
  }
  return Status::OK();
}

}  // namespace

const TensorRecord* Manifest::FindTensor(std::string_view name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}
const BlobRecord* Manifest::FindBlob(std::string_view name) const {
  for (const auto& b : blobs) {
    if (b.name == name) return &b;
  }
  return nullptr;
}
const FileRecord* Manifest::FindFile(std::string_view name) const {
  for (const auto& f : files) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

const FileRecord* Manifest::FindRef(std::string_view path) const {
  for (const auto& r : refs) {
    if (r.name == path) return &r;
  }
  return nullptr;
}

std::vector<std::string> Manifest::ReferencedDirs() const {
  std::set<std::string> dirs;
  for (const auto& r : refs) dirs.insert(r.name.substr(0, r.name.find('/')));
  return {dirs.begin(), dirs.end()};
}

namespace {

constexpr std::string_view kStep = "step-";

// The step a valid ref path names (IsValidRefPath: at most 19 digits, so it fits).
uint64_t RefPathStep(std::string_view path) {
  uint64_t step = 0;
  for (char c : path.substr(kStep.size(), path.find('/') - kStep.size()))
    step = step * 10 + uint64_t(c - '0');
  return step;
}

}  // namespace

bool IsValidRefPath(std::string_view path) {
  size_t slash = path.find('/');
  if (slash == std::string_view::npos || path.substr(0, kStep.size()) != kStep) return false;
  std::string_view digits = path.substr(kStep.size(), slash - kStep.size());
  std::string_view file = path.substr(slash + 1);
  if (digits.empty() || digits.size() > 19) return false;  // fits in a uint64_t
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
  }
  return !file.empty() && file[0] != '.' && file.find('/') == std::string_view::npos;
}

namespace {

// The file around the canonical body: head, body, hash key, the body's
// XXH3 as 16 hex digits, tail.
constexpr std::string_view kEnvelopeHead = "{\"manifest\":";
constexpr std::string_view kEnvelopeHashKey = ",\"manifest_xxh3\":\"";
constexpr std::string_view kEnvelopeTail = "\"}\n";

}  // namespace

std::string EncodeManifest(const Manifest& m) {
  std::string canonical = CanonicalBody(m);
  std::string hash = HashToHex(Xxh3(canonical.data(), canonical.size()));
  std::string out;
  out.reserve(kEnvelopeHead.size() + canonical.size() + kEnvelopeHashKey.size() + hash.size() +
              kEnvelopeTail.size());
  out += kEnvelopeHead;
  out += canonical;
  out += kEnvelopeHashKey;
  out += hash;
  out += kEnvelopeTail;
  return out;
}

namespace {

// Deepest nesting of arrays/objects in `bytes`, stopping once past `limit`.
// Serialising JSON recurses per level, so hostile nesting must be refused first.
int JsonDepthUpTo(std::string_view bytes, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < bytes.size() && deepest <= limit; ++i) {
    char c = bytes[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

constexpr int kMaxManifestDepth = 16;  // a valid manifest needs 7

// The body's bytes and the stored hash's text when `bytes` is exactly
// EncodeManifest's envelope: the body is then stored as its canonical dump, and hashing it
// where it lies spares re-dumping the parsed body (half a decode's time).
bool SplitEnvelope(std::string_view bytes, std::string_view* body, std::string_view* hex) {
  const size_t tail = kEnvelopeHashKey.size() + 16 + kEnvelopeTail.size();
  if (bytes.size() < kEnvelopeHead.size() + tail ||
      bytes.substr(0, kEnvelopeHead.size()) != kEnvelopeHead ||
      bytes.substr(bytes.size() - kEnvelopeTail.size()) != kEnvelopeTail ||
      bytes.substr(bytes.size() - tail, kEnvelopeHashKey.size()) != kEnvelopeHashKey) {
    return false;
  }
  *body = bytes.substr(kEnvelopeHead.size(), bytes.size() - tail - kEnvelopeHead.size());
  *hex = bytes.substr(bytes.size() - tail + kEnvelopeHashKey.size(), 16);
  return true;
}

}  // namespace

Result<Manifest> DecodeManifest(std::string_view bytes, std::string_view origin_view) {
  std::string origin(origin_view);
  std::string_view stored_body, stored_hex;
  const bool as_written = SplitEnvelope(bytes, &stored_body, &stored_hex);
  if (JsonDepthUpTo(bytes, kMaxManifestDepth) > kMaxManifestDepth) {
    return Status::DataLoss(origin + ": manifest nests deeper than " +
                            std::to_string(kMaxManifestDepth) + " levels");
  }
  json top = json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (top.is_discarded()) return Status::DataLoss(origin + ": manifest is not valid JSON");
  try {
    Fields f(top, origin, kManifestFields);
    STINT_RETURN_IF_ERROR(f.CheckObject());
    STINT_ASSIGN_OR_RETURN(std::string hex, f.String("manifest_xxh3"));
    STINT_ASSIGN_OR_RETURN(const json* body, f.Object("manifest"));
    auto want = HexToHash(hex);
    if (!want.ok()) return f.BadValue("manifest_xxh3", want.status().message());
    // Version first: a future format must say "unknown version", not "bad checksum".
    auto version = body->find("version");
    if (version != body->end() && version->is_array() && version->size() == 2 &&
        (*version)[0].is_number_unsigned() &&
        (*version)[0].get<uint64_t>() != uint64_t(kFormatMajor)) {
      return DecodeBody(*body, origin);
    }
    bool sound =
        as_written && stored_hex == hex && Xxh3(stored_body.data(), stored_body.size()) == *want;
    if (!sound) {  // not as EncodeManifest wrote it: the canonical dump decides
      std::string canonical = body->dump();
      sound = Xxh3(canonical.data(), canonical.size()) == *want;
    }
    if (!sound) return Status::DataLoss(origin + ": manifest checksum mismatch");
    return DecodeBody(*body, origin);
  } catch (const std::exception& e) {  // nlohmann on pathological input; never escapes
    return Status::DataLoss(origin + ": malformed manifest: " + e.what());
  }
}

Status ValidateManifest(const Manifest& m, std::string_view origin_view) {
  std::string origin(origin_view);
  std::set<std::string> names;
  for (const auto& f : m.files) {
    if (f.name.empty() || f.name.find('/') != std::string::npos || f.name[0] == '.') {
      return Status::DataLoss(origin + ": bad data file name '" + f.name + "'");
    }
    if (!names.insert(f.name).second)
      return Status::DataLoss(origin + ": duplicate file " + f.name);
  }
  for (const auto& r : m.refs) {
    if (!IsValidRefPath(r.name)) {
      return Status::DataLoss(origin + ": bad referenced file '" + r.name +
                              "' (expected step-<step>/<data file>)");
    }
    if (!names.insert(r.name).second)
      return Status::DataLoss(origin + ": duplicate referenced file " + r.name);
    // Only older checkpoints: references never form a cycle.
    if (RefPathStep(r.name) >= m.step) {
      return Status::DataLoss(origin + ": references " + r.name + ", not older than step " +
                              std::to_string(m.step));
    }
  }
  names.clear();
  for (const auto& t : m.tensors) {
    std::string ctx = origin + ": tensor '" + t.name + "'";
    if (!names.insert(t.name).second) return Status::DataLoss(ctx + " appears twice");
    for (int64_t d : t.global_shape) {
      if (d > (int64_t{1} << 40)) return Status::DataLoss(ctx + ": dimension too large");
    }
    for (size_t k = 0; k < t.shards.size(); ++k) {
      const ShardRecord& s = t.shards[k];
      std::string sctx = ctx + " shard " + std::to_string(k);
      if (s.offsets.size() != t.global_shape.size() || s.extents.size() != t.global_shape.size()) {
        return Status::DataLoss(sctx + ": rank of offsets/extents differs from the shape");
      }
      uint64_t elems = 1;
      for (size_t d = 0; d < t.global_shape.size(); ++d) {
        if (s.offsets[d] > t.global_shape[d] || s.extents[d] > t.global_shape[d] - s.offsets[d]) {
          return Status::DataLoss(sctx + ": lies outside the global shape in dim " +
                                  std::to_string(d));
        }
        if (s.extents[d] != 0 && elems > (uint64_t{1} << 40) / uint64_t(s.extents[d])) {
          return Status::DataLoss(sctx + ": too many elements");
        }
        elems *= uint64_t(s.extents[d]);
      }
      STINT_RETURN_IF_ERROR(ValidateChunks(m, s.chunks, elems * DTypeSize(t.dtype), s.file, sctx));
    }
    // Overlapping shards would make a read's bytes depend on which shard it
    // took. Gaps are left to the reader: asking for an uncovered region is
    // kNotFound there, and the rest of the tensor still loads.
    std::string problem = FindShardLayoutProblem(t, /*require_cover=*/false);
    if (!problem.empty()) return Status::DataLoss(origin + ": " + problem);
  }
  names.clear();
  for (const auto& b : m.blobs) {
    std::string ctx = origin + ": blob '" + b.name + "'";
    if (!names.insert(b.name).second) return Status::DataLoss(ctx + " appears twice");
    uint64_t sum = 0;
    for (const auto& c : b.chunks) sum += c.raw_len;
    STINT_RETURN_IF_ERROR(ValidateChunks(m, b.chunks, sum, b.file, ctx));
  }
  return Status::OK();
}

}  // namespace stint
