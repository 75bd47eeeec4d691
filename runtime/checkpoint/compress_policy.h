// CompressPolicy: CheckpointOptions::compress_auto. zstd pays only where it
// writes more logical bytes per second than the engine writes raw: on a
// slow or shared target (tier 2 over a network, a throttled disk) a 2x ratio
// doubles the rate; on a fast local NVMe the compressor is the bottleneck and
// makes saves several times slower. So each save compresses a sample of its
// first chunks on the pool's threads (the rate it would reach, all threads
// busy, and the ratio; sampled again every kResampleEvery saves), compares
// min(zstd rate, write rate x ratio) with the write rate measured on this
// Checkpointer's raw saves, and compresses only when that is clearly
// higher. Until a raw save has measured the disk, and every kRemeasureEvery
// compressed saves, a save is written raw.
//
// Used by the persist thread only.
#ifndef STINT_RUNTIME_CHECKPOINT_COMPRESS_POLICY_H_
#define STINT_RUNTIME_CHECKPOINT_COMPRESS_POLICY_H_

#include <cstdint>
#include <optional>
#include <string>

#include "base/thread_pool.h"
#include "checkpoint/snapshot.h"

namespace stint {

struct CompressChoice {
  bool compress = false;
  std::string why;  // the figures it was decided on, for SaveStats and logs
};

class CompressPolicy {
 public:
  static constexpr int kRemeasureEvery = 16;
  static constexpr int kResampleEvery = 8;
  // Compressed logical rate must beat raw by this factor (measurement noise
  // must not make a save slower than raw).
  static constexpr double kMargin = 1.1;

  explicit CompressPolicy(int zstd_level) : level_(zstd_level) {}

  CompressChoice Decide(const Snapshot& snapshot, ThreadPool* pool);
  // After a save: a raw one updates the write-rate estimate.
  void Record(bool compressed, uint64_t stored_bytes, double persist_seconds);

 private:
  struct Estimate {
    double zstd_bps;  // raw bytes/s compressed, every pool thread busy
    double ratio;     // raw / stored
  };
  Result<Estimate> Sample(const Snapshot& snapshot, ThreadPool* pool) const;

  const int level_;
  std::optional<Estimate> estimate_;
  int saves_since_sample_ = 0;
  std::optional<double> write_bps_;  // raw bytes/s of the newest raw save
  int compressed_in_a_row_ = 0;
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_COMPRESS_POLICY_H_
