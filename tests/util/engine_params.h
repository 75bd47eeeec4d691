// The I/O engine x compression grid that the Checkpointer's file tests run
// over, with readable test names ("uring_raw", "posix_zstd").
#ifndef STINT_TESTS_UTIL_ENGINE_PARAMS_H_
#define STINT_TESTS_UTIL_ENGINE_PARAMS_H_

#include <gtest/gtest.h>

#include <string>
#include <tuple>

namespace stint {

using EngineAndCompress = std::tuple<const char*, bool>;

inline auto EnginesAndCompression() {
  return ::testing::Combine(::testing::Values("uring", "posix"), ::testing::Bool());
}

inline std::string EngineAndCompressName(
    const ::testing::TestParamInfo<EngineAndCompress>& info) {
  return std::string(std::get<0>(info.param)) + (std::get<1>(info.param) ? "_zstd" : "_raw");
}

}  // namespace stint

#endif  // STINT_TESTS_UTIL_ENGINE_PARAMS_H_
