// Tier 2 in an S3-compatible object store, through the public API only:
// Checkpointer::Open with replica_root "s3://bucket/job" (the store's Env made
// from the AWS_* environment), against a real `rclone serve s3` on loopback
// (RcloneS3Test; without rclone every test skips and says why). Uploads with
// their own retention, a wiped tier 1 resumed from the store, read-only
// roots in the store, the server killed mid-upload, uploads left behind
// cleaned by the next writer, a corrupted object passed over, a wrong secret.
#include <gtest/gtest.h>

#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "objstore/object_store_env.h"
#include "stint/checkpointer.h"
#include "util/rclone_s3.h"
#include "util/checkpoint_checks.h"
#include "util/status_matchers.h"
#include "util/step_state.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::seconds;

constexpr char kJob[] = "job";

class ObjectTierTest : public RcloneS3Test {
 protected:
  // The Checkpointer reads the store's address and credentials the AWS way.
  void SetUp() override {
    RcloneS3Test::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ExportServerEnvironment();
  }

  std::string ReplicaRoot() const { return std::string("s3://") + kBucket + "/" + kJob; }

  CheckpointOptions Options(const std::string& local_root) const {
    CheckpointOptions o;
    o.root = local_.Sub(local_root);
    o.replica_root = ReplicaRoot();
    o.chunk_size = 64 << 10;
    return o;
  }

  // Saves each step, durable, then uploaded (else only the newest queued is).
  void SaveAndUpload(Checkpointer* ckpt, const std::vector<uint64_t>& steps) {
    for (uint64_t step : steps) {
      StepState s(step);
      auto h = ckpt->Save(step, s.AsState());
      ASSERT_OK(h);
      ASSERT_OK(h->durable.get());
      ASSERT_OK(ckpt->FlushReplication(std::chrono::minutes(2))) << "step " << step;
    }
  }

  // The step-* names under the job's prefix in the bucket, whatever they hold.
  std::set<std::string> StepPrefixes() {
    std::set<std::string> names;
    auto s3 = Client();
    auto listed = s3->ListObjects(std::string(kJob) + "/");
    EXPECT_OK(listed);
    if (!listed.ok()) return names;
    for (const S3ObjectInfo& o : *listed) {
      const std::string rest = o.key.substr(sizeof(kJob));
      const std::string name = rest.substr(0, rest.find('/'));
      if (name.rfind("step-", 0) == 0) names.insert(name);
    }
    return names;
  }

  // Multipart uploads in progress under `prefix`; rclone answers 404 where
  // none was ever started in the bucket.
  std::vector<S3MultipartUpload> Uploads(const std::string& prefix) {
    auto uploads = Client()->ListMultipartUploads(prefix);
    if (!uploads.ok() && uploads.status().code() == Code::kNotFound) return {};
    EXPECT_OK(uploads);
    return uploads.ok() ? *uploads : std::vector<S3MultipartUpload>{};
  }

  void SkipWithoutUploadListing() {
    auto uploads = Client()->ListMultipartUploads("");
    if (!uploads.ok() && uploads.status().code() == Code::kUnimplemented) {
      GTEST_SKIP() << "this rclone lacks ListMultipartUploads: " << uploads.status().ToString();
    }
  }

  TempDir local_;  // tier-1 roots (not served)
};

std::unique_ptr<Checkpointer> OpenOrFail(const CheckpointOptions& o) {
  auto ckpt = Checkpointer::Open(o);
  EXPECT_OK(ckpt);
  return ckpt.ok() ? std::move(ckpt).value() : nullptr;
}

TEST_F(ObjectTierTest, EveryCommitIsUploadedWithItsOwnRetention) {
  CheckpointOptions o = Options("nvme");
  o.replica_keep_last = 2;
  auto ckpt = OpenOrFail(o);
  ASSERT_NE(ckpt, nullptr);
  SaveAndUpload(ckpt.get(), {1, 2, 3, 4});
  EXPECT_EQ(*ckpt->ListReplicated(), (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(StepPrefixes(), (std::set<std::string>{"step-00000003", "step-00000004"}));
  auto stats = ckpt->stats();
  EXPECT_EQ(stats.replica_failed, 0u) << stats.last_replica_error;
  ASSERT_TRUE(stats.last_replica.has_value());
  EXPECT_EQ(stats.last_replica->step, 4u);
  EXPECT_GT(stats.last_replica->bytes, 80000u);
}

TEST_F(ObjectTierTest, AWipedTier1LoadsTheNewestStepFromTheStoreBitExactly) {
  {
    auto ckpt = OpenOrFail(Options("nvme"));
    ASSERT_NE(ckpt, nullptr);
    SaveAndUpload(ckpt.get(), {1, 2, 3});
  }
  std::filesystem::remove_all(local_.Sub("nvme"));  // the node and its disk are gone
  auto ckpt = OpenOrFail(Options("new-node"));
  ASSERT_NE(ckpt, nullptr);
  StepState out(0);
  auto loaded = ckpt->Load(out.Dests());
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->step, 3u);
  EXPECT_EQ(loaded->tier, 2);
  EXPECT_EQ(loaded->blobs["step"], "3");
  EXPECT_TRUE(out.SameData(StepState(3)));
}

TEST_F(ObjectTierTest, AReadOnlyCheckpointerOnTheStoreListsAndLoads) {
  {
    auto ckpt = OpenOrFail(Options("nvme"));
    ASSERT_NE(ckpt, nullptr);
    SaveAndUpload(ckpt.get(), {4, 5});
  }
  CheckpointOptions o;
  o.root = ReplicaRoot();
  o.read_only = true;
  auto ckpt = OpenOrFail(o);
  ASSERT_NE(ckpt, nullptr);
  EXPECT_EQ(*ckpt->ListCommitted(), (std::vector<uint64_t>{4, 5}));
  StepState out(0);
  auto loaded = ckpt->Load(out.Dests());
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->step, 5u);
  EXPECT_TRUE(out.SameData(StepState(5)));
  LoadOptions older;
  older.step = 4;
  loaded = ckpt->Load(out.Dests(), older);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->step, 4u);
  EXPECT_TRUE(out.SameData(StepState(4)));
}

// The local Env, whose reads of a tier-1 data file past its first part wait
// while the gate is closed: an upload is held after its first part, so the
// server can be killed in the middle of it, never before nor after.
class GatedReadEnv final : public EnvWrapper {
 public:
  explicit GatedReadEnv(Env* base) : EnvWrapper(base) {}

  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = false;
    }
    cv_.notify_all();
  }
  // Held reads let through on their own after this (a test that fails must
  // not hang).
  static constexpr auto kPatience = std::chrono::minutes(2);

  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const FileOptions& options) override {
    STINT_ASSIGN_OR_RETURN(auto file, EnvWrapper::NewRandomAccessFile(path, options));
    const std::string suffix = ".stint";
    if (path.size() < suffix.size() ||
        path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0) {
      return file;
    }
    return std::unique_ptr<RandomAccessFile>(std::make_unique<File>(this, std::move(file)));
  }

 private:
  class File final : public RandomAccessFile {
   public:
    File(GatedReadEnv* env, std::unique_ptr<RandomAccessFile> base)
        : env_(env), base_(std::move(base)) {}
    Result<size_t> Read(uint64_t offset, size_t n, void* dst) const override {
      if (offset >= kObjectPartBytes) {
        std::unique_lock<std::mutex> lock(env_->mu_);
        env_->cv_.wait_for(lock, kPatience, [this] { return !env_->closed_; });
      }
      return base_->Read(offset, n, dst);
    }
    Result<uint64_t> Size() const override { return base_->Size(); }
    bool direct_io() const override { return base_->direct_io(); }
    const std::string& path() const override { return base_->path(); }

   private:
    GatedReadEnv* const env_;
    const std::unique_ptr<RandomAccessFile> base_;
  };

  std::mutex mu_;
  std::condition_variable cv_;
  bool closed_ = false;  // guarded by mu_
};

TEST_F(ObjectTierTest, TheServerKilledMidUploadLeavesTier1AndTheStoreConsistent) {
  SkipWithoutUploadListing();
  GatedReadEnv env(Env::Default());
  CheckpointOptions o = Options("nvme");
  o.env = &env;
  o.chunk_size = 1 << 20;
  auto ckpt = OpenOrFail(o);
  ASSERT_NE(ckpt, nullptr);
  SaveAndUpload(ckpt.get(), {1});

  // 64 MiB of floats: eight parts, of which the first goes up before the gate holds the rest.
  constexpr int64_t kRows = (int64_t{64} << 20) / (100 * sizeof(float));
  const StepState big(2, kRows);
  env.Close();
  auto h = ckpt->Save(2, big.AsState());
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());  // tier 1 committed; its upload now starts
  // Wait (with a deadline far past a part's upload on loopback) until the
  // upload has a part stored.
  const std::string key = std::string(kJob) + "/step-00000002/rank-00000.stint";
  const auto deadline = Clock::now() + seconds(60);
  for (;;) {
    std::vector<S3MultipartUpload> uploads = Uploads(key);
    if (uploads.size() == 1) {
      auto parts = Client()->ListParts(key, uploads[0].upload_id);
      if (parts.ok() && !parts->empty()) break;
    }
    ASSERT_LT(Clock::now(), deadline) << "no part of " << key << " was uploaded in 60 s";
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_NO_FATAL_FAILURE(KillServer());
  env.Open();

  // An error, not a hang: the client's retries against a dead server take seconds.
  Status flushed = ckpt->FlushReplication(std::chrono::minutes(2));
  ASSERT_FALSE(flushed.ok());
  EXPECT_NE(flushed.code(), Code::kDeadlineExceeded) << flushed.ToString();
  EXPECT_NE(flushed.message().find("step-00000002"), std::string::npos) << flushed.ToString();
  Status replicated = h->replicated.get();
  EXPECT_FALSE(replicated.ok());
  EXPECT_OK(ckpt->Flush());  // never a tier-1 error
  EXPECT_EQ(*ckpt->ListCommitted(), (std::vector<uint64_t>{1, 2}));
  {
    StepState out(0, kRows);
    auto loaded = ckpt->Load(out.Dests());
    ASSERT_OK(loaded);
    EXPECT_EQ(loaded->step, 2u);
    EXPECT_EQ(loaded->tier, 1);
    EXPECT_TRUE(out.SameData(big));
  }

  ASSERT_NO_FATAL_FAILURE(RestartServer());
  // Only complete steps are listed, and nothing of step 2 lies in the bucket.
  EXPECT_EQ(*ckpt->ListReplicated(), (std::vector<uint64_t>{1}));
  EXPECT_EQ(StepPrefixes(), (std::set<std::string>{"step-00000001"}));
  // The next save uploads and commits.
  SaveAndUpload(ckpt.get(), {3});
  EXPECT_EQ(*ckpt->ListReplicated(), (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(ckpt->stats().replica_failed, 1u);
}

TEST_F(ObjectTierTest, APartialUploadLeftBehindIsRemovedByTheNextWriterAndNeverListed) {
  SkipWithoutUploadListing();
  {
    auto ckpt = OpenOrFail(Options("nvme"));
    ASSERT_NE(ckpt, nullptr);
    SaveAndUpload(ckpt.get(), {1, 2});
  }
  // What a writer killed mid-upload of step 9 leaves: objects with no
  // manifest, and a multipart upload never completed.
  auto s3 = Client();
  const std::string dir = std::string(kJob) + "/step-00000009/";
  const std::string data = Pattern(6 << 20, 9);
  ASSERT_OK(s3->PutObject(dir + "rank-00001.stint", data.data(), 1000));
  auto id = s3->CreateMultipartUpload(dir + "rank-00000.stint");
  ASSERT_OK(id);
  ASSERT_OK(s3->UploadPart(dir + "rank-00000.stint", *id, 1, data.data(), data.size()));
  // Another job's upload under a neighbouring prefix is not this root's.
  auto other = s3->CreateMultipartUpload("job-2/step-00000001/rank-00000.stint");
  ASSERT_OK(other);
  ASSERT_EQ(Uploads(std::string(kJob) + "/").size(), 1u);

  {
    CheckpointOptions ro;
    ro.root = ReplicaRoot();
    ro.read_only = true;
    auto reader = OpenOrFail(ro);
    ASSERT_NE(reader, nullptr);
    EXPECT_EQ(*reader->ListCommitted(), (std::vector<uint64_t>{1, 2}));
    StepState out(0);
    auto loaded = reader->Load(out.Dests());
    ASSERT_OK(loaded);
    EXPECT_EQ(loaded->step, 2u);
    EXPECT_TRUE(loaded->skipped.empty()) << loaded->skipped[0];
    EXPECT_TRUE(out.SameData(StepState(2)));
  }
  EXPECT_EQ(StepPrefixes().count("step-00000009"), 1u);  // a reader removes nothing

  auto writer = OpenOrFail(Options("new-node"));  // takes the replica root's lock
  ASSERT_NE(writer, nullptr);
  EXPECT_EQ(writer->stats().last_replica_error, "");
  EXPECT_EQ(StepPrefixes(), (std::set<std::string>{"step-00000001", "step-00000002"}));
  EXPECT_TRUE(Uploads(std::string(kJob) + "/").empty());
  EXPECT_EQ(Uploads("job-2/").size(), 1u);
  EXPECT_EQ(*writer->ListReplicated(), (std::vector<uint64_t>{1, 2}));
}

TEST_F(ObjectTierTest, ACorruptedObjectIsPassedOverAndNamed) {
  {
    auto ckpt = OpenOrFail(Options("nvme"));
    ASSERT_NE(ckpt, nullptr);
    SaveAndUpload(ckpt.get(), {6, 7});
  }
  // The file rclone serves the object from.
  const std::string path = dir_.Sub(kBucket) + "/" + kJob + "/step-00000007/rank-00000.stint";
  const auto size = std::filesystem::file_size(path);
  ASSERT_NO_FATAL_FAILURE(FlipByte(path, size / 2));

  CheckpointOptions o;
  o.root = ReplicaRoot();
  o.read_only = true;
  auto ckpt = OpenOrFail(o);
  ASSERT_NE(ckpt, nullptr);
  StepState out(0);
  auto loaded = ckpt->Load(out.Dests());
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->step, 6u);
  EXPECT_TRUE(out.SameData(StepState(6)));
  ASSERT_EQ(loaded->skipped.size(), 1u);
  EXPECT_NE(loaded->skipped[0].find("step-00000007"), std::string::npos) << loaded->skipped[0];
  EXPECT_EQ(loaded->skipped_steps, (std::vector<uint64_t>{7}));
}

TEST_F(ObjectTierTest, AWrongSecretFailsReplicationOnlyAndIsNeverShown) {
  const std::string wrong = "not-the-secret-Zz7wQ";
  ::setenv("AWS_SECRET_ACCESS_KEY", wrong.c_str(), 1);
  auto ckpt = OpenOrFail(Options("nvme"));
  ASSERT_NE(ckpt, nullptr);
  StepState s(1);
  auto h = ckpt->Save(1, s.AsState());
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());  // tier 1 commits
  Status replicated = h->replicated.get();
  EXPECT_EQ(replicated.code(), Code::kUnauthenticated) << replicated.ToString();
  Status flushed = ckpt->FlushReplication(std::chrono::minutes(2));
  EXPECT_EQ(flushed.code(), Code::kUnauthenticated) << flushed.ToString();
  EXPECT_OK(ckpt->Flush());
  EXPECT_EQ(*ckpt->ListCommitted(), (std::vector<uint64_t>{1}));
  const std::string error = ckpt->stats().last_replica_error;
  for (const std::string& text : {replicated.ToString(), flushed.ToString(), error}) {
    EXPECT_EQ(text.find(wrong), std::string::npos) << text;
    EXPECT_EQ(text.find(kSecret), std::string::npos) << text;
  }
  EXPECT_TRUE(StepPrefixes().empty());
}

}  // namespace
}  // namespace stint
