#include "checkpoint/incremental_base.h"

#include "checkpoint/commit.h"

namespace stint {

std::string ShardKey(const std::string& name, const std::vector<int64_t>& offsets,
                     const std::vector<int64_t>& extents) {
  std::string key = name;
  key += '\0';
  for (int64_t o : offsets) key += std::to_string(o) + ",";
  key += '\0';
  for (int64_t e : extents) key += std::to_string(e) + ",";
  return key;
}

IncrementalBase::IncrementalBase(const Manifest& m, const std::string& step_dir)
    : step_(m.step), dir_(step_dir) {
  for (const FileRecord& f : m.files) file_sizes_[step_dir + "/" + f.name] = f.size;
  for (const FileRecord& r : m.refs) file_sizes_[r.name] = r.size;
  for (const TensorRecord& t : m.tensors) {
    for (const ShardRecord& s : t.shards) {
      Shard shard{t.dtype, t.global_shape, s.chunks};
      bool hashed = true;
      for (ChunkRecord& c : shard.chunks) {
        hashed = hashed && c.raw_hash.has_value();
        if (c.ref.empty()) c.ref = step_dir + "/" + s.file;
      }
      // A shard saved without raw hashes (not incremental) cannot be matched.
      if (hashed) shards_.emplace(ShardKey(t.name, s.offsets, s.extents), std::move(shard));
    }
  }
}

Result<std::shared_ptr<const IncrementalBase>> IncrementalBase::Load(Env* env,
                                                                     const std::string& root,
                                                                     const std::string& step_dir) {
  const std::string path = root + "/" + step_dir + "/" + kManifestName;
  STINT_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(env, path));
  STINT_ASSIGN_OR_RETURN(Manifest m, DecodeManifest(bytes, path));
  return std::shared_ptr<const IncrementalBase>(std::make_shared<IncrementalBase>(m, step_dir));
}

Result<std::shared_ptr<const IncrementalBase>> IncrementalBase::LoadNewest(
    Env* env, const std::string& root) {
  STINT_ASSIGN_OR_RETURN(auto steps, ListCheckpointSteps(env, root));
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    auto base = Load(env, root, StepDirName(*it));
    // A damaged newest checkpoint is never a base: an older one that decodes
    // is, and with none the next save writes everything.
    if (base.ok()) return base;
  }
  return std::shared_ptr<const IncrementalBase>();
}

const std::vector<ChunkRecord>* IncrementalBase::FindShard(
    const std::string& name, DType dtype, const std::vector<int64_t>& global_shape,
    const std::vector<int64_t>& offsets, const std::vector<int64_t>& extents) const {
  auto it = shards_.find(ShardKey(name, offsets, extents));
  if (it == shards_.end() || it->second.dtype != dtype ||
      it->second.global_shape != global_shape) {
    return nullptr;
  }
  return &it->second.chunks;
}

std::optional<uint64_t> IncrementalBase::FileSize(const std::string& ref_path) const {
  auto it = file_sizes_.find(ref_path);
  if (it == file_sizes_.end()) return std::nullopt;
  return it->second;
}

std::set<std::string> IncrementalBase::Dirs() const {
  std::set<std::string> dirs{dir_};
  for (const auto& [path, size] : file_sizes_) dirs.insert(path.substr(0, path.find('/')));
  return dirs;
}

Result<std::vector<FileRecord>> ReferencedFiles(
    const std::vector<std::vector<ChunkRecord>>& entries, const IncrementalBase& base) {
  std::map<std::string, uint64_t> refs;
  for (const auto& chunks : entries) {
    for (const ChunkRecord& c : chunks) {
      if (c.ref.empty() || refs.count(c.ref) != 0) continue;
      std::optional<uint64_t> size = base.FileSize(c.ref);
      if (!size) {
        return Status::Internal("chunk references " + c.ref + ", which base " + base.dir() +
                                " does not hold");
      }
      refs[c.ref] = *size;
    }
  }
  std::vector<FileRecord> out;
  for (const auto& [path, size] : refs) out.push_back(FileRecord{path, size, 0});
  return out;
}

Status CheckReferencedFiles(Env* env, const std::string& root, const Manifest& m) {
  for (const FileRecord& r : m.refs) {
    const std::string path = root + "/" + r.name;
    auto file = env->NewRandomAccessFile(path, FileOptions{});
    if (!file.ok()) {
      return file.status().WithContext("step " + std::to_string(m.step) +
                                       " references a data file that is gone");
    }
    STINT_ASSIGN_OR_RETURN(uint64_t size, (*file)->Size());
    if (size != r.size) {
      return Status::DataLoss(path + " is " + std::to_string(size) + " bytes, step " +
                              std::to_string(m.step) + " references it as " +
                              std::to_string(r.size));
    }
  }
  return Status::OK();
}

}  // namespace stint
