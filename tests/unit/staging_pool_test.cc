#include "checkpoint/staging_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>

#include "base/mapped_buffer.h"
#include "base/thread_pool.h"
#include "util/status_matchers.h"

namespace stint {
namespace {

using std::chrono::milliseconds;

TEST(StagingPool, ExactSizeRoundedToBlocks) {
  StagingPool pool(1 << 20);
  auto b = pool.Acquire(5000, milliseconds(0));
  ASSERT_OK(b);
  EXPECT_EQ((*b)->size(), 8192u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*b)->data()) % 4096, 0u);
  EXPECT_EQ(pool.bytes_in_use(), 8192u);
  b->reset();
  EXPECT_EQ(pool.bytes_in_use(), 0u);
}

TEST(StagingPool, ReusesSameSizeBuffer) {
  StagingPool pool(1 << 20);
  char* first;
  {
    auto b = pool.Acquire(100000, milliseconds(0));
    ASSERT_OK(b);
    first = (*b)->data();
  }
  auto again = pool.Acquire(100000, milliseconds(0));
  ASSERT_OK(again);
  EXPECT_EQ((*again)->data(), first);
}

TEST(StagingPool, BusyWhenFullAndNoWait) {
  StagingPool pool(64 * 1024);
  auto a = pool.Acquire(40 * 1024, milliseconds(0));
  ASSERT_OK(a);
  auto b = pool.Acquire(40 * 1024, milliseconds(0));
  EXPECT_EQ(b.status().code(), Code::kUnavailable);
  auto huge = pool.Acquire(1 << 20, milliseconds(0));
  EXPECT_EQ(huge.status().code(), Code::kResourceExhausted);
}

TEST(StagingPool, BlockedAcquireWakesOnRelease) {
  StagingPool pool(64 * 1024);
  auto a = pool.Acquire(40 * 1024, milliseconds(0));
  ASSERT_OK(a);
  std::thread releaser([&] {
    std::this_thread::sleep_for(milliseconds(50));
    a->reset();
  });
  auto b = pool.Acquire(48 * 1024, milliseconds(10000));  // a different size: evicts the cached one
  releaser.join();
  ASSERT_OK(b);
  EXPECT_LE(pool.bytes_in_use(), pool.capacity());
}

TEST(StagingPool, CapacityFromFirstSnapshot) {
  StagingPool pool(0);
  auto a = pool.Acquire(4096 * 10, milliseconds(0));
  ASSERT_OK(a);
  EXPECT_EQ(pool.capacity(), 4096u * 20);
}

TEST(MappedBuffer, ExactSizePageAlignedAndZeroed) {
  auto b = MappedBuffer::Map(5000);
  ASSERT_OK(b);
  EXPECT_EQ(b->size(), 5000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 4096, 0u);
  EXPECT_EQ(std::count(b->data(), b->data() + b->size(), 0), 5000);
}

TEST(MappedBuffer, MoveLeavesTheSourceEmpty) {
  auto a = MappedBuffer::Map(4096);
  ASSERT_OK(a);
  char* data = a->data();
  MappedBuffer b = std::move(*a);
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(a->data(), nullptr);
  EXPECT_EQ(a->size(), 0u);
}

TEST(MappedBuffer, FailureNamesTheSize) {
  const size_t huge = size_t(1) << 62;  // beyond any address space
  auto b = MappedBuffer::Map(huge);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find(std::to_string(huge) + " bytes"), std::string::npos)
      << b.status().ToString();
}

TEST(ThreadPool, ParallelForRunsEveryIndexOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  pool.ParallelFor(hits.size(), [&](size_t i) { hits[i]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  pool.ParallelFor(0, [&](size_t) { FAIL(); });
  ThreadPool none(0);  // the caller alone
  int n = 0;
  none.ParallelFor(10, [&](size_t) { ++n; });
  EXPECT_EQ(n, 10);
}

}  // namespace
}  // namespace stint
