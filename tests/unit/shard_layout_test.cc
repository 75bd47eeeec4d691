// Shard layouts as boxes: CheckShardLayout (what a committer requires),
// the overlap check ValidateManifest applies to every manifest, the box
// helpers, and FindUncovered, which names the region a read cannot fill.
#include "format/shard_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "format/manifest.h"
#include "util/status_matchers.h"

namespace stint {
namespace {

ShardRecord Shard(std::vector<int64_t> offsets, std::vector<int64_t> extents, int rank = 0) {
  char file[32];
  std::snprintf(file, sizeof(file), "rank-%05d.stint", rank);
  return ShardRecord{std::move(offsets), std::move(extents), file, {}};
}

TensorRecord Tensor(std::vector<int64_t> shape, std::vector<ShardRecord> shards) {
  return TensorRecord{"w", DType::kFloat32, std::move(shape), std::move(shards)};
}

// The code is kInvalidArgument and the message holds every one of `parts`.
void ExpectRefused(const TensorRecord& t, const std::vector<std::string>& parts) {
  Status s = CheckShardLayout(t, "step 7");
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_EQ(s.message().rfind("step 7: tensor 'w': ", 0), 0u) << s.message();
  for (const auto& p : parts) {
    EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' missing: " << s.message();
  }
}

TEST(ShardLayoutTest, OneWholeShard) {
  EXPECT_OK(CheckShardLayout(Tensor({4, 6}, {Shard({0, 0}, {4, 6})}), "x"));
}

TEST(ShardLayoutTest, OverlapNamesBothShardsAndTheCommonBox) {
  ExpectRefused(
      Tensor({4, 6}, {Shard({0, 0}, {3, 6}, 0), Shard({2, 0}, {2, 6}, 3)}),
      {"shard [0, 0]+[3, 6] (rank 0) overlaps shard [2, 0]+[2, 6] (rank 3)", "in [2, 0]+[1, 6]"});
  // Overlap in a corner only, and identical shards.
  ExpectRefused(Tensor({4, 4}, {Shard({0, 0}, {2, 2}), Shard({1, 1}, {3, 3}, 1),
                                Shard({0, 2}, {1, 2}, 2), Shard({2, 0}, {2, 1}, 3)}),
                {"overlaps", "in [1, 1]+[1, 1]"});
  ExpectRefused(Tensor({4}, {Shard({0}, {4}, 1), Shard({0}, {4}, 2)}),
                {"(rank 1)", "(rank 2)", "overlaps"});
}

TEST(ShardLayoutTest, OutsideTheShape) {
  ExpectRefused(Tensor({4, 6}, {Shard({0, 0}, {4, 4}), Shard({0, 4}, {4, 3}, 1)}),
                {"shard [0, 4]+[4, 3] (rank 1) lies outside the shape [4, 6] in dim 1"});
  // offsets + extents would overflow int64.
  ExpectRefused(Tensor({4}, {Shard({INT64_MAX}, {4})}), {"lies outside the shape [4] in dim 0"});
  ExpectRefused(Tensor({4}, {Shard({-1}, {4})}), {"negative offset or extent"});
  ExpectRefused(Tensor({4, 6}, {Shard({0}, {4})}), {"has rank 1/1", "has rank 2"});
}

TEST(ShardLayoutTest, GapNamesTheUncoveredRegion) {
  ExpectRefused(Tensor({10}, {Shard({0}, {1}), Shard({3}, {7}, 1)}),
                {"region [1]+[2] is covered by no shard", "cover 8 of 10 elements"});
  // A 2x2 grid with its lower-right block missing.
  ExpectRefused(
      Tensor({4, 6}, {Shard({0, 0}, {2, 3}), Shard({0, 3}, {2, 3}, 1), Shard({2, 0}, {2, 3}, 2)}),
      {"region [2, 3]+[2, 3] is covered by no shard"});
  ExpectRefused(Tensor({4, 6}, {}), {"region [0, 0]+[4, 6] is covered by no shard"});
}

TEST(ShardLayoutTest, UnevenSplits) {
  EXPECT_OK(CheckShardLayout(
      Tensor({5, 10}, {Shard({0, 0}, {5, 3}), Shard({0, 3}, {5, 5}, 1), Shard({0, 8}, {5, 2}, 2)}),
      "x"));
  EXPECT_OK(CheckShardLayout(Tensor({7}, {Shard({4}, {3}, 2), Shard({0}, {1}), Shard({1}, {3}, 1)}),
                             "x"));  // any order
}

TEST(ShardLayoutTest, TwoDimensionalGrid) {
  std::vector<ShardRecord> shards;
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t c = 0; c < 4; ++c) shards.push_back(Shard({r * 2, c * 5}, {2, 5}, int(r * 4 + c)));
  }
  EXPECT_OK(CheckShardLayout(Tensor({6, 20}, shards), "x"));
  shards[5].extents[1] = 6;  // now reaches into its right neighbour
  ExpectRefused(Tensor({6, 20}, shards), {"(rank 5)", "(rank 6)", "overlaps"});
}

TEST(ShardLayoutTest, ThreeDimensional) {
  EXPECT_OK(CheckShardLayout(
      Tensor({3, 4, 10}, {Shard({0, 0, 0}, {3, 4, 4}), Shard({0, 0, 4}, {3, 4, 3}, 1),
                          Shard({0, 0, 7}, {3, 4, 3}, 2)}),
      "x"));
  // Bricks of different sizes: dim 0 split, then each half split differently.
  EXPECT_OK(CheckShardLayout(
      Tensor({2, 4, 6}, {Shard({0, 0, 0}, {1, 4, 3}), Shard({0, 0, 3}, {1, 4, 3}, 1),
                         Shard({1, 0, 0}, {1, 1, 6}, 2), Shard({1, 1, 0}, {1, 3, 6}, 3)}),
      "x"));
  ExpectRefused(Tensor({2, 4, 6}, {Shard({0, 0, 0}, {1, 4, 3}), Shard({0, 0, 3}, {1, 4, 3}, 1),
                                   Shard({1, 0, 0}, {1, 1, 6}, 2), Shard({1, 2, 0}, {1, 2, 6}, 3)}),
                {"region [1, 1, 0]+[1, 1, 6] is covered by no shard"});
}

TEST(ShardLayoutTest, ScalarHasExactlyOneShard) {
  EXPECT_OK(CheckShardLayout(Tensor({}, {Shard({}, {})}), "x"));
  ExpectRefused(Tensor({}, {}), {"a scalar needs exactly one shard, it has none"});
  ExpectRefused(Tensor({}, {Shard({}, {}), Shard({}, {}, 1)}),
                {"shard []+[] (rank 0) overlaps shard []+[] (rank 1)"});
}

TEST(ShardLayoutTest, EmptyShardsNeverOverlap) {
  // An empty tensor: no elements to cover, any number of empty shards.
  EXPECT_OK(CheckShardLayout(Tensor({0, 4}, {}), "x"));
  EXPECT_OK(
      CheckShardLayout(Tensor({0, 4}, {Shard({0, 0}, {0, 4}), Shard({0, 0}, {0, 4}, 1)}), "x"));
  // A rank whose shard is empty, sitting inside another rank's box.
  EXPECT_OK(
      CheckShardLayout(Tensor({4, 4}, {Shard({0, 0}, {4, 4}), Shard({2, 2}, {0, 2}, 1)}), "x"));
}

TEST(ShardLayoutTest, FileLabels) {
  EXPECT_EQ(ShardFileLabel("rank-00003.stint"), "rank 3");
  EXPECT_EQ(ShardFileLabel("rank-12345.stint"), "rank 12345");
  EXPECT_EQ(ShardFileLabel("rank-x.stint"), "rank-x.stint");
  EXPECT_EQ(ShardFileLabel("data.bin"), "data.bin");
  EXPECT_EQ(ShardFileLabel("rank-.stint"), "rank-.stint");
}

// Thousands of shards per tensor, in shuffled order: the sweep must stay far
// from n^2 box comparisons, and still find one overlap among them.
TEST(ShardLayoutTest, ManyShards) {
  std::mt19937 rng(5);
  std::vector<ShardRecord> rows, cols, grid;
  for (int i = 0; i < 20000; ++i) rows.push_back(Shard({i * 3, 0}, {3, 8}, i));
  for (int i = 0; i < 20000; ++i) cols.push_back(Shard({0, i * 2}, {8, 2}, i));
  for (int r = 0; r < 150; ++r) {
    for (int c = 0; c < 150; ++c) grid.push_back(Shard({r * 2, c * 3}, {2, 3}, r * 150 + c));
  }
  for (auto* list : {&rows, &cols, &grid}) std::shuffle(list->begin(), list->end(), rng);
  EXPECT_OK(CheckShardLayout(Tensor({60000, 8}, rows), "x"));
  EXPECT_OK(CheckShardLayout(Tensor({8, 40000}, cols), "x"));
  EXPECT_OK(CheckShardLayout(Tensor({300, 450}, grid), "x"));

  rows.push_back(Shard({30001, 4}, {1, 1}, 99999));
  ExpectRefused(Tensor({60000, 8}, rows), {"shard [30001, 4]+[1, 1] (rank 99999)", "overlaps"});
  grid.erase(grid.begin() + 777);
  Status s = CheckShardLayout(Tensor({300, 450}, grid), "x");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("+[2, 3] is covered by no shard"), std::string::npos) << s.message();
}

TEST(BoxTest, IntersectAndVolume) {
  Box a{{0, 0}, {4, 6}}, b{{2, 3}, {5, 5}};
  Box i = Intersect(a, b);
  EXPECT_EQ(i.offsets, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(i.extents, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(BoxVolume(i), 6u);
  EXPECT_EQ(BoxVolume(Intersect(a, Box{{4, 0}, {1, 6}})), 0u);  // touching is not meeting
  EXPECT_EQ(BoxVolume(Box{{}, {}}), 1u);
  EXPECT_EQ(BoxString(b), "[2, 3]+[5, 5]");
  EXPECT_EQ(ShapeVolume({3, 4}), std::optional<uint64_t>(12));
  EXPECT_EQ(ShapeVolume({int64_t{1} << 40, int64_t{1} << 40}), std::nullopt);
  EXPECT_EQ(ShapeVolume({-1}), std::nullopt);
}

TEST(BoxTest, FindUncovered) {
  std::vector<Box> boxes = {{{0, 0}, {2, 8}}, {{2, 0}, {2, 4}}};
  EXPECT_EQ(FindUncovered(Box{{0, 0}, {2, 8}}, boxes), std::nullopt);
  EXPECT_EQ(FindUncovered(Box{{1, 2}, {3, 2}}, boxes), std::nullopt);
  std::optional<Box> gap = FindUncovered(Box{{1, 3}, {3, 5}}, boxes);
  ASSERT_TRUE(gap);
  EXPECT_EQ(BoxString(*gap), "[2, 4]+[2, 4]");
  EXPECT_EQ(FindUncovered(Box{{0, 0}, {0, 8}}, {}), std::nullopt);  // nothing to cover
  ASSERT_TRUE(FindUncovered(Box{{}, {}}, {}));
  EXPECT_EQ(FindUncovered(Box{{}, {}}, {Box{{}, {}}}), std::nullopt);
}

// ValidateManifest: overlaps and shards outside the shape are a damaged
// manifest (kDataLoss); a gap is not its business.
Manifest ManifestWith(const std::vector<ShardRecord>& shards, std::vector<int64_t> shape) {
  Manifest m;
  TensorRecord t = Tensor(std::move(shape), {});
  uint64_t offset = 0;
  for (ShardRecord s : shards) {
    s.file = "rank-00000.stint";
    uint64_t raw = uint64_t(NumElements(s.extents)) * 4;
    s.chunks = {ChunkRecord{offset, raw, raw, Codec::kNone, 0}};
    offset += AlignUp(raw == 0 ? 1 : raw);
    t.shards.push_back(std::move(s));
  }
  m.tensors.push_back(std::move(t));
  m.files.push_back(FileRecord{"rank-00000.stint", offset, 0});
  return m;
}

TEST(ValidateManifestLayoutTest, OverlapIsDataLossGapIsNot) {
  EXPECT_OK(
      ValidateManifest(ManifestWith({Shard({0, 0}, {2, 4}), Shard({2, 0}, {2, 4})}, {4, 4}), "m"));
  EXPECT_OK(ValidateManifest(ManifestWith({Shard({0, 0}, {2, 4})}, {4, 4}), "m"));
  Status s = ValidateManifest(ManifestWith({Shard({0, 0}, {3, 4}), Shard({2, 0}, {2, 4})}, {4, 4}),
                              "dir/MANIFEST.json");
  EXPECT_EQ(s.code(), Code::kDataLoss);
  EXPECT_EQ(s.message(),
            "dir/MANIFEST.json: tensor 'w': shard [0, 0]+[3, 4] (rank 0) overlaps shard "
            "[2, 0]+[2, 4] (rank 0) in [2, 0]+[1, 4]");
  s = ValidateManifest(ManifestWith({Shard({0, 0}, {2, 4}), Shard({2, 1}, {2, 4})}, {4, 4}), "m");
  EXPECT_EQ(s.code(), Code::kDataLoss);
  EXPECT_NE(s.message().find("outside the global shape in dim 1"), std::string::npos);
}

}  // namespace
}  // namespace stint
