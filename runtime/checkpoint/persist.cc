#include "checkpoint/persist.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace stint {
namespace {

// Chunks are checksummed (and compressed) a window at a time on the pool
// while the previous window's writes are in flight, so hashing and zstd
// overlap the I/O instead of preceding it.
constexpr uint64_t kWindowBytes = 64u << 20;

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<char, FreeDeleter>;

AlignedBytes AllocAligned(size_t n) {
  void* p = nullptr;
  if (posix_memalign(&p, kChunkAlignment, n == 0 ? kChunkAlignment : n) != 0) return nullptr;
  return AlignedBytes(static_cast<char*>(p));
}

// Writes [buf, buf+len) at `offset` in io_size pieces; `keep` (may be null)
// is released when the last piece completes.
Status SubmitRange(IoEngine* engine, WritableFile* file, const char* buf, uint64_t len,
                   uint64_t offset, uint64_t io_size,
                   std::shared_ptr<AlignedBytes> keep = nullptr) {
  for (uint64_t done = 0; done < len; done += io_size) {
    uint64_t n = len - done < io_size ? len - done : io_size;
    IoDone on_done;
    if (keep) on_done = [keep](const Status&, size_t) {};
    STINT_RETURN_IF_ERROR(
        engine->SubmitWrite(file, buf + done, n, offset + done, std::move(on_done)));
  }
  return Status::OK();
}

struct ChunkRef {
  size_t entry, index;
};

}  // namespace

Result<PersistedFile> PersistSnapshot(Env* env, IoEngine* engine, ThreadPool* pool,
                                      const Snapshot& snapshot, const std::string& path,
                                      const PersistOptions& options) {
  const SnapshotLayout& layout = snapshot.layout;
  const char* image = snapshot.buffer->data();
  const uint64_t io_size =
      options.io_size < kChunkAlignment ? kChunkAlignment : AlignUp(options.io_size);

  // Chunks in staging (= raw file) order.
  std::vector<ChunkRef> refs;
  PersistedFile out;
  auto staging_offset = [&](size_t i) {
    return layout.entries[refs[i].entry].chunk_offset[refs[i].index];
  };
  auto record = [&](size_t i) -> ChunkRecord& {
    return out.entry_chunks[refs[i].entry][refs[i].index];
  };

  out.entry_chunks.resize(layout.entries.size());
  // Incremental: each tensor entry's chunks in the base, compared by hash.
  std::vector<const std::vector<ChunkRecord>*> base_chunks(layout.entries.size(), nullptr);
  for (size_t e = 0; e < layout.entries.size(); ++e) {
    const SnapshotEntry& se = layout.entries[e];
    if (!se.reused.empty()) {
      out.entry_chunks[e] = se.reused;  // frozen: referenced, never staged
      continue;
    }
    if (options.base != nullptr && !se.is_blob) {
      base_chunks[e] =
          options.base->FindShard(se.name, se.dtype, se.global_shape, se.offsets, se.extents);
    }
    out.entry_chunks[e].resize(se.chunk_len.size());
    for (size_t c = 0; c < se.chunk_len.size(); ++c) refs.push_back({e, c});
  }
  // A chunk the base holds with the same bytes: its record, with `ref` set.
  auto base_match = [&](size_t i, const RawHash& hash) -> const ChunkRecord* {
    const auto* chunks = base_chunks[refs[i].entry];
    if (chunks == nullptr || refs[i].index >= chunks->size()) return nullptr;
    const ChunkRecord& b = (*chunks)[refs[i].index];
    return b.raw_hash == hash && b.raw_len == record(i).raw_len ? &b : nullptr;
  };

  STINT_ASSIGN_OR_RETURN(auto file, env->NewWritableFile(path, FileOptions{options.direct_io}));
  Status status;
  // Raw and complete: the staging image is the file, so its size is known;
  // preallocate it. Otherwise chunks are packed one after another.
  const bool image_is_file = !options.compress && !options.incremental;
  if (image_is_file) status = file->Allocate(layout.image_bytes);
  std::vector<char> referenced(refs.size(), 0);  // chunk i is in the base, not written

  uint64_t file_size = 0;
  std::vector<std::shared_ptr<AlignedBytes>> compressed;
  std::vector<Status> errors;
  for (size_t begin = 0; begin < refs.size() && status.ok();) {
    size_t end = begin;
    while (end < refs.size() && staging_offset(end) < staging_offset(begin) + kWindowBytes) ++end;
    compressed.assign(end - begin, nullptr);
    errors.assign(end - begin, Status::OK());

    pool->ParallelFor(end - begin, [&](size_t k) {
      const size_t i = begin + k;
      ChunkRecord& rec = record(i);
      const char* raw = image + staging_offset(i);
      rec.raw_len = layout.entries[refs[i].entry].chunk_len[refs[i].index];
      rec.codec = Codec::kNone;
      rec.stored_len = rec.raw_len;
      if (options.incremental) {
        RawHash hash = Xxh128(raw, rec.raw_len);
        if (const ChunkRecord* same = base_match(i, hash)) {
          rec = *same;
          referenced[i] = 1;
          return;
        }
        rec.raw_hash = hash;
      }
      if (options.compress && rec.raw_len > 0) {
        size_t cap = AlignUp(ZstdBound(rec.raw_len));
        AlignedBytes buf = AllocAligned(cap);
        if (buf == nullptr) {
          errors[k] =
              Status::ResourceExhausted("zstd: cannot allocate " + std::to_string(cap) + " bytes");
          return;
        }
        auto n = ZstdCompress(raw, rec.raw_len, buf.get(), cap, options.zstd_level);
        if (!n.ok()) {
          errors[k] = n.status();
          return;
        }
        if (*n < rec.raw_len) {  // keep raw when zstd does not help
          std::memset(buf.get() + *n, 0, AlignUp(*n) - *n);
          rec.codec = Codec::kZstd;
          rec.stored_len = *n;
          rec.xxh3 = Xxh3(buf.get(), *n);
          compressed[k] = std::make_shared<AlignedBytes>(std::move(buf));
          return;
        }
      }
      rec.xxh3 = Xxh3(raw, rec.raw_len);
    });
    for (const Status& s : errors) {
      if (status.ok() && !s.ok()) status = s;
    }
    if (!status.ok()) break;

    if (image_is_file) {
      // One run of large aligned writes straight from the staging image.
      uint64_t from = staging_offset(begin);
      uint64_t to = end < refs.size() ? staging_offset(end) : layout.image_bytes;
      for (size_t i = begin; i < end; ++i) record(i).file_offset = staging_offset(i);
      status = SubmitRange(engine, file.get(), image + from, to - from, from, io_size);
      file_size = to;
    } else {
      // Packed: raw chunks adjacent in staging go out as one run of writes.
      uint64_t run_from = 0, run_len = 0, run_at = 0;
      auto flush_run = [&] {
        if (run_len > 0 && status.ok()) {
          status = SubmitRange(engine, file.get(), image + run_from, run_len, run_at, io_size);
        }
        run_len = 0;
      };
      for (size_t i = begin; i < end && status.ok(); ++i) {
        ChunkRecord& rec = record(i);
        if (referenced[i]) {
          out.referenced_bytes += rec.raw_len;
          continue;
        }
        const auto& buf = compressed[i - begin];
        rec.file_offset = file_size;
        uint64_t padded = AlignUp(rec.stored_len == 0 ? 1 : rec.stored_len);
        if (buf) {
          flush_run();
          // A compressed buffer lives until its last write completes.
          status = SubmitRange(engine, file.get(), buf->get(), padded, file_size, io_size, buf);
        } else {
          if (run_len > 0 && run_from + run_len != staging_offset(i)) flush_run();
          if (run_len == 0) {
            run_from = staging_offset(i);
            run_at = file_size;
          }
          run_len += padded;
        }
        file_size += padded;
      }
      flush_run();
    }
    begin = end;
  }
  compressed.clear();
  Status drained = engine->Drain();  // always: buffers must not be freed under the kernel
  STINT_RETURN_IF_ERROR(status.WithContext("write " + path));
  STINT_RETURN_IF_ERROR(drained.WithContext("write " + path));
  STINT_RETURN_IF_ERROR(file->Sync());
  STINT_RETURN_IF_ERROR(file->Close());

  std::vector<ChunkRecord> in_file_order;
  in_file_order.reserve(refs.size());
  for (size_t i = 0; i < refs.size(); ++i) {
    if (referenced[i]) continue;
    in_file_order.push_back(record(i));
    out.stored_bytes += record(i).stored_len;
  }
  for (const SnapshotEntry& se : layout.entries) {
    for (const ChunkRecord& c : se.reused) out.referenced_bytes += c.raw_len;
  }
  out.file.size = file_size;
  out.file.digest = FileDigest(in_file_order, file_size);
  size_t slash = path.rfind('/');
  out.file.name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (options.base != nullptr) {
    STINT_ASSIGN_OR_RETURN(out.refs, ReferencedFiles(out.entry_chunks, *options.base));
  }
  return out;
}

Manifest BuildManifest(const CheckpointOptions& options, const Snapshot& snapshot,
                       const PersistedFile& file) {
  Manifest m;
  m.job_id = options.job_id;
  m.step = snapshot.step;
  m.fencing_token = options.fencing_token;
  m.world_size = options.world_size;
  m.chunk_size = options.chunk_size;
  m.created_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  m.files.push_back(file.file);
  m.refs = file.refs;
  const auto& entries = snapshot.layout.entries;
  for (size_t e = 0; e < entries.size(); ++e) {
    const SnapshotEntry& se = entries[e];
    if (se.is_blob) {
      m.blobs.push_back(BlobRecord{se.name, file.file.name, file.entry_chunks[e]});
      continue;
    }
    ShardRecord shard{se.offsets, se.extents, file.file.name, file.entry_chunks[e]};
    auto it = std::find_if(m.tensors.begin(), m.tensors.end(),
                           [&](const TensorRecord& t) { return t.name == se.name; });
    if (it == m.tensors.end()) {
      m.tensors.push_back(TensorRecord{se.name, se.dtype, se.global_shape, {}});
      it = m.tensors.end() - 1;
    }
    it->shards.push_back(std::move(shard));
  }
  return m;
}

}  // namespace stint
