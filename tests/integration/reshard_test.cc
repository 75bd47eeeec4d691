// Reading any box of a tensor from shards saved in another layout: real
// checkpoints written by the Checkpointer (one process, several shards of a
// tensor in one State), read back with CheckpointReader::Read into row
// splits, column splits, arbitrary boxes, whole tensors and single elements.
// Element i of every tensor (its row-major global index) holds the value i,
// so the expected bytes of any box are computed, not stored.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <set>

#include "checkpoint/commit.h"
#include "format/manifest.h"
#include "format/shard_layout.h"
#include "stint/checkpoint_reader.h"
#include "stint/checkpointer.h"
#include "util/engine_params.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

// The values of box `b` of a tensor of `shape`, row-major.
template <typename T>
std::vector<T> Values(const std::vector<int64_t>& shape, const Box& b) {
  std::vector<T> out;
  std::vector<int64_t> i = b.offsets;
  const uint64_t n = BoxVolume(b);
  for (uint64_t e = 0; e < n; ++e) {
    int64_t global = 0;
    for (size_t d = 0; d < shape.size(); ++d) global = global * shape[d] + i[d];
    out.push_back(T(global));
    for (size_t d = shape.size(); d-- > 0;) {
      if (++i[d] < b.offsets[d] + b.extents[d]) break;
      i[d] = b.offsets[d];
    }
  }
  return out;
}

// A data file read that goes through the Env (NativeFd -1 makes both I/O
// engines call Read), counted per (file, offset).
class CountingEnv : public EnvWrapper {
 public:
  explicit CountingEnv(Env* base) : EnvWrapper(base) {}

  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const FileOptions& options) override {
    STINT_ASSIGN_OR_RETURN(auto file, target()->NewRandomAccessFile(path, options));
    return std::unique_ptr<RandomAccessFile>(new File(this, std::move(file)));
  }
  // How often each chunk of `file_name` (in `m`) was read, by its file
  // offset: a read that covers any byte of it counts once for it (the
  // reader merges adjacent chunks into one request). Chunks never read are
  // absent.
  std::map<uint64_t, int> ReadsOf(const std::string& file_name, const Manifest& m) {
    std::lock_guard<std::mutex> l(mu_);
    std::map<uint64_t, int> out;
    auto ours = [&](const std::string& path) {
      return path.size() >= file_name.size() &&
             path.compare(path.size() - file_name.size(), file_name.size(), file_name) == 0;
    };
    for (const TensorRecord& t : m.tensors) {
      for (const ShardRecord& sh : t.shards) {
        if (sh.file != file_name) continue;
        for (const ChunkRecord& c : sh.chunks) {
          for (const Read& r : reads_) {
            if (ours(r.path) && r.offset < c.file_offset + c.stored_len &&
                c.file_offset < r.offset + r.n)
              out[c.file_offset] += 1;
          }
        }
      }
    }
    return out;
  }
  void Clear() {
    std::lock_guard<std::mutex> l(mu_);
    reads_.clear();
  }

 private:
  class File : public RandomAccessFile {
   public:
    File(CountingEnv* env, std::unique_ptr<RandomAccessFile> base)
        : env_(env), base_(std::move(base)) {}
    Result<size_t> Read(uint64_t offset, size_t n, void* dst) const override {
      {
        std::lock_guard<std::mutex> l(env_->mu_);
        env_->reads_.push_back({base_->path(), offset, n});
      }
      return base_->Read(offset, n, dst);
    }
    Result<uint64_t> Size() const override { return base_->Size(); }
    bool direct_io() const override { return base_->direct_io(); }
    const std::string& path() const override { return base_->path(); }

   private:
    CountingEnv* env_;
    std::unique_ptr<RandomAccessFile> base_;
  };
  std::mutex mu_;
  struct Read {
    std::string path;
    uint64_t offset;
    size_t n;
  };
  std::vector<Read> reads_;
};

const std::vector<int64_t> kGridShape = {8, 2048};   // int32, 2x2 grid of [4, 1024]
const std::vector<int64_t> kUnevenShape = {5, 10};   // float64, columns 3 + 5 + 2
const std::vector<int64_t> kCubeShape = {3, 4, 10};  // int16, split on dim 2: 4 + 3 + 3
const std::vector<int64_t> kWholeShape = {7, 3};     // float32, one shard

class ReshardTest : public ::testing::TestWithParam<EngineAndCompress> {
 protected:
  void SetUp() override {
    CheckpointOptions o;
    o.root = dir_.Sub("ckpt");
    o.io_engine = std::get<0>(GetParam());
    o.compress = std::get<1>(GetParam());
    o.chunk_size = 4096;  // a grid shard row (1024 x int32) per chunk
    o.job_id = "reshard";
    auto ckpt = Checkpointer::Open(o);
    ASSERT_OK(ckpt);
    ckpt_ = std::move(*ckpt);

    State state;
    for (int64_t r : {0, 4}) {
      for (int64_t c : {0, 1024})
        AddShard<int32_t>(&state, "grid", DType::kInt32, kGridShape, Box{{r, c}, {4, 1024}});
    }
    AddShard<double>(&state, "uneven", DType::kFloat64, kUnevenShape, Box{{0, 3}, {5, 5}});
    AddShard<double>(&state, "uneven", DType::kFloat64, kUnevenShape, Box{{0, 0}, {5, 3}});
    AddShard<double>(&state, "uneven", DType::kFloat64, kUnevenShape, Box{{0, 8}, {5, 2}});
    for (auto [c, n] : {std::pair<int64_t, int64_t>{0, 4}, {4, 3}, {7, 3}}) {
      AddShard<int16_t>(&state, "cube", DType::kInt16, kCubeShape, Box{{0, 0, c}, {3, 4, n}});
    }
    AddShard<float>(&state, "whole", DType::kFloat32, kWholeShape, Box{{0, 0}, {7, 3}});
    AddShard<int64_t>(&state, "scalar", DType::kInt64, {}, Box{{}, {}});
    auto h = ckpt_->Save(1, state);
    ASSERT_OK(h);
    ASSERT_OK(h->durable.get());
    step_dir_ = o.root + "/" + StepDirName(1);
    data_file_ = step_dir_ + "/" + RankFileName(0);
    reader_ = Open(Env::Default());
  }

  template <typename T>
  void AddShard(State* state, const std::string& name, DType dtype,
                const std::vector<int64_t>& shape, const Box& b) {
    std::vector<T> values = Values<T>(shape, b);
    auto& bytes = saved_.emplace_back(reinterpret_cast<const char*>(values.data()),
                                      values.size() * sizeof(T));
    state->tensors.push_back({name, dtype, shape, b.offsets, b.extents, bytes.data()});
  }

  std::unique_ptr<CheckpointReader> Open(Env* env) {
    ReaderOptions ro;
    ro.env = env;
    ro.io_engine = std::get<0>(GetParam());
    auto r = CheckpointReader::Open(step_dir_, ro);
    EXPECT_OK(r);
    return r.ok() ? std::move(*r) : nullptr;
  }

  Manifest ReadManifest() {
    auto bytes = ReadFileToString(Env::Default(), step_dir_ + "/" + kManifestName);
    EXPECT_OK(bytes);
    auto m = DecodeManifest(*bytes, "test");
    EXPECT_OK(m);
    return *m;
  }

  // The chunks of `tensor`'s shard whose box starts at `offsets`, and its index.
  std::pair<size_t, const ShardRecord*> FindShard(const Manifest& m, const std::string& tensor,
                                                  const std::vector<int64_t>& offsets) {
    const TensorRecord* t = m.FindTensor(tensor);
    for (size_t k = 0; t != nullptr && k < t->shards.size(); ++k) {
      if (t->shards[k].offsets == offsets) return {k, &t->shards[k]};
    }
    ADD_FAILURE() << "no shard of " << tensor << " at the given offsets";
    return {0, nullptr};
  }

  TempDir dir_;
  std::unique_ptr<Checkpointer> ckpt_;
  std::deque<std::string> saved_;  // shard bytes, alive until the save is durable
  std::string step_dir_, data_file_;
  std::unique_ptr<CheckpointReader> reader_;
};

// A destination of box `b` and the values it must end up with.
template <typename T>
struct Want {
  Want(std::string name, DType dtype, std::vector<int64_t> shape, Box b)
      : name(std::move(name)),
        dtype(dtype),
        shape(std::move(shape)),
        box(std::move(b)),
        got(BoxVolume(box), T(-7)) {}
  TensorDest Dest() { return {name, dtype, shape, box.offsets, box.extents, got.data()}; }
  void Check() const { EXPECT_EQ(got, Values<T>(shape, box)) << name << " " << BoxString(box); }
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  Box box;
  std::vector<T> got;
};

using GridWant = Want<int32_t>;
GridWant Grid(Box b) { return GridWant("grid", DType::kInt32, kGridShape, std::move(b)); }

TEST_P(ReshardTest, GridIntoRowSplitsOfThree) {
  std::vector<GridWant> parts = {Grid({{0, 0}, {3, 2048}}), Grid({{3, 0}, {3, 2048}}),
                                 Grid({{6, 0}, {2, 2048}})};
  std::vector<TensorDest> dests;
  for (auto& p : parts) dests.push_back(p.Dest());
  ASSERT_OK(reader_->Read(dests));
  for (const auto& p : parts) p.Check();
}

TEST_P(ReshardTest, GridIntoColumnSplits) {
  std::vector<GridWant> parts = {Grid({{0, 0}, {8, 700}}), Grid({{0, 700}, {8, 1348}})};
  ASSERT_OK(reader_->Read({parts[0].Dest(), parts[1].Dest()}));
  for (const auto& p : parts) p.Check();
}

TEST_P(ReshardTest, ArbitraryBoxes) {
  for (Box b : {Box{{3, 1000}, {3, 50}}, Box{{1, 5}, {6, 2040}}, Box{{0, 1024}, {8, 1024}},
                Box{{4, 0}, {4, 1024}}, Box{{2, 1023}, {5, 2}}}) {
    GridWant w = Grid(b);
    ASSERT_OK(reader_->Read({w.Dest()})) << BoxString(b);
    w.Check();
  }
  for (Box b : {Box{{1, 2}, {3, 7}}, Box{{0, 0}, {5, 4}}, Box{{4, 9}, {1, 1}}}) {
    Want<double> w("uneven", DType::kFloat64, kUnevenShape, b);
    ASSERT_OK(reader_->Read({w.Dest()})) << BoxString(b);
    w.Check();
  }
  for (Box b : {Box{{1, 1, 2}, {2, 2, 7}}, Box{{0, 0, 0}, {1, 4, 10}}, Box{{2, 0, 3}, {1, 4, 2}},
                Box{{0, 2, 0}, {3, 1, 10}}}) {
    Want<int16_t> w("cube", DType::kInt16, kCubeShape, b);
    ASSERT_OK(reader_->Read({w.Dest()})) << BoxString(b);
    w.Check();
  }
  Want<float> column("whole", DType::kFloat32, kWholeShape, Box{{2, 1}, {4, 1}});
  ASSERT_OK(reader_->Read({column.Dest()}));
  column.Check();
}

TEST_P(ReshardTest, WholeTensorsAndSingleElements) {
  GridWant grid = Grid({{0, 0}, kGridShape}), one = Grid({{5, 1500}, {1, 1}});
  Want<double> uneven("uneven", DType::kFloat64, kUnevenShape, Box{{0, 0}, kUnevenShape});
  Want<int16_t> cube("cube", DType::kInt16, kCubeShape, Box{{0, 0, 0}, kCubeShape});
  Want<int16_t> cube_one("cube", DType::kInt16, kCubeShape, Box{{2, 3, 9}, {1, 1, 1}});
  Want<float> whole("whole", DType::kFloat32, kWholeShape, Box{{0, 0}, kWholeShape});
  Want<int64_t> scalar("scalar", DType::kInt64, {}, Box{{}, {}});
  ASSERT_OK(reader_->Read({grid.Dest(), one.Dest(), uneven.Dest(), cube.Dest(), cube_one.Dest(),
                           whole.Dest(), scalar.Dest()}));
  grid.Check();
  one.Check();
  uneven.Check();
  cube.Check();
  cube_one.Check();
  whole.Check();
  scalar.Check();
  // Empty offsets/extents mean the whole tensor, as for a save.
  std::vector<int32_t> all(8 * 2048);
  ASSERT_OK(reader_->Read({{"grid", DType::kInt32, kGridShape, {}, {}, all.data()}}));
  EXPECT_EQ(all, grid.got);
}

TEST_P(ReshardTest, TensorInfoListsTheShardBoxes) {
  std::map<std::string, TensorInfo> infos;
  for (auto& t : reader_->tensors()) infos.emplace(t.name, t);
  const TensorInfo& grid = infos.at("grid");
  EXPECT_EQ(grid.shards, 4u);
  ASSERT_EQ(grid.shard_boxes.size(), 4u);
  std::set<std::vector<int64_t>> offsets;
  for (const ShardInfo& s : grid.shard_boxes) {
    offsets.insert(s.offsets);
    EXPECT_EQ(s.extents, (std::vector<int64_t>{4, 1024}));
    EXPECT_EQ(s.file, RankFileName(0));
    EXPECT_EQ(s.raw_bytes, 4u * 1024 * 4);
  }
  EXPECT_EQ(offsets, (std::set<std::vector<int64_t>>{{0, 0}, {0, 1024}, {4, 0}, {4, 1024}}));
  ASSERT_EQ(infos.at("scalar").shard_boxes.size(), 1u);
  EXPECT_EQ(infos.at("scalar").shard_boxes[0].raw_bytes, 8u);
}

TEST_P(ReshardTest, BadDestinationsAreInvalidArgument) {
  std::vector<int32_t> buf(8 * 2048);
  auto read = [&](std::vector<int64_t> off, std::vector<int64_t> ext,
                  std::vector<int64_t> shape = kGridShape, DType dtype = DType::kInt32) {
    return reader_->Read({{"grid", dtype, shape, off, ext, buf.data()}});
  };
  Status s = read({6, 0}, {3, 2048});
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("destination region [6, 0]+[3, 2048] lies outside the shape "
                             "[8, 2048] in dim 0"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(read({-1, 0}, {1, 1}).code(), Code::kInvalidArgument);
  EXPECT_EQ(read({0, 2047}, {1, INT64_MAX}).code(), Code::kInvalidArgument);
  EXPECT_EQ(read({0}, {8}).code(), Code::kInvalidArgument);
  EXPECT_EQ(read({}, {}, {8, 2047}).code(), Code::kInvalidArgument);
  EXPECT_EQ(read({}, {}, kGridShape, DType::kFloat32).code(), Code::kInvalidArgument);
  EXPECT_EQ(reader_->Read({{"nope", DType::kInt32, kGridShape, {}, {}, buf.data()}}).code(),
            Code::kNotFound);
}

// A manifest whose shards leave a hole (only tampering or a bug writes one)
// still opens; reading into the hole is kNotFound naming the region, never
// kDataLoss, so a Checkpointer does not take the checkpoint for damaged.
TEST_P(ReshardTest, UncoveredRegionIsNotFound) {
  Manifest m = ReadManifest();
  TensorRecord* grid = nullptr;
  for (auto& t : m.tensors) {
    if (t.name == "grid") grid = &t;
  }
  ASSERT_NE(grid, nullptr);
  grid->shards.erase(std::remove_if(grid->shards.begin(), grid->shards.end(),
                                    [](const ShardRecord& s) {
                                      return s.offsets == std::vector<int64_t>{4, 1024};
                                    }),
                     grid->shards.end());
  ASSERT_EQ(grid->shards.size(), 3u);
  std::vector<ChunkRecord> in_file;  // the digest binds the file's chunk list
  for (const auto& t : m.tensors) {
    for (const auto& s : t.shards) in_file.insert(in_file.end(), s.chunks.begin(), s.chunks.end());
  }
  for (const auto& b : m.blobs) in_file.insert(in_file.end(), b.chunks.begin(), b.chunks.end());
  std::sort(in_file.begin(), in_file.end(), [](const ChunkRecord& a, const ChunkRecord& b) {
    return a.file_offset < b.file_offset;
  });
  m.files[0].digest = FileDigest(in_file, m.files[0].size);
  ASSERT_OK(
      WriteStringToFileSync(Env::Default(), step_dir_ + "/" + kManifestName, EncodeManifest(m)));
  auto reader = Open(Env::Default());
  ASSERT_NE(reader, nullptr);

  GridWant whole = Grid({{0, 0}, kGridShape});
  Status s = reader->Read({whole.Dest()});
  EXPECT_EQ(s.code(), Code::kNotFound) << s.ToString();
  EXPECT_EQ(s.message(), step_dir_ +
                             ": region [4, 1024]+[4, 1024] of tensor 'grid' is not covered by the "
                             "stored shards (destination [0, 0]+[8, 2048])");
  GridWant corner = Grid({{3, 1000}, {3, 50}});
  s = reader->Read({corner.Dest()});
  EXPECT_EQ(s.code(), Code::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("region [4, 1024]+[2, 26] of tensor 'grid' is not covered"),
            std::string::npos)
      << s.message();
  GridWant covered = Grid({{0, 0}, {4, 2048}});
  ASSERT_OK(reader->Read({covered.Dest()}));
  covered.Check();

  // Through the Checkpointer: the caller's error, not a damaged checkpoint.
  auto loaded = ckpt_->Load({whole.Dest()});
  EXPECT_EQ(loaded.status().code(), Code::kNotFound) << loaded.status().ToString();
  EXPECT_EQ(*ckpt_->ListCommitted(), std::vector<uint64_t>{1});
}

// A damaged chunk the destination does not need is never read, so the read
// succeeds; a destination that needs it fails with kDataLoss naming it.
TEST_P(ReshardTest, UnneededChunksAreNotRead) {
  Manifest m = ReadManifest();
  auto [index, shard] = FindShard(m, "grid", {0, 0});
  ASSERT_NE(shard, nullptr);
  ASSERT_EQ(shard->chunks.size(), 4u);      // one row of the shard per chunk
  const ChunkRecord& c = shard->chunks[3];  // row 3, columns [0, 1024)
  {
    auto bytes = ReadFileToString(Env::Default(), data_file_);
    ASSERT_OK(bytes);
    (*bytes)[c.file_offset + c.stored_len / 2] ^= 0x20;
    ASSERT_OK(WriteStringToFileSync(Env::Default(), data_file_, *bytes));
  }
  for (Box b : {Box{{0, 0}, {3, 2048}}, Box{{0, 1024}, {8, 1024}}, Box{{4, 0}, {4, 2048}},
                Box{{0, 1000}, {3, 48}}}) {
    GridWant w = Grid(b);
    ASSERT_OK(reader_->Read({w.Dest()})) << BoxString(b);
    w.Check();
  }
  for (Box b : {Box{{3, 1023}, {1, 2}}, Box{{0, 0}, kGridShape}, Box{{2, 5}, {3, 1}}}) {
    GridWant w = Grid(b);
    Status s = reader_->Read({w.Dest()});
    EXPECT_EQ(s.code(), Code::kDataLoss) << BoxString(b) << ": " << s.ToString();
    EXPECT_NE(s.message().find("chunk 3 (tensor grid shard " + std::to_string(index) + ")"),
              std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.message();
  }
}

// Counted reads: a column box reads only the chunks of the shards it meets,
// and a chunk that feeds two destinations of one Read is read once.
TEST_P(ReshardTest, ReadsOnlyNeededChunksOnce) {
  CountingEnv env(Env::Default());
  auto reader = Open(&env);
  ASSERT_NE(reader, nullptr);
  Manifest m = ReadManifest();
  auto offsets_of = [&](std::vector<int64_t> shard_offsets, std::vector<size_t> chunks) {
    std::map<uint64_t, int> out;
    const ShardRecord* s = FindShard(m, "grid", shard_offsets).second;
    for (size_t i : chunks) out[s->chunks[i].file_offset] = 1;
    return out;
  };
  auto merge = [](std::map<uint64_t, int> a, const std::map<uint64_t, int>& b) {
    a.insert(b.begin(), b.end());
    return a;
  };

  env.Clear();
  GridWant column = Grid({{0, 1500}, {8, 10}});
  ASSERT_OK(reader->Read({column.Dest()}));
  column.Check();
  EXPECT_EQ(env.ReadsOf(RankFileName(0), m),
            merge(offsets_of({0, 1024}, {0, 1, 2, 3}), offsets_of({4, 1024}, {0, 1, 2, 3})));

  env.Clear();
  GridWant row = Grid({{0, 0}, {1, 2048}}), corner = Grid({{0, 5}, {2, 3}});
  ASSERT_OK(reader->Read({row.Dest(), corner.Dest()}));
  row.Check();
  corner.Check();
  EXPECT_EQ(env.ReadsOf(RankFileName(0), m),
            merge(offsets_of({0, 0}, {0, 1}), offsets_of({0, 1024}, {0})));

  env.Clear();
  GridWant exact = Grid({{4, 0}, {4, 1024}});  // equal to a stored shard
  ASSERT_OK(reader->Read({exact.Dest()}));
  exact.Check();
  EXPECT_EQ(env.ReadsOf(RankFileName(0), m), offsets_of({4, 0}, {0, 1, 2, 3}));
}

INSTANTIATE_TEST_SUITE_P(Engines, ReshardTest, EnginesAndCompression(),
                         EngineAndCompressName);

}  // namespace
}  // namespace stint
