#include "bench_state.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

namespace stint {
namespace bench {
namespace {

std::vector<TensorSpec> PlanModel(uint64_t bytes) {
  const int64_t elems = int64_t(bytes / sizeof(float));
  const int layers = 4;
  // Matrices get ~3/4 of the parameters (48 d^2 for 4 layers), the embedding the rest.
  int64_t d = int64_t(std::sqrt(0.75 * double(elems) / 48.0));
  d = d >= 128 ? d / 64 * 64 : std::max<int64_t>(8, d / 8 * 8);
  int64_t positions = d >= 512 ? 1024 : 64;
  int64_t vocab = 0;
  for (;; d = std::max<int64_t>(8, d / 2)) {
    int64_t fixed = layers * (12 * d * d + 13 * d) + positions * d + 2 * d;
    vocab = (elems - fixed) / d;
    if (vocab >= 1 || d == 8) break;
  }
  vocab = std::max<int64_t>(vocab, 1);
  std::vector<TensorSpec> t;
  t.push_back({"embed.tokens.weight", {vocab, d}, 0, 0.02f});
  t.push_back({"embed.positions.weight", {positions, d}, 0, 0.02f});
  for (int l = 0; l < layers; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    t.push_back({p + "ln1.weight", {d}, 1.0f, 0.05f});
    t.push_back({p + "ln1.bias", {d}, 0, 0.01f});
    t.push_back({p + "attn.qkv.weight", {3 * d, d}, 0, 0.02f});
    t.push_back({p + "attn.qkv.bias", {3 * d}, 0, 0.01f});
    t.push_back({p + "attn.proj.weight", {d, d}, 0, 0.02f});
    t.push_back({p + "attn.proj.bias", {d}, 0, 0.01f});
    t.push_back({p + "ln2.weight", {d}, 1.0f, 0.05f});
    t.push_back({p + "ln2.bias", {d}, 0, 0.01f});
    t.push_back({p + "mlp.fc1.weight", {4 * d, d}, 0, 0.02f});
    t.push_back({p + "mlp.fc1.bias", {4 * d}, 0, 0.01f});
    t.push_back({p + "mlp.fc2.weight", {d, 4 * d}, 0, 0.02f});
    t.push_back({p + "mlp.fc2.bias", {d}, 0, 0.01f});
  }
  t.push_back({"final_ln.weight", {d}, 1.0f, 0.05f});
  t.push_back({"final_ln.bias", {d}, 0, 0.01f});
  return t;
}

// Acklam's rational approximation of the normal quantile (|rel err| < 1.2e-9).
double NormalQuantile(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                             1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static const double e[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  const double lo = 0.02425;
  auto tail = [&](double q) {
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((e[0] * q + e[1]) * q + e[2]) * q + e[3]) * q + 1);
  };
  if (p < lo) return tail(std::sqrt(-2 * std::log(p)));
  if (p > 1 - lo) return -tail(std::sqrt(-2 * std::log(1 - p)));
  double q = p - 0.5, r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

// Normal samples from a quantile table with linear interpolation: ~1 ns per
// value instead of ~15 ns for std::normal_distribution, which matters for
// filling gigabytes on two cores. Tails are cut at ~4.3 sigma.
class FastNormal {
 public:
  FastNormal() : table_(kEntries + 1) {
    for (size_t k = 0; k <= kEntries; ++k)
      table_[k] = float(NormalQuantile((k + 0.5) / (kEntries + 1)));
  }
  // splitmix64 seeded per block, so the data does not depend on the thread count.
  void Fill(float* out, size_t n, uint64_t seed, float mean, float sigma, bool bf16) const {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; ++i) {
      uint64_t z = (s += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      uint32_t hi = uint32_t(z >> 48), frac = uint32_t(z >> 32) & 0xFFFF;
      float x = table_[hi] + (table_[hi + 1] - table_[hi]) * float(frac) * (1.0f / 65536);
      float v = mean + sigma * x;
      if (bf16) {  // round to nearest even bf16, keep as float32 (low 16 bits zero)
        uint32_t u;
        std::memcpy(&u, &v, 4);
        u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
        std::memcpy(&v, &u, 4);
      }
      out[i] = v;
    }
  }

 private:
  static constexpr size_t kEntries = 65536;
  std::vector<float> table_;
};

// Runs fn(i) for i in [0, n) on every core (the generator and the checks are
// the bench's own work, not the runtime's).
void ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  unsigned workers = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < n;) fn(i);
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace

BenchState BuildState(uint64_t bytes, const std::string& data_kind, bool aligned_dests) {
  BenchState bs;
  bs.specs = PlanModel(bytes);
  const bool bf16 = data_kind == "bf16";
  bs.description =
      bf16 ? "N(0,0.02) weights (LayerNorm ~N(1,0.05)) rounded to bf16, stored as float32"
           : "full-precision float32 N(0,0.02) weights (LayerNorm ~N(1,0.05))";
  bs.description += aligned_dests ? "; restored into page-aligned memory"
                                  : "; restored into new float[] (not page-aligned)";
  struct Block {
    size_t tensor;
    size_t begin, len;
  };
  std::vector<Block> blocks;
  constexpr size_t kBlock = 1u << 20;
  for (size_t t = 0; t < bs.specs.size(); ++t) {
    size_t n = size_t(NumElements(bs.specs[t].shape));
    bs.data.emplace_back(new float[n]);
    // One page more, so the destination can start on a page boundary.
    bs.dest.emplace_back(new float[n + (aligned_dests ? 1024 : 0)]);
    const uintptr_t at = reinterpret_cast<uintptr_t>(bs.dest.back().get());
    bs.dest_at.push_back(reinterpret_cast<float*>(aligned_dests ? (at + 4095) & ~uintptr_t{4095}
                                                                : at));
    bs.tensor_bytes += n * sizeof(float);
    for (size_t b = 0; b < n; b += kBlock) blocks.push_back({t, b, std::min(kBlock, n - b)});
  }
  FastNormal gen;
  ParallelFor(blocks.size(), [&](size_t i) {
    const Block& b = blocks[i];
    const TensorSpec& s = bs.specs[b.tensor];
    gen.Fill(bs.data[b.tensor].get() + b.begin, b.len, (uint64_t(b.tensor) << 32) + b.begin, s.mean,
             s.sigma, bf16);
    std::memset(bs.dest_at[b.tensor] + b.begin, 0,
                b.len * sizeof(float));  // fault the pages in now
  });
  for (size_t t = 0; t < bs.specs.size(); ++t) {
    const TensorSpec& s = bs.specs[t];
    bs.state.tensors.push_back({s.name, DType::kFloat32, s.shape, {}, {}, bs.data[t].get()});
    bs.dests.push_back({s.name, DType::kFloat32, s.shape, {}, {}, bs.dest_at[t]});
  }
  // A trainer also saves its RNG and a little metadata next to the weights.
  std::mt19937_64 rng(42);
  std::ostringstream rng_state;
  rng_state << rng;
  bs.state.blobs["rng.mt19937_64"] = rng_state.str();
  bs.state.blobs["trainer.json"] =
      R"({"step": 1000, "lr": 0.0003, "epoch": 2, "sampler_cursor": 123456})";
  for (const auto& [name, blob] : bs.state.blobs) bs.blob_bytes += blob.size();
  return bs;
}

void PoisonDests(BenchState* bs) {
  ParallelFor(bs->specs.size(), [&](size_t t) {
    std::memset(bs->dest_at[t], 0xA5, size_t(NumElements(bs->specs[t].shape)) * sizeof(float));
  });
}

Status CheckRestored(const BenchState& bs, const LoadResult& r) {
  std::vector<char> bad(bs.specs.size(), 0);
  ParallelFor(bs.specs.size(), [&](size_t t) {
    size_t n = size_t(NumElements(bs.specs[t].shape)) * sizeof(float);
    bad[t] = std::memcmp(bs.data[t].get(), bs.dest_at[t], n) != 0;
  });
  for (size_t t = 0; t < bad.size(); ++t) {
    if (bad[t])
      return Status::DataLoss("restored tensor '" + bs.specs[t].name +
                              "' differs from what was saved");
  }
  if (r.blobs != bs.state.blobs)
    return Status::DataLoss("restored blobs differ from what was saved");
  return Status::OK();
}

}  // namespace bench
}  // namespace stint
