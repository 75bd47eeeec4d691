#include "checkpoint/persist.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <unordered_map>

namespace stint {
namespace {

// Chunks are checksummed (and compressed) a window at a time on the pool
// while the previous window's writes are in flight, so hashing and zstd
// overlap the I/O instead of preceding it.
constexpr uint64_t kWindowBytes = 64u << 20;
// Chunks this small (stored, padded) are written through a pack buffer of
// kPackBytes.
constexpr uint64_t kPackedChunkBytes = 256u << 10;
constexpr uint64_t kPackBytes = 4u << 20;

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

// One PersistSnapshot, step by step: PlanChunks (which chunks are written
// and, incremental, where the base holds each entry's), then per window of
// kWindowBytes EncodeWindow (hash, compress, match the base, on the pool)
// and its writes (SubmitImage or SubmitPacked), and once the writes are
// durable Finish (the file record).
class SnapshotFileWriter {
 public:
  SnapshotFileWriter(IoEngine* engine, ThreadPool* pool, const Snapshot& snapshot,
                     const PersistOptions& options)
      : engine_(engine),
        pool_(pool),
        layout_(snapshot.layout),
        image_(snapshot.buffer->data()),
        unchanged_(snapshot.unchanged.get()),
        filled_(snapshot.filled.get()),
        options_(options),
        io_size_(options.io_size < kChunkAlignment ? kChunkAlignment : AlignUp(options.io_size)),
        // Raw and complete: the staging image is the file, so its size is
        // known. Otherwise chunks are packed one after another.
        image_is_file_(!options.compress && !options.incremental) {
    PlanChunks();
  }

  // Submits every window's writes to `file`; the caller drains the engine.
  Status Write(WritableFile* file) {
    file_ = file;
    Status status;
    if (image_is_file_) status = file->Allocate(layout_.image_bytes);  // preallocated
    size_t encoded = 0;  // chunks [0, encoded) are recorded
    // Encoding (zstd, hashing every chunk) needs the cores Save()'s own
    // copies run on: it starts once they are done. (Device copies do not
    // compete for them: windows still follow those as they land.)
    if (!image_is_file_ && filled_ != nullptr) filled_->WaitFor(layout_.image_bytes);
    for (size_t begin = 0; begin < refs_.size() && status.ok();) {
      size_t end = begin;
      while (end < refs_.size() && staging_offset(end) < staging_offset(begin) + kWindowBytes) {
        ++end;
      }
      // Save() may still be copying the later windows in.
      status = WaitStaged(window_end(end));
      if (!status.ok()) break;
      if (!image_is_file_) {
        status = EncodeWindow(begin, end);
        if (status.ok()) status = SubmitPacked(begin, end);
        encoded = end;
      } else {
        // Raw chunks are written before they are checksummed. While Save()
        // still copies, checksums wait: hashing beside the copies would
        // take their cores and lengthen the training thread's stall.
        status = SubmitImage(begin, end);
        if (status.ok() && (filled_ == nullptr || filled_->finished())) {
          status = EncodeWindow(encoded, end);
          encoded = end;
        }
      }
      begin = end;
    }
    if (status.ok() && encoded < refs_.size()) status = EncodeWindow(encoded, refs_.size());
    // Nothing is committed before every copy into the image is done.
    if (status.ok()) status = WaitStaged(layout_.image_bytes);
    compressed_.clear();
    return status;
  }

  // The result once the file is durable, its name the last part of `path`.
  Result<PersistedFile> Finish(const std::string& path) {
    std::vector<ChunkRecord> in_file_order;
    in_file_order.reserve(refs_.size());
    for (size_t i = 0; i < refs_.size(); ++i) {
      if (referenced_[i]) continue;
      in_file_order.push_back(record(i));
      out_.stored_bytes += record(i).stored_len;
    }
    for (const SnapshotEntry& se : layout_.entries) {
      for (const ChunkRecord& c : se.reused) out_.referenced_bytes += c.raw_len;
    }
    out_.file.size = file_size_;
    out_.file.digest = FileDigest(in_file_order, file_size_);
    size_t slash = path.rfind('/');
    out_.file.name = slash == std::string::npos ? path : path.substr(slash + 1);
    if (options_.base != nullptr) {
      STINT_ASSIGN_OR_RETURN(out_.refs, ReferencedFiles(out_.entry_chunks, *options_.base));
    }
    return std::move(out_);
  }

 private:
  // Chunks in staging (= raw file) order; frozen entries' records as they
  // are (referenced, never staged); with a base, each tensor entry's chunks
  // in it, compared by hash.
  void PlanChunks() {
    out_.entry_chunks.resize(layout_.entries.size());
    base_chunks_.assign(layout_.entries.size(), nullptr);
    for (size_t e = 0; e < layout_.entries.size(); ++e) {
      const SnapshotEntry& se = layout_.entries[e];
      if (!se.reused.empty()) {
        out_.entry_chunks[e] = se.reused;
        continue;
      }
      if (options_.base != nullptr && !se.is_blob) {
        base_chunks_[e] =
            options_.base->FindShard(se.name, se.dtype, se.global_shape, se.offsets, se.extents);
      }
      out_.entry_chunks[e].resize(se.chunk_len.size());
      for (size_t c = 0; c < se.chunk_len.size(); ++c) refs_.push_back({e, c});
    }
    referenced_.assign(refs_.size(), 0);
  }

  uint64_t staging_offset(size_t i) const {
    return layout_.entries[refs_[i].entry].chunk_offset[refs_[i].index];
  }
  Status WaitStaged(uint64_t to) {
    if (filled_ != nullptr) filled_->WaitFor(to);
    return options_.wait_staged ? options_.wait_staged(to) : Status::OK();
  }

  // Where the staged bytes of a window ending before chunk `end` end.
  uint64_t window_end(size_t end) const {
    return end < refs_.size() ? staging_offset(end) : layout_.image_bytes;
  }
  ChunkRecord& record(size_t i) { return out_.entry_chunks[refs_[i].entry][refs_[i].index]; }

  // The base's chunk of the same bytes of the same shard, with `ref` set,
  // if it has the same length; null if none.
  const ChunkRecord* BaseChunk(size_t i) {
    const auto* chunks = base_chunks_[refs_[i].entry];
    if (chunks == nullptr || refs_[i].index >= chunks->size()) return nullptr;
    const ChunkRecord& b = (*chunks)[refs_[i].index];
    return b.raw_len == record(i).raw_len ? &b : nullptr;
  }

  // Records chunks [begin, end) on the pool; the first error.
  Status EncodeWindow(size_t begin, size_t end) {
    compressed_.assign(end - begin, nullptr);
    errors_.assign(end - begin, Status::OK());
    pool_->ParallelFor(end - begin, [&](size_t k) { EncodeChunk(begin + k, k); });
    for (const Status& s : errors_) {
      if (!s.ok()) return s;
    }
    return Status::OK();
  }

  // Chunk i, window slot k: referenced in the base (incremental, same
  // bytes), compressed where zstd helps, else raw.
  void EncodeChunk(size_t i, size_t k) {
    ChunkRecord& rec = record(i);
    const char* raw = image_ + staging_offset(i);
    rec.raw_len = layout_.entries[refs_[i].entry].chunk_len[refs_[i].index];
    rec.codec = Codec::kNone;
    rec.stored_len = rec.raw_len;
    if (options_.incremental) {
      const ChunkRecord* same = BaseChunk(i);
      // Matched before staging (Snapshot::unchanged): never copied, not in
      // the image.
      bool matched = same != nullptr && unchanged_ != nullptr && (*unchanged_)[i];
      RawHash hash{};
      if (!matched) hash = Xxh128(raw, rec.raw_len);
      if (matched || (same != nullptr && same->raw_hash == hash)) {
        rec = *same;
        referenced_[i] = 1;
        return;
      }
      rec.raw_hash = hash;
    }
    if (options_.compress && rec.raw_len > 0) {
      size_t cap = AlignUp(ZstdBound(rec.raw_len));
      AlignedBytes buf = AllocAligned(cap);
      if (buf == nullptr) {
        errors_[k] =
            Status::ResourceExhausted("zstd: cannot allocate " + std::to_string(cap) + " bytes");
        return;
      }
      auto n = ZstdCompress(raw, rec.raw_len, buf.get(), cap, options_.zstd_level);
      if (!n.ok()) {
        errors_[k] = n.status();
        return;
      }
      if (*n < rec.raw_len) {  // keep raw when zstd does not help
        std::memset(buf.get() + *n, 0, AlignUp(*n) - *n);
        rec.codec = Codec::kZstd;
        rec.stored_len = *n;
        rec.xxh3 = Xxh3(buf.get(), *n);
        compressed_[k] = std::make_shared<AlignedBytes>(std::move(buf));
        return;
      }
    }
    rec.xxh3 = Xxh3(raw, rec.raw_len);
  }

  // The image is the file: one run of large aligned writes straight from
  // the staging image.
  Status SubmitImage(size_t begin, size_t end) {
    uint64_t from = staging_offset(begin);
    uint64_t to = window_end(end);
    for (size_t i = begin; i < end; ++i) record(i).file_offset = staging_offset(i);
    file_size_ = to;
    return SubmitRange(engine_, file_, image_ + from, to - from, from, io_size_);
  }

  // Packed: raw chunks adjacent in staging go out as one run of writes; a
  // compressed buffer lives until its last write completes. Small chunks
  // (an incremental save's changed adapters, optimizer scalars) are gathered
  // into a pack buffer and written together: one 4 KiB write per chunk
  // would make a save of a few MiB take thousands of requests.
  Status SubmitPacked(size_t begin, size_t end) {
    Status status;
    uint64_t run_from = 0, run_len = 0, run_at = 0;
    auto flush_run = [&] {
      if (run_len > 0 && status.ok()) {
        status = SubmitRange(engine_, file_, image_ + run_from, run_len, run_at, io_size_);
      }
      run_len = 0;
    };
    for (size_t i = begin; i < end && status.ok(); ++i) {
      ChunkRecord& rec = record(i);
      if (referenced_[i]) {
        out_.referenced_bytes += rec.raw_len;
        if (unchanged_ != nullptr && (*unchanged_)[i]) out_.matched_in_place_bytes += rec.raw_len;
        continue;
      }
      const auto& buf = compressed_[i - begin];
      rec.file_offset = file_size_;
      uint64_t padded = AlignUp(rec.stored_len == 0 ? 1 : rec.stored_len);
      if (padded <= kPackedChunkBytes) {
        flush_run();
        status = Pack(buf ? buf->get() : image_ + staging_offset(i), padded);
      } else if (buf) {
        flush_run();
        status = FlushPack();
        if (status.ok()) {
          status = SubmitRange(engine_, file_, buf->get(), padded, file_size_, io_size_, buf);
        }
      } else {
        if (status.ok()) status = FlushPack();
        if (run_len > 0 && run_from + run_len != staging_offset(i)) flush_run();
        if (run_len == 0) {
          run_from = staging_offset(i);
          run_at = file_size_;
        }
        run_len += padded;
      }
      file_size_ += padded;
    }
    flush_run();
    if (status.ok() && end == refs_.size()) status = FlushPack();
    return status;
  }

  // Appends `padded` bytes (a chunk and its zeroed padding) at file offset
  // file_size_ to the pack, writing it first when they would not fit.
  Status Pack(const char* src, uint64_t padded) {
    if (pack_ != nullptr && pack_len_ + padded > kPackBytes) STINT_RETURN_IF_ERROR(FlushPack());
    if (pack_ == nullptr) {
      AlignedBytes bytes = AllocAligned(kPackBytes);
      if (bytes == nullptr) {
        return Status::ResourceExhausted("cannot allocate a " + std::to_string(kPackBytes) +
                                         " byte write buffer");
      }
      pack_ = std::make_shared<AlignedBytes>(std::move(bytes));
      pack_at_ = file_size_;
    }
    std::memcpy(pack_->get() + pack_len_, src, padded);
    pack_len_ += padded;
    return Status::OK();
  }

  // Writes the pack (it lives until its last write completes).
  Status FlushPack() {
    if (pack_ == nullptr) return Status::OK();
    Status s = SubmitRange(engine_, file_, pack_->get(), pack_len_, pack_at_, io_size_, pack_);
    pack_.reset();
    pack_len_ = 0;
    return s;
  }

  IoEngine* const engine_;
  ThreadPool* const pool_;
  const SnapshotLayout& layout_;
  const char* const image_;
  const std::vector<uint8_t>* const unchanged_;  // Snapshot::unchanged, by chunk i; may be null
  StagingWatermark* const filled_;               // null: the image is filled
  const PersistOptions& options_;
  const uint64_t io_size_;
  const bool image_is_file_;
  WritableFile* file_ = nullptr;  // set by Write()

  std::vector<ChunkRef> refs_;  // the chunks written (or referenced), in staging order
  PersistedFile out_;
  std::vector<const std::vector<ChunkRecord>*> base_chunks_;  // by entry; null: none
  std::vector<char> referenced_;                              // chunk i is in the base, not written
  uint64_t file_size_ = 0;
  // The current window's compressed chunks (null: written raw) and errors.
  std::vector<std::shared_ptr<AlignedBytes>> compressed_;
  std::vector<Status> errors_;
  // Small chunks gathered for one write: file bytes [pack_at_, + pack_len_).
  std::shared_ptr<AlignedBytes> pack_;
  uint64_t pack_at_ = 0, pack_len_ = 0;
};

}  // namespace

Result<PersistedFile> PersistSnapshot(Env* env, IoEngine* engine, ThreadPool* pool,
                                      const Snapshot& snapshot, const std::string& path,
                                      const PersistOptions& options) {
  SnapshotFileWriter writer(engine, pool, snapshot, options);
  STINT_ASSIGN_OR_RETURN(auto file, env->NewWritableFile(path, FileOptions{options.direct_io}));
  Status status = writer.Write(file.get());
  Status drained = engine->Drain();  // always: buffers must not be freed under the kernel
  STINT_RETURN_IF_ERROR(status.WithContext("write " + path));
  STINT_RETURN_IF_ERROR(drained.WithContext("write " + path));
  STINT_RETURN_IF_ERROR(file->Sync());
  STINT_RETURN_IF_ERROR(file->Close());
  return writer.Finish(path);
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
  std::unordered_map<std::string, size_t> tensor_index;  // thousands of tensors: no linear search
  for (size_t e = 0; e < entries.size(); ++e) {
    const SnapshotEntry& se = entries[e];
    if (se.is_blob) {
      m.blobs.push_back(BlobRecord{se.name, file.file.name, file.entry_chunks[e]});
      continue;
    }
    auto [it, fresh] = tensor_index.emplace(se.name, m.tensors.size());
    if (fresh) m.tensors.push_back(TensorRecord{se.name, se.dtype, se.global_shape, {}});
    m.tensors[it->second].shards.push_back(
        ShardRecord{se.offsets, se.extents, file.file.name, file.entry_chunks[e]});
  }
  return m;
}

}  // namespace stint
