// Where a job's checkpoints are (tools/stintd/core/storage.h): locations,
// which pools reach them, the worker's report, and how the planner starts
// and moves a job only where its newest step can be read.
#include "stintd/core/storage.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "stintd/core/model.h"
#include "stintd/core/policy.h"
#include "stintd/core/transitions.h"
#include "util/policy_cluster.h"
#include "util/status_matchers.h"

namespace stint::stintd {
namespace {

TEST(StorageLocation, NormalizesPathsAndObjectStorePrefixes) {
  EXPECT_EQ(*NormalizeLocation("location", "/mnt/ckpt/"), "/mnt/ckpt");
  EXPECT_EQ(*NormalizeLocation("location", "/"), "/");
  EXPECT_EQ(*NormalizeLocation("location", "s3://bucket/runs//"), "s3://bucket/runs");
  EXPECT_EQ(*NormalizeLocation("location", "s3://bucket/"), "s3://bucket");
  for (const char* bad : {"", "relative/dir", "s3://", "s3:///x", "/a/../b", "/a b", "/a?x=1",
                          "s3://key:secret@bucket/x", "http://host/x"}) {
    Result<std::string> r = NormalizeLocation("storage", bad);
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_EQ(NormalizeLocation("storage", std::string(2000, 'a').insert(0, "/")).status().code(),
            Code::kInvalidArgument);
  Result<std::vector<std::string>> storage = NormalizeStorage({"/a/", "/a", "s3://b"});
  ASSERT_OK(storage.status());
  EXPECT_EQ(*storage, (std::vector<std::string>{"/a", "s3://b"}));
}

TEST(StorageLocation, UnderWholePathComponents) {
  EXPECT_TRUE(LocationUnder("/mnt/ckpt", "/mnt/ckpt"));
  EXPECT_TRUE(LocationUnder("/mnt/ckpt", "/mnt/ckpt/job7"));
  EXPECT_FALSE(LocationUnder("/mnt/ckpt", "/mnt/ckpt2/job7"));
  EXPECT_TRUE(LocationUnder("/", "/anything"));
  EXPECT_TRUE(LocationUnder("s3://b/runs", "s3://b/runs/job7"));
  EXPECT_FALSE(LocationUnder("s3://b/runs", "s3://b/runs-old/job7"));
  EXPECT_TRUE(IsObjectStoreLocation("s3://b/x"));
  EXPECT_FALSE(IsObjectStoreLocation("/s3/x"));
}

TEST(StorageReach, DeclaredPrefixesUndeclaredPoolsAndAPoolsOwnDisk) {
  ClusterState s;
  Pool undeclared("any");
  Pool cloud("cloud");
  cloud.storage = {"s3://b/runs"};
  Pool onprem("onprem");
  onprem.storage = {"s3://b/runs", "/shared"};
  const StoredStep from_onprem{5, 1, 0, "onprem", 1, 0};
  EXPECT_TRUE(PoolReaches(s, nullptr, "/nvme/job", from_onprem));
  EXPECT_TRUE(PoolReaches(s, &undeclared, "/nvme/job", from_onprem));
  EXPECT_TRUE(PoolReaches(s, &cloud, "s3://b/runs/job", from_onprem));
  EXPECT_FALSE(PoolReaches(s, &cloud, "/shared/job", from_onprem));
  EXPECT_FALSE(PoolReaches(s, &cloud, "/nvme/job", from_onprem));
  // What nobody declared is reached from the pool that wrote it only.
  EXPECT_TRUE(PoolReaches(s, &onprem, "/nvme/job", from_onprem));
  EXPECT_FALSE(PoolReaches(s, &onprem, "/nvme/job", StoredStep{5, 1, 0, "", 1, 0}));
}

// Two pools that share only a bucket: "onprem" (3.00 per GPU-hour) and
// "cloud" (1.00), each with 8 GPUs free, and a 1-GPU job whose checkpoints
// are on an onprem node's disk and, once replicated, in the bucket.
struct TwoSites {
  Cluster c;
  int64_t onprem_window = 0, cloud_window = 0;
  Job* job = nullptr;
};
TwoSites TwoSitesCase() {
  TwoSites t;
  t.onprem_window = t.c.Window("onprem", 8, kNow - Hours(2), kNow + Hours(100));
  t.cloud_window = t.c.Window("cloud", 8, kNow - Hours(2), kNow + Hours(100));
  t.c.Price("onprem", 3, PoolPricing::kOnPrem);
  t.c.Price("cloud", 1);
  t.c.s.pools.at("onprem").storage = {"s3://bucket/runs"};
  t.c.s.pools.at("cloud").storage = {"s3://bucket/runs"};
  t.job = &t.c.Pending(1);
  return t;
}

int64_t StartWindow(const Plan& plan, int64_t job_id) {
  const StartDecision* d = StartOf(plan, job_id);
  return d == nullptr || d->allocs.empty() ? 0 : d->allocs.front().window_id;
}

TEST(StoragePolicy, AJobWithNoLocationReportedGoesToTheCheapestPool) {
  TwoSites t = TwoSitesCase();
  EXPECT_EQ(StartWindow(PlanAt(t.c.s), t.job->id), t.cloud_window);
}

TEST(StoragePolicy, ANewestStepOnOneSitesDiskKeepsTheJobThere) {
  TwoSites t = TwoSitesCase();
  t.job->stored["/nvme/job"] = StoredStep{40, 1, 1 << 30, "onprem", 3, kNow};
  t.job->stored["s3://bucket/runs/job"] = StoredStep{30, 2, 1 << 30, "onprem", 3, kNow};
  EXPECT_EQ(StartWindow(PlanAt(t.c.s), t.job->id), t.onprem_window);

  // Once step 40 is in the bucket too, the cheaper site can resume it.
  t.job->stored["s3://bucket/runs/job"].step = 40;
  EXPECT_EQ(StartWindow(PlanAt(t.c.s), t.job->id), t.cloud_window);
}

TEST(StoragePolicy, NoReachablePoolWaitsWithReasonStorage) {
  TwoSites t = TwoSitesCase();
  t.c.s.windows.at(t.onprem_window).closed_early = true;
  t.c.s.windows.at(t.onprem_window).end_ms = kNow - 1;
  t.job->stored["/nvme/job"] = StoredStep{40, 1, 1 << 30, "onprem", 3, kNow};
  const Plan plan = PlanAt(t.c.s);
  EXPECT_EQ(StartOf(plan, t.job->id), nullptr);
  const PendingInfo& info = Info(plan, t.job->id);
  EXPECT_EQ(info.reason, BlockReason::kStorage);
  EXPECT_STREQ(BlockReasonName(info.reason), "storage");
  EXPECT_NE(info.detail.find("step 40 at /nvme/job (step 40, pool onprem)"), std::string::npos)
      << info.detail;
}

TEST(StoragePolicy, ReadingFromAnObjectStoreCostsItsTransfer) {
  TwoSites t = TwoSitesCase();
  t.c.Price("cloud", 3);  // as dear as onprem, which also sees the step on a shared path
  t.c.s.pools.at("onprem").storage.push_back("/shared");
  t.job->stored["/shared/job"] = StoredStep{40, 1, 0, "onprem", 3, kNow};
  t.job->stored["s3://bucket/runs/job"] = StoredStep{40, 2, uint64_t{400} << 30, "onprem", 3, kNow};
  EXPECT_EQ(StartWindow(PlanAt(t.c.s), t.job->id), t.onprem_window);
}

// Price migration between the two sites.
struct Moving {
  TwoSites t;
  int64_t seg = 0;
  PolicyConfig config;
};
Moving MovingCase() {
  Moving m;
  m.t = TwoSitesCase();
  m.t.c.s.jobs.erase(m.t.job->id);  // the running job alone
  m.t.job = nullptr;
  Segment& seg = m.t.c.Running({{m.t.onprem_window, 8}}, Priority::kLow, Hours(1));
  seg.price_per_gpu_hour = 3;
  m.t.c.JobOf(seg).remaining_seconds = 4 * 3600;
  m.seg = seg.id;
  m.config.price_migration = true;
  return m;
}

TEST(StoragePolicy, ASegmentMovesOnlyWhereItWritesIsReachable) {
  Moving m = MovingCase();
  Job& job = m.t.c.JobOf(m.t.c.s.segments.at(m.seg));
  job.stored["/nvme/job"] = StoredStep{40, 1, 1 << 30, "onprem", m.seg, kNow};
  EXPECT_EQ(NoticeOf(PlanAt(m.t.c.s, kNow, m.config), m.seg), nullptr);

  // It replicates to the bucket: its emergency checkpoint goes there before
  // it acks, so the notice leaves time for the upload (1 GiB at 0.5 GB/s).
  job.stored["s3://bucket/runs/job"] = StoredStep{30, 2, 1 << 30, "onprem", m.seg, kNow};
  const Plan plan = PlanAt(m.t.c.s, kNow, m.config);
  const NoticeDecision* n = NoticeOf(plan, m.seg);
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->reason, NoticeReason::kMigrate);
  const double upload_s = (1 << 30) / 0.5e9;
  EXPECT_EQ(n->deadline_ms, kNow + SecondsToMs(30 + upload_s + 10));
}

TEST(StoragePolicy, AnOlderSegmentsReportsDoNotMakeATargetReachable) {
  Moving m = MovingCase();
  Job& job = m.t.c.JobOf(m.t.c.s.segments.at(m.seg));
  job.stored["/nvme/job"] = StoredStep{40, 1, 1 << 30, "onprem", m.seg, kNow};
  job.stored["s3://bucket/runs/job"] = StoredStep{10, 2, 1 << 30, "onprem", m.seg - 100, kNow};
  EXPECT_EQ(NoticeOf(PlanAt(m.t.c.s, kNow, m.config), m.seg), nullptr);
}

TEST(StorageTransitions, AWorkerReportsWhereItsStepIs) {
  TwoSites t = TwoSitesCase();
  Segment& seg = t.c.Running({{t.onprem_window, 1}});
  t.c.Workers(seg, 1);
  int64_t worker = 0;
  for (const auto& [id, w] : t.c.s.workers) worker = id;
  const int64_t job = seg.job_id;
  Changes ch;
  ASSERT_OK(ReportStored(t.c.s, worker, "s3://bucket/runs/job/", 2, 7, 4096, kNow, &ch));
  EXPECT_EQ(ch.jobs.count(job), 1u);
  const StoredStep& at = t.c.s.jobs.at(job).stored.at("s3://bucket/runs/job");
  EXPECT_EQ(at.step, 7);
  EXPECT_EQ(at.tier, 2);
  EXPECT_EQ(at.bytes, 4096u);
  EXPECT_EQ(at.pool, "onprem");
  EXPECT_EQ(at.segment_id, seg.id);
  // An older report (a late retry) changes nothing.
  ASSERT_OK(ReportStored(t.c.s, worker, "s3://bucket/runs/job", 2, 6, 1, kNow, &ch));
  EXPECT_EQ(t.c.s.jobs.at(job).stored.at("s3://bucket/runs/job").step, 7);

  EXPECT_EQ(ReportStored(t.c.s, worker, "runs/job", 1, 8, 0, kNow, &ch).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(ReportStored(t.c.s, worker, "/x", 3, 8, 0, kNow, &ch).code(), Code::kInvalidArgument);
  EXPECT_EQ(ReportStored(t.c.s, 999999, "/x", 1, 8, 0, kNow, &ch).code(), Code::kNotFound);

  // At most kMaxStoredLocations: the oldest step goes first.
  for (size_t i = 0; i < kMaxStoredLocations + 3; i++) {
    ASSERT_OK(ReportStored(t.c.s, worker, "/nvme/node" + std::to_string(i), 1,
                           100 + static_cast<int64_t>(i), 0, kNow, &ch));
  }
  const auto& stored = t.c.s.jobs.at(job).stored;
  EXPECT_EQ(stored.size(), kMaxStoredLocations);
  EXPECT_EQ(stored.count("s3://bucket/runs/job"), 0u);
  EXPECT_EQ(stored.count("/nvme/node0"), 0u);
  EXPECT_EQ(stored.count("/nvme/node18"), 1u);
}

TEST(StorageTransitions, PoolStorageIsValidatedAndReplaced) {
  ClusterState s;
  Changes ch;
  Pool p("cloud");
  p.storage = {"s3://bucket/runs/"};
  ASSERT_OK(AddPool(s, p, kNow, &ch));
  EXPECT_EQ(s.pools.at("cloud").storage, std::vector<std::string>{"s3://bucket/runs"});
  Pool bad("bad");
  bad.storage = {"relative"};
  EXPECT_EQ(AddPool(s, bad, kNow, &ch).code(), Code::kInvalidArgument);
  ASSERT_OK(SetPoolStorage(s, "cloud", {"/shared", "s3://other"}, &ch));
  EXPECT_EQ(s.pools.at("cloud").storage, (std::vector<std::string>{"/shared", "s3://other"}));
  ASSERT_OK(SetPoolStorage(s, "cloud", {}, &ch));
  EXPECT_TRUE(s.pools.at("cloud").storage.empty());
  EXPECT_EQ(SetPoolStorage(s, "nope", {}, &ch).code(), Code::kNotFound);
}

}  // namespace
}  // namespace stint::stintd
