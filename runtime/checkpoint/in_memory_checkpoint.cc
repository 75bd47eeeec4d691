#include "checkpoint/in_memory_checkpoint.h"

#include <cstring>

#include "checkpoint/commit.h"
#include "format/chunk.h"
#include "format/manifest.h"

namespace stint {
namespace {

// A read-only file over bytes someone else owns.
class ImageFile final : public RandomAccessFile {
 public:
  ImageFile(std::string path, const char* data, uint64_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  Result<size_t> Read(uint64_t offset, size_t n, void* dst) const override {
    if (offset >= size_) return size_t(0);
    size_t k = size_t(std::min<uint64_t>(n, size_ - offset));
    std::memcpy(dst, data_ + offset, k);
    return k;
  }
  Result<uint64_t> Size() const override { return size_; }
  bool direct_io() const override { return false; }
  const std::string& path() const override { return path_; }

 private:
  const std::string path_;
  const char* const data_;
  const uint64_t size_;
};

Status ReadOnly(const std::string& what, const std::string& path) {
  return Status::FailedPrecondition(what + " " + path + ": the in-memory checkpoint is read-only");
}

}  // namespace

// Serves exactly two files: <dir>/MANIFEST.json and <dir>/<data file>.
class InMemoryCheckpoint::ImageEnv final : public Env {
 public:
  ImageEnv(std::string dir, std::string file_name, const char* image, uint64_t image_bytes,
           std::string manifest)
      : dir_(std::move(dir)),
        file_name_(std::move(file_name)),
        image_(image),
        image_bytes_(image_bytes),
        manifest_(std::move(manifest)) {}

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        const FileOptions&) override {
    return ReadOnly("create", path);
  }
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path,
                                                                const FileOptions&) override {
    if (path == dir_ + "/" + kManifestName) {
      return std::unique_ptr<RandomAccessFile>(
          new ImageFile(path, manifest_.data(), manifest_.size()));
    }
    if (path == dir_ + "/" + file_name_) {
      return std::unique_ptr<RandomAccessFile>(new ImageFile(path, image_, image_bytes_));
    }
    return Status::NotFound(path + ": not in the in-memory checkpoint");
  }
  Status CreateDir(const std::string& p) override { return ReadOnly("mkdir", p); }
  Status RemoveFile(const std::string& p) override { return ReadOnly("remove", p); }
  Status RemoveDir(const std::string& p) override { return ReadOnly("rmdir", p); }
  Status RenameFile(const std::string& f, const std::string&) override {
    return ReadOnly("rename", f);
  }
  Status SyncDir(const std::string&) override { return Status::OK(); }
  Result<std::vector<std::string>> GetChildren(const std::string& dir) override {
    if (dir != dir_) return Status::NotFound(dir + ": not in the in-memory checkpoint");
    return std::vector<std::string>{kManifestName, file_name_};
  }
  bool FileExists(const std::string& p) override {
    return p == dir_ || p == dir_ + "/" + kManifestName || p == dir_ + "/" + file_name_;
  }
  bool IsDirectory(const std::string& p) override { return p == dir_; }
  uint64_t NowMicros() override { return Env::Default()->NowMicros(); }
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& p, const std::string&) override {
    return ReadOnly("lock", p);
  }

 private:
  const std::string dir_, file_name_;
  const char* const image_;
  const uint64_t image_bytes_;
  const std::string manifest_;
};

PersistedFile RawImageFile(const Snapshot& snapshot, const PersistedFile& persisted,
                           ThreadPool* pool) {
  const SnapshotLayout& layout = snapshot.layout;
  const char* image = snapshot.buffer->data();
  PersistedFile out;
  out.entry_chunks.resize(layout.entries.size());
  struct Ref {
    size_t e, c;
  };
  std::vector<Ref> rehash;
  for (size_t e = 0; e < layout.entries.size(); ++e) {
    const SnapshotEntry& se = layout.entries[e];
    out.entry_chunks[e].resize(se.chunk_len.size());
    for (size_t c = 0; c < se.chunk_len.size(); ++c) {
      const ChunkRecord& stored = persisted.entry_chunks[e][c];
      ChunkRecord& rec = out.entry_chunks[e][c];
      rec = stored;
      rec.file_offset = se.chunk_offset[c];
      rec.raw_len = se.chunk_len[c];
      rec.stored_len = rec.raw_len;
      rec.codec = Codec::kNone;
      if (stored.codec != Codec::kNone) rehash.push_back({e, c});  // its XXH3 covers zstd bytes
      out.stored_bytes += rec.raw_len;
    }
  }
  pool->ParallelFor(rehash.size(), [&](size_t i) {
    ChunkRecord& rec = out.entry_chunks[rehash[i].e][rehash[i].c];
    rec.xxh3 = Xxh3(image + rec.file_offset, rec.raw_len);
  });
  std::vector<ChunkRecord> in_file_order;
  for (const auto& chunks : out.entry_chunks)
    in_file_order.insert(in_file_order.end(), chunks.begin(), chunks.end());
  out.file.name = persisted.file.name;
  out.file.size = layout.image_bytes;
  out.file.digest = FileDigest(in_file_order, layout.image_bytes);
  return out;
}

InMemoryCheckpoint::InMemoryCheckpoint(uint64_t step, std::unique_ptr<StagingBuffer> buffer,
                                       uint64_t image_bytes, std::string file_name,
                                       std::string manifest_bytes)
    : step_(step), dir_("memory:/" + StepDirName(step)), buffer_(std::move(buffer)) {
  env_ = std::make_unique<ImageEnv>(dir_, std::move(file_name), buffer_->data(), image_bytes,
                                    std::move(manifest_bytes));
}

InMemoryCheckpoint::~InMemoryCheckpoint() = default;

Result<std::unique_ptr<CheckpointReader>> InMemoryCheckpoint::OpenReader(
    ReaderOptions options) const {
  options.env = env_.get();
  options.direct_io = false;
  // Both engines read a file without a descriptor through Read(): a memcpy.
  options.io_engine = "posix";
  return CheckpointReader::Open(dir_, options);
}

}  // namespace stint
