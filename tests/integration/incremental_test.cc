// Incremental checkpoints (CheckpointOptions::incremental) on real files:
// a chain of saves with random changes loads bit-exactly at every kept step,
// frozen shards are referenced without being written, retention never
// deletes what a kept checkpoint references, a referenced file that is gone
// is named by load and verify, a crash at every op of an incremental save
// leaves the previous checkpoint loadable, and tier 2 gets what it lacks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/commit.h"
#include "format/manifest.h"
#include "stint/checkpoint_reader.h"
#include "stint/checkpointer.h"
#include "util/fault_env.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

constexpr uint64_t kChunk = 8192;
constexpr size_t kFrozenFloats = 16 * kChunk / 4;  // 16 chunks
constexpr size_t kWeightFloats = 12 * kChunk / 4 + 300;  // 13 chunks, the last one short
constexpr size_t kMomentFloats = 5 * kChunk / 4;

// A fine-tuning state: a frozen base, trained weights of which a few chunks
// change per step, an optimizer moment that changes everywhere, a blob.
struct FineTuneState {
  explicit FineTuneState(uint32_t seed)
      : frozen(kFrozenFloats), weight(kWeightFloats), moment(kMomentFloats) {
    std::mt19937 rng{seed};
    for (auto& x : frozen) x = float(rng()) / 1e9f;
    for (auto& x : weight) x = float(rng()) / 1e9f;
    for (auto& x : moment) x = float(rng()) / 1e9f;
  }
  // Changes `chunks` random chunks of the weight (one float each) and all of the moment.
  void Step(uint64_t step, int chunks) {
    std::mt19937 rng{uint32_t(step) * 7919u};
    for (int i = 0; i < chunks; ++i) {
      size_t c = rng() % (kWeightFloats * 4 / kChunk + 1);
      size_t at = std::min(kWeightFloats - 1, c * kChunk / 4 + rng() % (kChunk / 4));
      weight[at] += 1.0f;
    }
    for (auto& x : moment) x = x * 0.9f + float(step);
    label = "step " + std::to_string(step);
  }
  State AsState(bool frozen_flag = true) const {
    State s;
    s.tensors.push_back({"base", DType::kFloat32, {int64_t(kFrozenFloats)}, {}, {}, frozen.data()});
    s.tensors.back().frozen = frozen_flag;
    s.tensors.push_back({"weight", DType::kFloat32, {int64_t(kWeightFloats)}, {}, {},
                         weight.data()});
    s.tensors.push_back({"moment", DType::kFloat32, {int64_t(kMomentFloats)}, {}, {},
                         moment.data()});
    s.blobs["label"] = label;
    return s;
  }
  std::vector<TensorDest> Dests() {
    return {{"base", DType::kFloat32, {int64_t(kFrozenFloats)}, {}, {}, frozen.data()},
            {"weight", DType::kFloat32, {int64_t(kWeightFloats)}, {}, {}, weight.data()},
            {"moment", DType::kFloat32, {int64_t(kMomentFloats)}, {}, {}, moment.data()}};
  }
  bool operator==(const FineTuneState& o) const {
    return frozen == o.frozen && weight == o.weight && moment == o.moment;
  }

  std::vector<float> frozen, weight, moment;
  std::string label = "start";
};

CheckpointOptions Incremental(const std::string& root, const char* engine = "auto") {
  CheckpointOptions o;
  o.root = root;
  o.chunk_size = kChunk;
  o.incremental = true;
  o.io_engine = engine;
  return o;
}

// Loads `step` into a fresh state and expects `want`, bit for bit, and a full
// verification pass (which reads referenced chunks too).
void ExpectLoads(Checkpointer* ckpt, uint64_t step, const FineTuneState& want) {
  FineTuneState got(12345);
  LoadOptions lo;
  lo.step = step;
  lo.verify_all = true;
  auto loaded = ckpt->Load(got.Dests(), lo);
  ASSERT_OK(loaded) << "step " << step;
  EXPECT_TRUE(got == want) << "step " << step << " does not load bit-exactly";
  EXPECT_EQ(loaded->blobs["label"], want.label) << "step " << step;
}

Manifest ManifestOf(const std::string& root, uint64_t step) {
  const std::string path = root + "/" + StepDirName(step) + "/" + kManifestName;
  auto m = DecodeManifest(ReadWholeFile(path), path);
  EXPECT_OK(m);
  return m.ok() ? *m : Manifest();
}

SaveStats SaveDurably(Checkpointer* ckpt, uint64_t step, const State& state) {
  auto h = ckpt->Save(step, state);
  EXPECT_OK(h);
  if (!h.ok()) return {};
  EXPECT_OK(h->durable.get());
  EXPECT_OK(ckpt->Flush());  // retention and stats settled
  return ckpt->stats().last.value_or(SaveStats{});
}

class IncrementalTest : public ::testing::TestWithParam<const char*> {};

TEST_P(IncrementalTest, ChainOfTwentySavesLoadsBitExactlyAtEveryKeptStep) {
  TempDir dir;
  CheckpointOptions o = Incremental(dir.Sub("ckpt"), GetParam());
  o.keep_last = 4;
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  FineTuneState state(1);
  std::vector<FineTuneState> saved;
  const uint64_t full = (kFrozenFloats + kWeightFloats + kMomentFloats) * 4;
  for (uint64_t step = 1; step <= 20; ++step) {
    state.Step(step, int(step % 4));  // 0 to 3 changed weight chunks
    saved.push_back(state);
    SaveStats st = SaveDurably(ckpt->get(), step, state.AsState(/*frozen_flag=*/step % 2 == 0));
    if (step == 1) {
      EXPECT_EQ(st.referenced_bytes, 0u);  // nothing to compare against yet
    } else {
      // The base and the unchanged weight chunks are referenced, whether the
      // base was flagged frozen (not copied) or found by its hash.
      EXPECT_GE(st.referenced_bytes, kFrozenFloats * 4 + (13 - 3) * kChunk - kChunk) << step;
      EXPECT_LT(st.stored_bytes, full / 3) << step;
    }
    auto committed = (*ckpt)->ListCommitted();
    ASSERT_OK(committed);
    // Retention keeps the newest four and exactly the older steps they
    // reference (step 1 holds the base), directly or through each other.
    EXPECT_EQ(committed->front(), 1u);
    std::set<uint64_t> needed(committed->end() - std::min<size_t>(4, committed->size()),
                              committed->end());
    for (auto it = committed->rbegin(); it != committed->rend(); ++it) {
      if (needed.count(*it) == 0) continue;
      for (const std::string& d : ManifestOf(o.root, *it).ReferencedDirs())
        needed.insert(*ParseStepDirName(d));
    }
    EXPECT_EQ(std::set<uint64_t>(committed->begin(), committed->end()), needed) << step;
    for (uint64_t kept : *committed) {
      ExpectLoads(ckpt->get(), kept, saved[kept - 1]);
      if (HasFatalFailure()) return;
    }
  }
  // A fresh process (Open rebuilds everything from the manifests) loads the newest.
  ckpt->reset();
  o.read_only = true;
  auto again = Checkpointer::Open(o);
  ASSERT_OK(again);
  ExpectLoads(again->get(), 20, saved.back());
}

TEST_P(IncrementalTest, FrozenShardsAreReferencedWithoutBeingWritten) {
  TempDir dir;
  auto ckpt = Checkpointer::Open(Incremental(dir.Sub("ckpt"), GetParam()));
  ASSERT_OK(ckpt);
  FineTuneState state(2);
  SaveStats first = SaveDurably(ckpt->get(), 1, state.AsState());
  EXPECT_GE(first.stored_bytes, kFrozenFloats * 4);  // a first save writes everything
  state.Step(2, 0);
  SaveStats second = SaveDurably(ckpt->get(), 2, state.AsState());
  // Only the moment and the blob are written; the base and the weight are referenced.
  EXPECT_EQ(second.referenced_bytes, (kFrozenFloats + kWeightFloats) * 4);
  EXPECT_LE(second.stored_bytes, kMomentFloats * 4 + kChunk);
  auto reader = CheckpointReader::Open(dir.Sub("ckpt") + "/" + StepDirName(2));
  ASSERT_OK(reader);
  auto report = (*reader)->Verify();
  ASSERT_OK(report);
  EXPECT_EQ(report->files, 1u);
  ExpectLoads(ckpt->get(), 2, state);
}

// Shards the previous save found whole in its base are hashed from their
// own memory, eagerly or lazily, and not copied when they still match; a
// chunk that changed since is found, copied and written.
TEST_P(IncrementalTest, ShardsUnchangedLastTimeAreMatchedInPlaceAndChangesStillWritten) {
  for (SnapshotMode mode : {SnapshotMode::kEager, SnapshotMode::kLazy}) {
    SCOPED_TRACE(mode == SnapshotMode::kLazy ? "lazy" : "eager");
    TempDir dir;
    CheckpointOptions o = Incremental(dir.Sub("ckpt"), GetParam());
    o.snapshot = mode;
    auto ckpt = Checkpointer::Open(o);
    ASSERT_OK(ckpt);
    FineTuneState state(3);
    const uint64_t unchanged = (kFrozenFloats + kWeightFloats) * 4;
    SaveDurably(ckpt->get(), 1, state.AsState(/*frozen_flag=*/false));
    state.Step(2, 0);
    SaveStats second = SaveDurably(ckpt->get(), 2, state.AsState(false));
    // Found unchanged by hashing the staged copy: nothing was known yet.
    EXPECT_EQ(second.referenced_bytes, unchanged);
    EXPECT_EQ(second.matched_in_place_bytes, 0u);
    state.Step(3, 0);
    SaveStats third = SaveDurably(ckpt->get(), 3, state.AsState(false));
    EXPECT_EQ(third.referenced_bytes, unchanged);
    EXPECT_EQ(third.matched_in_place_bytes, unchanged);
    EXPECT_LE(third.stored_bytes, kMomentFloats * 4 + kChunk);
    ExpectLoads(ckpt->get(), 3, state);
    // One chunk of the base and the last (short) chunk of the weight change.
    state.frozen[5 * kChunk / 4 + 7] += 1.0f;
    state.weight.back() += 1.0f;
    state.Step(4, 0);
    SaveStats fourth = SaveDurably(ckpt->get(), 4, state.AsState(false));
    const uint64_t short_chunk = kWeightFloats * 4 - 12 * kChunk;
    EXPECT_EQ(fourth.matched_in_place_bytes, unchanged - kChunk - short_chunk);
    EXPECT_EQ(fourth.referenced_bytes, fourth.matched_in_place_bytes);
    EXPECT_GE(fourth.stored_bytes, kMomentFloats * 4 + kChunk + short_chunk);
    ExpectLoads(ckpt->get(), 4, state);
  }
}

TEST_P(IncrementalTest, RetentionKeepsWhatKeptCheckpointsReferenceAndNothingElse) {
  TempDir dir;
  const std::string root = dir.Sub("ckpt");
  CheckpointOptions o = Incremental(root, GetParam());
  o.keep_last = 1;
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  FineTuneState state(3);
  for (uint64_t step = 1; step <= 4; ++step) {
    state.Step(step, 1);
    SaveDurably(ckpt->get(), step, state.AsState());
  }
  // Step 4 references step 1's base (and unchanged weight chunks of 1 to 3).
  auto committed = (*ckpt)->ListCommitted();
  ASSERT_OK(committed);
  EXPECT_EQ(committed->front(), 1u);
  EXPECT_EQ(committed->back(), 4u);
  ExpectLoads(ckpt->get(), 4, state);
  // Every byte changes: nothing older is referenced any more, so retention
  // removes all of it.
  for (auto& x : state.frozen) x += 1.0f;
  for (auto& x : state.weight) x += 1.0f;
  state.Step(5, 0);
  SaveDurably(ckpt->get(), 5, state.AsState(/*frozen_flag=*/false));
  SaveDurably(ckpt->get(), 6, state.AsState(/*frozen_flag=*/false));
  committed = (*ckpt)->ListCommitted();
  ASSERT_OK(committed);
  EXPECT_EQ(*committed, (std::vector<uint64_t>{5, 6}));  // 6 references 5
  ExpectLoads(ckpt->get(), 6, state);
}

TEST_P(IncrementalTest, AReferencedFileThatIsGoneIsNamedAndNeverLoadedSilently) {
  TempDir dir;
  const std::string root = dir.Sub("ckpt");
  auto ckpt = Checkpointer::Open(Incremental(root, GetParam()));
  ASSERT_OK(ckpt);
  FineTuneState state(4);
  SaveDurably(ckpt->get(), 1, state.AsState());
  state.Step(2, 1);
  SaveDurably(ckpt->get(), 2, state.AsState());
  const std::string gone = root + "/" + StepDirName(1) + "/" + "rank-00000.stint";
  ASSERT_OK(Env::Default()->RemoveFile(gone));

  auto reader = CheckpointReader::Open(root + "/" + StepDirName(2));
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), Code::kDataLoss);
  EXPECT_NE(reader.status().message().find(gone), std::string::npos) << reader.status().ToString();

  FineTuneState into(99);
  LoadOptions lo;
  lo.step = 2;
  auto loaded = (*ckpt)->Load(into.Dests(), lo);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find(gone), std::string::npos) << loaded.status().ToString();
  // The newest-first load reports both (step 1 lost its own file) and loads neither.
  auto newest = (*ckpt)->Load(into.Dests());
  ASSERT_FALSE(newest.ok());
  EXPECT_EQ(newest.status().code(), Code::kDataLoss);
  // And a save after that does not reference the lost file: it is refused
  // at its commit, naming what is gone, and the next one is full.
  state.Step(3, 1);
  auto h = (*ckpt)->Save(3, state.AsState());
  ASSERT_OK(h);
  Status d = h->durable.get();
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.message().find("rank-00000.stint"), std::string::npos) << d.ToString();
  EXPECT_FALSE((*ckpt)->Flush().ok());  // the background error, once
  state.Step(4, 1);
  SaveStats full = SaveDurably(ckpt->get(), 4, state.AsState());
  EXPECT_EQ(full.referenced_bytes, 0u);
  ExpectLoads(ckpt->get(), 4, state);
}

TEST_P(IncrementalTest, CorruptedReferencedChunkFailsVerificationNamingItsFile) {
  TempDir dir;
  const std::string root = dir.Sub("ckpt");
  auto ckpt = Checkpointer::Open(Incremental(root, GetParam()));
  ASSERT_OK(ckpt);
  FineTuneState state(5);
  SaveDurably(ckpt->get(), 1, state.AsState());
  state.Step(2, 0);
  SaveDurably(ckpt->get(), 2, state.AsState());
  // Flip one byte of the base's first chunk, in step 1's file.
  const std::string file = root + "/" + StepDirName(1) + "/rank-00000.stint";
  std::string bytes = ReadWholeFile(file);
  ASSERT_FALSE(bytes.empty());
  bytes[100] ^= 0x40;
  ASSERT_TRUE(WriteWholeFile(file, bytes));
  auto reader = CheckpointReader::Open(root + "/" + StepDirName(2));
  ASSERT_OK(reader);
  auto verified = (*reader)->Verify();
  ASSERT_FALSE(verified.ok());
  EXPECT_EQ(verified.status().code(), Code::kDataLoss);
  EXPECT_NE(verified.status().message().find(StepDirName(1) + "/rank-00000.stint"),
            std::string::npos)
      << verified.status().ToString();
}

TEST_P(IncrementalTest, CrashAtEveryOpOfAnIncrementalSaveLeavesThePreviousLoadable) {
  int crashes = 0;
  for (uint64_t k = 1;; ++k) {
    TempDir dir;
    const std::string root = dir.Sub("ckpt");
    FaultEnv env(Env::Default());
    FineTuneState state(6);
    FineTuneState at1 = state, at2 = state;
    bool completed = false, reported = false;
    {
      CheckpointOptions o = Incremental(root, GetParam());
      o.env = &env;
      o.io_size = 16384;  // many write ops
      o.keep_last = 1;
      auto ckpt = Checkpointer::Open(o);
      ASSERT_OK(ckpt);
      state.Step(1, 2);
      at1 = state;
      SaveDurably(ckpt->get(), 1, state.AsState());
      ASSERT_OK((*ckpt)->Flush());  // retention and SAVE_TIMES of step 1 come before op k
      state.Step(2, 2);
      at2 = state;
      env.CrashAtOp(env.ops() + k);
      auto h = (*ckpt)->Save(2, state.AsState());
      ASSERT_OK(h);
      Status d = h->durable.get();
      (*ckpt)->Flush().IgnoreError();  // a crash after the commit fails it: only waited for
      reported = d.ok();
      completed = !env.crashed();
      if (completed) {
        ASSERT_OK(d);
      }
    }
    ASSERT_OK(env.DropUnsyncedData());
    // A fresh process: the newest committed step loads bit-exactly and verifies.
    auto ckpt = Checkpointer::Open(Incremental(root, GetParam()));
    ASSERT_OK(ckpt);
    FineTuneState got(77);
    LoadOptions lo;
    lo.verify_all = true;
    auto loaded = (*ckpt)->Load(got.Dests(), lo);
    ASSERT_OK(loaded) << "crash at op " << k;
    EXPECT_TRUE(loaded->skipped.empty()) << "crash at op " << k << ": " << loaded->skipped[0];
    ASSERT_TRUE(loaded->step == 1 || loaded->step == 2) << loaded->step;
    EXPECT_TRUE(got == (loaded->step == 1 ? at1 : at2)) << "crash at op " << k;
    if (reported) {  // whatever crashed after its commit
      EXPECT_EQ(loaded->step, 2u) << "crash at op " << k;
    }
    if (HasFailure()) return;
    if (completed) break;
    ++crashes;
  }
  EXPECT_GT(crashes, 5);
}

TEST_P(IncrementalTest, ReplicaGetsTheCheckpointsItsStepsReference) {
  TempDir dir;
  CheckpointOptions o = Incremental(dir.Sub("tier1"), GetParam());
  o.replica_root = dir.Sub("tier2");
  o.keep_last = 1;
  o.replica_keep_last = 1;
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  FineTuneState state(8);
  for (uint64_t step = 1; step <= 3; ++step) {
    state.Step(step, 1);
    SaveDurably(ckpt->get(), step, state.AsState());
    ASSERT_OK((*ckpt)->FlushReplication());
  }
  auto replicated = (*ckpt)->ListReplicated();
  ASSERT_OK(replicated);
  EXPECT_EQ(replicated->front(), 1u);  // referenced by step 3, kept on tier 2 too
  EXPECT_EQ(replicated->back(), 3u);
  // The replica alone, as a job on another machine would see it.
  CheckpointOptions r;
  r.root = dir.Sub("tier2");
  r.read_only = true;
  auto replica = Checkpointer::Open(r);
  ASSERT_OK(replica);
  ExpectLoads(replica->get(), 3, state);
}

// Every byte of `state` changes, so the next save references nothing older.
void ChangeEverything(FineTuneState* state, uint64_t step) {
  for (auto& x : state->frozen) x += 1.0f;
  for (auto& x : state->weight) x += 1.0f;
  state->Step(step, 0);
}

bool References(const std::string& root, uint64_t step, uint64_t older) {
  auto dirs = ManifestOf(root, step).ReferencedDirs();
  return std::find(dirs.begin(), dirs.end(), StepDirName(older)) != dirs.end();
}

TEST_P(IncrementalTest, RetentionDeletesNothingWhenAKeptManifestCannotBeRead) {
  TempDir dir;
  const std::string root = dir.Sub("ckpt");
  FaultEnv env(Env::Default());
  CheckpointOptions o = Incremental(root, GetParam());
  o.env = &env;
  o.keep_last = 2;
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  FineTuneState state(9);
  SaveDurably(ckpt->get(), 1, state.AsState());
  state.Step(2, 1);
  SaveDurably(ckpt->get(), 2, state.AsState());
  const FineTuneState at2 = state;
  ASSERT_TRUE(References(root, 2, 1));
  ChangeEverything(&state, 3);
  // Step 3 references nothing; retention then keeps 2 and 3 and finds step
  // 1 due, but one transient EIO hides what step 2 references.
  env.FailReadsOf(StepDirName(2) + "/" + kManifestName, EIO);
  SaveDurably(ckpt->get(), 3, state.AsState(/*frozen_flag=*/false));
  env.Reset();
  EXPECT_EQ(*(*ckpt)->ListCommitted(), (std::vector<uint64_t>{1, 2, 3}));
  const std::string held_back = (*ckpt)->stats().retention_held_back;
  EXPECT_NE(held_back.find("retention deleted nothing"), std::string::npos) << held_back;
  EXPECT_NE(held_back.find(StepDirName(2)), std::string::npos) << held_back;
  EXPECT_NE(held_back.find("Input/output error"), std::string::npos) << held_back;
  ExpectLoads(ckpt->get(), 2, at2);
  // Readable again: the next retention deletes what nothing kept references.
  state.Step(4, 1);
  SaveDurably(ckpt->get(), 4, state.AsState());
  EXPECT_EQ(*(*ckpt)->ListCommitted(), (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ((*ckpt)->stats().retention_held_back, "");
  ExpectLoads(ckpt->get(), 4, state);
}

TEST_P(IncrementalTest, QuarantineRefusesAStepANewerOneReferences) {
  TempDir dir;
  const std::string root = dir.Sub("ckpt");
  CheckpointOptions o = Incremental(root, GetParam());
  o.keep_last = 0;
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  FineTuneState state(10);
  SaveDurably(ckpt->get(), 1, state.AsState());
  const FineTuneState at1 = state;
  ChangeEverything(&state, 2);
  SaveDurably(ckpt->get(), 2, state.AsState(/*frozen_flag=*/false));
  state.Step(3, 1);
  SaveDurably(ckpt->get(), 3, state.AsState());
  ASSERT_TRUE(References(root, 3, 2));
  ASSERT_FALSE(References(root, 2, 1));
  // Damage in step 2's file, in the base's first chunk, which step 3 references.
  const std::string file = root + "/" + StepDirName(2) + "/rank-00000.stint";
  std::string bytes = ReadWholeFile(file);
  bytes[100] ^= 0x40;
  ASSERT_TRUE(WriteWholeFile(file, bytes));

  FineTuneState got(77);
  auto r = (*ckpt)->Load(got.Dests());
  ASSERT_OK(r);
  EXPECT_EQ(r->step, 1u);
  EXPECT_TRUE(got == at1);
  EXPECT_EQ(r->skipped_steps, (std::vector<uint64_t>{3, 2}));
  // Moving step 2 alone would break step 3: refused, naming it; nothing moves.
  Status q = (*ckpt)->Quarantine(2);
  EXPECT_EQ(q.code(), Code::kFailedPrecondition) << q.ToString();
  EXPECT_NE(q.message().find(StepDirName(3) + " references its data"), std::string::npos)
      << q.ToString();
  EXPECT_EQ(*(*ckpt)->ListCommitted(), (std::vector<uint64_t>{1, 2, 3}));
  // In the order Load reports them (newest first) both go, and the next
  // load passes over nothing.
  for (uint64_t step : r->skipped_steps) ASSERT_OK((*ckpt)->Quarantine(step));
  EXPECT_EQ(*(*ckpt)->ListCommitted(), std::vector<uint64_t>{1});
  r = (*ckpt)->Load(got.Dests());
  ASSERT_OK(r);
  EXPECT_EQ(r->step, 1u);
  EXPECT_TRUE(r->skipped.empty());
}

TEST(IncrementalOptionsTest, IncrementalWithTierZeroIsRefused) {
  TempDir dir;
  CheckpointOptions o = Incremental(dir.Sub("ckpt"));
  o.keep_in_memory = true;
  auto ckpt = Checkpointer::Open(o);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), Code::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Engines, IncrementalTest, ::testing::Values("uring", "posix"));

}  // namespace
}  // namespace stint
