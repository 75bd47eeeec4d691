// FindState: an optimizer's per-parameter state, for tests of the LibTorch
// adapter. The state's key type differs between LibTorch versions (see
// runtime/torch/torch_state.cc); this looks states up the way the optimizer
// does. Header-only; only tests that link LibTorch include it.
#ifndef STINT_TESTS_UTIL_OPTIMIZER_STATE_H_
#define STINT_TESTS_UTIL_OPTIMIZER_STATE_H_

#include <torch/optim/optimizer.h>

#include <sstream>
#include <string>
#include <type_traits>

namespace stint {

// Null when `p` has no state yet.
template <typename Map>
const torch::optim::OptimizerParamState* FindState(const Map& state, const torch::Tensor& p) {
  using K = typename Map::key_type;
  if constexpr (std::is_same_v<K, std::string>) {
    std::ostringstream os;
    os << p.unsafeGetTensorImpl();
    auto it = state.find(os.str());
    return it == state.end() ? nullptr : it->second.get();
  } else {
    auto it = state.find(static_cast<K>(p.unsafeGetTensorImpl()));
    return it == state.end() ? nullptr : it->second.get();
  }
}

}  // namespace stint

#endif  // STINT_TESTS_UTIL_OPTIMIZER_STATE_H_
