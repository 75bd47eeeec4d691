// CheckpointReader implementation: manifest checks at Open, then chunk reads
// through an IoEngine, each chunk verified before the read returns. A whole
// raw chunk goes straight into its destination where the file allows
// (O_DIRECT: a page-aligned stretch of whole pages; buffered: any), and is
// hashed there; the others are read into bounce slots, adjacent ones merged
// into one request of up to 8 MiB, and hashed while they are copied out.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "base/mapped_buffer.h"
#include "base/thread_pool.h"
#include "checkpoint/commit.h"
#include "format/manifest.h"
#include "format/shard_layout.h"
#include "io/io_engine.h"
#include "stint/checkpoint_reader.h"

namespace stint {

namespace {

// Bytes of reads in flight at most (see Open).
constexpr uint64_t kReadAheadBytes = 64u << 20;

// A bounce request merges chunks that lie one after another in a file up to
// this many bytes (a larger chunk is read alone): a default chunk's size, so
// merging needs no larger slots than reading such chunks one by one.
constexpr uint64_t kMergeBytes = 8u << 20;

// A strided copy of one box of elements out of a stored entry's row-major
// bytes into a row-major destination: `runs` contiguous runs of run_bytes,
// run r starting at src_base + sum(i[k] * src_stride[k]) in the entry and at
// dst_base + sum(i[k] * dst_stride[k]) in the destination, where i is r as a
// row-major index over `counts`. A whole entry is one run.
struct BoxCopy {
  std::vector<uint64_t> counts, src_stride, dst_stride;
  uint64_t src_base = 0, run_bytes = 0, runs = 0;
  char* dst_base = nullptr;

  // Where run r starts: in the entry and relative to dst_base.
  void Offsets(uint64_t r, uint64_t* src, uint64_t* dst) const {
    *src = src_base;
    *dst = 0;
    for (size_t k = counts.size(); k-- > 0;) {
      *src += (r % counts[k]) * src_stride[k];
      *dst += (r % counts[k]) * dst_stride[k];
      r /= counts[k];
    }
  }
  uint64_t SrcOffset(uint64_t r) const {
    uint64_t src = 0, dst = 0;
    Offsets(r, &src, &dst);
    return src;
  }
  // Copies the parts of runs [first, end) that lie in entry bytes
  // [begin, begin + len), held at `src`.
  void Scatter(uint64_t first, uint64_t end, uint64_t begin, uint64_t len, const char* src) const {
    std::vector<uint64_t> i(counts.size());
    uint64_t rest = first;
    for (size_t k = counts.size(); k-- > 0;) {
      i[k] = rest % counts[k];
      rest /= counts[k];
    }
    for (uint64_t r = first; r < end; ++r) {
      uint64_t s = src_base, d = 0;
      for (size_t k = 0; k < counts.size(); ++k) {
        s += i[k] * src_stride[k];
        d += i[k] * dst_stride[k];
      }
      uint64_t lo = std::max(s, begin), hi = std::min(s + run_bytes, begin + len);
      if (lo < hi) std::memcpy(dst_base + d + (lo - s), src + (lo - begin), hi - lo);
      for (size_t k = counts.size(); k-- > 0;) {  // next row-major index
        if (++i[k] < counts[k]) break;
        i[k] = 0;
      }
    }
  }
};

// The runs [first, end) of `copy` that take bytes from one chunk.
struct Piece {
  const BoxCopy* copy;
  uint64_t first, end;
};

// One chunk to read: where it is, and where its decoded bytes go.
struct ChunkRead {
  const std::string* file;
  const ChunkRecord* rec;
  std::string where;    // "dir/file chunk k (tensor x)"
  uint64_t begin = 0;   // offset of the chunk's raw bytes in its entry
  bool verify = false;  // check the checksum only
  std::vector<Piece> pieces;
};

// Chunk reads of one Read() or ReadBlob(): each chunk once, whatever number
// of destinations it feeds, and the copies its pieces point to.
struct ReadPlan {
  std::vector<ChunkRead> reads;
  std::map<const ChunkRecord*, size_t> index;
  std::deque<BoxCopy> copies;  // stable addresses for Piece::copy
};

class CheckpointReaderImpl final : public CheckpointReader {
 public:
  CheckpointReaderImpl(std::string dir, Manifest m, Env* env, std::unique_ptr<IoEngine> engine,
                       size_t depth, const ReaderOptions& options)
      : dir_(std::move(dir)),
        m_(std::move(m)),
        env_(env),
        engine_(std::move(engine)),
        depth_(depth),
        options_(options),
        decode_pool_(options.threads != 0 ? options.threads
                                          : std::max(1u, std::thread::hardware_concurrency()) - 1) {
    // A load plans every destination by name: no linear search per tensor.
    for (const TensorRecord& t : m_.tensors) tensors_.emplace(t.name, &t);
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
    // Chunks an incremental save did not write again live in an older
    // checkpoint's file; each is verified against its own XXH3 when read.
    for (const auto& r : m_.refs) {
      std::string path = RootOf(dir_) + "/" + r.name;
      auto file = env_->NewRandomAccessFile(path, FileOptions{options_.direct_io});
      if (!file.ok()) {
        if (file.status().code() == Code::kNotFound) {
          return Status::DataLoss(dir_ + ": references " + path +
                                  ", which is missing (a referenced checkpoint was deleted)");
        }
        return file.status();
      }
      STINT_ASSIGN_OR_RETURN(uint64_t size, (*file)->Size());
      if (size != r.size) {
        return Status::DataLoss(dir_ + ": references " + path + ", which is " +
                                std::to_string(size) + " bytes; the manifest says " +
                                std::to_string(r.size));
      }
      files_[r.name] = std::move(*file);
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
      TensorInfo info{t.name, t.dtype, t.global_shape, t.shards.size(), bytes, {}};
      for (const auto& s : t.shards) {
        uint64_t raw = 0;
        for (const auto& c : s.chunks) raw += c.raw_len;
        info.shard_boxes.push_back(ShardInfo{s.offsets, s.extents, s.file, raw});
      }
      out.push_back(std::move(info));
    }
    return out;
  }

  std::vector<std::string> blob_names() const override {
    std::vector<std::string> out;
    for (const auto& b : m_.blobs) out.push_back(b.name);
    return out;
  }

  Status Read(const std::vector<TensorDest>& dests) const override {
    ReadPlan plan;
    for (const auto& d : dests) STINT_RETURN_IF_ERROR(PlanTensor(d, &plan));
    return Execute(plan.reads);
  }

  Result<std::string> ReadBlob(const std::string& name) const override {
    const BlobRecord* b = m_.FindBlob(name);
    if (b == nullptr) return Status::NotFound(dir_ + ": no blob '" + name + "'");
    uint64_t total = 0;
    for (const auto& c : b->chunks) total += c.raw_len;
    std::string out;
    try {
      out.resize(total);
    } catch (const std::bad_alloc&) {  // the manifest's lengths are checked, not small
      return Status::ResourceExhausted(dir_ + ": blob '" + name + "' holds " +
                                       std::to_string(total) + " bytes, more than can be allocated");
    }
    ReadPlan plan;
    BoxCopy& whole = plan.copies.emplace_back();
    whole.run_bytes = total;
    whole.runs = 1;
    whole.dst_base = out.data();
    AddCopy(b->file, b->chunks, "blob " + name, whole, &plan);
    STINT_RETURN_IF_ERROR(Execute(plan.reads));
    return out;
  }

  Result<VerifyReport> Verify() const override {
    std::vector<ChunkRead> reads;
    VerifyReport report;
    auto add = [&](const std::string& file, const std::vector<ChunkRecord>& chunks,
                   const std::string& what) {
      for (size_t i = 0; i < chunks.size(); ++i) {
        reads.push_back(
            ChunkRead{&file, &chunks[i], Where(file, chunks[i], i, what), 0, /*verify=*/true, {}});
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
  std::string Where(const std::string& file, const ChunkRecord& rec, size_t chunk,
                    const std::string& what) const {
    std::string path = rec.ref.empty() ? dir_ + "/" + file : RootOf(dir_) + "/" + rec.ref;
    return path + " chunk " + std::to_string(chunk) + " (" + what + ") at offset " +
           std::to_string(rec.file_offset);
  }

  // The checkpoint root a step directory lies in ("." for a bare name).
  static std::string RootOf(const std::string& dir) {
    size_t slash = dir.find_last_of('/');
    return slash == std::string::npos ? "." : slash == 0 ? "" : dir.substr(0, slash);
  }

  // The chunks stored in the entry's own file (not referenced elsewhere).
  static void AppendOwn(const std::vector<ChunkRecord>& chunks, std::vector<ChunkRecord>* out) {
    for (const auto& c : chunks) {
      if (c.ref.empty()) out->push_back(c);
    }
  }

  std::vector<ChunkRecord> ChunksOf(const std::string& file) const {
    std::vector<ChunkRecord> out;
    for (const auto& t : m_.tensors) {
      for (const auto& s : t.shards) {
        if (s.file == file) AppendOwn(s.chunks, &out);
      }
    }
    for (const auto& b : m_.blobs) {
      if (b.file == file) AppendOwn(b.chunks, &out);
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

  // Adds the chunks of an entry (a shard or a blob) that `copy` takes bytes
  // from, and only those: a chunk none of whose bytes a run needs is not read.
  // A chunk already in the plan (another destination needs it too) gets one
  // more piece instead of a second read.
  void AddCopy(const std::string& file, const std::vector<ChunkRecord>& chunks,
               const std::string& what, const BoxCopy& copy, ReadPlan* plan) const {
    if (copy.runs == 0 || copy.run_bytes == 0) return;
    const uint64_t lo = copy.SrcOffset(0);
    const uint64_t hi = copy.SrcOffset(copy.runs - 1) + copy.run_bytes;
    // Runs start at increasing offsets and do not overlap, so the runs that
    // meet a chunk's bytes [c0, c1) are one range, found by binary search:
    // the first run for which `past` holds, `past` false then true over runs.
    auto first_run = [&](auto past) {
      uint64_t a = 0, b = copy.runs;
      while (a < b) {
        uint64_t mid = a + (b - a) / 2;
        if (past(copy.SrcOffset(mid))) {
          b = mid;
        } else {
          a = mid + 1;
        }
      }
      return a;
    };
    uint64_t c0 = 0;
    for (size_t i = 0; i < chunks.size(); c0 += chunks[i].raw_len, ++i) {
      const uint64_t c1 = c0 + chunks[i].raw_len;
      if (c1 <= lo || c0 >= hi) continue;
      const uint64_t first = first_run([&](uint64_t start) { return start + copy.run_bytes > c0; });
      const uint64_t end = first_run([&](uint64_t start) { return start >= c1; });
      if (first >= end) continue;  // the chunk lies between two runs
      auto [it, fresh] = plan->index.emplace(&chunks[i], plan->reads.size());
      if (fresh)
        plan->reads.push_back(
            ChunkRead{&file, &chunks[i], Where(file, chunks[i], i, what), c0, false, {}});
      plan->reads[it->second].pieces.push_back(Piece{&copy, first, end});
    }
  }

  // The copy of box `part` of a stored shard (box `src`) into a destination
  // buffer holding box `dst`; every box in global coordinates. Dimensions
  // whose full extent both sides hold merge into the run, so a part made of
  // whole rows is one run.
  static BoxCopy MakeBoxCopy(const Box& src, const Box& dst, const Box& part, uint64_t elem,
                             char* dst_data) {
    const size_t rank = part.extents.size();
    std::vector<uint64_t> src_stride(rank), dst_stride(rank);  // bytes
    uint64_t ss = elem, ds = elem;
    for (size_t k = rank; k-- > 0;) {
      src_stride[k] = ss;
      dst_stride[k] = ds;
      ss *= uint64_t(src.extents[k]);
      ds *= uint64_t(dst.extents[k]);
    }
    BoxCopy copy;
    uint64_t dst_off = 0;
    for (size_t k = 0; k < rank; ++k) {
      copy.src_base += uint64_t(part.offsets[k] - src.offsets[k]) * src_stride[k];
      dst_off += uint64_t(part.offsets[k] - dst.offsets[k]) * dst_stride[k];
    }
    copy.dst_base = dst_data + dst_off;
    size_t outer = rank;  // dims [outer, rank) form one contiguous run
    copy.run_bytes = elem;
    while (outer > 0) {
      --outer;
      copy.run_bytes *= uint64_t(part.extents[outer]);
      if (part.extents[outer] != src.extents[outer] || part.extents[outer] != dst.extents[outer])
        break;
    }
    copy.runs = 1;
    for (size_t k = 0; k < outer; ++k) {
      copy.counts.push_back(uint64_t(part.extents[k]));
      copy.src_stride.push_back(src_stride[k]);
      copy.dst_stride.push_back(dst_stride[k]);
      copy.runs *= uint64_t(part.extents[k]);
    }
    return copy;
  }

  Status PlanTensor(const TensorDest& d, ReadPlan* plan) const {
    auto found = tensors_.find(d.name);
    const TensorRecord* t = found == tensors_.end() ? nullptr : found->second;
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
    Box want{d.offsets.empty() ? std::vector<int64_t>(rank, 0) : d.offsets,
             d.extents.empty() ? t->global_shape : d.extents};
    if (want.offsets.size() != rank || want.extents.size() != rank) {
      return Status::InvalidArgument(ctx + ": destination offsets/extents need " +
                                     std::to_string(rank) + " entries");
    }
    for (size_t k = 0; k < rank; ++k) {
      if (want.offsets[k] < 0 || want.extents[k] < 0 || want.offsets[k] > t->global_shape[k] ||
          want.extents[k] > t->global_shape[k] - want.offsets[k]) {
        return Status::InvalidArgument(ctx + ": destination region " + BoxString(want) +
                                       " lies outside the shape " + ShapeString(t->global_shape) +
                                       " in dim " + std::to_string(k));
      }
    }
    const uint64_t volume = BoxVolume(want);
    if (volume > 0 && d.data == nullptr)
      return Status::InvalidArgument(ctx + ": destination is null");
    char* dst = static_cast<char*>(d.data);
    const uint64_t elem = DTypeSize(t->dtype);
    auto what = [&](size_t k) { return "tensor " + t->name + " shard " + std::to_string(k); };

    // A stored shard equal to the region: copy it whole.
    for (size_t k = 0; k < t->shards.size(); ++k) {
      if (t->shards[k].offsets == want.offsets && t->shards[k].extents == want.extents) {
        BoxCopy& whole = plan->copies.emplace_back();
        whole.run_bytes = volume * elem;
        whole.runs = 1;
        whole.dst_base = dst;
        AddCopy(t->shards[k].file, t->shards[k].chunks, what(k), whole, plan);
        return Status::OK();
      }
    }
    // Any other region: its intersection with each stored shard. The manifest
    // holds no overlaps, so the parts cover the region iff their volumes add up.
    std::vector<Box> stored;
    uint64_t covered = 0;
    for (size_t k = 0; k < t->shards.size(); ++k) {
      const ShardRecord& s = t->shards[k];
      stored.push_back(ShardBox(s));
      Box part = Intersect(want, stored.back());
      uint64_t n = BoxVolume(part);
      if (n == 0) continue;
      covered += n;
      plan->copies.push_back(MakeBoxCopy(stored.back(), want, part, elem, dst));
      AddCopy(s.file, s.chunks, what(k), plan->copies.back(), plan);
    }
    if (covered < volume) {
      std::optional<Box> gap = FindUncovered(want, stored);
      return Status::NotFound(dir_ + ": region " + BoxString(gap ? *gap : want) + " of tensor '" +
                              d.name + "' is not covered by the stored shards (destination " +
                              BoxString(want) + ")");
    }
    return Status::OK();
  }

  // A bounce slot (see Execute).
  struct Slot {
    MappedBuffer buf;
    bool busy = false;  // guarded by Execute's mutex
  };

  // A raw chunk that lies whole in one contiguous stretch of its
  // destination: read straight into it, and verified there. From a file
  // opened with O_DIRECT the stretch must also be page-aligned and whole
  // pages; a buffered file (direct_io = false, or a file system that refused
  // O_DIRECT) reads into any stretch. Null otherwise (the chunk goes through
  // a bounce slot). The read is stored_len bytes; the manifest decoder
  // refused stored != raw already, checked again here because it decides
  // what is written to.
  static char* DirectTarget(const ChunkRead& r, const RandomAccessFile& file) {
    const ChunkRecord& c = *r.rec;
    const bool any = !file.direct_io();
    if (r.verify || c.codec != Codec::kNone || c.stored_len != c.raw_len || c.stored_len == 0 ||
        (!any && c.stored_len % kChunkAlignment != 0) || r.pieces.size() != 1 ||
        r.pieces[0].end - r.pieces[0].first != 1) {
      return nullptr;
    }
    const Piece& p = r.pieces[0];
    uint64_t src = 0, dst = 0;
    p.copy->Offsets(p.first, &src, &dst);
    if (src > r.begin || r.begin + c.raw_len > src + p.copy->run_bytes) return nullptr;
    char* at = p.copy->dst_base + dst + (r.begin - src);
    return any || reinterpret_cast<uintptr_t>(at) % kChunkAlignment == 0 ? at : nullptr;
  }

  // One read request: a chunk straight into its destination, or chunks that
  // lie one after another in a file, read together into one bounce slot. A
  // state of thousands of small tensors (a LoRA adapter's) is then read in a
  // few large requests instead of one small request per tensor.
  struct Request {
    const RandomAccessFile* file = nullptr;
    uint64_t offset = 0;      // in the file (aligned)
    uint64_t len = 0;         // bytes to read (aligned, except a direct read's)
    char* direct = nullptr;   // the destination of the one chunk read in place
    std::vector<const ChunkRead*> chunks;  // in file order, the first at `offset`
  };

  // The requests for `reads`, in file order: each file is read front to back.
  Result<std::vector<Request>> PlanRequests(const std::vector<ChunkRead>& reads) const {
    std::vector<const ChunkRead*> order;
    order.reserve(reads.size());
    for (const ChunkRead& r : reads) order.push_back(&r);
    auto file_of = [](const ChunkRead* r) -> const std::string& {
      return r->rec->ref.empty() ? *r->file : r->rec->ref;
    };
    std::stable_sort(order.begin(), order.end(), [&](const ChunkRead* a, const ChunkRead* b) {
      int c = file_of(a).compare(file_of(b));
      return c != 0 ? c < 0 : a->rec->file_offset < b->rec->file_offset;
    });
    std::vector<Request> out;
    const std::string* name = nullptr;
    const RandomAccessFile* file = nullptr;
    for (const ChunkRead* r : order) {
      if (name == nullptr || *name != file_of(r)) {
        auto it = files_.find(file_of(r));
        if (it == files_.end()) return Status::Internal(r->where + ": file not open");
        name = &file_of(r);
        file = it->second.get();
      }
      if (char* direct = DirectTarget(*r, *file)) {
        out.push_back(Request{file, r->rec->file_offset, r->rec->stored_len, direct, {r}});
        continue;
      }
      const uint64_t len = AlignUp(r->rec->stored_len == 0 ? 1 : r->rec->stored_len);
      if (!out.empty()) {
        Request& prev = out.back();
        if (prev.direct == nullptr && prev.file == file &&
            prev.offset + prev.len == r->rec->file_offset && prev.len + len <= kMergeBytes) {
          prev.len += len;
          prev.chunks.push_back(r);
          continue;
        }
      }
      out.push_back(Request{file, r->rec->file_offset, len, nullptr, {r}});
    }
    return out;
  }

  // Reads every request, at most the engine's queue depth (bounded in bytes
  // at Open) in flight; the decode pool verifies and decodes each request's
  // chunks as it arrives, so checksums and copies overlap the reads. Bounce
  // slots are made as the reads need them (a load whose chunks all go
  // straight into place makes none) and kept for the reader's life.
  Status Execute(const std::vector<ChunkRead>& reads) const {
    STINT_ASSIGN_OR_RETURN(std::vector<Request> requests, PlanRequests(reads));
    std::mutex mu;
    std::condition_variable slot_freed;
    Status first;
    auto fail = [&](const Status& s) {
      std::lock_guard<std::mutex> l(mu);
      if (first.ok()) first = s;
    };
    uint64_t largest = kChunkAlignment;
    for (const Request& q : requests) {
      if (q.direct == nullptr) largest = std::max(largest, q.len);
    }
    if (largest > slot_bytes_) {
      for (auto& slot : slots_) engine_->UnregisterBuffer(slot->buf.data());
      slots_.clear();
      slot_bytes_ = largest;
    }
    // More slots than requests in flight: a full set of busy slots then
    // always includes some being decoded, which free themselves, so waiting
    // for one cannot deadlock on completions only Submit/Drain would reap.
    const size_t max_slots = depth_ + 2 * decode_pool_.size() + 1;
    size_t decoding = 0;  // guarded by mu
    auto done_decoding = [&](Slot* slot) {
      std::lock_guard<std::mutex> l(mu);
      if (slot != nullptr) slot->busy = false;
      --decoding;
      slot_freed.notify_all();
    };
    // On completion: verify (and decode) on the pool, then free the slot.
    auto on_read = [&](const Request* q, Slot* slot) {
      return [&, q, slot](const Status& io, size_t bytes) {
        {
          std::lock_guard<std::mutex> l(mu);
          ++decoding;
        }
        if (!io.ok()) {
          fail(io);
          done_decoding(slot);
          return;
        }
        decode_pool_.Schedule([&, q, slot, bytes] {
          Status d = DecodeRequest(*q, slot != nullptr ? slot->buf.data() : q->direct, bytes);
          if (!d.ok()) fail(d);
          done_decoding(slot);
        });
      };
    };
    for (const Request& q : requests) {
      {
        std::lock_guard<std::mutex> l(mu);
        if (!first.ok()) break;
      }
      if (q.direct != nullptr) {
        Status s = engine_->SubmitRead(q.file, q.direct, q.len, q.offset, on_read(&q, nullptr));
        if (!s.ok()) fail(s);
        continue;
      }
      Slot* slot = nullptr;
      {
        std::unique_lock<std::mutex> l(mu);
        for (;;) {
          for (auto& s : slots_) {
            if (!s->busy) {
              slot = s.get();
              break;
            }
          }
          if (slot != nullptr || slots_.size() < max_slots) break;
          slot_freed.wait(l);
        }
        if (slot != nullptr) slot->busy = true;
      }
      if (slot == nullptr) {
        // One more slot, faulted in at once and registered with the engine
        // (no page fault per read), made while the reads submitted already
        // are in flight. Only this thread changes slots_; the pool reaches
        // a slot through its request's pointer.
        Result<MappedBuffer> buf = MappedBuffer::Map(slot_bytes_, /*populate=*/true);
        if (!buf.ok()) {
          fail(buf.status());
          break;
        }
        engine_->RegisterBuffer(buf->data(), buf->size());
        auto made = std::make_unique<Slot>(Slot{std::move(*buf), true});
        slot = made.get();
        std::lock_guard<std::mutex> l(mu);
        slots_.push_back(std::move(made));
      }
      Status s = engine_->SubmitRead(q.file, slot->buf.data(), q.len, q.offset, on_read(&q, slot));
      if (!s.ok()) {
        fail(s);
        std::lock_guard<std::mutex> l(mu);
        slot->busy = false;
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

  // The chunks of a request that read `bytes` into `data` (its slot, or the
  // one chunk's destination): each verified, and decoded where it goes. A
  // chunk the file ends inside of is data loss, named by its own `where`.
  static Status DecodeRequest(const Request& q, const char* data, size_t bytes) {
    for (const ChunkRead* r : q.chunks) {
      const uint64_t at = r->rec->file_offset - q.offset;
      if (bytes < at + r->rec->stored_len) {
        return Status::DataLoss(r->where + ": file ends after " +
                                std::to_string(bytes > at ? bytes - at : 0) + " of the chunk's " +
                                std::to_string(r->rec->stored_len) + " bytes");
      }
      STINT_RETURN_IF_ERROR(q.direct != nullptr ? CheckInPlace(*r, data + at)
                                                : DecodeInto(*r, data + at));
    }
    return Status::OK();
  }

  // A chunk read straight into its destination: its checksum, there.
  static Status CheckInPlace(const ChunkRead& r, const char* data) {
    uint64_t h = Xxh3(data, r.rec->stored_len);
    if (h != r.rec->xxh3) {
      return Status::DataLoss(r.where + ": checksum mismatch (stored " + HashToHex(r.rec->xxh3) +
                              ", computed " + HashToHex(h) + ")");
    }
    return Status::OK();
  }

  // A raw chunk copied from its slot into its destination, hashed as it is
  // copied (one pass over the slot). The destination holds the bytes before
  // they are verified, as after a read in place; a mismatch fails the load.
  static Status CopyInto(const ChunkRead& r, const char* stored, char* into) {
    uint64_t h = Xxh3Copy(into, stored, r.rec->raw_len);
    if (h != r.rec->xxh3) {
      return Status::DataLoss(r.where + ": checksum mismatch (stored " + HashToHex(r.rec->xxh3) +
                              ", computed " + HashToHex(h) + ")");
    }
    return Status::OK();
  }

  static Status DecodeInto(const ChunkRead& r, const char* stored) {
    const ChunkRecord& c = *r.rec;
    if (r.verify) return CheckInPlace(r, stored);
    // The whole chunk inside one run: decode straight into the destination.
    if (r.pieces.size() == 1 && r.pieces[0].end - r.pieces[0].first == 1) {
      const Piece& p = r.pieces[0];
      uint64_t src = 0, dst = 0;
      p.copy->Offsets(p.first, &src, &dst);
      if (src <= r.begin && r.begin + c.raw_len <= src + p.copy->run_bytes) {
        char* into = p.copy->dst_base + dst + (r.begin - src);
        if (c.codec == Codec::kNone && c.stored_len == c.raw_len) return CopyInto(r, stored, into);
        return DecodeChunk(c, stored, into, r.where);
      }
    }
    // Pieces of the chunk: raw bytes scatter from the slot once verified;
    // a zstd frame is decoded to scratch first (mapped, so a length too
    // large fails here as a Status instead of throwing on a pool thread).
    std::optional<MappedBuffer> scratch;
    const char* raw = stored;
    if (c.codec == Codec::kNone) {
      STINT_RETURN_IF_ERROR(CheckInPlace(r, stored));
    } else {
      char nothing = 0;  // an empty frame is still checked
      char* into = &nothing;
      if (c.raw_len > 0) {
        auto mapped = MappedBuffer::Map(c.raw_len);
        if (!mapped.ok()) return mapped.status().WithContext(r.where);
        scratch.emplace(std::move(*mapped));
        into = scratch->data();
      }
      STINT_RETURN_IF_ERROR(DecodeChunk(c, stored, into, r.where));
      raw = into;
    }
    for (const Piece& p : r.pieces) p.copy->Scatter(p.first, p.end, r.begin, c.raw_len, raw);
    return Status::OK();
  }

  const std::string dir_;
  const Manifest m_;
  std::unordered_map<std::string_view, const TensorRecord*> tensors_;  // m_'s, by name
  Env* const env_;
  // Declared before engine_: unmapped only after the engine that may hold
  // them registered is gone.
  mutable std::vector<std::unique_ptr<Slot>> slots_;  // only Execute's thread changes it
  mutable uint64_t slot_bytes_ = 0;
  std::unique_ptr<IoEngine> engine_;
  const size_t depth_;  // requests in flight (the engine's queue depth)
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
  // A step-* directory holds that step's checkpoint: one renamed or copied
  // over another step's name would load as the wrong step (and retention,
  // going by names, would then delete the real one).
  std::string base = dir.substr(0, dir.find_last_not_of('/') + 1);
  base = base.substr(base.find_last_of('/') + 1);
  if (std::optional<uint64_t> named = ParseStepDirName(base); named && *named != m.step) {
    return Status::DataLoss(manifest_path + ": says step " + std::to_string(m.step) +
                            ", but its directory is " + base);
  }
  STINT_ASSIGN_OR_RETURN(IoEngineKind kind, ParseIoEngineKind(options.io_engine));
  IoEngineOptions io;
  io.kind = kind;
  // Read-ahead bounded in bytes as well as requests: a deep queue of large
  // reads gains nothing over ~32 MiB in flight on the disks measured (and
  // was slower on a virtual one), and each needs a bounce slot.
  const uint64_t chunk = std::max<uint64_t>(AlignUp(m.chunk_size), kChunkAlignment);
  io.queue_depth = unsigned(std::clamp<uint64_t>(kReadAheadBytes / chunk, 2,
                                                 std::max(2u, options.queue_depth)));
  STINT_ASSIGN_OR_RETURN(auto engine, NewIoEngine(io));
  auto reader = std::make_unique<CheckpointReaderImpl>(dir, std::move(m), env, std::move(engine),
                                                       io.queue_depth, options);
  STINT_RETURN_IF_ERROR(reader->OpenFiles());
  return std::unique_ptr<CheckpointReader>(std::move(reader));
}

}  // namespace stint
