// Checkpointer round trips with real files, on both I/O engines.
#include "stint/checkpointer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <numeric>
#include <random>

#include "checkpoint/commit.h"
#include "checkpoint/save_times.h"
#include "util/engine_params.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

struct Model {
  std::vector<float> w, b;
  std::vector<int64_t> counters;
  State AsState() const {
    State s;
    s.tensors.push_back(
        {"layer.w", DType::kFloat32, {int64_t(w.size() / 100), 100}, {}, {}, w.data()});
    s.tensors.push_back({"layer.b", DType::kFloat32, {int64_t(b.size())}, {}, {}, b.data()});
    s.tensors.push_back(
        {"counters", DType::kInt64, {int64_t(counters.size())}, {}, {}, counters.data()});
    s.blobs["rng"] = "mt19937-state-bytes";
    s.blobs["user.json"] = R"({"lr": 0.001})";
    return s;
  }
  std::vector<TensorDest> Dests() {
    return {{"layer.w", DType::kFloat32, {int64_t(w.size() / 100), 100}, {}, {}, w.data()},
            {"layer.b", DType::kFloat32, {int64_t(b.size())}, {}, {}, b.data()},
            {"counters", DType::kInt64, {int64_t(counters.size())}, {}, {}, counters.data()}};
  }
};

Model MakeModel(uint32_t seed, size_t rows = 300) {
  Model m;
  m.w = RandomFloats(rows * 100, seed);
  m.b = RandomFloats(100, seed + 1);
  m.counters = {int64_t(seed), 2, 3};
  return m;
}

class CheckpointerTest : public ::testing::TestWithParam<EngineAndCompress> {
 protected:
  CheckpointOptions Options() {
    CheckpointOptions o;
    o.root = dir_.Sub("ckpt");
    o.io_engine = std::get<0>(GetParam());
    o.compress = std::get<1>(GetParam());
    o.chunk_size = 16 * 1024;  // many chunks per tensor
    o.job_id = "job-1";
    return o;
  }
  TempDir dir_;
};

TEST_P(CheckpointerTest, SaveLoadRoundTrip) {
  auto ckpt = Checkpointer::Open(Options());
  ASSERT_OK(ckpt);
  Model m = MakeModel(7);
  auto h = (*ckpt)->Save(10, m.AsState());
  ASSERT_OK(h);
  EXPECT_OK(h->staged.get());
  ASSERT_OK(h->durable.get());

  Model out = MakeModel(99);
  auto r = (*ckpt)->Load(out.Dests());
  ASSERT_OK(r);
  EXPECT_EQ(r->step, 10u);
  EXPECT_EQ(out.w, m.w);
  EXPECT_EQ(out.b, m.b);
  EXPECT_EQ(out.counters, m.counters);
  EXPECT_EQ(r->blobs.at("rng"), "mt19937-state-bytes");
  EXPECT_EQ(r->blobs.at("user.json"), R"({"lr": 0.001})");
  EXPECT_TRUE(r->skipped.empty());
}

TEST_P(CheckpointerTest, LatestAndRetention) {
  CheckpointOptions o = Options();
  o.keep_last = 2;
  o.keep_every = 4;
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  for (uint64_t step = 1; step <= 6; ++step) {
    Model m = MakeModel(uint32_t(step), 10);
    auto h = (*ckpt)->Save(step, m.AsState());
    ASSERT_OK(h);
    ASSERT_OK(h->durable.get());
  }
  ASSERT_OK((*ckpt)->Flush());  // retention runs after the commit is reported
  auto steps = (*ckpt)->ListCommitted();
  ASSERT_OK(steps);
  EXPECT_EQ(*steps, (std::vector<uint64_t>{4, 5, 6}));
  auto latest = ReadLatest(Env::Default(), o.root);
  ASSERT_OK(latest);
  EXPECT_EQ(latest->value(), "step-00000006");
  Model out = MakeModel(0, 10);
  auto r = (*ckpt)->Load(out.Dests());
  ASSERT_OK(r);
  EXPECT_EQ(out.counters[0], 6);
  LoadOptions old;
  old.step = 4;
  r = (*ckpt)->Load(out.Dests(), old);
  ASSERT_OK(r);
  EXPECT_EQ(out.counters[0], 4);
}

TEST_P(CheckpointerTest, EmptyAndScalarTensors) {
  auto ckpt = Checkpointer::Open(Options());
  ASSERT_OK(ckpt);
  double scalar = 3.5;
  State s;
  s.tensors.push_back({"empty", DType::kFloat32, {0, 4}, {}, {}, nullptr});
  s.tensors.push_back({"scalar", DType::kFloat64, {}, {}, {}, &scalar});
  s.blobs["empty_blob"] = "";
  auto h = (*ckpt)->Save(1, s);
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());
  double out = 0;
  auto r = (*ckpt)->Load({{"empty", DType::kFloat32, {0, 4}, {}, {}, nullptr},
                          {"scalar", DType::kFloat64, {}, {}, {}, &out}});
  ASSERT_OK(r);
  EXPECT_EQ(out, 3.5);
  EXPECT_EQ(r->blobs.at("empty_blob"), "");
}

TEST_P(CheckpointerTest, ZeroByteSavesCommitAndLoad) {
  // A rank with nothing to write (an empty state, or only 0-element tensors
  // and empty blobs) writes a 0-byte data file: it commits and loads back.
  auto ckpt = Checkpointer::Open(Options());
  ASSERT_OK(ckpt);
  auto h = (*ckpt)->Save(1, State{});
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());
  State only_empty;
  only_empty.tensors.push_back({"empty", DType::kFloat32, {0, 4}, {}, {}, nullptr});
  only_empty.blobs["empty_blob"] = "";
  h = (*ckpt)->Save(2, only_empty);
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());

  LoadOptions first;
  first.step = 1;
  auto r = (*ckpt)->Load(std::vector<TensorDest>{}, first);
  ASSERT_OK(r);
  EXPECT_EQ(r->step, 1u);
  EXPECT_TRUE(r->blobs.empty());
  r = (*ckpt)->Load({{"empty", DType::kFloat32, {0, 4}, {}, {}, nullptr}});
  ASSERT_OK(r);
  EXPECT_EQ(r->step, 2u);
  EXPECT_EQ(r->blobs.at("empty_blob"), "");
  EXPECT_TRUE(r->skipped.empty());
}

TEST_P(CheckpointerTest, ReshardDim0) {
  // Saved as 3 uneven row shards (as 3 ranks would), loaded as 2 and as 1.
  auto ckpt = Checkpointer::Open(Options());
  ASSERT_OK(ckpt);
  const int64_t rows = 1001, cols = 37;
  std::vector<float> full = RandomFloats(size_t(rows * cols), 5);
  State s;
  int64_t cut[] = {0, 400, 401, rows};
  for (int k = 0; k < 3; ++k) {
    s.tensors.push_back({"emb",
                         DType::kFloat32,
                         {rows, cols},
                         {cut[k], 0},
                         {cut[k + 1] - cut[k], cols},
                         full.data() + cut[k] * cols});
  }
  auto h = (*ckpt)->Save(3, s);
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());

  std::vector<float> a(size_t(500 * cols)), b(size_t(501 * cols)), whole(full.size());
  auto r = (*ckpt)->Load({{"emb", DType::kFloat32, {rows, cols}, {0, 0}, {500, cols}, a.data()},
                          {"emb", DType::kFloat32, {rows, cols}, {500, 0}, {501, cols}, b.data()}});
  ASSERT_OK(r);
  EXPECT_EQ(0, std::memcmp(a.data(), full.data(), a.size() * 4));
  EXPECT_EQ(0, std::memcmp(b.data(), full.data() + 500 * cols, b.size() * 4));
  r = (*ckpt)->Load({{"emb", DType::kFloat32, {rows, cols}, {}, {}, whole.data()}});
  ASSERT_OK(r);
  EXPECT_EQ(whole, full);
}

TEST_P(CheckpointerTest, OverlappingOrMissingShardsAreRefusedAtSave) {
  auto ckpt = Checkpointer::Open(Options());
  ASSERT_OK(ckpt);
  std::vector<float> rows(8 * 4, 1.0f);
  auto shard = [&](int64_t first, int64_t count) {
    return TensorShard{"emb", DType::kFloat32, {8, 4}, {first, 0}, {count, 4}, rows.data()};
  };
  State overlap;  // rows 3..4 twice: they would add up to 8 with a gap elsewhere
  overlap.tensors = {shard(0, 5), shard(3, 3)};
  auto h = (*ckpt)->Save(1, overlap);
  ASSERT_EQ(h.status().code(), Code::kInvalidArgument) << h.status().ToString();
  EXPECT_NE(h.status().message().find("'emb'"), std::string::npos) << h.status().ToString();
  EXPECT_NE(h.status().message().find("overlaps"), std::string::npos) << h.status().ToString();
  State gap;
  gap.tensors = {shard(0, 3), shard(4, 4)};
  h = (*ckpt)->Save(1, gap);
  ASSERT_EQ(h.status().code(), Code::kInvalidArgument) << h.status().ToString();
  EXPECT_NE(h.status().message().find("covered by no shard"), std::string::npos)
      << h.status().ToString();
  EXPECT_TRUE((*ckpt)->ListCommitted()->empty());
}

// The manifest stores names as JSON strings: a name that is not UTF-8 is
// refused at Save(), naming it, and nothing is committed.
TEST_P(CheckpointerTest, NamesThatAreNotUtf8AreRefusedAtSave) {
  auto ckpt = Checkpointer::Open(Options());
  ASSERT_OK(ckpt);
  std::vector<float> w(4, 1.0f);
  for (const std::string bad : {"w\xff", "w\xc3", "w\xed\xa0\x80", "w\xc0\xaf"}) {
    State tensor;
    tensor.tensors = {TensorShard{bad, DType::kFloat32, {4}, {}, {}, w.data()}};
    auto h = (*ckpt)->Save(1, tensor);
    ASSERT_EQ(h.status().code(), Code::kInvalidArgument) << h.status().ToString();
    EXPECT_NE(h.status().message().find("tensor name '" + bad + "' is not valid UTF-8"),
              std::string::npos)
        << h.status().ToString();
    State blob;
    blob.blobs[bad] = "x";
    h = (*ckpt)->Save(1, blob);
    ASSERT_EQ(h.status().code(), Code::kInvalidArgument) << h.status().ToString();
    EXPECT_NE(h.status().message().find("blob name"), std::string::npos) << h.status().ToString();
  }
  EXPECT_TRUE((*ckpt)->ListCommitted()->empty());
  State fine;  // UTF-8 beyond ASCII is a name like any other
  fine.tensors = {
      TensorShard{"caf\xc3\xa9.\xf0\x9f\x98\x80", DType::kFloat32, {4}, {}, {}, w.data()}};
  auto h = (*ckpt)->Save(1, fine);
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());
}

// A reader next to a running writer: opening read_only neither creates the
// root nor removes a save's tmp directory, and refuses to save.
TEST_P(CheckpointerTest, ReadOnlyOpenLoadsAndTouchesNothing) {
  CheckpointOptions o = Options();
  o.read_only = true;
  EXPECT_EQ(Checkpointer::Open(o).status().code(), Code::kNotFound);
  EXPECT_FALSE(Env::Default()->FileExists(o.root));
  o.read_only = false;
  Model m = MakeModel(1, 10);
  {
    auto writer = Checkpointer::Open(o);
    ASSERT_OK(writer);
    auto h = (*writer)->Save(1, m.AsState());
    ASSERT_OK(h);
    ASSERT_OK(h->durable.get());
  }
  const std::string in_flight = o.root + "/" + TmpDirName(2, 7);
  ASSERT_OK(Env::Default()->CreateDir(in_flight));
  o.read_only = true;
  auto reader = Checkpointer::Open(o);
  ASSERT_OK(reader);
  EXPECT_TRUE(Env::Default()->FileExists(in_flight));
  Model out = MakeModel(0, 10);
  auto r = (*reader)->Load(out.Dests());
  ASSERT_OK(r);
  EXPECT_EQ(out.w, m.w);
  EXPECT_EQ((*reader)->Save(2, m.AsState()).status().code(), Code::kFailedPrecondition);
}

TEST_P(CheckpointerTest, WrongDtypeOrShapeIsAClearError) {
  auto ckpt = Checkpointer::Open(Options());
  ASSERT_OK(ckpt);
  Model m = MakeModel(1, 10);
  auto h = (*ckpt)->Save(1, m.AsState());
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());
  std::vector<double> wrong(m.b.size());
  auto r = (*ckpt)->Load({{"layer.b", DType::kFloat64, {100}, {}, {}, wrong.data()}});
  ASSERT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("layer.b' is float32, destination is float64"),
            std::string::npos)
      << r.status().message();
  r = (*ckpt)->Load({{"layer.b", DType::kFloat32, {99}, {}, {}, wrong.data()}});
  ASSERT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("[100]"), std::string::npos);
  r = (*ckpt)->Load({{"nope", DType::kFloat32, {1}, {}, {}, wrong.data()}});
  EXPECT_EQ(r.status().code(), Code::kNotFound);
}

TEST_P(CheckpointerTest, RefusesToOverwriteCommittedStep) {
  auto ckpt = Checkpointer::Open(Options());
  ASSERT_OK(ckpt);
  Model m = MakeModel(1, 10);
  auto h = (*ckpt)->Save(5, m.AsState());
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());
  Model other = MakeModel(2, 10);
  auto again = (*ckpt)->Save(5, other.AsState());
  EXPECT_EQ(again.status().code(), Code::kAlreadyExists);
  Model out = MakeModel(3, 10);
  ASSERT_OK((*ckpt)->Load(out.Dests()));
  EXPECT_EQ(out.w, m.w);
}

// A save while the first of the same step is still persisting is refused at
// once; the first commits and the next step saves as usual.
TEST_P(CheckpointerTest, SameStepTwiceInFlightIsRefusedAtOnce) {
  CheckpointOptions o = Options();
  std::promise<void> open_gate;
  std::shared_future<void> gate = open_gate.get_future().share();
  o.commit_guard = [gate](uint64_t step) {
    if (step != 5) return Status::OK();
    if (gate.wait_for(std::chrono::minutes(2)) != std::future_status::ready) {
      return Status::DeadlineExceeded("the test never opened the gate");
    }
    return Status::OK();
  };
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  Model first = MakeModel(1, 10), second = MakeModel(2, 10);
  auto h = (*ckpt)->Save(5, first.AsState());
  ASSERT_OK(h);
  auto again = (*ckpt)->Save(5, second.AsState());  // step 5 waits at its commit
  open_gate.set_value();
  ASSERT_FALSE(again.ok()) << "a second save of a step in flight was accepted";
  EXPECT_EQ(again.status().code(), Code::kAlreadyExists);
  EXPECT_NE(again.status().message().find("in flight"), std::string::npos)
      << again.status().ToString();
  ASSERT_OK(h->durable.get());
  auto next = (*ckpt)->Save(6, second.AsState());
  ASSERT_OK(next);
  ASSERT_OK(next->durable.get());
  EXPECT_OK((*ckpt)->Flush());
  EXPECT_EQ(*(*ckpt)->ListCommitted(), (std::vector<uint64_t>{5, 6}));
  Model out = MakeModel(3, 10);
  LoadOptions at5;
  at5.step = 5;
  ASSERT_OK((*ckpt)->Load(out.Dests(), at5));
  EXPECT_EQ(out.w, first.w);
}

// The pool sized automatically by a small first save (before the optimizer
// has state) grows for the larger saves after it.
TEST_P(CheckpointerTest, StagingPoolGrowsWithTheState) {
  auto ckpt = Checkpointer::Open(Options());
  ASSERT_OK(ckpt);
  Model small = MakeModel(1, 10);
  auto h0 = (*ckpt)->Save(0, small.AsState());
  ASSERT_OK(h0);
  ASSERT_OK(h0->durable.get());
  for (uint64_t step = 1; step <= 3; ++step) {
    Model large = MakeModel(uint32_t(step), 3000);
    auto h = (*ckpt)->Save(step, large.AsState());
    ASSERT_OK(h) << "step " << step;
    ASSERT_OK(h->durable.get());
    Model out = MakeModel(0, 3000);
    ASSERT_OK((*ckpt)->Load(out.Dests()));
    EXPECT_EQ(out.w, large.w);
  }
  EXPECT_OK((*ckpt)->Flush());
}

// Its growth stops at staging_max_bytes, and the refusal names that option.
TEST_P(CheckpointerTest, StagingPoolCapIsNamedWhenExceeded) {
  CheckpointOptions o = Options();
  o.staging_max_bytes = 256 << 10;
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  Model small = MakeModel(1, 10);  // ~4 KiB of tensors
  auto h1 = (*ckpt)->Save(1, small.AsState());
  ASSERT_OK(h1);
  ASSERT_OK(h1->durable.get());
  Model large = MakeModel(2, 3000);  // ~1.2 MB
  auto h2 = (*ckpt)->Save(2, large.AsState());
  ASSERT_FALSE(h2.ok());
  EXPECT_EQ(h2.status().code(), Code::kResourceExhausted);
  EXPECT_NE(h2.status().message().find("staging_max_bytes"), std::string::npos)
      << h2.status().ToString();
  EXPECT_NE(h2.status().message().find(std::to_string(256 << 10)), std::string::npos)
      << h2.status().ToString();
  auto h3 = (*ckpt)->Save(3, small.AsState());  // what fits still saves
  ASSERT_OK(h3);
  ASSERT_OK(h3->durable.get());
}

TEST_P(CheckpointerTest, SkipPolicyReportsBusyPool) {
  CheckpointOptions o = Options();
  o.busy_policy = BusyPolicy::kSkip;
  Model m = MakeModel(1, 2000);
  o.staging_bytes = m.w.size() * 4 + (1 << 20);  // room for one snapshot only
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  int skipped = 0, saved = 0;
  std::vector<std::shared_future<Status>> durables;
  for (uint64_t step = 1; step <= 20; ++step) {
    auto h = (*ckpt)->Save(step, m.AsState());
    ASSERT_OK(h);
    if (h->skipped) {
      ++skipped;
      EXPECT_EQ(h->durable.get().code(), Code::kUnavailable);
    } else {
      ++saved;
      durables.push_back(h->durable);
    }
  }
  for (auto& d : durables) EXPECT_OK(d.get());
  EXPECT_GE(saved, 1);
  EXPECT_EQ((*ckpt)->stats().skipped, uint64_t(skipped));
  EXPECT_OK((*ckpt)->Flush());
}

TEST_P(CheckpointerTest, LeftoverTmpDirsAreCleanedOnOpen) {
  CheckpointOptions o = Options();
  ASSERT_OK(Env::Default()->CreateDir(o.root));
  ASSERT_OK(Env::Default()->CreateDir(o.root + "/.tmp-7-abc"));
  ASSERT_OK(WriteStringToFileSync(Env::Default(), o.root + "/.tmp-7-abc/rank-00000.stint", "junk"));
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  EXPECT_FALSE(Env::Default()->FileExists(o.root + "/.tmp-7-abc"));
}

TEST_P(CheckpointerTest, DamagedNewestIsSkippedReportedAndQuarantined) {
  CheckpointOptions o = Options();
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  Model m1 = MakeModel(1, 10), m2 = MakeModel(2, 10);
  for (auto [step, m] : {std::pair<uint64_t, Model*>{1, &m1}, {2, &m2}}) {
    auto h = (*ckpt)->Save(step, m->AsState());
    ASSERT_OK(h);
    ASSERT_OK(h->durable.get());
  }
  // Flip one byte inside step 2's first chunk (layer.w; padding is not data).
  std::string data = o.root + "/" + StepDirName(2) + "/" + RankFileName(0);
  auto bytes = ReadFileToString(Env::Default(), data);
  ASSERT_OK(bytes);
  (*bytes)[100] ^= 0x40;
  ASSERT_OK(WriteStringToFileSync(Env::Default(), data, *bytes));

  Model out = MakeModel(0, 10);
  auto r = (*ckpt)->Load(out.Dests());
  ASSERT_OK(r);
  EXPECT_EQ(r->step, 1u);
  EXPECT_EQ(out.w, m1.w);
  ASSERT_EQ(r->skipped.size(), 1u);
  EXPECT_NE(r->skipped[0].find("checksum mismatch"), std::string::npos) << r->skipped[0];
  EXPECT_NE(r->skipped[0].find("rank-00000.stint chunk"), std::string::npos) << r->skipped[0];
  EXPECT_EQ(r->skipped_steps, std::vector<uint64_t>{2});

  LoadOptions exact;
  exact.step = 2;  // asking for it by name is an error, not a fallback
  EXPECT_EQ((*ckpt)->Load(out.Dests(), exact).status().code(), Code::kDataLoss);

  ASSERT_OK((*ckpt)->Quarantine(2));
  EXPECT_EQ(*(*ckpt)->ListCommitted(), std::vector<uint64_t>{1});
  // LATEST no longer names the moved step: a second load (a second resume)
  // skips nothing, and quarantining the step again finds nothing to move.
  EXPECT_EQ(ReadLatest(Env::Default(), o.root)->value_or(""), StepDirName(1));
  r = (*ckpt)->Load(out.Dests());
  ASSERT_OK(r);
  EXPECT_EQ(r->step, 1u);
  EXPECT_TRUE(r->skipped.empty()) << r->skipped[0];
  ASSERT_OK((*ckpt)->Quarantine(2));
  auto h = (*ckpt)->Save(2, m2.AsState());
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());
  ASSERT_OK((*ckpt)->Load(out.Dests()));
  EXPECT_EQ(out.w, m2.w);
}

TEST(CheckpointerOptions, BadOptionsAreRefusedClearly) {
  TempDir dir;
  CheckpointOptions o;
  EXPECT_EQ(Checkpointer::Open(o).status().code(), Code::kInvalidArgument);  // no root
  o.root = dir.Sub("c");
  o.chunk_size = 1000;
  EXPECT_EQ(Checkpointer::Open(o).status().code(), Code::kInvalidArgument);
  o.chunk_size = 4096;
  o.io_engine = "spdk";
  EXPECT_EQ(Checkpointer::Open(o).status().code(), Code::kInvalidArgument);
  o.io_engine = "auto";
  o.world_size = 2;
  auto multi = Checkpointer::Open(o);  // several ranks need the job's store
  EXPECT_EQ(multi.status().code(), Code::kInvalidArgument);
  EXPECT_NE(multi.status().message().find("commit_channel"), std::string::npos);
  o.world_size = 1;
  ASSERT_OK(WriteStringToFileSync(Env::Default(), dir.Sub("file"), "x"));
  o.world_size = 1;
  o.root = dir.Sub("file");
  EXPECT_FALSE(Checkpointer::Open(o).ok());
}

TEST(CheckpointerCompletion, AFinishedRunIsMarkedInItsRootUntilCleared) {
  TempDir dir;
  CheckpointOptions o;
  o.root = dir.Sub("ckpt");
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  auto none = (*ckpt)->Completion();
  ASSERT_OK(none);
  EXPECT_FALSE(none->has_value());
  // Only a committed step completes a run.
  EXPECT_EQ((*ckpt)->MarkComplete(5).code(), Code::kFailedPrecondition);
  Model m = MakeModel(1);
  auto h = (*ckpt)->Save(5, m.AsState());
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());
  EXPECT_EQ((*ckpt)->MarkComplete(5, "[1]").code(), Code::kInvalidArgument);
  ASSERT_OK((*ckpt)->MarkComplete(5, R"({"slurm_job_id": "42"})"));
  ckpt->reset();

  // A later start (a reader too) sees it; the checkpoints are untouched.
  o.read_only = true;
  auto reader = Checkpointer::Open(o);
  ASSERT_OK(reader);
  auto marker = (*reader)->Completion();
  ASSERT_OK(marker);
  ASSERT_TRUE(marker->has_value());
  EXPECT_EQ((*marker)->step, 5u);
  EXPECT_EQ((*marker)->info, R"({"slurm_job_id":"42"})");
  EXPECT_EQ((*reader)->ClearCompletion().code(), Code::kFailedPrecondition);
  EXPECT_EQ((*reader)->MarkComplete(5).code(), Code::kFailedPrecondition);
  Model out = MakeModel(9);
  auto loaded = (*reader)->Load(out.Dests());
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->step, 5u);
  reader->reset();

  // A damaged marker is named, not taken for "complete" or "not complete".
  ASSERT_OK(WriteStringToFileSync(Env::Default(), o.root + "/COMPLETE", "{\"step\": -1}"));
  auto writer_o = o;
  writer_o.read_only = false;
  auto writer = Checkpointer::Open(writer_o);
  ASSERT_OK(writer);
  auto damaged = (*writer)->Completion();
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.status().code(), Code::kDataLoss);
  EXPECT_NE(damaged.status().ToString().find("COMPLETE"), std::string::npos);
  ASSERT_OK((*writer)->ClearCompletion());
  auto cleared = (*writer)->Completion();
  ASSERT_OK(cleared);
  EXPECT_FALSE(cleared->has_value());
  EXPECT_OK((*writer)->ClearCompletion());  // none: OK
}

TEST_P(CheckpointerTest, EachCommittedSaveRecordsItsTimeToDurableForLaunchers) {
  // What `stint slurm submit --root` sizes its warning from.
  CheckpointOptions o = Options();
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  for (uint64_t step : {3, 5, 8}) {
    Model m = MakeModel(uint32_t(step), 10);
    auto h = (*ckpt)->Save(step, m.AsState());
    ASSERT_OK(h);
    ASSERT_OK(h->durable.get());
  }
  ASSERT_OK((*ckpt)->Flush());  // recorded after the commit is reported
  auto times = ReadSaveTimes(Env::Default(), o.root);
  ASSERT_OK(times);
  ASSERT_EQ(times->size(), 3u);
  EXPECT_EQ((*times)[0].step, 3u);
  EXPECT_EQ((*times)[2].step, 8u);
  for (const SaveTime& t : *times) EXPECT_GE(t.durable_seconds, 0);
  // Not a checkpoint: listing and loading pass over it.
  auto steps = (*ckpt)->ListCommitted();
  ASSERT_OK(steps);
  EXPECT_EQ(*steps, (std::vector<uint64_t>{3, 5, 8}));
}

TEST(SaveTimesTest, TheNewestAreKeptAndADamagedFileIsNamedThenStartedAfresh) {
  TempDir dir;
  Env* env = Env::Default();
  const std::string root = dir.path();
  auto none = ReadSaveTimes(env, root);
  ASSERT_OK(none);
  EXPECT_TRUE(none->empty());
  for (uint64_t step = 1; step <= kSaveTimesKept + 8; ++step)
    ASSERT_OK(RecordSaveTime(env, root, {step, 0.5 * double(step)}));
  auto times = ReadSaveTimes(env, root);
  ASSERT_OK(times);
  ASSERT_EQ(times->size(), kSaveTimesKept);
  EXPECT_EQ(times->front().step, 9u);
  EXPECT_EQ(times->back().step, kSaveTimesKept + 8);
  EXPECT_DOUBLE_EQ(times->back().durable_seconds, 0.5 * double(kSaveTimesKept + 8));
  EXPECT_FALSE(env->FileExists(root + "/" + kSaveTimesName + ".tmp"));

  ASSERT_OK(WriteStringToFileSync(env, root + "/" + kSaveTimesName, "1 0.5\n2 nan\n"));
  auto damaged = ReadSaveTimes(env, root);
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.status().code(), Code::kDataLoss);
  EXPECT_NE(damaged.status().ToString().find("SAVE_TIMES line 2"), std::string::npos)
      << damaged.status().ToString();
  ASSERT_OK(RecordSaveTime(env, root, {3, 1.25}));
  times = ReadSaveTimes(env, root);
  ASSERT_OK(times);
  ASSERT_EQ(times->size(), 1u);
  EXPECT_EQ(times->front().step, 3u);
}

INSTANTIATE_TEST_SUITE_P(Engines, CheckpointerTest, EnginesAndCompression(),
                         EngineAndCompressName);

}  // namespace
}  // namespace stint
