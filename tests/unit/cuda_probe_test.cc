// Runs on a GPU machine; skips with the driver's reason elsewhere.
#include "device_probe.h"

#include <gtest/gtest.h>

#include "util/status_matchers.h"

namespace stint {
namespace {

TEST(CudaProbe, CountOrClearReason) {
  auto n = CudaDeviceCount();
  if (!n.ok()) {
    EXPECT_EQ(n.status().code(), Code::kUnavailable);
    EXPECT_NE(n.status().message().find("no CUDA device"), std::string::npos);
    GTEST_SKIP() << n.status().ToString();
  }
  EXPECT_GT(*n, 0);
  auto summary = CudaDeviceSummary(0);
  ASSERT_OK(summary);
  std::printf("device 0: %s\n", summary->c_str());
}

}  // namespace
}  // namespace stint
