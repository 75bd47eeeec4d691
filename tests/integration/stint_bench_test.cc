// The real `stint-bench` on a small state: it runs end to end, and every
// figure against fio carries the range of its per-run ratios (in the table
// and in the JSON), so a reader sees how far one invocation's runs agree.
// Correctness only: the figures of so small a state say nothing.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "util/subprocess.h"
#include "util/temp_dir.h"

#ifndef STINT_BENCH_PATH
#error "STINT_BENCH_PATH must name the stint-bench binary"
#endif

namespace stint {
namespace {

TEST(StintBenchTest, EachRatioToFioComesWithTheRangeOfItsRuns) {
  TempDir dir;
  const std::string json_file = dir.Sub("out.json");
  RunResult r = RunProgram(
      STINT_BENCH_PATH,
      {"--dir", dir.path(), "--size", "8MiB", "--runs", "2", "--no-torch", "--no-drop-caches",
       "--engines", "posix", "--compress", "off", "--json=" + json_file},
      /*with_stderr=*/true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(ReadWholeFile(json_file), nullptr, false);
  ASSERT_TRUE(j.is_object()) << ReadWholeFile(json_file);
  if (j["fio"].contains("unavailable")) GTEST_SKIP() << "fio: " << j["fio"]["unavailable"];
  ASSERT_EQ(j["variants"].size(), 1u) << j.dump(2);
  const nlohmann::json& ranges = j["variants"][0]["ratio_range_over_runs"];
  for (const char* figure :
       {"persist_vs_fio_write", "save_to_durable_vs_fio_write", "restore_vs_fio_read"}) {
    ASSERT_TRUE(ranges[figure].is_array()) << figure << ": " << ranges.dump();
    const double lo = ranges[figure][0], hi = ranges[figure][1];
    EXPECT_GT(lo, 0) << figure;
    EXPECT_LE(lo, hi) << figure;
    // The ratio is the median of the per-run ratios: within their range.
    const double median = j["variants"][0]["ratio"][figure];
    EXPECT_LE(lo, median * 1.000001) << figure;
    EXPECT_GE(hi, median * 0.999999) << figure;
  }
  EXPECT_NE(r.output.find("\"ratio\": the median of the per-run ratios"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("\"runs\": the lowest-highest of those"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace stint
