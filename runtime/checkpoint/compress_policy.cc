#include "checkpoint/compress_policy.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "format/chunk.h"

namespace stint {
namespace {

constexpr uint64_t kSampleBytes = 16u << 20;  // of the first chunks

std::string Rate(double bps) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f MiB/s", bps / (1 << 20));
  return buf;
}

}  // namespace

CompressChoice CompressPolicy::Decide(const Snapshot& snapshot, ThreadPool* pool) {
  if (!write_bps_) return {false, "raw: the write rate is not measured yet (first save)"};
  if (compressed_in_a_row_ >= kRemeasureEvery) {
    return {false, "raw: measuring the write rate again after " +
                       std::to_string(compressed_in_a_row_) + " compressed saves"};
  }
  // The first chunks, at most kSampleBytes, at least one per pool thread.
  std::vector<std::pair<const char*, uint64_t>> sample;
  uint64_t sampled = 0;
  const char* image = snapshot.buffer->data();
  for (const SnapshotEntry& e : snapshot.layout.entries) {
    for (size_t c = 0; c < e.chunk_len.size() && sampled < kSampleBytes; ++c) {
      if (e.chunk_len[c] == 0) continue;
      sample.emplace_back(image + e.chunk_offset[c], e.chunk_len[c]);
      sampled += e.chunk_len[c];
    }
  }
  if (sampled == 0) return {false, "raw: nothing to compress"};
  std::vector<uint64_t> stored(sample.size(), 0);
  std::vector<Status> errors(sample.size());
  auto t0 = std::chrono::steady_clock::now();
  pool->ParallelFor(sample.size(), [&](size_t i) {
    std::string out(ZstdBound(sample[i].second), '\0');
    auto n = ZstdCompress(sample[i].first, sample[i].second, out.data(), out.size(), level_);
    if (!n.ok()) errors[i] = n.status();
    stored[i] = n.ok() ? std::min<uint64_t>(*n, sample[i].second) : sample[i].second;
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const Status& s : errors) {
    if (!s.ok()) return {false, "raw: zstd failed on the sample: " + s.ToString()};
  }
  uint64_t stored_total = 0;
  for (uint64_t s : stored) stored_total += s;
  const double ratio = double(sampled) / double(std::max<uint64_t>(stored_total, 1));
  const double zstd_bps = double(sampled) / std::max(seconds, 1e-9);
  const double compressed_bps = std::min(zstd_bps, *write_bps_ * ratio);
  char figures[160];
  std::snprintf(figures, sizeof(figures), "zstd %s at ratio %.2f -> %s logical vs raw write %s",
                Rate(zstd_bps).c_str(), ratio, Rate(compressed_bps).c_str(),
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
