// The multi-rank commit's messages and merge, without processes: reports and
// decisions round-trip and refuse malformed input, ranks' shards merge into
// one manifest, overlapping or missing shards are refused naming the ranks,
// and each rank sees its own blobs.
#include <gtest/gtest.h>

#include "checkpoint/node_commit.h"
#include "checkpoint/peer_replicas.h"
#include "checkpoint/rank_commit.h"
#include "util/status_matchers.h"

namespace stint {
namespace {

// Rank `rank`'s report: rows [first, first + count) of an [8, 4] float32
// tensor "w", and a blob "rng".
RankReport Report(int rank, int64_t first, int64_t count) {
  RankReport r;
  r.rank = rank;
  r.fencing_token = 40 + rank;
  r.tmp = ".tmp-7-00000000000000ab";
  const std::string file = "rank-0000" + std::to_string(rank) + ".stint";
  const uint64_t bytes = uint64_t(count) * 4 * 4;
  ChunkRecord chunk;
  chunk.file_offset = 0;
  chunk.stored_len = chunk.raw_len = bytes;
  chunk.xxh3 = 0x1234 + rank;
  r.part.step = 7;
  r.part.tensors.push_back(TensorRecord{
      "w", DType::kFloat32, {8, 4}, {ShardRecord{{first, 0}, {count, 4}, file, {chunk}}}});
  ChunkRecord blob_chunk = chunk;
  blob_chunk.file_offset = 4096;
  blob_chunk.stored_len = blob_chunk.raw_len = 3;
  r.part.blobs.push_back(BlobRecord{"rng", file, {blob_chunk}});
  r.part.files.push_back(FileRecord{file, 8192, FileDigest({chunk, blob_chunk}, 8192)});
  return r;
}

TEST(RankReport, RoundTripsWithItsPartOrItsError) {
  RankReport ok = Report(2, 4, 4);
  auto decoded = DecodeRankReport(EncodeRankReport(ok), "report/2");
  ASSERT_OK(decoded.status());
  EXPECT_EQ(decoded->rank, 2);
  EXPECT_EQ(decoded->fencing_token, 42u);
  EXPECT_EQ(decoded->tmp, ok.tmp);
  ASSERT_OK(decoded->status);
  EXPECT_EQ(EncodeManifest(decoded->part), EncodeManifest(ok.part));

  RankReport failed{1, 41, "", Status::ResourceExhausted("write x: No space left on device"), {}};
  decoded = DecodeRankReport(EncodeRankReport(failed), "report/1");
  ASSERT_OK(decoded.status());
  EXPECT_EQ(decoded->status.code(), Code::kResourceExhausted);
  EXPECT_EQ(decoded->status.message(), "write x: No space left on device");
}

TEST(RankReport, MalformedMessagesAreRefusedNamingTheKey) {
  for (const char* bad : {"", "[]", "{\"rank\": 1}", "{\"rank\": 1, \"fencing_token\": 2}",
                          "{\"rank\": 1, \"fencing_token\": 2, \"tmp\": \"t\", \"part\": \"{}\"}",
                          "{\"rank\": 1, \"fencing_token\": 2, \"tmp\": \"t\", \"error\": "
                          "{\"code\": 99, \"message\": \"x\"}}"}) {
    auto r = DecodeRankReport(bad, "k/report/1");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kDataLoss) << bad;
    EXPECT_NE(r.status().message().find("k/report/1"), std::string::npos) << r.status().ToString();
  }
  EXPECT_EQ(DecodeDecision("not json", "k/decision").code(), Code::kDataLoss);
  Status aborted = Status::Aborted("fenced: token 3 is stale");
  Status back = DecodeDecision(EncodeDecision(aborted), "k/decision");
  EXPECT_EQ(back.code(), Code::kAborted);
  EXPECT_EQ(back.message(), aborted.message());
  EXPECT_OK(DecodeDecision(EncodeDecision(Status::OK()), "k/decision"));
}

TEST(RankReport, MergeJoinsShardsBlobsAndFilesOfEveryRank) {
  Manifest header;
  header.step = 7;
  header.world_size = 2;
  auto merged = MergeRankReports(header, {Report(0, 0, 4), Report(1, 4, 4)});
  ASSERT_OK(merged.status());
  ASSERT_EQ(merged->tensors.size(), 1u);
  EXPECT_EQ(merged->tensors[0].shards.size(), 2u);
  ASSERT_EQ(merged->files.size(), 2u);
  ASSERT_EQ(merged->blobs.size(), 2u);
  EXPECT_EQ(merged->blobs[0].name, "rng");
  EXPECT_EQ(merged->blobs[1].name, "rank-00001/rng");
  EXPECT_EQ(merged->world_size, 2);
  EXPECT_OK(ValidateManifest(*merged, "merged"));
}

TEST(RankReport, OverlappingOrMissingShardsAcrossRanksAreRefusedNamingThem) {
  Manifest header;
  header.step = 7;
  auto overlap = MergeRankReports(header, {Report(0, 0, 5), Report(1, 4, 4)});
  ASSERT_EQ(overlap.status().code(), Code::kInvalidArgument);
  EXPECT_NE(overlap.status().message().find("'w'"), std::string::npos);
  EXPECT_NE(overlap.status().message().find("rank 0"), std::string::npos);
  EXPECT_NE(overlap.status().message().find("rank 1"), std::string::npos);
  auto gap = MergeRankReports(header, {Report(0, 0, 3), Report(1, 4, 4)});
  ASSERT_EQ(gap.status().code(), Code::kInvalidArgument);
  EXPECT_NE(gap.status().message().find("covered by no shard"), std::string::npos);

  RankReport other_shape = Report(1, 4, 4);
  other_shape.part.tensors[0].global_shape = {8, 5};
  auto shape = MergeRankReports(header, {Report(0, 0, 4), other_shape});
  ASSERT_EQ(shape.status().code(), Code::kInvalidArgument);
  EXPECT_NE(shape.status().message().find("rank 1"), std::string::npos);
}

TEST(RankReport, EachRankSeesItsOwnBlobsElseRankZeros) {
  std::map<std::string, std::string> stored = {
      {"rng", "r0"}, {"cfg", "c0"}, {"rank-00001/rng", "r1"}, {"rank-00002/rng", "r2"}};
  auto r0 = BlobsForRank(stored, 0, 3);
  EXPECT_EQ(r0, (std::map<std::string, std::string>{{"rng", "r0"}, {"cfg", "c0"}}));
  auto r1 = BlobsForRank(stored, 1, 3);
  EXPECT_EQ(r1, (std::map<std::string, std::string>{{"rng", "r1"}, {"cfg", "c0"}}));
  auto r5 = BlobsForRank(stored, 5, 3);  // a rank that did not exist at save
  EXPECT_EQ(r5, (std::map<std::string, std::string>{{"rng", "r0"}, {"cfg", "c0"}}));
  EXPECT_EQ(RankBlobName(0, "x"), "x");
  EXPECT_EQ(RankBlobName(12, "x"), "rank-00012/x");
}

TEST(RankReport, ABlobNamedLikeARanksIsRankZerosOwn) {
  // A one-rank save keeps every name as given.
  std::map<std::string, std::string> one = {{"rank-00001/x", "mine"}, {"rank-1/y", "y"}};
  EXPECT_EQ(BlobsForRank(one, 0, 1), one);
  // In a multi-rank save rank 0's such name is escaped, and comes back as given.
  EXPECT_EQ(RankBlobName(0, "rank-00001/x"), "rank-00000/rank-00001/x");
  EXPECT_EQ(RankBlobName(0, "rank-1/x"), "rank-1/x");  // not a rank's spelling
  std::map<std::string, std::string> two = {{"rank-00000/rank-00001/x", "r0"},
                                            {"rank-00001/x", "r1"}};
  EXPECT_EQ(BlobsForRank(two, 0, 2), (std::map<std::string, std::string>{{"rank-00001/x", "r0"}}));
  EXPECT_EQ(BlobsForRank(two, 1, 2),
            (std::map<std::string, std::string>{{"rank-00001/x", "r0"}, {"x", "r1"}}));
}

// Node-local roots (node_commit.h, peer_replicas.h).
TEST(NodeCommit, ReportsCarryTheirNodeAndWhereTheyWrote) {
  RankReport r = Report(2, 4, 2);
  r.node = "gpu-7";
  r.node_local = true;
  auto decoded = DecodeRankReport(EncodeRankReport(r), "report/2");
  ASSERT_OK(decoded.status());
  EXPECT_EQ(decoded->node, "gpu-7");
  EXPECT_TRUE(decoded->node_local);
  // Reports of writers before node-local roots: the committer's directory.
  decoded = DecodeRankReport(EncodeRankReport(Report(1, 0, 4)), "report/1");
  ASSERT_OK(decoded.status());
  EXPECT_FALSE(decoded->node_local);
}

TEST(NodeCommit, EveryOtherNodeGetsItsLowestRankAsKeeper) {
  std::vector<RankReport> reports = {Report(0, 0, 2), Report(1, 2, 2), Report(2, 4, 2),
                                     Report(3, 6, 2)};
  for (auto& r : reports) r.node = "a";
  auto shared = PlanNodeCommit(reports, "a", false);
  ASSERT_OK(shared.status());
  EXPECT_FALSE(shared->node_local) << "one shared root commits as before";
  reports[3].node = reports[2].node = "b";
  reports[3].node_local = reports[2].node_local = true;
  auto plan = PlanNodeCommit(reports, "a", false);
  ASSERT_OK(plan.status());
  EXPECT_TRUE(plan->node_local);
  EXPECT_EQ(plan->keepers, (std::map<std::string, int>{{"b", 2}}));
  Manifest merged = MergeRankReports(Manifest(), reports).value();
  RecordFileNodes(reports, "a", &merged);
  EXPECT_EQ(merged.version_minor, kFormatMinorNodes);
  for (const FileRecord& f : merged.files) {
    EXPECT_EQ(f.node, f.name == "rank-00002.stint" || f.name == "rank-00003.stint" ? "b" : "a")
        << f.name;
  }
  auto again = DecodeManifest(EncodeManifest(merged), "m");
  ASSERT_OK(again.status());
  EXPECT_EQ(again->files[3].node, "b");
  // Incremental saves reference files by root; across node roots they are refused.
  auto incremental = PlanNodeCommit(reports, "a", true);
  EXPECT_EQ(incremental.status().code(), Code::kInvalidArgument);
  // A rank of the committer's node that wrote elsewhere: refused with why.
  reports[1].node_local = true;
  auto mixed = PlanNodeCommit(reports, "a", false);
  EXPECT_EQ(mixed.status().code(), Code::kInvalidArgument);
  EXPECT_NE(mixed.status().message().find("rank 1"), std::string::npos) << mixed.status().ToString();
  EXPECT_NE(mixed.status().message().find("one root"), std::string::npos) << mixed.status().ToString();
}

TEST(NodeCommit, PrepareCarriesTheManifestOrTheErrorThatEndedTheSave) {
  NodePlan plan;
  plan.node_local = true;
  plan.keepers = {{"b", 2}, {"c", 5}};
  auto p = DecodePrepare(EncodePrepare("{\"m\":1}", plan), "prepare/x");
  ASSERT_OK(p.status());
  EXPECT_EQ(p->manifest_bytes, "{\"m\":1}");
  EXPECT_EQ(p->keepers, (std::vector<int>{2, 5}));
  auto failed = DecodePrepare(EncodePrepareError(Status::DeadlineExceeded("rank 3 late")), "k");
  EXPECT_EQ(failed.status().code(), Code::kDeadlineExceeded);
  EXPECT_EQ(DecodePrepare("[]", "k").status().code(), Code::kDataLoss);
  EXPECT_EQ(DecodePrepare("{\"manifest\":1}", "k").status().code(), Code::kDataLoss);
}

TEST(PeerReplicas, HoldersFollowTheRingAndLeaveTheSourcesFailureDomainFirst) {
  const std::vector<std::string> nodes = {"a", "b", "c", "d"};
  EXPECT_EQ(ReplicaHolders("a", nodes, {}, 1), std::vector<std::string>{"b"});
  EXPECT_EQ(ReplicaHolders("d", nodes, {}, 1), std::vector<std::string>{"a"}) << "wraps";
  EXPECT_EQ(ReplicaHolders("b", nodes, {}, 2), (std::vector<std::string>{"c", "d"}));
  EXPECT_EQ(ReplicaHolders("b", nodes, {}, 9), (std::vector<std::string>{"c", "d", "a"}));
  // a and b share a rack: a's copy goes to the next node in another rack.
  const std::map<std::string, std::string> racks = {
      {"a", "rack1"}, {"b", "rack1"}, {"c", "rack2"}, {"d", "rack2"}};
  EXPECT_EQ(ReplicaHolders("a", nodes, racks, 1), std::vector<std::string>{"c"});
  EXPECT_EQ(ReplicaHolders("c", nodes, racks, 2), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(ReplicaHolders("x", nodes, {}, 1).empty());
  EXPECT_TRUE(ReplicaHolders("a", nodes, {}, 0).empty());
  Manifest m;
  m.files = {FileRecord{"rank-00001.stint", 1, 1, "b"}, FileRecord{"rank-00000.stint", 1, 1, "a"},
             FileRecord{"rank-00002.stint", 1, 1, "b"}};
  EXPECT_EQ(ManifestNodes(m), (std::vector<std::string>{"a", "b"}));
}

}  // namespace
}  // namespace stint
