// tools/common/gpu_list: stint-agent's --gpus and stintctl's --node NAME:GPUS.
#include "common/gpu_list.h"

#include <gtest/gtest.h>

#include "util/status_matchers.h"

namespace stint {
namespace tools {
namespace {

TEST(GpuList, IndicesInTheOrderGiven) {
  auto gpus = ParseGpuList("3,0,12");
  ASSERT_OK(gpus);
  EXPECT_EQ(*gpus, (std::vector<int>{3, 0, 12}));
  EXPECT_EQ(*ParseGpuList("0"), std::vector<int>{0});
  EXPECT_EQ(*ParseGpuList("1000000"), std::vector<int>{1000000});
}

TEST(GpuList, RefusesQuotingThePiece) {
  EXPECT_EQ(ParseGpuList("0,x").status().message(), "\"x\" is not a GPU index");
  EXPECT_EQ(ParseGpuList("-1").status().message(), "\"-1\" is not a GPU index");
  EXPECT_EQ(ParseGpuList("1000001").status().message(), "\"1000001\" is not a GPU index");
  EXPECT_EQ(ParseGpuList("2 ").status().message(), "\"2 \" is not a GPU index");
  for (const char* empty : {"", "0,,1", "0,1,", ",0"})
    EXPECT_EQ(ParseGpuList(empty).status().message(), "\"\" is not a GPU index") << empty;
}

}  // namespace
}  // namespace tools
}  // namespace stint
