#include "checkpoint/compress_policy.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "format/chunk.h"

namespace stint {
namespace {

// Slices of the first chunks, compressed to estimate zstd's rate and ratio:
// a few milliseconds, not a measurable part of a save.
constexpr uint64_t kSliceBytes = 1u << 20;
constexpr uint64_t kSampleBytes = 4u << 20;

std::string Rate(double bps) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f MiB/s", bps / (1 << 20));
  return buf;
}

}  // namespace

Result<CompressPolicy::Estimate> CompressPolicy::Sample(const Snapshot& snapshot,
                                                        ThreadPool* pool) const {
  std::vector<std::pair<const char*, uint64_t>> slices;
  uint64_t sampled = 0;
  const char* image = snapshot.buffer->data();
  for (const SnapshotEntry& e : snapshot.layout.entries) {
    for (size_t c = 0; c < e.chunk_len.size() && sampled < kSampleBytes; ++c) {
      const uint64_t n = std::min(e.chunk_len[c], kSliceBytes);
      if (n == 0) continue;
      slices.emplace_back(image + e.chunk_offset[c], n);
      sampled += n;
    }
  }
  if (sampled == 0) return Status::NotFound("nothing to compress");
  std::vector<uint64_t> stored(slices.size(), 0);
  std::vector<Status> errors(slices.size());
  auto t0 = std::chrono::steady_clock::now();
  pool->ParallelFor(slices.size(), [&](size_t i) {
    std::string out(ZstdBound(slices[i].second), '\0');
    auto n = ZstdCompress(slices[i].first, slices[i].second, out.data(), out.size(), level_);
    if (!n.ok()) errors[i] = n.status();
    stored[i] = n.ok() ? std::min<uint64_t>(*n, slices[i].second) : slices[i].second;
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const Status& s : errors) STINT_RETURN_IF_ERROR(s);
  uint64_t stored_total = 0;
  for (uint64_t s : stored) stored_total += s;
  return Estimate{double(sampled) / std::max(seconds, 1e-9),
                  double(sampled) / double(std::max<uint64_t>(stored_total, 1))};
}

CompressChoice CompressPolicy::Decide(const Snapshot& snapshot, ThreadPool* pool) {
  if (!write_bps_) return {false, "raw: the write rate is not measured yet (first save)"};
  if (compressed_in_a_row_ >= kRemeasureEvery) {
    return {false, "raw: measuring the write rate again after " +
                       std::to_string(compressed_in_a_row_) + " compressed saves"};
  }
  if (!estimate_ || saves_since_sample_ >= kResampleEvery) {
    auto sampled = Sample(snapshot, pool);
    if (!sampled.ok()) return {false, "raw: " + sampled.status().ToString()};
    estimate_ = *sampled;
    saves_since_sample_ = 0;
  }
  ++saves_since_sample_;
  const double compressed_bps = std::min(estimate_->zstd_bps, *write_bps_ * estimate_->ratio);
  char figures[160];
  std::snprintf(figures, sizeof(figures), "zstd %s at ratio %.2f -> %s logical vs raw write %s",
                Rate(estimate_->zstd_bps).c_str(), estimate_->ratio, Rate(compressed_bps).c_str(),
                Rate(*write_bps_).c_str());
  const bool compress = compressed_bps > kMargin * *write_bps_;
  return {compress, std::string(compress ? "zstd: " : "raw: ") + figures};
}

void CompressPolicy::Record(bool compressed, uint64_t stored_bytes, double persist_seconds) {
  if (compressed) {
    ++compressed_in_a_row_;
    return;
  }
  compressed_in_a_row_ = 0;
  // Tiny saves say more about fsync latency than about bandwidth: they only
  // give a first estimate.
  if (persist_seconds > 0 && (stored_bytes >= (4u << 20) || !write_bps_)) {
    write_bps_ = double(stored_bytes) / persist_seconds;
  }
}

}  // namespace stint
