// ResumableSampler: which samples each rank and worker trains on, as a pure
// function of one global cursor, so a run can stop anywhere and resume on
// any number of ranks with every sample consumed exactly once.
//
// The order of epoch e is a stateless permutation of [0, dataset_size)
// (IndexPermutation: a keyed Feistel network with cycle-walking, O(1)
// memory, O(1) seek), keyed by (seed, epoch). Step s of an epoch covers
// global positions [s*G, s*G + G) of that order (G = global batch); rank r
// of W takes the r-th contiguous slice, and a rank's workers split its slice
// the same way. The epoch tail is cut globally: with drop_last the last
// partial batch is skipped for everyone; without, it is split as evenly as
// possible across ranks (some may get one fewer, or none).
//
// The cursor (epoch, consumed) moves only in CommitStep(), which the
// training loop calls after the optimizer step: prefetched batches never
// count as consumed.
//
// Thread-compatible.
#ifndef STINT_INCLUDE_STINT_RESUMABLE_SAMPLER_H_
#define STINT_INCLUDE_STINT_RESUMABLE_SAMPLER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stint/status.h"

namespace stint {

// A bijection on [0, n), a pure function of (n, key). Version 1 of the
// algorithm; a change of algorithm must bump kVersion (it is part of the
// data fingerprint, so old checkpoints refuse to resume on a new order).
class IndexPermutation {
 public:
  static constexpr uint32_t kVersion = 1;
  IndexPermutation(uint64_t n, uint64_t key);
  uint64_t n() const { return n_; }
  // REQUIRES: pos < n().
  uint64_t operator()(uint64_t pos) const;

 private:
  uint64_t Encrypt(uint64_t x) const;

  static constexpr int kRounds = 8;
  uint64_t n_;
  unsigned half_bits_;  // the Feistel block is 2 * half_bits_ wide
  uint64_t half_mask_;
  uint64_t round_keys_[kRounds];
};

struct SamplerConfig {
  uint64_t dataset_size = 0;  // REQUIRES: > 0
  uint64_t seed = 0;
  uint64_t global_batch = 1;  // samples per step over all ranks; REQUIRES: > 0
  bool shuffle = true;        // false: identity order (still resumable)
  bool drop_last = false;     // skip the last partial global batch of each epoch
};

struct DataCursor {
  uint64_t epoch = 0;
  uint64_t consumed = 0;  // samples of `epoch` committed, a prefix of its order
  bool operator==(const DataCursor& o) const { return epoch == o.epoch && consumed == o.consumed; }
};

class ResumableSampler {
 public:
  // kInvalidArgument for an empty dataset, a zero batch, or drop_last with
  // a dataset smaller than one global batch.
  static Result<ResumableSampler> Create(const SamplerConfig& config);

  const SamplerConfig& config() const { return config_; }
  DataCursor cursor() const { return cursor_; }
  // Samples per epoch that are trained on (dataset_size, or less with drop_last).
  uint64_t epoch_length() const { return epoch_length_; }
  uint64_t steps_per_epoch() const;

  // Dataset index at `pos` of epoch `epoch`'s order.
  uint64_t GlobalIndex(uint64_t epoch, uint64_t pos) const;
  // Size of the global batch at the cursor (G, or the tail).
  uint64_t NextBatchSize() const;
  // Dataset indices rank `rank` of `world` trains on at the cursor.
  // kInvalidArgument unless 0 <= rank < world and global_batch % world == 0.
  Result<std::vector<uint64_t>> RankIndices(int rank, int world) const;
  // The part of RankIndices that DataLoader worker `worker` of `num_workers` loads.
  Result<std::vector<uint64_t>> WorkerIndices(int rank, int world, int worker,
                                              int num_workers) const;

  // Steps are also numbered globally across epochs: step s is the
  // (s % steps_per_epoch())-th batch of epoch s / steps_per_epoch(). A data
  // loader that prefetches asks for steps ahead of the committed cursor.
  uint64_t committed_steps() const;  // global number of the step at the cursor
  DataCursor CursorAtStep(uint64_t global_step) const;
  Result<std::vector<uint64_t>> RankIndicesAtStep(uint64_t global_step, int rank, int world) const;

  // Marks the batch at the cursor as trained on: call after the optimizer step.
  void CommitStep();

  // Versioned JSON: {"version":1,"cursor":{...},"fingerprint":{...}}.
  std::string SaveState() const;
  // Restores the cursor. kFailedPrecondition naming the field when the saved
  // data configuration differs from this sampler's; kDataLoss for bad JSON.
  Status LoadState(std::string_view state);
  // "size=1000 seed=7 global_batch=32 shuffle=1 drop_last=0 order=feistel-v1".
  std::string Fingerprint() const;

 private:
  explicit ResumableSampler(const SamplerConfig& config);
  // Indices of worker `worker` of rank `rank` for the batch at `at`.
  Result<std::vector<uint64_t>> Indices(const DataCursor& at, int rank, int world, int worker,
                                        int num_workers) const;
  uint64_t BatchSizeAt(const DataCursor& at) const;
  uint64_t EpochKey(uint64_t epoch) const;  // the permutation key of an epoch
  // The [begin, end) of the global batch at the cursor assigned to `part` of `parts`.
  static void Split(uint64_t begin, uint64_t count, uint64_t part, uint64_t parts, uint64_t* b,
                    uint64_t* n);

  SamplerConfig config_;
  uint64_t epoch_length_;
  DataCursor cursor_;
};

}  // namespace stint

#endif  // STINT_INCLUDE_STINT_RESUMABLE_SAMPLER_H_
