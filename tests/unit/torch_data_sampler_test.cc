// TorchDataSampler with a real torch::data DataLoader (worker threads and
// prefetch): stopping mid-epoch and resuming on a new loader consumes every
// sample exactly once, because only committed steps count.
#include "torch_data_sampler.h"

#include <gtest/gtest.h>
#include <torch/data/dataloader.h>
#include <torch/data/datasets/map.h>
#include <torch/data/datasets/tensor.h>
#include <torch/data/transforms/stack.h>

#include <set>

#include "util/status_matchers.h"

namespace stint {
namespace {

TEST(TorchDataSampler, ResumeMidEpochOnANewLoaderIsExactlyOnce) {
  constexpr int64_t kN = 1001, kBatch = 16;
  torch::Tensor ids = torch::arange(kN, torch::kLong);
  auto dataset = torch::data::datasets::TensorDataset(ids).map(
      torch::data::transforms::Stack<torch::data::TensorExample>());
  SamplerConfig cfg;
  cfg.dataset_size = kN;
  cfg.global_batch = kBatch;
  cfg.seed = 11;
  auto sampler = ResumableSampler::Create(cfg);
  ASSERT_OK(sampler);

  std::vector<int64_t> seen;
  std::string saved;
  {
    auto loader = torch::data::make_data_loader(
        dataset, TorchDataSampler(&*sampler, 0, 1),
        torch::data::DataLoaderOptions().batch_size(kBatch).workers(2).max_jobs(4));
    int steps = 0;
    for (auto& batch : *loader) {
      for (int64_t i = 0; i < batch.data.size(0); ++i)
        seen.push_back(batch.data[i].item<int64_t>());
      sampler->CommitStep();
      if (++steps == 20) break;  // "preempted": the loader has prefetched past step 20
    }
    saved = sampler->SaveState();
  }
  auto resumed = ResumableSampler::Create(cfg);
  ASSERT_OK(resumed->LoadState(saved));
  auto loader =
      torch::data::make_data_loader(dataset, TorchDataSampler(&*resumed, 0, 1),
                                    torch::data::DataLoaderOptions().batch_size(kBatch).workers(2));
  for (auto& batch : *loader) {
    for (int64_t i = 0; i < batch.data.size(0); ++i) seen.push_back(batch.data[i].item<int64_t>());
    resumed->CommitStep();
  }
  ASSERT_EQ(seen.size(), size_t(kN));
  std::set<int64_t> unique(seen.begin(), seen.end());
  EXPECT_EQ(unique.size(), size_t(kN));
  EXPECT_EQ(resumed->cursor(), (DataCursor{1, 0}));
  // The order is the sampler's global order, batch by batch.
  for (size_t p = 0; p < seen.size(); ++p) ASSERT_EQ(uint64_t(seen[p]), sampler->GlobalIndex(0, p));
}

TEST(TorchDataSampler, RanksSplitEachStep) {
  SamplerConfig cfg;
  cfg.dataset_size = 100;
  cfg.global_batch = 12;
  auto s = ResumableSampler::Create(cfg);
  ASSERT_OK(s);
  TorchDataSampler r0(&*s, 0, 3), r1(&*s, 1, 3), r2(&*s, 2, 3);
  std::set<size_t> all;
  for (int step = 0; step < 9; ++step) {
    for (TorchDataSampler* r : {&r0, &r1, &r2}) {
      auto b = r->next(4);
      ASSERT_TRUE(b.has_value());
      all.insert(b->begin(), b->end());
    }
  }
  EXPECT_EQ(all.size(), 100u);  // 8 full steps and the 4-sample tail
  EXPECT_FALSE(r0.next(4).has_value()) << "epoch ends";
}

}  // namespace
}  // namespace stint
