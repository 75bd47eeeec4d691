#include "checkpoint/snapshot.h"

#include <cstring>
#include <map>

#include "base/strings.h"
#include "format/chunk.h"
#include "format/manifest.h"
#include "format/shard_layout.h"

namespace stint {
namespace {

Status CheckShard(const TensorShard& t, std::vector<int64_t>* offsets,
                  std::vector<int64_t>* extents) {
  std::string ctx = "tensor '" + t.name + "'";
  if (DTypeSize(t.dtype) == 0) return Status::InvalidArgument(ctx + ": unknown dtype");
  size_t rank = t.global_shape.size();
  *offsets = t.offsets.empty() ? std::vector<int64_t>(rank, 0) : t.offsets;
  *extents = t.extents.empty() ? t.global_shape : t.extents;
  if (offsets->size() != rank || extents->size() != rank) {
    return Status::InvalidArgument(ctx + ": offsets/extents must have one entry per dimension (" +
                                   std::to_string(rank) + ")");
  }
  for (size_t d = 0; d < rank; ++d) {
    if (t.global_shape[d] < 0 || (*offsets)[d] < 0 || (*extents)[d] < 0 ||
        (*offsets)[d] + (*extents)[d] > t.global_shape[d]) {
      return Status::InvalidArgument(ctx + ": shard lies outside the global shape in dim " +
                                     std::to_string(d));
    }
  }
  if (NumElements(*extents) > 0 && t.data == nullptr) {
    return Status::InvalidArgument(ctx + ": data is null");
  }
  return Status::OK();
}

// The manifest stores names as JSON strings.
Status CheckName(const char* what, const std::string& name) {
  if (IsValidUtf8(name)) return Status::OK();
  return Status::InvalidArgument(std::string(what) + " name '" + name + "' is not valid UTF-8");
}

void AddChunks(SnapshotEntry* e, uint64_t chunk_size, uint64_t* cursor) {
  for (uint64_t len : SplitIntoChunks(e->raw_bytes, chunk_size)) {
    e->chunk_offset.push_back(*cursor);
    e->chunk_len.push_back(len);
    *cursor += AlignUp(len == 0 ? 1 : len);  // an empty chunk still owns a (zero) block
  }
}

// The base's chunks of a frozen shard, if it holds the shard chunked as this
// save would chunk it.
std::vector<ChunkRecord> ReusableChunks(const SnapshotEntry& e, uint64_t chunk_size,
                                        const IncrementalBase& base) {
  const std::vector<ChunkRecord>* chunks =
      base.FindShard(e.name, e.dtype, e.global_shape, e.offsets, e.extents);
  if (chunks == nullptr) return {};
  std::vector<uint64_t> lens = SplitIntoChunks(e.raw_bytes, chunk_size);
  if (lens.size() != chunks->size()) return {};
  for (size_t c = 0; c < lens.size(); ++c) {
    if ((*chunks)[c].raw_len != lens[c]) return {};
  }
  return *chunks;
}

}  // namespace

Result<SnapshotLayout> PlanSnapshot(const State& state, uint64_t chunk_size,
                                    const IncrementalBase* base) {
  if (chunk_size == 0 || chunk_size % kChunkAlignment != 0) {
    return Status::InvalidArgument("chunk_size must be a positive multiple of 4096, got " +
                                   std::to_string(chunk_size));
  }
  SnapshotLayout layout;
  // Several shards of one tensor may be saved together; they must agree.
  std::map<std::string, const TensorShard*> first_shard;
  uint64_t cursor = 0;
  for (const auto& t : state.tensors) {
    if (t.name.empty()) return Status::InvalidArgument("a tensor has an empty name");
    STINT_RETURN_IF_ERROR(CheckName("tensor", t.name));
    SnapshotEntry e;
    e.name = t.name;
    e.dtype = t.dtype;
    e.global_shape = t.global_shape;
    STINT_RETURN_IF_ERROR(CheckShard(t, &e.offsets, &e.extents));
    e.raw_bytes = uint64_t(NumElements(e.extents)) * DTypeSize(t.dtype);
    if (t.frozen && base != nullptr) e.reused = ReusableChunks(e, chunk_size, *base);
    if (e.reused.empty()) AddChunks(&e, chunk_size, &cursor);
    layout.raw_bytes += e.raw_bytes;
    auto [it, fresh] = first_shard.emplace(t.name, &t);
    if (!fresh && (it->second->dtype != t.dtype || it->second->global_shape != t.global_shape)) {
      return Status::InvalidArgument("tensor '" + t.name +
                                     "': shards disagree on dtype or global shape");
    }
    layout.entries.push_back(std::move(e));
  }
  for (const auto& [name, bytes] : state.blobs) {
    if (name.empty()) return Status::InvalidArgument("a blob has an empty name");
    STINT_RETURN_IF_ERROR(CheckName("blob", name));
    SnapshotEntry e;
    e.name = name;
    e.is_blob = true;
    e.raw_bytes = bytes.size();
    AddChunks(&e, chunk_size, &cursor);
    layout.raw_bytes += e.raw_bytes;
    layout.entries.push_back(std::move(e));
  }
  layout.image_bytes = cursor;
  return layout;
}

Status CheckSnapshotLayout(const SnapshotLayout& layout, bool require_cover) {
  std::map<std::string, TensorRecord> tensors;
  for (const SnapshotEntry& e : layout.entries) {
    if (e.is_blob) continue;
    TensorRecord& t = tensors[e.name];
    t.name = e.name;
    t.dtype = e.dtype;
    t.global_shape = e.global_shape;
    t.shards.push_back(ShardRecord{e.offsets, e.extents, "this state", {}});
  }
  for (const auto& [name, t] : tensors) {
    std::string problem = FindShardLayoutProblem(t, require_cover);
    if (!problem.empty()) return Status::InvalidArgument("save: " + problem);
  }
  return Status::OK();
}

StagingCopies PlanStagingCopies(const State& state, const SnapshotLayout& layout, char* buffer,
                                bool lazy_host, const SourceHashing* hashing) {
  StagingCopies out;
  if (hashing != nullptr) {
    size_t chunks = 0;
    for (const auto& e : layout.entries) chunks += e.chunk_len.size();
    out.unchanged = std::make_shared<std::vector<uint8_t>>(chunks, 0);
  }
  size_t tensor_index = 0;
  size_t chunk_index = 0;  // among staged chunks: the persist's chunk order
  auto blob = state.blobs.begin();
  for (const auto& e : layout.entries) {
    const char* src;
    bool on_device = false;
    const std::vector<ChunkRecord>* base_chunks = nullptr;
    std::vector<StagingPiece>* pieces = &out.now;
    if (e.is_blob) {
      src = (blob++)->second.data();
    } else {
      const TensorShard& t = state.tensors[tensor_index++];
      if (!e.reused.empty()) continue;  // referenced from the base, not copied
      const int when = static_cast<int>(t.written_at);
      src = static_cast<const char*>(t.data);
      on_device = t.device != kHostDevice;
      if (on_device && e.raw_bytes > 0) {
        // Every chunk but the last is a whole multiple of 4 KiB, so the
        // tensor's chunks are back to back: one copy fills them all.
        out.device[when].push_back(
            DeviceCopy{t.device, t.stream, buffer + e.chunk_offset[0], src, size_t(e.raw_bytes)});
      }
      if (!on_device && lazy_host) pieces = &out.later[when];
      if (!on_device && hashing != nullptr && e.raw_bytes > 0 &&
          hashing->unchanged->count(ShardKey(e.name, e.offsets, e.extents)) != 0) {
        base_chunks =
            hashing->base->FindShard(e.name, e.dtype, e.global_shape, e.offsets, e.extents);
      }
    }
    uint64_t done = 0;
    for (size_t c = 0; c < e.chunk_len.size(); ++c, ++chunk_index) {
      uint64_t len = e.chunk_len[c];
      // Device bytes arrive by DMA; only the padding is written here.
      StagingPiece piece =
          on_device
              ? StagingPiece{nullptr, e.chunk_offset[c] + len, 0, AlignUp(len == 0 ? 1 : len) - len}
              : StagingPiece{src + done, e.chunk_offset[c], len, AlignUp(len == 0 ? 1 : len)};
      // The base chunks the same bytes of the shard, if it chunks them alike.
      if (base_chunks != nullptr && c < base_chunks->size() && (*base_chunks)[c].raw_len == len) {
        piece.base_hash = &*(*base_chunks)[c].raw_hash;
        piece.unchanged = &(*out.unchanged)[chunk_index];
      }
      pieces->push_back(piece);
      done += len;
    }
  }
  return out;
}

void RunStagingCopies(const std::vector<StagingPiece>& pieces, char* buffer, ThreadPool* pool,
                      StagingWatermark* filled) {
  // A batch is large enough to keep every thread busy and small enough that
  // the writer does not wait long for its first bytes.
  constexpr uint64_t kBatchBytes = 16u << 20;
  for (size_t begin = 0; begin < pieces.size();) {
    size_t end = begin;
    uint64_t bytes = 0;
    while (end < pieces.size() && (bytes < kBatchBytes || filled == nullptr)) {
      bytes += pieces[end++].padded;
    }
    pool->ParallelFor(end - begin, [&](size_t k) {
      const StagingPiece& p = pieces[begin + k];
      if (p.base_hash != nullptr && Xxh128(p.src, p.len) == *p.base_hash) {
        *p.unchanged = 1;  // the persist references the base's chunk, never reads it here
        return;
      }
      if (p.len > 0) std::memcpy(buffer + p.dst, p.src, p.len);
      std::memset(buffer + p.dst + p.len, 0, p.padded - p.len);
    });
    if (filled != nullptr) filled->Advance(pieces[end - 1].dst + pieces[end - 1].padded);
    begin = end;
  }
}

}  // namespace stint
