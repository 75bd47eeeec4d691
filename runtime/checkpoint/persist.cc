#include "checkpoint/persist.h"

#include <cstdlib>
#include <cstring>
#include <memory>

namespace stint {
namespace {

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<char, FreeDeleter>;

AlignedBytes AllocAligned(size_t n) {
  void* p = nullptr;
  if (posix_memalign(&p, kChunkAlignment, n == 0 ? kChunkAlignment : n) != 0) return nullptr;
  return AlignedBytes(static_cast<char*>(p));
}

// Writes [buf, buf+len) at `offset` in io_size pieces.
Status SubmitRange(IoEngine* engine, WritableFile* file, const char* buf, uint64_t len,
                   uint64_t offset, uint64_t io_size) {
  for (uint64_t done = 0; done < len; done += io_size) {
    uint64_t n = len - done < io_size ? len - done : io_size;
    STINT_RETURN_IF_ERROR(engine->SubmitWrite(file, buf + done, n, offset + done));
  }
  return Status::OK();
}

}  // namespace

Result<PersistedFile> PersistSnapshot(Env* env, IoEngine* engine, ThreadPool* pool,
                                      const Snapshot& snapshot, const std::string& path,
                                      const PersistOptions& options) {
  const SnapshotLayout& layout = snapshot.layout;
  const char* image = snapshot.buffer->data();
  uint64_t io_size = options.io_size < kChunkAlignment ? kChunkAlignment : AlignUp(options.io_size);

  // Flat list of chunks so the pool can work on them in any order.
  struct ChunkRef {
    size_t entry, index;
  };
  std::vector<ChunkRef> refs;
  PersistedFile out;
  out.entry_chunks.resize(layout.entries.size());
  for (size_t e = 0; e < layout.entries.size(); ++e) {
    out.entry_chunks[e].resize(layout.entries[e].chunk_len.size());
    for (size_t c = 0; c < layout.entries[e].chunk_len.size(); ++c) refs.push_back({e, c});
  }

  STINT_ASSIGN_OR_RETURN(auto file, env->NewWritableFile(path, FileOptions{options.direct_io}));
  std::vector<AlignedBytes> compressed(options.compress ? refs.size() : 0);
  std::vector<Status> errors(refs.size());

  pool->ParallelFor(refs.size(), [&](size_t i) {
    const SnapshotEntry& e = layout.entries[refs[i].entry];
    ChunkRecord& rec = out.entry_chunks[refs[i].entry][refs[i].index];
    const char* raw = image + e.chunk_offset[refs[i].index];
    rec.raw_len = e.chunk_len[refs[i].index];
    rec.codec = Codec::kNone;
    rec.stored_len = rec.raw_len;
    rec.file_offset = e.chunk_offset[refs[i].index];
    if (options.compress && rec.raw_len > 0) {
      size_t cap = AlignUp(ZstdBound(rec.raw_len));
      AlignedBytes buf = AllocAligned(cap);
      if (buf == nullptr) {
        errors[i] = Status::ResourceExhausted("zstd: cannot allocate " + std::to_string(cap) + " bytes");
        return;
      }
      auto n = ZstdCompress(raw, rec.raw_len, buf.get(), cap, options.zstd_level);
      if (!n.ok()) {
        errors[i] = n.status();
        return;
      }
      if (*n < rec.raw_len) {  // keep raw when zstd does not help
        std::memset(buf.get() + *n, 0, AlignUp(*n) - *n);
        rec.codec = Codec::kZstd;
        rec.stored_len = *n;
        rec.xxh3 = Xxh3(buf.get(), *n);
        compressed[i] = std::move(buf);
        return;
      }
    }
    rec.xxh3 = Xxh3(raw, rec.raw_len);
  });
  for (const Status& s : errors) STINT_RETURN_IF_ERROR(s);

  uint64_t file_size = 0;
  Status submit;
  if (!options.compress) {
    // The staging image is the file: one pass of large aligned writes.
    file_size = layout.image_bytes;
    submit = SubmitRange(engine, file.get(), image, file_size, 0, io_size);
  } else {
    for (size_t i = 0; i < refs.size() && submit.ok(); ++i) {
      ChunkRecord& rec = out.entry_chunks[refs[i].entry][refs[i].index];
      const char* src = compressed[i] ? compressed[i].get()
                                      : image + layout.entries[refs[i].entry].chunk_offset[refs[i].index];
      rec.file_offset = file_size;
      uint64_t padded = AlignUp(rec.stored_len == 0 ? 1 : rec.stored_len);
      submit = SubmitRange(engine, file.get(), src, padded, file_size, io_size);
      file_size += padded;
    }
  }
  Status drained = engine->Drain();  // always: buffers must not be freed under the kernel
  STINT_RETURN_IF_ERROR(submit.WithContext("write " + path));
  STINT_RETURN_IF_ERROR(drained.WithContext("write " + path));
  STINT_RETURN_IF_ERROR(file->Sync());
  STINT_RETURN_IF_ERROR(file->Close());

  std::vector<ChunkRecord> in_file_order;
  for (size_t i = 0; i < refs.size(); ++i) {
    const ChunkRecord& rec = out.entry_chunks[refs[i].entry][refs[i].index];
    in_file_order.push_back(rec);
    out.stored_bytes += rec.stored_len;
  }
  out.file.size = file_size;
  out.file.digest = FileDigest(in_file_order, file_size);
  size_t slash = path.rfind('/');
  out.file.name = slash == std::string::npos ? path : path.substr(slash + 1);
  return out;
}

}  // namespace stint
