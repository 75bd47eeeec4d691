// MANIFEST.json: the commit point of a checkpoint, written last.
//
// Layout (see FORMAT.md):
//   {"manifest": {...body...}, "manifest_xxh3": "<16 hex>"}
// The checksum covers the body's canonical serialisation, so a flipped digit
// in an offset or a length is caught, not only broken JSON. Decoding is pure
// and never throws; every error names the origin (path) and the field.
#ifndef STINT_RUNTIME_FORMAT_MANIFEST_H_
#define STINT_RUNTIME_FORMAT_MANIFEST_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/chunk.h"
#include "stint/state.h"
#include "stint/status.h"

namespace stint {

constexpr int kFormatMajor = 1;
// 1.1: chunk `ref` and `raw_xxh128`, manifest `refs` (incremental saves).
constexpr int kFormatMinor = 1;
// 1.2: file `node`, written by saves on node-local roots only (the others
// stay 1.1, readable by every 1.x reader).
constexpr int kFormatMinorNodes = 2;
constexpr char kManifestName[] = "MANIFEST.json";

struct ShardRecord {
  std::vector<int64_t> offsets;
  std::vector<int64_t> extents;
  std::string file;                 // data file name inside the checkpoint dir
  std::vector<ChunkRecord> chunks;  // cover the shard's raw bytes in order
};

struct TensorRecord {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> global_shape;
  std::vector<ShardRecord> shards;
};

struct BlobRecord {
  std::string name;
  std::string file;
  std::vector<ChunkRecord> chunks;
};

struct FileRecord {
  std::string name;
  uint64_t size = 0;
  uint64_t digest = 0;  // FileDigest()
  // Node-local roots (format 1.2): the node whose root holds the file (its
  // STINT_NODE_ID or host name); empty when every rank shared one root.
  std::string node{};
};

struct Manifest {
  int version_major = kFormatMajor;
  int version_minor = kFormatMinor;
  std::string job_id;
  uint64_t step = 0;
  uint64_t fencing_token = 0;
  int world_size = 1;
  uint64_t chunk_size = 0;
  int64_t created_unix_ms = 0;
  std::vector<TensorRecord> tensors;
  std::vector<BlobRecord> blobs;
  std::vector<FileRecord> files;
  // Data files of other committed checkpoints that chunks reference
  // (ChunkRecord::ref): name "step-<step>/<file>" relative to the root, and
  // size; digest unused (each referenced chunk's XXH3 covers its bytes).
  std::vector<FileRecord> refs;

  // Linear searches, for one-off lookups (a reader indexes its tensors).
  const TensorRecord* FindTensor(std::string_view name) const;
  const BlobRecord* FindBlob(std::string_view name) const;
  const FileRecord* FindFile(std::string_view name) const;
  const FileRecord* FindRef(std::string_view path) const;
  // The step directories this checkpoint's chunks reference, e.g. "step-00000010".
  std::vector<std::string> ReferencedDirs() const;
};

// A reference "step-<digits>/<file name>": nothing else is accepted, so a
// manifest can never point outside its root.
bool IsValidRefPath(std::string_view path);

std::string EncodeManifest(const Manifest& m);
// `origin` (the manifest's path) prefixes every error.
Result<Manifest> DecodeManifest(std::string_view bytes, std::string_view origin);
// Structural checks (shards inside the global shape and not overlapping,
// chunk lengths add up, aligned offsets inside the recorded file sizes, no
// duplicate names). Shards need not cover the tensor: a gap is reported by
// the reader when a read asks for it (see shard_layout.h).
Status ValidateManifest(const Manifest& m, std::string_view origin);

}  // namespace stint

#endif  // STINT_RUNTIME_FORMAT_MANIFEST_H_
