#include "stint/resumable_sampler.h"

#include <nlohmann/json.hpp>

namespace stint {
namespace {

// SplitMix64 finaliser: a fast, well-mixed 64-bit hash.
uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Bits needed to write v (0 for 0): std::bit_width, in C++17.
unsigned BitWidth(uint64_t v) {
  unsigned w = 0;
  while (v != 0) {
    ++w;
    v >>= 1;
  }
  return w;
}

constexpr char kOrderName[] = "feistel-v";

}  // namespace

IndexPermutation::IndexPermutation(uint64_t n, uint64_t key) : n_(n) {
  // The block must hold n-1, the largest position: bit_width(n-1), not
  // ceil(log2(n-1)), which loses one bit when n = 2^k + 1 and breaks the bijection.
  unsigned bits = BitWidth(n > 0 ? n - 1 : 0);
  if (bits < 4) bits = 4;
  half_bits_ = (bits + 1) / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  uint64_t k = Mix64(key ^ 0x5354494e54ull);  // "STINT"
  for (int i = 0; i < kRounds; ++i) {
    k = Mix64(k + uint64_t(i));
    round_keys_[i] = k;
  }
}

uint64_t IndexPermutation::Encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (int i = 0; i < kRounds; ++i) {
    uint64_t next = left ^ (Mix64(right ^ round_keys_[i]) & half_mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t IndexPermutation::operator()(uint64_t pos) const {
  // Cycle-walking: the block (< 4n values) is a permutation, so re-encrypting
  // until the value falls inside [0, n) yields a permutation of [0, n).
  uint64_t x = Encrypt(pos);
  while (x >= n_) x = Encrypt(x);
  return x;
}

ResumableSampler::ResumableSampler(const SamplerConfig& config)
    : config_(config),
      epoch_length_(config.drop_last
                        ? config.dataset_size / config.global_batch * config.global_batch
                        : config.dataset_size) {}

Result<ResumableSampler> ResumableSampler::Create(const SamplerConfig& config) {
  if (config.dataset_size == 0) return Status::InvalidArgument("sampler: dataset_size is 0");
  if (config.global_batch == 0) return Status::InvalidArgument("sampler: global_batch is 0");
  if (config.drop_last && config.dataset_size < config.global_batch) {
    return Status::InvalidArgument(
        "sampler: drop_last with dataset_size " + std::to_string(config.dataset_size) +
        " < global_batch " + std::to_string(config.global_batch) + " leaves nothing to train on");
  }
  return ResumableSampler(config);
}

uint64_t ResumableSampler::steps_per_epoch() const {
  return (epoch_length_ + config_.global_batch - 1) / config_.global_batch;
}

uint64_t ResumableSampler::EpochKey(uint64_t epoch) const {
  return Mix64(config_.seed) ^ Mix64(epoch + 1);
}

uint64_t ResumableSampler::GlobalIndex(uint64_t epoch, uint64_t pos) const {
  if (!config_.shuffle) return pos;
  return IndexPermutation(config_.dataset_size, EpochKey(epoch))(pos);
}

uint64_t ResumableSampler::BatchSizeAt(const DataCursor& at) const {
  uint64_t left = epoch_length_ - at.consumed;
  return left < config_.global_batch ? left : config_.global_batch;
}

uint64_t ResumableSampler::NextBatchSize() const { return BatchSizeAt(cursor_); }

uint64_t ResumableSampler::committed_steps() const {
  return cursor_.epoch * steps_per_epoch() + cursor_.consumed / config_.global_batch;
}

DataCursor ResumableSampler::CursorAtStep(uint64_t global_step) const {
  const uint64_t spe = steps_per_epoch();
  return DataCursor{global_step / spe, global_step % spe * config_.global_batch};
}

Result<std::vector<uint64_t>> ResumableSampler::RankIndicesAtStep(uint64_t global_step, int rank,
                                                                  int world) const {
  return Indices(CursorAtStep(global_step), rank, world, 0, 1);
}

void ResumableSampler::Split(uint64_t begin, uint64_t count, uint64_t part, uint64_t parts,
                             uint64_t* b, uint64_t* n) {
  uint64_t base = count / parts, extra = count % parts;
  *b = begin + part * base + (part < extra ? part : extra);
  *n = base + (part < extra ? 1 : 0);
}

Result<std::vector<uint64_t>> ResumableSampler::RankIndices(int rank, int world) const {
  return WorkerIndices(rank, world, 0, 1);
}

Result<std::vector<uint64_t>> ResumableSampler::WorkerIndices(int rank, int world, int worker,
                                                              int num_workers) const {
  return Indices(cursor_, rank, world, worker, num_workers);
}

Result<std::vector<uint64_t>> ResumableSampler::Indices(const DataCursor& at, int rank, int world,
                                                        int worker, int num_workers) const {
  if (world <= 0 || rank < 0 || rank >= world) {
    return Status::InvalidArgument("sampler: rank " + std::to_string(rank) + " not in world of " +
                                   std::to_string(world));
  }
  if (num_workers <= 0 || worker < 0 || worker >= num_workers) {
    return Status::InvalidArgument("sampler: worker " + std::to_string(worker) + " of " +
                                   std::to_string(num_workers));
  }
  if (config_.global_batch % uint64_t(world) != 0) {
    return Status::InvalidArgument("sampler: global_batch " + std::to_string(config_.global_batch) +
                                   " is not divisible by world size " + std::to_string(world));
  }
  uint64_t rank_begin, rank_count, begin, count;
  Split(at.consumed, BatchSizeAt(at), uint64_t(rank), uint64_t(world), &rank_begin, &rank_count);
  Split(rank_begin, rank_count, uint64_t(worker), uint64_t(num_workers), &begin, &count);
  std::vector<uint64_t> out;
  out.reserve(count);
  if (config_.shuffle) {
    IndexPermutation perm(config_.dataset_size, EpochKey(at.epoch));
    for (uint64_t p = begin; p < begin + count; ++p) out.push_back(perm(p));
  } else {
    for (uint64_t p = begin; p < begin + count; ++p) out.push_back(p);
  }
  return out;
}

void ResumableSampler::CommitStep() {
  cursor_.consumed += NextBatchSize();
  if (cursor_.consumed >= epoch_length_) {  // canonical form: (epoch + 1, 0), never (epoch, length)
    ++cursor_.epoch;
    cursor_.consumed = 0;
  }
}

std::string ResumableSampler::Fingerprint() const {
  return "size=" + std::to_string(config_.dataset_size) + " seed=" + std::to_string(config_.seed) +
         " global_batch=" + std::to_string(config_.global_batch) +
         " shuffle=" + std::to_string(int(config_.shuffle)) +
         " drop_last=" + std::to_string(int(config_.drop_last)) + " order=" + kOrderName +
         std::to_string(IndexPermutation::kVersion);
}

std::string ResumableSampler::SaveState() const {
  nlohmann::json j = {
      {"version", 1},
      {"cursor", {{"epoch", cursor_.epoch}, {"consumed", cursor_.consumed}}},
      {"fingerprint",
       {{"dataset_size", config_.dataset_size},
        {"seed", config_.seed},
        {"global_batch", config_.global_batch},
        {"shuffle", config_.shuffle},
        {"drop_last", config_.drop_last},
        {"order", std::string(kOrderName) + std::to_string(IndexPermutation::kVersion)}}}};
  return j.dump();
}

Status ResumableSampler::LoadState(std::string_view state) {
  using json = nlohmann::json;
  json j = json::parse(state.begin(), state.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Status::DataLoss("sampler state is not a JSON object");
  auto version = j.find("version");
  if (version == j.end() || !version->is_number_unsigned() || version->get<uint64_t>() != 1) {
    return Status::Unimplemented("sampler state: unknown version (this build reads version 1)");
  }
  auto cursor = j.find("cursor");
  auto fp = j.find("fingerprint");
  if (cursor == j.end() || !cursor->is_object() || fp == j.end() || !fp->is_object()) {
    return Status::DataLoss("sampler state lacks cursor or fingerprint");
  }
  auto u64 = [](const json& o, const char* key, uint64_t* out) {
    auto it = o.find(key);
    if (it == o.end() || !it->is_number_unsigned()) return false;
    *out = it->get<uint64_t>();
    return true;
  };
  auto boolean = [](const json& o, const char* key, bool* out) {
    auto it = o.find(key);
    if (it == o.end() || !it->is_boolean()) return false;
    *out = it->get<bool>();
    return true;
  };
  SamplerConfig saved;
  DataCursor c;
  std::string order;
  auto order_it = fp->find("order");
  if (order_it != fp->end() && order_it->is_string()) order = order_it->get<std::string>();
  if (!u64(*cursor, "epoch", &c.epoch) || !u64(*cursor, "consumed", &c.consumed) ||
      !u64(*fp, "dataset_size", &saved.dataset_size) || !u64(*fp, "seed", &saved.seed) ||
      !u64(*fp, "global_batch", &saved.global_batch) || !boolean(*fp, "shuffle", &saved.shuffle) ||
      !boolean(*fp, "drop_last", &saved.drop_last) || order.empty()) {
    return Status::DataLoss("sampler state has a missing or mistyped field");
  }
  auto mismatch = [](const char* what, const std::string& was, const std::string& now) {
    return Status::FailedPrecondition(
        "data configuration changed since the checkpoint: " + std::string(what) + " was " + was +
        ", is " + now + " (resuming would skip or repeat samples)");
  };
  if (saved.dataset_size != config_.dataset_size)
    return mismatch("dataset_size", std::to_string(saved.dataset_size),
                    std::to_string(config_.dataset_size));
  if (saved.seed != config_.seed)
    return mismatch("seed", std::to_string(saved.seed), std::to_string(config_.seed));
  if (saved.global_batch != config_.global_batch)
    return mismatch("global_batch", std::to_string(saved.global_batch),
                    std::to_string(config_.global_batch));
  if (saved.shuffle != config_.shuffle)
    return mismatch("shuffle", std::to_string(saved.shuffle), std::to_string(config_.shuffle));
  if (saved.drop_last != config_.drop_last)
    return mismatch("drop_last", std::to_string(saved.drop_last),
                    std::to_string(config_.drop_last));
  std::string ours = std::string(kOrderName) + std::to_string(IndexPermutation::kVersion);
  if (order != ours) return mismatch("order", order, ours);
  if (c.consumed >= epoch_length_ || c.consumed % config_.global_batch != 0) {
    return Status::DataLoss("sampler state: consumed " + std::to_string(c.consumed) +
                            " is not a step boundary of an epoch of " +
                            std::to_string(epoch_length_));
  }
  cursor_ = c;
  return Status::OK();
}

}  // namespace stint
