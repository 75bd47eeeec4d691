// CheckpointReader implementation: manifest checks at Open, then chunk reads
// through an IoEngine into aligned buffers, each verified before use.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "base/thread_pool.h"
#include "format/manifest.h"
#include "io/io_engine.h"
#include "stint/checkpoint_reader.h"

namespace stint {

namespace {

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

// One chunk to read: where it is, and what to do with its decoded bytes.
struct ChunkRead {
  const std::string* file;
  const ChunkRecord* rec;
  std::string where;  // "dir/file chunk k (tensor x)"
  // Decoded bytes [src_begin, src_end) of the chunk go to dst; dst == null
  // means verify only.
  char* dst = nullptr;
  uint64_t src_begin = 0, src_end = 0;
};

class CheckpointReaderImpl final : public CheckpointReader {
 public:
  CheckpointReaderImpl(std::string dir, Manifest m, Env* env, std::unique_ptr<IoEngine> engine,
                       const ReaderOptions& options)
      : dir_(std::move(dir)),
        m_(std::move(m)),
        env_(env),
        engine_(std::move(engine)),
        options_(options),
        decode_pool_(options.threads != 0 ? options.threads
                                          : std::max(1u, std::thread::hardware_concurrency()) - 1) {
  }

  Status OpenFiles() {
    for (const auto& f : m_.files) {
      std::string path = dir_ + "/" + f.name;
      auto file = env_->NewRandomAccessFile(path, FileOptions{options_.direct_io});
      if (!file.ok()) {
        if (file.status().code() == Code::kNotFound) {
          return Status::DataLoss(path + ": data file listed in the manifest is missing");
        }
        return file.status();
      }
      STINT_ASSIGN_OR_RETURN(uint64_t size, (*file)->Size());
      if (size != f.size) {
        return Status::DataLoss(path + ": is " + std::to_string(size) + " bytes, manifest says " +
                                std::to_string(f.size) + (size < f.size ? " (truncated)" : ""));
      }
      // The digest binds the chunk list to the file; recomputed from records here,
      // and against the bytes by Verify().
      std::vector<ChunkRecord> chunks = ChunksOf(f.name);
      if (FileDigest(chunks, f.size) != f.digest) {
        return Status::DataLoss(path + ": file digest does not match the manifest's chunk list");
      }
      files_[f.name] = std::move(*file);
    }
    return Status::OK();
  }

  const std::string& dir() const override { return dir_; }
  uint64_t step() const override { return m_.step; }
  const std::string& job_id() const override { return m_.job_id; }
  int world_size() const override { return m_.world_size; }

  std::vector<TensorInfo> tensors() const override {
    std::vector<TensorInfo> out;
    for (const auto& t : m_.tensors) {
      uint64_t bytes = 0;
      for (const auto& s : t.shards) {
        for (const auto& c : s.chunks) bytes += c.raw_len;
      }
      out.push_back(TensorInfo{t.name, t.dtype, t.global_shape, t.shards.size(), bytes});
    }
    return out;
  }

  std::vector<std::string> blob_names() const override {
    std::vector<std::string> out;
    for (const auto& b : m_.blobs) out.push_back(b.name);
    return out;
  }

  Status Read(const std::vector<TensorDest>& dests) const override {
    std::vector<ChunkRead> reads;
    for (const auto& d : dests) STINT_RETURN_IF_ERROR(PlanTensor(d, &reads));
    return Execute(reads);
  }

  Result<std::string> ReadBlob(const std::string& name) const override {
    const BlobRecord* b = m_.FindBlob(name);
    if (b == nullptr) return Status::NotFound(dir_ + ": no blob '" + name + "'");
    uint64_t total = 0;
    for (const auto& c : b->chunks) total += c.raw_len;
    std::string out(total, '\0');
    std::vector<ChunkRead> reads;
    uint64_t pos = 0;
    for (size_t i = 0; i < b->chunks.size(); ++i) {
      const ChunkRecord& c = b->chunks[i];
      reads.push_back(ChunkRead{&b->file, &c, Where(b->file, i, "blob " + name), out.data() + pos,
                                0, c.raw_len});
      pos += c.raw_len;
    }
    STINT_RETURN_IF_ERROR(Execute(reads));
    return out;
  }

  Result<VerifyReport> Verify() const override {
    std::vector<ChunkRead> reads;
    VerifyReport report;
    auto add = [&](const std::string& file, const std::vector<ChunkRecord>& chunks,
                   const std::string& what) {
      for (size_t i = 0; i < chunks.size(); ++i) {
        reads.push_back(ChunkRead{&file, &chunks[i], Where(file, i, what), nullptr, 0, 0});
        report.stored_bytes += chunks[i].stored_len;
      }
    };
    for (const auto& t : m_.tensors) {
      for (size_t k = 0; k < t.shards.size(); ++k) {
        add(t.shards[k].file, t.shards[k].chunks,
            "tensor " + t.name + " shard " + std::to_string(k));
      }
    }
    for (const auto& b : m_.blobs) add(b.file, b.chunks, "blob " + b.name);
    report.chunks = reads.size();
    report.files = m_.files.size();
    STINT_RETURN_IF_ERROR(Execute(reads));
    return report;
  }

 private:
  std::string Where(const std::string& file, size_t chunk, const std::string& what) const {
    return dir_ + "/" + file + " chunk " + std::to_string(chunk) + " (" + what + ")";
  }

  std::vector<ChunkRecord> ChunksOf(const std::string& file) const {
    std::vector<ChunkRecord> out;
    for (const auto& t : m_.tensors) {
      for (const auto& s : t.shards) {
        if (s.file == file) out.insert(out.end(), s.chunks.begin(), s.chunks.end());
      }
    }
    for (const auto& b : m_.blobs) {
      if (b.file == file) out.insert(out.end(), b.chunks.begin(), b.chunks.end());
    }
    std::sort(out.begin(), out.end(), [](const ChunkRecord& a, const ChunkRecord& b) {
      return a.file_offset < b.file_offset;
    });
    return out;
  }

  static std::string ShapeString(const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
  }

  // Adds the chunk reads that fill bytes [begin, end) of `shard` into dst.
  void AddShardRange(const TensorRecord& t, size_t shard_index, uint64_t begin, uint64_t end,
                     char* dst, std::vector<ChunkRead>* reads) const {
    const ShardRecord& s = t.shards[shard_index];
    uint64_t pos = 0;
    for (size_t i = 0; i < s.chunks.size(); ++i) {
      const ChunkRecord& c = s.chunks[i];
      uint64_t c0 = pos, c1 = pos + c.raw_len;
      pos = c1;
      uint64_t lo = std::max(begin, c0), hi = std::min(end, c1);
      if (lo >= hi && !(c.raw_len == 0 && begin == end)) continue;
      reads->push_back(
          ChunkRead{&s.file, &c,
                    Where(s.file, i, "tensor " + t.name + " shard " + std::to_string(shard_index)),
                    dst + (lo - begin), lo - c0, hi - c0});
    }
  }

  Status PlanTensor(const TensorDest& d, std::vector<ChunkRead>* reads) const {
    const TensorRecord* t = m_.FindTensor(d.name);
    std::string ctx = dir_ + ": tensor '" + d.name + "'";
    if (t == nullptr) return Status::NotFound(ctx + " is not in this checkpoint");
    if (t->dtype != d.dtype) {
      return Status::InvalidArgument(ctx + " is " + DTypeName(t->dtype) + ", destination is " +
                                     DTypeName(d.dtype));
    }
    if (t->global_shape != d.global_shape) {
      return Status::InvalidArgument(ctx + " has shape " + ShapeString(t->global_shape) +
                                     ", destination expects " + ShapeString(d.global_shape));
    }
    const size_t rank = t->global_shape.size();
    std::vector<int64_t> off = d.offsets.empty() ? std::vector<int64_t>(rank, 0) : d.offsets;
    std::vector<int64_t> ext = d.extents.empty() ? t->global_shape : d.extents;
    if (off.size() != rank || ext.size() != rank) {
      return Status::InvalidArgument(ctx + ": destination offsets/extents need " +
                                     std::to_string(rank) + " entries");
    }
    for (size_t k = 0; k < rank; ++k) {
      if (off[k] < 0 || ext[k] < 0 || off[k] + ext[k] > t->global_shape[k]) {
        return Status::InvalidArgument(ctx + ": destination region lies outside the shape in dim " +
                                       std::to_string(k));
      }
    }
    if (NumElements(ext) > 0 && d.data == nullptr)
      return Status::InvalidArgument(ctx + ": destination is null");
    char* dst = static_cast<char*>(d.data);
    const uint64_t elem = DTypeSize(t->dtype);

    // A stored shard equal to the region: copy it whole.
    for (size_t k = 0; k < t->shards.size(); ++k) {
      if (t->shards[k].offsets == off && t->shards[k].extents == ext) {
        AddShardRange(*t, k, 0, uint64_t(NumElements(ext)) * elem, dst, reads);
        return Status::OK();
      }
    }
    // Reshard along dim 0: every shard involved spans all other dimensions.
    auto full_rows = [&](const std::vector<int64_t>& o, const std::vector<int64_t>& e) {
      for (size_t k = 1; k < rank; ++k) {
        if (o[k] != 0 || e[k] != t->global_shape[k]) return false;
      }
      return true;
    };
    if (rank == 0 || !full_rows(off, ext)) {
      return Status::Unimplemented(ctx + ": destination region " + ShapeString(off) + "+" +
                                   ShapeString(ext) +
                                   " matches no stored shard and is not a dim-0 slice");
    }
    std::vector<int64_t> inner(t->global_shape.begin() + 1, t->global_shape.end());
    const uint64_t row_bytes = uint64_t(NumElements(inner)) * elem;
    const int64_t r0 = off[0], r1 = off[0] + ext[0];
    int64_t covered = 0;
    for (size_t k = 0; k < t->shards.size(); ++k) {
      const ShardRecord& s = t->shards[k];
      int64_t s0 = s.offsets[0], s1 = s.offsets[0] + s.extents[0];
      int64_t lo = std::max(r0, s0), hi = std::min(r1, s1);
      if (lo >= hi) continue;
      if (!full_rows(s.offsets, s.extents)) {
        return Status::Unimplemented(ctx + ": stored shard " + std::to_string(k) +
                                     " is not a dim-0 slice; cannot reshard");
      }
      covered += hi - lo;
      AddShardRange(*t, k, uint64_t(lo - s0) * row_bytes, uint64_t(hi - s0) * row_bytes,
                    dst + uint64_t(lo - r0) * row_bytes, reads);
    }
    if (covered != r1 - r0) {
      return Status::DataLoss(ctx + ": stored shards cover " + std::to_string(covered) +
                              " of rows [" + std::to_string(r0) + ", " + std::to_string(r1) +
                              ") (missing or overlapping shards)");
    }
    return Status::OK();
  }

  // Reads every chunk, `queue_depth` in flight; the decode pool verifies and
  // decodes each as it arrives, so checksums and zstd overlap the reads.
  Status Execute(const std::vector<ChunkRead>& reads) const {
    std::mutex mu;
    std::condition_variable slot_freed;
    Status first;
    auto fail = [&](const Status& s) {
      std::lock_guard<std::mutex> l(mu);
      if (first.ok()) first = s;
    };
    // More buffers than requests in flight: a full set of busy buffers then
    // always includes some being decoded, which free themselves, so waiting
    // for one cannot deadlock on completions only Submit/Drain would reap.
    const size_t depth = std::max<size_t>(options_.queue_depth, 1);
    const size_t nbuf = depth + 2 * decode_pool_.size() + 1;
    struct Slot {
      std::unique_ptr<char, FreeDeleter> buf;
      size_t cap = 0;
      bool busy = false;
    };
    std::vector<Slot> slots(nbuf);
    size_t decoding = 0;  // guarded by mu
    auto release = [&](Slot* slot) {
      std::lock_guard<std::mutex> l(mu);
      slot->busy = false;
      slot_freed.notify_all();
    };
    for (const ChunkRead& r : reads) {
      {
        std::lock_guard<std::mutex> l(mu);
        if (!first.ok()) break;
      }
      auto file_it = files_.find(*r.file);
      if (file_it == files_.end()) return Status::Internal(r.where + ": file not open");
      const uint64_t want = AlignUp(r.rec->stored_len == 0 ? 1 : r.rec->stored_len);
      Slot* slot = nullptr;
      {
        std::unique_lock<std::mutex> l(mu);
        for (;;) {
          for (auto& s : slots) {
            if (!s.busy) {
              slot = &s;
              break;
            }
          }
          if (slot != nullptr) break;
          slot_freed.wait(l);
        }
        slot->busy = true;
      }
      if (slot->cap < want) {
        void* p = nullptr;
        if (posix_memalign(&p, kChunkAlignment, want) != 0) {
          return Status::ResourceExhausted("read buffer of " + std::to_string(want) + " bytes");
        }
        slot->buf.reset(static_cast<char*>(p));
        slot->cap = want;
      }
      const ChunkRead* rp = &r;
      Status s = engine_->SubmitRead(
          file_it->second.get(), slot->buf.get(), want, r.rec->file_offset,
          [&, rp, slot](const Status& io, size_t bytes) {
            Status st = io;
            if (st.ok() && bytes < rp->rec->stored_len) {
              st = Status::DataLoss(rp->where + ": file ends after " + std::to_string(bytes) +
                                    " of the chunk's " + std::to_string(rp->rec->stored_len) +
                                    " bytes");
            }
            if (!st.ok()) {
              fail(st);
              release(slot);
              return;
            }
            {
              std::lock_guard<std::mutex> l(mu);
              ++decoding;
            }
            decode_pool_.Schedule([&, rp, slot] {
              Status d = DecodeInto(*rp, slot->buf.get());
              if (!d.ok()) fail(d);
              std::lock_guard<std::mutex> l(mu);
              slot->busy = false;
              --decoding;
              slot_freed.notify_all();
            });
          });
      if (!s.ok()) {
        fail(s);
        release(slot);
      }
    }
    Status drained = engine_->Drain();
    {
      std::unique_lock<std::mutex> l(mu);
      slot_freed.wait(l, [&] { return decoding == 0; });
    }
    if (!first.ok()) return first;
    return drained;
  }

  static Status DecodeInto(const ChunkRead& r, const char* stored) {
    const ChunkRecord& c = *r.rec;
    if (r.dst == nullptr) {  // verify only
      uint64_t h = Xxh3(stored, c.stored_len);
      if (h != c.xxh3) {
        return Status::DataLoss(r.where + ": checksum mismatch (stored " + HashToHex(c.xxh3) +
                                ", computed " + HashToHex(h) + ")");
      }
      return Status::OK();
    }
    if (r.src_begin == 0 && r.src_end == c.raw_len) return DecodeChunk(c, stored, r.dst, r.where);
    std::string scratch(c.raw_len, '\0');
    STINT_RETURN_IF_ERROR(DecodeChunk(c, stored, scratch.data(), r.where));
    std::memcpy(r.dst, scratch.data() + r.src_begin, r.src_end - r.src_begin);
    return Status::OK();
  }

  const std::string dir_;
  const Manifest m_;
  Env* const env_;
  std::unique_ptr<IoEngine> engine_;
  const ReaderOptions options_;
  std::map<std::string, std::unique_ptr<RandomAccessFile>> files_;
  mutable ThreadPool decode_pool_;  // Execute() is logically const
};

}  // namespace

Result<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(const std::string& dir,
                                                                 const ReaderOptions& options) {
  Env* env = options.env != nullptr ? options.env : Env::Default();
  std::string manifest_path = dir + "/" + kManifestName;
  auto bytes = ReadFileToString(env, manifest_path);
  if (!bytes.ok()) {
    if (bytes.status().code() == Code::kNotFound) {
      return Status::NotFound(manifest_path + ": no manifest (not a committed checkpoint)");
    }
    return bytes.status();
  }
  STINT_ASSIGN_OR_RETURN(Manifest m, DecodeManifest(*bytes, manifest_path));
  STINT_ASSIGN_OR_RETURN(IoEngineKind kind, ParseIoEngineKind(options.io_engine));
  IoEngineOptions io;
  io.kind = kind;
  io.queue_depth = options.queue_depth;
  STINT_ASSIGN_OR_RETURN(auto engine, NewIoEngine(io));
  auto reader =
      std::make_unique<CheckpointReaderImpl>(dir, std::move(m), env, std::move(engine), options);
  STINT_RETURN_IF_ERROR(reader->OpenFiles());
  return std::unique_ptr<CheckpointReader>(std::move(reader));
}

}  // namespace stint
