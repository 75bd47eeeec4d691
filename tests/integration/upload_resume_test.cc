// An upload into an object store resumes after its process dies: a step of
// two files (two ranks) is uploaded by store_uploader, which is SIGKILLed
// once the first file is up whole and the second not started; a new
// Checkpointer on the same roots uploads only the second file and the
// manifest, and the step loads from the store bit-exactly. With the server
// kept, the first file is recognised by its digest metadata; with the
// server restarted (rclone serve s3 keeps metadata in memory only), by
// reading its chunks back. Before the resume the step is not listed and
// does not load. Against a real `rclone serve s3` (RcloneS3Test).
#include <gtest/gtest.h>

#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "stint/checkpointer.h"
#include "stint/commit_channel.h"
#include "util/rclone_s3.h"
#include "util/status_matchers.h"
#include "util/subprocess.h"
#include "util/temp_dir.h"

#ifndef STINT_STORE_UPLOADER
#define STINT_STORE_UPLOADER ""
#endif

namespace stint {
namespace {

constexpr char kJob[] = "job";
// Three parts of a multipart upload per rank's file.
constexpr int64_t kFloats = int64_t{6} << 20;

// The commit channel of two ranks in one process.
class MemoryChannel final : public CommitChannel {
 public:
  Status Set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    kv_[key] = value;
    return Status::OK();
  }
  Result<std::optional<std::string>> Get(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = kv_.find(key);
    if (it == kv_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }
  Status Delete(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    kv_.erase(key);
    return Status::OK();
  }
  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t sum = (kv_.count(key) ? std::stoll(kv_[key]) : 0) + delta;
    kv_[key] = std::to_string(sum);
    return sum;
  }
  std::string Describe() const override { return "memory channel"; }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> kv_;  // guarded by mu_
};

// Rank r's tensor: "t<r>", every float depending on r and its index.
std::vector<float> RankData(int rank) {
  std::vector<float> v(kFloats);
  for (int64_t i = 0; i < kFloats; ++i) v[i] = float(i % 100003) * 0.5f + float(rank);
  return v;
}

class UploadResumeTest : public RcloneS3Test, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    if (std::string(STINT_STORE_UPLOADER).empty()) GTEST_SKIP() << "store_uploader not built";
    RcloneS3Test::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ExportServerEnvironment();
  }

  std::string Root() const { return local_.Sub("nvme"); }
  std::string ReplicaRoot() const { return std::string("s3://") + kBucket + "/" + kJob; }
  std::string StepKey(const std::string& name) const {
    return std::string(kJob) + "/step-00000001/" + name;
  }

  // Step 1 on tier 1 only: two ranks, one file each.
  void SaveTwoRanks() {
    MemoryChannel channel;
    std::vector<std::unique_ptr<Checkpointer>> ranks;
    for (int r = 0; r < 2; ++r) {
      CheckpointOptions o;
      o.root = Root();
      o.rank = r;
      o.world_size = 2;
      o.commit_channel = &channel;
      o.chunk_size = 1 << 20;
      auto ckpt = Checkpointer::Open(o);
      ASSERT_OK(ckpt);
      ranks.push_back(std::move(ckpt).value());
    }
    std::vector<std::vector<float>> data = {RankData(0), RankData(1)};
    std::vector<Status> outcome(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        State s;
        s.tensors.push_back({"t" + std::to_string(r), DType::kFloat32, {kFloats}, {}, {},
                             data[r].data()});
        auto h = ranks[r]->Save(1, s);
        outcome[r] = h.ok() ? h->durable.get() : h.status();
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_OK(outcome[0]);
    ASSERT_OK(outcome[1]);
  }

  uint64_t Tier1Size(const std::string& name) const {
    return std::filesystem::file_size(Root() + "/step-00000001/" + name);
  }

  TempDir local_;
};

TEST_P(UploadResumeTest, AKilledUploaderResumesSendingOnlyWhatIsNotUpWhole) {
  const bool restart_server = GetParam();
  ASSERT_NO_FATAL_FAILURE(SaveTwoRanks());

  // The first upload: cut off (SIGKILL) once rank 0's file is up whole.
  ChildProcess uploader(STINT_STORE_UPLOADER, {Root(), ReplicaRoot(), "rank-00001.stint"});
  ASSERT_TRUE(uploader.WaitForLine("holding", 120)) << uploader.output();
  auto s3 = Client();
  auto first = s3->HeadObject(StepKey("rank-00000.stint"));
  ASSERT_OK(first);
  EXPECT_EQ(first->size, Tier1Size("rank-00000.stint"));
  // Its digest went up with it (what the resume compares first).
  ASSERT_EQ(first->metadata.size(), 1u);
  EXPECT_EQ(first->metadata[0].first, "stint-digest");
  EXPECT_EQ(first->metadata[0].second.size(), 16u);
  EXPECT_EQ(s3->HeadObject(StepKey("MANIFEST.json")).status().code(), Code::kNotFound);
  ASSERT_EQ(::kill(uploader.pid(), SIGKILL), 0);
  uploader.Wait();
  if (restart_server) {
    ASSERT_NO_FATAL_FAILURE(KillServer());
    ASSERT_NO_FATAL_FAILURE(RestartServer());
    // rclone kept the metadata in memory: the resume reads the chunks back.
    auto again = s3->HeadObject(StepKey("rank-00000.stint"));
    ASSERT_OK(again);
    EXPECT_TRUE(again->metadata.empty());
  }

  // Uncommitted: neither listed nor loadable from the store.
  {
    CheckpointOptions ro;
    ro.root = ReplicaRoot();
    ro.read_only = true;
    auto reader = Checkpointer::Open(ro);
    ASSERT_OK(reader);
    EXPECT_TRUE((*reader)->ListCommitted()->empty());
    std::vector<float> t0(kFloats);
    auto loaded = (*reader)->Load({{"t0", DType::kFloat32, {kFloats}, {}, {}, t0.data()}});
    EXPECT_EQ(loaded.status().code(), Code::kNotFound) << loaded.status().ToString();
  }

  // The restart: the same roots; step 1 is replicated at open, without
  // sending rank 0's file again.
  const uint64_t manifest_bytes = Tier1Size("MANIFEST.json");
  {
    CheckpointOptions o;
    o.root = Root();
    o.replica_root = ReplicaRoot();
    auto ckpt = Checkpointer::Open(o);
    ASSERT_OK(ckpt);
    ASSERT_OK((*ckpt)->FlushReplication(std::chrono::minutes(2)));
    CheckpointerStats stats = (*ckpt)->stats();
    ASSERT_TRUE(stats.last_replica.has_value()) << stats.last_replica_error;
    EXPECT_EQ(stats.last_replica->step, 1u);
    EXPECT_EQ(stats.last_replica->bytes, Tier1Size("rank-00001.stint") + manifest_bytes);
    EXPECT_LT(stats.last_replica->bytes,
              Tier1Size("rank-00000.stint") + Tier1Size("rank-00001.stint") + manifest_bytes);
    EXPECT_EQ(*(*ckpt)->ListReplicated(), std::vector<uint64_t>{1});
  }

  // Tier 1 lost: the step loads from the store, bit-exactly.
  std::filesystem::remove_all(Root());
  CheckpointOptions ro;
  ro.root = ReplicaRoot();
  ro.read_only = true;
  auto reader = Checkpointer::Open(ro);
  ASSERT_OK(reader);
  std::vector<float> t0(kFloats), t1(kFloats);
  auto loaded = (*reader)->Load({{"t0", DType::kFloat32, {kFloats}, {}, {}, t0.data()},
                                 {"t1", DType::kFloat32, {kFloats}, {}, {}, t1.data()}});
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->step, 1u);
  EXPECT_TRUE(t0 == RankData(0));
  EXPECT_TRUE(t1 == RankData(1));
}

INSTANTIATE_TEST_SUITE_P(ServerKeptOrRestarted, UploadResumeTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "ServerRestarted" : "ServerKept");
                         });

}  // namespace
}  // namespace stint
