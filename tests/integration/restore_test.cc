// Restore into destinations that already exist, on both engines: every
// dtype, sizes that are not multiples of 4 KiB, destinations page-aligned
// (whole chunks are read straight into them) and not (through bounce
// slots), raw and zstd, whole tensors and regions of them: bit-exact.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "stint/checkpoint_reader.h"
#include "stint/checkpointer.h"
#include "util/engine_params.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

constexpr DType kDTypes[] = {DType::kFloat32,  DType::kFloat64,   DType::kFloat16,
                             DType::kBFloat16, DType::kInt8,      DType::kUInt8,
                             DType::kInt16,    DType::kInt32,     DType::kInt64,
                             DType::kBool,     DType::kComplex64, DType::kComplex128};

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

// Page-aligned memory, handed out at `misalign` bytes past a page boundary.
struct Buffer {
  Buffer(size_t bytes, size_t misalign) {
    void* p = nullptr;
    EXPECT_EQ(posix_memalign(&p, 4096, bytes + misalign + 4096), 0);
    mem.reset(static_cast<char*>(p));
    data = mem.get() + misalign;
  }
  std::unique_ptr<char, FreeDeleter> mem;
  char* data;
};

class RestoreTest : public ::testing::TestWithParam<EngineAndCompress> {};

TEST_P(RestoreTest, EveryDTypeOddSizesAlignedAndNotLoadsBitExactly) {
  const auto [engine, compress] = GetParam();
  TempDir dir;
  CheckpointOptions o;
  o.root = dir.Sub("ckpt");
  o.io_engine = engine;
  o.compress = compress;
  o.chunk_size = 16384;  // several chunks per tensor, the last one short
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);

  std::mt19937 rng(7);
  std::vector<std::vector<char>> values;
  State state;
  const int64_t rows = 37;  // 37 x 301 elements: no dtype makes that a multiple of 4 KiB
  const int64_t cols = 301;
  for (DType d : kDTypes) {
    std::vector<char> v(size_t(rows * cols) * DTypeSize(d));
    for (auto& c : v) c = char(d == DType::kBool ? rng() % 2 : rng() % 7);  // zstd has work
    values.push_back(std::move(v));
  }
  for (size_t i = 0; i < values.size(); ++i) {
    state.tensors.push_back({std::string("t") + DTypeName(kDTypes[i]),
                             kDTypes[i],
                             {rows, cols},
                             {},
                             {},
                             values[i].data()});
  }
  auto h = (*ckpt)->Save(1, state);
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());

  for (size_t misalign : {size_t(0), size_t(64), size_t(512)}) {
    std::vector<Buffer> buffers;
    std::vector<TensorDest> dests;
    for (size_t i = 0; i < values.size(); ++i) {
      buffers.emplace_back(values[i].size(), misalign);
      std::memset(buffers.back().data, 0x5a, values[i].size());
      dests.push_back(
          {state.tensors[i].name, kDTypes[i], {rows, cols}, {}, {}, buffers.back().data});
    }
    // A region too: rows 5..29 of the first tensor, into its own buffer.
    const size_t row_bytes = size_t(cols) * DTypeSize(kDTypes[0]);
    Buffer region(25 * row_bytes, misalign);
    dests.push_back(
        {state.tensors[0].name, kDTypes[0], {rows, cols}, {5, 0}, {25, cols}, region.data});
    auto loaded = (*ckpt)->Load(dests);
    ASSERT_OK(loaded) << "misalign " << misalign;
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(std::memcmp(buffers[i].data, values[i].data(), values[i].size()), 0)
          << state.tensors[i].name << ", misalign " << misalign;
    }
    EXPECT_EQ(std::memcmp(region.data, values[0].data() + 5 * row_bytes, 25 * row_bytes), 0)
        << "region, misalign " << misalign;
  }
}

// Raw whole chunks into a page-aligned destination: read there and verified there.
TEST(RestoreDirectTest, DamageReadStraightIntoADestinationIsDataLoss) {
  for (const char* engine : {"uring", "posix"}) {
    SCOPED_TRACE(engine);
    TempDir dir;
    CheckpointOptions o;
    o.root = dir.Sub("ckpt");
    o.io_engine = engine;
    o.chunk_size = 8192;
    auto ckpt = Checkpointer::Open(o);
    ASSERT_OK(ckpt);
    std::vector<int32_t> v(8192);  // 32 KiB: four whole chunks
    for (size_t i = 0; i < v.size(); ++i) v[i] = int32_t(i * 2654435761u);
    State state;
    state.tensors.push_back({"v", DType::kInt32, {int64_t(v.size())}, {}, {}, v.data()});
    auto h = (*ckpt)->Save(1, state);
    ASSERT_OK(h);
    ASSERT_OK(h->durable.get());
    const std::string file = dir.Sub("ckpt") + "/step-00000001/rank-00000.stint";
    std::string bytes = ReadWholeFile(file);
    bytes[8192 + 17] ^= 1;  // inside the second chunk
    ASSERT_TRUE(WriteWholeFile(file, bytes));
    auto reader = CheckpointReader::Open(dir.Sub("ckpt") + "/step-00000001");
    ASSERT_OK(reader);
    Buffer into(v.size() * 4, 0);
    Status s = (*reader)->Read({{"v", DType::kInt32, {int64_t(v.size())}, {}, {}, into.data}});
    EXPECT_EQ(s.code(), Code::kDataLoss) << s.ToString();
    EXPECT_NE(s.message().find("chunk 1"), std::string::npos) << s.ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, RestoreTest, EnginesAndCompression(),
                         EngineAndCompressName);

}  // namespace
}  // namespace stint
