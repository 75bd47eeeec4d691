// StepState: a model-like state whose every byte depends on the step, so a
// test that loads a checkpoint can prove which step it got, bit for bit.
#ifndef STINT_TESTS_UTIL_STEP_STATE_H_
#define STINT_TESTS_UTIL_STEP_STATE_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "stint/state.h"

namespace stint {

struct StepState {
  explicit StepState(uint64_t step, int64_t rows = 200)
      : step(step), rows(rows), w(size_t(rows) * 100), b(300) {
    std::mt19937 rng{uint32_t(step)};
    for (auto& x : w) x = float(rng()) / 1e9f;
    for (auto& x : b) x = int32_t(rng());
  }
  State AsState() const {
    State s;
    s.tensors.push_back({"w", DType::kFloat32, {rows, 100}, {}, {}, w.data()});
    s.tensors.push_back({"b", DType::kInt32, {300}, {}, {}, b.data()});
    s.blobs["step"] = std::to_string(step);
    return s;
  }
  std::vector<TensorDest> Dests() {
    return {{"w", DType::kFloat32, {rows, 100}, {}, {}, w.data()},
            {"b", DType::kInt32, {300}, {}, {}, b.data()}};
  }
  bool SameData(const StepState& o) const { return w == o.w && b == o.b; }

  uint64_t step;
  int64_t rows;
  std::vector<float> w;
  std::vector<int32_t> b;
};

}  // namespace stint

#endif  // STINT_TESTS_UTIL_STEP_STATE_H_
