// IncrementalBase: the committed checkpoint an incremental save compares
// against (CheckpointOptions::incremental). It indexes that checkpoint's
// tensor shards by name and box, each chunk naming the data file that really
// holds its bytes ("step-<step>/<file>", relative to the root), so a new
// manifest can reference an unchanged chunk instead of writing it again.
//
// Immutable once built; shared between the training thread (frozen shards
// are matched at Save()) and the persist thread (hash matches).
#ifndef STINT_RUNTIME_CHECKPOINT_INCREMENTAL_BASE_H_
#define STINT_RUNTIME_CHECKPOINT_INCREMENTAL_BASE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "format/manifest.h"
#include "stint/env.h"
#include "stint/status.h"

namespace stint {

class IncrementalBase {
 public:
  // `m` is the committed manifest of `root`/`step_dir`.
  IncrementalBase(const Manifest& m, const std::string& step_dir);

  // The newest committed checkpoint of `root` whose manifest decodes; null
  // when there is none (the next save is a full one).
  static Result<std::shared_ptr<const IncrementalBase>> LoadNewest(Env* env,
                                                                   const std::string& root);
  // The committed checkpoint `root`/`step_dir`.
  static Result<std::shared_ptr<const IncrementalBase>> Load(Env* env, const std::string& root,
                                                             const std::string& step_dir);

  uint64_t step() const { return step_; }
  const std::string& dir() const { return dir_; }

  // The chunks of the stored shard `name` with exactly this dtype, global
  // shape and box, every one carrying its raw hash and `ref` set to where its
  // bytes are; null when the base holds no such shard.
  const std::vector<ChunkRecord>* FindShard(const std::string& name, DType dtype,
                                            const std::vector<int64_t>& global_shape,
                                            const std::vector<int64_t>& offsets,
                                            const std::vector<int64_t>& extents) const;
  // Size of a data file that one of the base's chunks lives in.
  std::optional<uint64_t> FileSize(const std::string& ref_path) const;
  // Step directories holding bytes of the base: its own and those it references.
  std::set<std::string> Dirs() const;

 private:
  struct Shard {
    DType dtype;
    std::vector<int64_t> global_shape;
    std::vector<ChunkRecord> chunks;
  };
  uint64_t step_ = 0;
  std::string dir_;
  std::map<std::string, Shard> shards_;  // by ShardKey
  std::map<std::string, uint64_t> file_sizes_;
};

// A tensor shard's identity within a checkpoint: its name and box.
std::string ShardKey(const std::string& name, const std::vector<int64_t>& offsets,
                     const std::vector<int64_t>& extents);

// The files `entries`' chunks reference, as FileRecords for Manifest::refs,
// sizes taken from `base`. kInternal if one is not the base's.
Result<std::vector<FileRecord>> ReferencedFiles(
    const std::vector<std::vector<ChunkRecord>>& entries, const IncrementalBase& base);

// Every file `m` references exists under `root` with its recorded size:
// checked right before a commit, so a checkpoint whose referenced data is
// gone is never committed.
Status CheckReferencedFiles(Env* env, const std::string& root, const Manifest& m);

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_INCREMENTAL_BASE_H_
