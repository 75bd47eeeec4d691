// The state stint-bench saves and restores: a small transformer's weights
// (big matrices, an embedding, many small vectors) plus an RNG and a little
// trainer metadata, so tensor count and size mix look like a real save.
// BuildState fills it on every core; the restore side checks every byte.
#ifndef STINT_TOOLS_STINT_BENCH_BENCH_STATE_H_
#define STINT_TOOLS_STINT_BENCH_BENCH_STATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stint/checkpointer.h"
#include "stint/state.h"
#include "stint/status.h"

namespace stint {
namespace bench {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  float mean = 0, sigma = 0.02f;
};

struct BenchState {
  std::vector<TensorSpec> specs;
  std::vector<std::unique_ptr<float[]>> data;  // what is saved
  std::vector<std::unique_ptr<float[]>> dest;  // what restore fills, from dest_at
  std::vector<float*> dest_at;  // page-aligned inside dest with --aligned-dests
  State state;
  std::vector<TensorDest> dests;
  uint64_t tensor_bytes = 0, blob_bytes = 0;
  std::string description;

  uint64_t raw_bytes() const { return tensor_bytes + blob_bytes; }  // what one checkpoint holds
};

// About `bytes` of float32 tensors; data_kind is "bf16" (values rounded to
// bf16, stored as float32) or "fp32".
// aligned_dests: restore destinations start on a page boundary (chunks are
// then read straight into them), else wherever new float[] puts them.
BenchState BuildState(uint64_t bytes, const std::string& data_kind, bool aligned_dests);

// Poisons the restore destinations so a load that skips bytes cannot pass.
void PoisonDests(BenchState* bs);

// OK when every restored tensor and blob equals what was saved; DataLoss
// naming the first that differs.
Status CheckRestored(const BenchState& bs, const LoadResult& r);

}  // namespace bench
}  // namespace stint

#endif  // STINT_TOOLS_STINT_BENCH_BENCH_STATE_H_
