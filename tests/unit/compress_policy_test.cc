// CompressPolicy (compress_auto): raw until the disk's write rate is known,
// zstd where the measured rate and ratio beat a slow disk, raw where the
// disk outruns zstd, and raw again every kRemeasureEvery compressed saves.
#include "checkpoint/compress_policy.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "checkpoint/snapshot.h"
#include "checkpoint/staging_pool.h"
#include "util/status_matchers.h"

namespace stint {
namespace {

constexpr double kMiB = 1 << 20;

// A 16 MiB snapshot of repetitive (very compressible) values.
class CompressPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (size_t i = 0; i < values_.size(); ++i) values_[i] = int32_t(i % 64);
    State state;
    state.tensors.push_back(
        {"w", DType::kInt32, {int64_t(values_.size())}, {}, {}, values_.data()});
    auto layout = PlanSnapshot(state, 4u << 20);
    ASSERT_OK(layout);
    auto buffer = pool_.Acquire(layout->image_bytes, std::chrono::milliseconds(0));
    ASSERT_OK(buffer);
    snapshot_.layout = *layout;
    snapshot_.buffer = std::move(*buffer);
    StagingCopies copies = PlanStagingCopies(state, snapshot_.layout, snapshot_.buffer->data(),
                                             /*lazy_host=*/false);
    RunStagingCopies(copies.now, snapshot_.buffer->data(), &threads_);
  }

  std::vector<int32_t> values_ = std::vector<int32_t>(4u << 20);
  StagingPool pool_{64u << 20};
  ThreadPool threads_{2};
  Snapshot snapshot_;
};

TEST_F(CompressPolicyTest, RawUntilTheWriteRateIsMeasured) {
  CompressPolicy policy(1);
  CompressChoice c = policy.Decide(snapshot_, &threads_);
  EXPECT_FALSE(c.compress);
  EXPECT_NE(c.why.find("not measured"), std::string::npos) << c.why;
}

TEST_F(CompressPolicyTest, CompressesForASlowDiskNotForAFastOne) {
  CompressPolicy slow(1);
  slow.Record(/*compressed=*/false, 64u << 20, /*persist_seconds=*/64.0);  // 1 MiB/s
  CompressChoice c = slow.Decide(snapshot_, &threads_);
  EXPECT_TRUE(c.compress) << c.why;
  EXPECT_NE(c.why.find("raw write 1 MiB/s"), std::string::npos) << c.why;

  CompressPolicy fast(1);
  fast.Record(false, uint64_t(1e6 * kMiB), 1.0);  // ~1 TiB/s: no compressor keeps up
  c = fast.Decide(snapshot_, &threads_);
  EXPECT_FALSE(c.compress) << c.why;
  EXPECT_EQ(c.why.rfind("raw: zstd", 0), 0u) << c.why;  // decided on the figures
}

TEST_F(CompressPolicyTest, RemeasuresTheDiskAfterARunOfCompressedSaves) {
  CompressPolicy policy(1);
  policy.Record(false, 64u << 20, 64.0);
  for (int i = 0; i < CompressPolicy::kRemeasureEvery; ++i) {
    ASSERT_TRUE(policy.Decide(snapshot_, &threads_).compress);
    policy.Record(true, 1u << 20, 1.0);
  }
  CompressChoice c = policy.Decide(snapshot_, &threads_);
  EXPECT_FALSE(c.compress);
  EXPECT_NE(c.why.find("measuring the write rate again"), std::string::npos) << c.why;
  policy.Record(false, 64u << 20, 64.0);  // still slow
  EXPECT_TRUE(policy.Decide(snapshot_, &threads_).compress);
}

}  // namespace
}  // namespace stint
