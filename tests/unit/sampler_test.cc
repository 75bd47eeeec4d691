// ResumableSampler and IndexPermutation: bijectivity (including the 2^k+1
// sizes that break a peer's Feistel sampler), exactly-once coverage across
// resizes and save/load, epoch tails, fingerprint checks.
#include "stint/resumable_sampler.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "util/status_matchers.h"

namespace stint {
namespace {

void ExpectBijection(uint64_t n, uint64_t key) {
  IndexPermutation p(n, key);
  std::vector<bool> seen(n, false);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t v = p(i);
    ASSERT_LT(v, n) << "n=" << n;
    ASSERT_FALSE(seen[v]) << "n=" << n << " key=" << key << ": " << v << " appears twice";
    seen[v] = true;
  }
}

TEST(IndexPermutation, BijectiveForEverySmallSize) {
  for (uint64_t n = 1; n <= 2048; ++n) ExpectBijection(n, n * 31 + 7);
}

TEST(IndexPermutation, BijectiveAtPowersOfTwoAndNeighbours) {
  for (unsigned k : {4u, 8u, 15u, 16u, 17u, 18u, 20u}) {
    for (uint64_t n : {(uint64_t{1} << k) - 1, uint64_t{1} << k, (uint64_t{1} << k) + 1}) {
      ExpectBijection(n, 12345);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(IndexPermutation, LargeDomainSampleHasNoCollisions) {
  const uint64_t n = (uint64_t{1} << 40) + 3;
  IndexPermutation p(n, 99);
  std::set<uint64_t> out;
  for (uint64_t i = 0; i < 200000; ++i) {
    uint64_t v = p(i * 5497558139ull % n);
    ASSERT_LT(v, n);
    ASSERT_TRUE(out.insert(v).second);
  }
}

TEST(IndexPermutation, ShufflesAndDependsOnKey) {
  IndexPermutation a(1000, 1), b(1000, 2);
  int fixed = 0, same = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    fixed += a(i) == i;
    same += a(i) == b(i);
  }
  EXPECT_LT(fixed, 20);
  EXPECT_LT(same, 20);
}

TEST(IndexPermutation, GoldenVectorsPinVersion1) {
  // A change here changes every resumed run's data order: bump kVersion instead.
  IndexPermutation p(1000, 42);
  std::vector<uint64_t> got;
  for (uint64_t i = 0; i < 8; ++i) got.push_back(p(i));
  EXPECT_EQ(got, (std::vector<uint64_t>{111, 498, 767, 789, 727, 624, 662, 947}));
}

SamplerConfig Config(uint64_t n, uint64_t g, bool drop_last = false) {
  SamplerConfig c;
  c.dataset_size = n;
  c.global_batch = g;
  c.seed = 7;
  c.drop_last = drop_last;
  return c;
}

// Runs `steps` committed steps with world sizes taken from `worlds` in turn
// (a resize every `resize_every` steps, through SaveState/LoadState into a
// fresh sampler as a restarted job would), recording what every rank got.
std::map<uint64_t, std::vector<uint64_t>> RunElastic(const SamplerConfig& cfg, uint64_t steps,
                                                     std::vector<int> worlds,
                                                     uint64_t resize_every) {
  std::map<uint64_t, std::vector<uint64_t>> by_epoch;  // epoch -> indices consumed
  auto sampler = ResumableSampler::Create(cfg);
  EXPECT_OK(sampler);
  size_t wi = 0;
  for (uint64_t s = 0; s < steps; ++s) {
    if (s > 0 && s % resize_every == 0) {
      std::string blob = sampler->SaveState();
      auto fresh = ResumableSampler::Create(cfg);
      EXPECT_OK(fresh->LoadState(blob));
      EXPECT_EQ(fresh->cursor(), sampler->cursor());
      sampler = std::move(fresh);
      wi = (wi + 1) % worlds.size();
    }
    int w = worlds[wi];
    uint64_t epoch = sampler->cursor().epoch;
    uint64_t total = 0;
    for (int r = 0; r < w; ++r) {
      auto idx = sampler->RankIndices(r, w);
      EXPECT_OK(idx);
      total += idx->size();
      by_epoch[epoch].insert(by_epoch[epoch].end(), idx->begin(), idx->end());
    }
    EXPECT_EQ(total, sampler->NextBatchSize());
    sampler->CommitStep();
  }
  return by_epoch;
}

void ExpectExactlyOncePerFullEpoch(const std::map<uint64_t, std::vector<uint64_t>>& by_epoch,
                                   uint64_t epoch_len, uint64_t n) {
  for (const auto& [epoch, ids] : by_epoch) {
    std::set<uint64_t> unique(ids.begin(), ids.end());
    EXPECT_EQ(unique.size(), ids.size()) << "epoch " << epoch << " repeats a sample";
    for (uint64_t id : ids) EXPECT_LT(id, n);
    if (std::next(by_epoch.find(epoch)) != by_epoch.end()) {
      EXPECT_EQ(ids.size(), epoch_len) << "epoch " << epoch << " is incomplete";
    }
  }
}

TEST(ResumableSampler, ExactlyOnceAcrossResizes1_2_3_2) {
  for (uint64_t n : {1000ull, 1025ull, 65537ull, 997ull, 5ull}) {
    for (bool drop_last : {false, true}) {
      SamplerConfig cfg = Config(n, 6, drop_last);
      if (drop_last && n < 6) continue;
      auto s = ResumableSampler::Create(cfg);
      ASSERT_OK(s);
      uint64_t steps = s->steps_per_epoch() * 2 + 3;  // into a third epoch
      auto got = RunElastic(cfg, steps, {1, 2, 3, 2}, 7);
      ExpectExactlyOncePerFullEpoch(got, s->epoch_length(), n);
      // The global order does not depend on the world sizes used.
      auto reference = RunElastic(cfg, steps, {1}, 1000000);
      EXPECT_EQ(got, reference) << "n=" << n;
    }
  }
}

TEST(ResumableSampler, FewerSamplesThanRanks) {
  SamplerConfig cfg = Config(2, 4);
  auto s = ResumableSampler::Create(cfg);
  ASSERT_OK(s);
  std::vector<uint64_t> all;
  for (int r = 0; r < 4; ++r) {
    auto idx = s->RankIndices(r, 4);
    ASSERT_OK(idx);
    EXPECT_LE(idx->size(), 1u);
    all.insert(all.end(), idx->begin(), idx->end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<uint64_t>{0, 1}));
  s->CommitStep();
  EXPECT_EQ(s->cursor(), (DataCursor{1, 0}));
}

TEST(ResumableSampler, CheckpointAtStepZeroAndAtEpochEnd) {
  SamplerConfig cfg = Config(12, 4);
  auto s = ResumableSampler::Create(cfg);
  ASSERT_OK(s);
  auto fresh = ResumableSampler::Create(cfg);
  ASSERT_OK(fresh->LoadState(s->SaveState()));  // step 0
  EXPECT_EQ(fresh->cursor(), (DataCursor{0, 0}));
  for (int i = 0; i < 3; ++i) s->CommitStep();
  EXPECT_EQ(s->cursor(), (DataCursor{1, 0}))
      << "an exact epoch end is stored as the next epoch's start";
  ASSERT_OK(fresh->LoadState(s->SaveState()));
  ASSERT_OK(fresh->LoadState(s->SaveState())) << "loading twice is idempotent";
  EXPECT_EQ(fresh->cursor(), (DataCursor{1, 0}));
  EXPECT_EQ(*fresh->RankIndices(0, 1), *s->RankIndices(0, 1));
}

TEST(ResumableSampler, WorkersSplitARankSlice) {
  SamplerConfig cfg = Config(100, 12);
  auto s = ResumableSampler::Create(cfg);
  ASSERT_OK(s);
  auto rank = s->RankIndices(1, 2);
  ASSERT_OK(rank);
  std::vector<uint64_t> joined;
  for (int w = 0; w < 4; ++w) {
    auto part = s->WorkerIndices(1, 2, w, 4);
    ASSERT_OK(part);
    joined.insert(joined.end(), part->begin(), part->end());
  }
  EXPECT_EQ(joined, *rank);
}

TEST(ResumableSampler, ClearErrors) {
  EXPECT_EQ(ResumableSampler::Create(Config(0, 4)).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ResumableSampler::Create(Config(3, 4, true)).status().code(), Code::kInvalidArgument);
  auto s = ResumableSampler::Create(Config(100, 6));
  ASSERT_OK(s);
  auto bad_world = s->RankIndices(0, 4);
  EXPECT_EQ(bad_world.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad_world.status().message().find("not divisible by world size 4"), std::string::npos);

  std::string saved = s->SaveState();
  SamplerConfig other = Config(101, 6);
  auto changed = ResumableSampler::Create(other);
  Status st = changed->LoadState(saved);
  EXPECT_EQ(st.code(), Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("dataset_size was 100, is 101"), std::string::npos) << st.message();
  other = Config(100, 6);
  other.seed = 8;
  EXPECT_NE(ResumableSampler::Create(other)->LoadState(saved).message().find("seed was 7, is 8"),
            std::string::npos);
  EXPECT_EQ(s->LoadState("{not json").code(), Code::kDataLoss);
  EXPECT_EQ(s->LoadState(R"({"version": 9})").code(), Code::kUnimplemented);
}

}  // namespace
}  // namespace stint
