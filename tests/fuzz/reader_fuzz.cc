// libFuzzer target: the reader's plan and reads on a manifest from arbitrary
// bytes (resealed as in manifest_fuzz, see reseal.h).
//
// A manifest that decodes gets its file digests recomputed (they bind the
// chunk list, so random lengths would otherwise stop at Open, as a crafted
// manifest does not) and is written to a step directory with its data files
// (and referenced files) at their recorded sizes, filled with a pattern;
// CheckpointReader then reads every tensor into a destination of exactly its
// size (whole, and the first half of dimension 0 as a region) and every blob.
// Properties: nothing crashes, throws or trips a sanitizer — ASan sees any
// write past a destination, however the manifest's lengths are crafted. Read
// errors (checksums never match the pattern) are expected and ignored.
//
// Built and run by tools/fuzz.sh (seeded from manifest_fuzz's corpus).
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "format/manifest.h"
#include "reseal.h"
#include "stint/checkpoint_reader.h"

namespace stint {
namespace {

// Inputs whose files or tensors are larger are skipped: fuzzing needs speed.
constexpr uint64_t kMaxBytes = 1u << 20;

[[noreturn]] void Die(const char* what, const std::string& detail) {
  std::fprintf(stderr, "reader_fuzz: %s\n%s\n", what, detail.c_str());
  std::abort();
}

// The root of this process's step directories, made once.
const std::string& Root() {
  static const std::string root = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr ? tmp : "/tmp") + "/stint-reader-fuzz.XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) Die("mkdtemp failed", pattern);
    return pattern;
  }();
  return root;
}

bool WriteFile(const std::string& path, uint64_t size) {
  std::string bytes(size, '\0');
  for (uint64_t i = 0; i < size; ++i) bytes[i] = char(i * 131 + 7);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  return bool(out);
}

// An exact-size heap destination, page-aligned so the reader may read
// straight into it; ASan knows its exact end.
struct Dest {
  explicit Dest(uint64_t bytes) {
    if (posix_memalign(&data, 4096, bytes == 0 ? 1 : bytes) != 0) Die("posix_memalign", "");
  }
  ~Dest() { free(data); }
  Dest(const Dest&) = delete;
  Dest& operator=(const Dest&) = delete;
  void* data = nullptr;
};

void ReadAll(const std::string& dir) {
  ReaderOptions options;
  options.io_engine = "posix";
  options.direct_io = false;
  options.threads = 2;
  auto reader = CheckpointReader::Open(dir, options);
  if (!reader.ok()) return;
  for (const TensorInfo& t : (*reader)->tensors()) {
    uint64_t elems = 1;  // saturates past kMaxBytes
    for (int64_t d : t.shape) {
      elems = d < 0 || (d > 0 && elems > kMaxBytes / uint64_t(d)) ? kMaxBytes + 1
                                                                  : elems * uint64_t(d);
    }
    const uint64_t bytes = elems * DTypeSize(t.dtype);
    if (elems > kMaxBytes || bytes > kMaxBytes) continue;
    Dest whole(bytes);
    (*reader)->Read({{t.name, t.dtype, t.shape, {}, {}, whole.data}}).IgnoreError();
    if (t.shape.empty() || t.shape[0] < 2) continue;
    std::vector<int64_t> offsets(t.shape.size(), 0), extents = t.shape;
    extents[0] = t.shape[0] / 2;
    Dest half(bytes / uint64_t(t.shape[0]) * uint64_t(extents[0]));
    (*reader)->Read({{t.name, t.dtype, t.shape, offsets, extents, half.data}}).IgnoreError();
  }
  for (const std::string& name : (*reader)->blob_names()) {
    (*reader)->ReadBlob(name).status().IgnoreError();
  }
}

// The digest of each data file over the chunks it holds (see FORMAT.md).
void RedoFileDigests(Manifest* m) {
  for (FileRecord& f : m->files) {
    std::vector<ChunkRecord> chunks;
    auto add = [&](const std::string& file, const std::vector<ChunkRecord>& list) {
      for (const ChunkRecord& c : list) {
        if (file == f.name && c.ref.empty()) chunks.push_back(c);
      }
    };
    for (const auto& t : m->tensors) {
      for (const auto& sh : t.shards) add(sh.file, sh.chunks);
    }
    for (const auto& b : m->blobs) add(b.file, b.chunks);
    std::stable_sort(chunks.begin(), chunks.end(), [](const ChunkRecord& a, const ChunkRecord& b) {
      return a.file_offset < b.file_offset;
    });
    f.digest = FileDigest(chunks, f.size);
  }
}

void CheckOne(std::string_view input) {
  Result<Manifest> m = DecodeManifest(input, "fuzz");
  if (!m.ok()) return;
  RedoFileDigests(&*m);
  const std::string bytes = EncodeManifest(*m);
  for (const auto& f : m->files) {
    if (f.size > kMaxBytes) return;
  }
  for (const auto& r : m->refs) {
    if (r.size > kMaxBytes) return;
  }
  const std::string dir = Root() + "/step-under-test";
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) Die("mkdir failed", dir);
  std::vector<std::string> made;
  auto put = [&](const std::string& path, uint64_t size) {
    if (!WriteFile(path, size)) Die("write failed", path);
    made.push_back(path);
  };
  const std::string manifest = dir + "/" + kManifestName;
  if (!(std::ofstream(manifest, std::ios::binary | std::ios::trunc) << bytes)) {
    Die("write failed", manifest);
  }
  made.push_back(manifest);
  for (const auto& f : m->files) put(dir + "/" + f.name, f.size);
  std::vector<std::string> ref_dirs;
  for (const auto& r : m->refs) {  // "step-<step>/<file>", validated
    std::string ref_dir = Root() + "/" + r.name.substr(0, r.name.find('/'));
    if (mkdir(ref_dir.c_str(), 0755) == 0) ref_dirs.push_back(ref_dir);
    put(Root() + "/" + r.name, r.size);
  }
  ReadAll(dir);
  for (const auto& path : made) unlink(path.c_str());
  rmdir(dir.c_str());
  for (const auto& d : ref_dirs) rmdir(d.c_str());
}

}  // namespace
}  // namespace stint

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  stint::CheckOne(bytes);
  if (auto resealed = stint::Reseal(bytes)) stint::CheckOne(*resealed);
  return 0;
}
