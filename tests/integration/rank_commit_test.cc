// The commit across ranks with real processes (rank_saver) that agree
// through a real c10d TCPStore served by this test: every rank's part or
// nothing, the same outcome on every rank, a lost rank named within the
// deadline, SIGKILL at many points of a save, ENOSPC and fsync failures on
// one rank, loads at other world sizes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/commit.h"
#include "format/manifest.h"
#include "stint/checkpoint_reader.h"
#include "util/status_matchers.h"
#include "util/subprocess.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

struct RankRun {
  int exit_code = -1;  // -1: killed by a signal
  std::string output;
  double seconds = 0;
  bool ok() const { return exit_code == 0; }
};

class RankCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    c10d::TCPStoreOptions so;
    so.port = 0;
    so.isServer = true;
    so.waitWorkers = false;
    store_ = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  }

  // Runs `world` ranks to completion (each bounded: a hung rank fails the test).
  // `step`: what a save saves; for a load only a name for the start barrier.
  // `timeouts`: a rank's own commit_timeout in ms, where it is not `timeout_ms`.
  std::vector<RankRun> Run(const std::string& mode, int world, uint64_t step,
                           const std::map<int, std::string>& faults = {}, int64_t timeout_ms = 0,
                           const std::map<int, int64_t>& timeouts = {}) {
    std::vector<std::unique_ptr<ChildProcess>> children;
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < world; ++r) {
      auto fault = faults.find(r);
      auto own_timeout = timeouts.find(r);
      std::vector<std::string> args{
          mode, nodes_.empty() ? dir_.path() : NodeRoot(nodes_.at(r)),
          std::to_string(store_->getPort()), std::to_string(r), std::to_string(world),
          std::to_string(step), fault == faults.end() ? "none" : fault->second,
          std::to_string(own_timeout == timeouts.end() ? timeout_ms : own_timeout->second)};
      if (!nodes_.empty()) {
        args.push_back(nodes_.at(r));
        args.push_back(replicate_ ? "1" : "0");
      }
      children.push_back(std::make_unique<ChildProcess>(STINT_RANK_SAVER, args));
    }
    std::vector<RankRun> runs(world);
    for (int r = 0; r < world; ++r) {
      bool killed = false;
      // Far above any deadline involved: the bound only turns a hang into a failure.
      int status = children[r]->WaitAtMost(180, &killed);
      EXPECT_FALSE(killed) << "rank " << r << " hung:\n" << children[r]->output();
      runs[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      runs[r].output = children[r]->output();
      runs[r].seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    return runs;
  }

  std::vector<uint64_t> Committed() {
    return ListCheckpointSteps(Env::Default(), dir_.path()).value();
  }
  std::string Latest() {
    auto latest = ReadLatest(Env::Default(), dir_.path());
    return latest.ok() && latest->has_value() ? **latest : std::string();
  }
  void ExpectVerifies(uint64_t step) {
    auto reader = CheckpointReader::Open(dir_.path() + "/" + StepDirName(step));
    ASSERT_OK(reader.status());
    ASSERT_OK((*reader)->Verify().status());
  }

  // Node-local roots: rank r runs on node nodes_[r], whose root is
  // NodeRoot(node); empty: every rank shares dir_.
  std::string NodeRoot(const std::string& node) const { return dir_.path() + "/node-" + node; }
  std::vector<std::string> nodes_;
  bool replicate_ = false;  // saves wait for their node's peer replicas

  TempDir dir_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
};

std::string All(const std::vector<RankRun>& runs) {
  std::string out;
  for (size_t r = 0; r < runs.size(); ++r) {
    out += "--- rank " + std::to_string(r) + " exit " + std::to_string(runs[r].exit_code) + "\n" +
           runs[r].output;
  }
  return out;
}

TEST_F(RankCommitTest, EveryRankCommitsOneCheckpointThatLoadsAtOtherWorldSizes) {
  auto runs = Run("save", 3, 10);
  for (const auto& r : runs) ASSERT_TRUE(r.ok()) << All(runs);
  EXPECT_EQ(Committed(), std::vector<uint64_t>{10});
  EXPECT_EQ(Latest(), StepDirName(10));
  ExpectVerifies(10);
  auto reader = CheckpointReader::Open(dir_.path() + "/" + StepDirName(10));
  ASSERT_OK(reader.status());
  EXPECT_EQ((*reader)->world_size(), 3);
  for (const auto& t : (*reader)->tensors()) {
    // "w" from every rank; "bias" (replicated) written once.
    EXPECT_EQ(t.shards, t.name == "w" ? 3u : 1u) << t.name;
  }
  for (int world : {2, 1, 4}) {
    auto loads = Run("load", world, 100 + world);
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(loads[r].ok()) << All(loads);
      // A rank's own blob where it saved one, else rank 0's.
      const std::string who = r < 3 ? "rank " + std::to_string(r) : "rank 0";
      EXPECT_NE(loads[r].output.find("loaded 10 who=" + who), std::string::npos) << All(loads);
    }
  }
  // The next save by a job of another size commits beside it.
  runs = Run("save", 2, 11);
  for (const auto& r : runs) ASSERT_TRUE(r.ok()) << All(runs);
  EXPECT_EQ(Committed(), (std::vector<uint64_t>{10, 11}));
}

// Once every rank has its outcome, the save's keys are gone from the store
// (the last rank done with them deletes them), whether it committed or not:
// only the start barriers' counters of rank_saver and each rank's closed
// file-service record (job_peers.h) are left.
TEST_F(RankCommitTest, AFinishedSaveLeavesNoKeysInTheStore) {
  auto runs = Run("save", 3, 10);
  for (const auto& r : runs) ASSERT_TRUE(r.ok()) << All(runs);
  EXPECT_FALSE(store_->check({"stint-ckpt/rank-saver/save-0-step-10/tmp"}));
  EXPECT_FALSE(store_->check({"stint-ckpt/rank-saver/save-0-step-10/done"}));
  EXPECT_EQ(store_->getNumKeys(), 1 + 3) << "save-ready-10, 3 closed records and nothing else";
  runs = Run("save", 3, 11, {{1, "enospc"}});
  for (const auto& r : runs) ASSERT_FALSE(r.ok()) << All(runs);
  EXPECT_EQ(store_->getNumKeys(), 2 + 3)
      << "save-ready-10, save-ready-11, 3 closed records and nothing else";
  EXPECT_EQ(Committed(), std::vector<uint64_t>{10});
}

// A load's agreement (every round of it) leaves no keys either, also when a
// damaged step took the ranks through a second round.
TEST_F(RankCommitTest, AFinishedLoadLeavesNoKeysInTheStore) {
  for (uint64_t step : {1, 2}) {
    auto runs = Run("save", 2, step);
    for (const auto& r : runs) ASSERT_TRUE(r.ok()) << All(runs);
  }
  const int64_t before = store_->getNumKeys();  // the save barriers' counters
  auto loads = Run("load", 2, 100);
  for (const auto& r : loads) ASSERT_TRUE(r.ok()) << All(loads);
  EXPECT_FALSE(store_->check({"stint-ckpt/rank-saver/load-0/round-0/decision"}));
  EXPECT_EQ(store_->getNumKeys(), before + 1) << "load-ready-100 and nothing else";
  // Rank 1 alone cannot read step 2: round 0 decides to go back, round 1 agrees on 1.
  const std::string file = dir_.path() + "/" + StepDirName(2) + "/" + RankFileName(1);
  auto bytes = ReadFileToString(Env::Default(), file);
  ASSERT_OK(bytes.status());
  (*bytes)[8] ^= 0x20;
  ASSERT_OK(WriteStringToFileSync(Env::Default(), file, *bytes));
  loads = Run("load", 2, 101);
  for (const auto& r : loads) {
    ASSERT_TRUE(r.ok()) << All(loads);
    EXPECT_NE(r.output.find("loaded 1 "), std::string::npos) << All(loads);
  }
  EXPECT_EQ(store_->getNumKeys(), before + 2) << "load-ready-100, load-ready-101 and nothing else";
}

// A rank that alone reads a damaged chunk of the newest checkpoint takes
// every rank back to the newest step all of them load: no mixed resume.
TEST_F(RankCommitTest, RanksLoadTheSameStepWhenOnlyOneSeesDamage) {
  for (uint64_t step : {1, 2}) {
    auto runs = Run("save", 2, step);
    for (const auto& r : runs) ASSERT_TRUE(r.ok()) << All(runs);
  }
  // Rank 1's rows of "w" are the first chunk of rank-00001.stint; rank 0 does
  // not read that file at all at world size 2.
  const std::string file = dir_.path() + "/" + StepDirName(2) + "/" + RankFileName(1);
  auto bytes = ReadFileToString(Env::Default(), file);
  ASSERT_OK(bytes.status());
  (*bytes)[8] ^= 0x20;
  ASSERT_OK(WriteStringToFileSync(Env::Default(), file, *bytes));
  auto loads = Run("load", 2, 100);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(loads[r].ok()) << All(loads);
    EXPECT_NE(loads[r].output.find("loaded 1 "), std::string::npos) << All(loads);
  }
}

// Damage that each rank alone reads, in different steps: rank 1 cannot load
// step 3, rank 0 cannot load step 2. The step agreed after the first
// fallback is agreed again, so both end on step 1 (not rank 0 raising while
// rank 1 resumes from step 2).
TEST_F(RankCommitTest, RanksAgreeAgainWhenTheFallbackStepIsDamagedForAnotherRank) {
  for (uint64_t step : {1, 2, 3}) {
    auto runs = Run("save", 2, step);
    for (const auto& r : runs) ASSERT_TRUE(r.ok()) << All(runs);
  }
  // The first chunk of a rank's file holds its rows of "w", which only that
  // rank reads at world size 2 ("bias" is a chunk of its own in rank 0's).
  for (auto [step, rank] : {std::pair<uint64_t, int>{3, 1}, {2, 0}}) {
    const std::string file = dir_.path() + "/" + StepDirName(step) + "/" + RankFileName(rank);
    auto bytes = ReadFileToString(Env::Default(), file);
    ASSERT_OK(bytes.status());
    (*bytes)[8] ^= 0x20;
    ASSERT_OK(WriteStringToFileSync(Env::Default(), file, *bytes));
  }
  auto loads = Run("load", 2, 100);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(loads[r].ok()) << All(loads);
    EXPECT_NE(loads[r].output.find("loaded 1 "), std::string::npos) << All(loads);
  }
}

// A rank whose load takes longer than the other's load times anything the
// other derives from its own (the old rule: 60 s at least) is waited for:
// both ranks use the one load deadline (10 minutes by default).
TEST_F(RankCommitTest, AFastRankWaitsForASlowRanksLoad) {
  auto runs = Run("save", 2, 1);
  for (const auto& r : runs) ASSERT_TRUE(r.ok()) << All(runs);
  auto loads = Run("load", 2, 100, {{1, "slowread@65000"}});
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(loads[r].ok()) << All(loads);
    EXPECT_NE(loads[r].output.find("loaded 1 "), std::string::npos) << All(loads);
  }
}

TEST_F(RankCommitTest, EveryRankWaitsForTheDecisionByTheCommittersDeadline) {
  // Rank 1's own deadline (1.5 s) is far shorter than the committer's
  // (60 s), whose persist takes 6 s: rank 1 must wait by the committer's
  // deadline, published with the save, not give up by its own while rank 0
  // commits.
  auto runs = Run("save", 2, 7, {{0, "slowwrite@6000"}}, 60000, {{1, 1500}});
  for (const auto& r : runs) EXPECT_TRUE(r.ok()) << All(runs);
  EXPECT_EQ(Committed(), std::vector<uint64_t>({7})) << All(runs);
  ExpectVerifies(7);
}

TEST_F(RankCommitTest, EnospcOnOneRankFailsEveryRankAndCommitsNothing) {
  ASSERT_TRUE(Run("save", 3, 1)[0].ok());
  auto runs = Run("save", 3, 2, {{1, "enospc"}});
  for (const auto& r : runs) EXPECT_EQ(r.exit_code, 3) << All(runs);
  EXPECT_NE(runs[0].output.find("rank 1"), std::string::npos) << All(runs);
  EXPECT_NE(runs[2].output.find("rank 1"), std::string::npos) << All(runs);
  EXPECT_NE(runs[1].output.find("o space"), std::string::npos) << All(runs);
  EXPECT_EQ(Committed(), std::vector<uint64_t>{1});
  EXPECT_EQ(Latest(), StepDirName(1));
  ExpectVerifies(1);
}

TEST_F(RankCommitTest, FsyncFailureOnOneRankFailsEveryRankAndCommitsNothing) {
  ASSERT_TRUE(Run("save", 2, 1)[0].ok());
  auto runs = Run("save", 2, 2, {{1, "fsync"}});
  for (const auto& r : runs) EXPECT_EQ(r.exit_code, 3) << All(runs);
  EXPECT_NE(runs[0].output.find("rank 1"), std::string::npos) << All(runs);
  EXPECT_EQ(Committed(), std::vector<uint64_t>{1});
  EXPECT_EQ(Latest(), StepDirName(1));
}

// A rank that gives the save up before it starts (it could not build its
// state) fails every rank at once, naming it, whether that happens before
// or after the committer started the save (and cleared the save's bell):
// nobody waits out the 60 s deadline.
TEST_F(RankCommitTest, ARankThatAbandonsTheSaveFailsEveryRankPromptly) {
  ASSERT_TRUE(Run("save", 3, 1)[0].ok());
  uint64_t step = 2;
  for (const char* fault : {"abandon@0", "abandon@500"}) {
    auto runs = Run("save", 3, step, {{1, fault}}, 60000);
    for (const auto& r : runs) {
      EXPECT_EQ(r.exit_code, 3) << fault << "\n" << All(runs);
      // Not a speed threshold: it tells "told at once" from "waited out
      // the 60 s deadline".
      EXPECT_LT(r.seconds, 30) << fault << "\n" << All(runs);
    }
    for (int r : {0, 2}) {
      EXPECT_NE(runs[r].output.find("rank 1"), std::string::npos) << fault << "\n" << All(runs);
      EXPECT_NE(runs[r].output.find("this rank's state is bad"), std::string::npos) << fault << "\n"
                                                                                    << All(runs);
    }
    EXPECT_EQ(Committed(), std::vector<uint64_t>{1}) << fault;
    EXPECT_EQ(Latest(), StepDirName(1)) << fault;
    ++step;
  }
}

TEST_F(RankCommitTest, FailureOfTheCommitterFailsEveryRank) {
  auto runs = Run("save", 3, 5, {{0, "enospc"}});
  for (const auto& r : runs) EXPECT_EQ(r.exit_code, 3) << All(runs);
  EXPECT_NE(runs[1].output.find("rank 0 failed its part"), std::string::npos) << All(runs);
  EXPECT_TRUE(Committed().empty());
  EXPECT_EQ(Latest(), "");
}

// SIGKILL one rank at its N-th file-system or channel operation, for many
// (rank, N): the survivors agree (all durable and the step committed, or all
// failed, within the deadline, naming the lost rank, and nothing committed);
// the newest committed checkpoint always verifies.
TEST_F(RankCommitTest, SigkillOfOneRankAtManyPointsOfASave) {
  constexpr int kWorld = 3;
  // What a survivor waits for before it names the lost rank: the others'
  // saves of a few KiB, fsyncs included (milliseconds), with a wide margin
  // for a machine busy compiling beside it.
  constexpr int64_t kTimeoutMs = 3000;
  ASSERT_TRUE(Run("save", kWorld, 1)[0].ok());
  uint64_t step = 1;
  int killed_cases = 0, committed_cases = 0;
  for (int c = 0; c < 24; ++c) {
    const int victim = c % kWorld;
    // Rank 0 does about 17 operations in a save, the others about 5.
    const uint64_t at = victim == 0 ? 1 + (c * 5) % 17 : 1 + c % 5;
    ++step;
    const std::string before = Latest();
    auto runs = Run("save", kWorld, step, {{victim, "kill@" + std::to_string(at)}}, kTimeoutMs);
    SCOPED_TRACE("case " + std::to_string(c) + ": rank " + std::to_string(victim) +
                 " killed at op " + std::to_string(at) + "\n" + All(runs));
    const bool died = runs[victim].exit_code == -1;
    killed_cases += died;
    bool all_ok = true, all_failed = true;
    for (int r = 0; r < kWorld; ++r) {
      if (r == victim && died) continue;
      all_ok &= runs[r].ok();
      all_failed &= runs[r].exit_code == 3;
    }
    ASSERT_TRUE(all_ok || all_failed) << "survivors disagree";
    auto committed = Committed();
    const bool has_step = !committed.empty() && committed.back() == step;
    if (all_ok) {
      ASSERT_TRUE(has_step);
      ++committed_cases;
    } else {
      ASSERT_FALSE(has_step);
      EXPECT_EQ(Latest(), before);
      // A lost rank is named: the committer names the rank that did not
      // report; the others name the committer when it is the one lost.
      const std::string named = victim == 0 ? "rank 0" : "rank " + std::to_string(victim);
      for (int r = 0; r < kWorld; ++r) {
        if (r == victim) continue;
        EXPECT_NE(runs[r].output.find(named), std::string::npos) << "rank " << r;
      }
    }
    ExpectVerifies(committed.back());
  }
  // The points must really have stopped ranks mid-save, in both outcomes' ways.
  EXPECT_GE(killed_cases, 20);
  EXPECT_LT(committed_cases, 24);
}

// Node-local roots (issue 42): four ranks on three "nodes", each node's
// root its own directory. The job commits once; every node's root holds the
// step's manifest (the same bytes) beside its own ranks' files only, and the
// manifest says which node holds each file. Each node's part is copied to
// the next node (peer_replicas 2: a ring), verified and committed there.
// A load at the same world size reads the files a node lacks (rank 0's
// "bias") from the node that has them.
TEST_F(RankCommitTest, NodeLocalRootsCommitOnceAndEveryNodeHoldsTheManifest) {
  nodes_ = {"a", "a", "b", "c"};
  replicate_ = true;
  auto runs = Run("save", 4, 10);
  for (const auto& r : runs) ASSERT_TRUE(r.ok()) << All(runs);
  std::string manifest_a;
  const std::map<std::string, std::vector<std::string>> own = {
      {"a", {"rank-00000.stint", "rank-00001.stint"}},
      {"b", {"rank-00002.stint"}},
      {"c", {"rank-00003.stint"}}};
  // The ring in node order: a's part on b, b's on c, c's on a.
  const std::map<std::string, std::vector<std::string>> held = {
      {"a", {"rank-00003.stint"}},
      {"b", {"rank-00000.stint", "rank-00001.stint"}},
      {"c", {"rank-00002.stint"}}};
  for (const auto& [node, files] : own) {
    const std::string dir = NodeRoot(node) + "/" + StepDirName(10);
    auto manifest = ReadFileToString(Env::Default(), dir + "/MANIFEST.json");
    ASSERT_OK(manifest.status()) << node;
    if (manifest_a.empty()) manifest_a = *manifest;
    EXPECT_EQ(*manifest, manifest_a) << "node " << node << " holds another manifest";
    auto children = Env::Default()->GetChildren(dir);
    ASSERT_OK(children.status());
    std::vector<std::string> data;
    for (const auto& c : *children) {
      if (c != "MANIFEST.json") data.push_back(c);
    }
    std::sort(data.begin(), data.end());
    EXPECT_EQ(data, files) << "node " << node;
    auto latest = ReadLatest(Env::Default(), NodeRoot(node));
    ASSERT_OK(latest.status());
    EXPECT_EQ(latest->value_or(""), StepDirName(10)) << node;
    const std::string copies = NodeRoot(node) + "/.peer-replicas/" + StepDirName(10);
    for (const auto& f : held.at(node)) {
      EXPECT_TRUE(Env::Default()->FileExists(copies + "/" + f)) << node << " lacks " << f;
    }
  }
  auto m = DecodeManifest(manifest_a, "a");
  ASSERT_OK(m.status());
  EXPECT_EQ(m->version_minor, 2);
  for (const auto& f : m->files) {
    const std::string want = f.name == "rank-00002.stint"   ? "b"
                             : f.name == "rank-00003.stint" ? "c"
                                                            : "a";
    EXPECT_EQ(f.node, want) << f.name;
  }
  auto loads = Run("load", 4, 100);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(loads[r].ok()) << All(loads);
    EXPECT_NE(loads[r].output.find("loaded 10 who=rank " + std::to_string(r)), std::string::npos)
        << All(loads);
  }
  // `stint verify` on one node's root checks what it holds and names the rest.
  RunResult verify = RunProgram(STINT_CLI_PATH, {"verify", "--all", NodeRoot("b")});
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
  EXPECT_NE(verify.output.find("verified step-00000010 (this node's part): 1 of 4 files; "
                               "elsewhere: rank-00000.stint on node 'a'"),
            std::string::npos)
      << verify.output;
  // A flipped byte in the node's own file fails it, naming the file.
  const std::string own_file = NodeRoot("b") + "/" + StepDirName(10) + "/rank-00002.stint";
  auto bytes = ReadFileToString(Env::Default(), own_file);
  ASSERT_OK(bytes.status());
  std::string damaged = *bytes;
  damaged[0] ^= 0x01;
  ASSERT_OK(WriteStringToFileSync(Env::Default(), own_file, damaged));
  verify = RunProgram(STINT_CLI_PATH, {"verify", "--all", NodeRoot("b")});
  EXPECT_NE(verify.exit_code, 0) << verify.output;
  EXPECT_NE(verify.output.find("rank-00002.stint"), std::string::npos) << verify.output;
}

// A node lost with its disk: its replacement starts on an empty root and
// the job resumes from the newest step, reading the lost node's files from
// the peer that holds its copy. A copy that fails verification is never
// loaded: the load falls back to an older step and names why.
TEST_F(RankCommitTest, ALostNodeResumesFromItsPeerReplicaAndADamagedCopyIsNeverLoaded) {
  nodes_ = {"a", "b", "c"};
  replicate_ = true;
  for (uint64_t step : {10, 11}) {
    auto runs = Run("save", 3, step);
    for (const auto& r : runs) ASSERT_TRUE(r.ok()) << All(runs);
  }
  ASSERT_OK(RemoveRecursively(Env::Default(), NodeRoot("b")));
  auto loads = Run("load", 3, 100);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(loads[r].ok()) << All(loads);
    EXPECT_NE(loads[r].output.find("loaded 11 who=rank " + std::to_string(r)), std::string::npos)
        << All(loads);
  }
  // Step 11's only copy of node b's part (on c) is damaged: one byte.
  const std::string copy = NodeRoot("c") + "/.peer-replicas/" + StepDirName(11) + "/rank-00001.stint";
  {
    auto bytes = ReadFileToString(Env::Default(), copy);
    ASSERT_OK(bytes.status());
    std::string damaged = *bytes;
    damaged[0] ^= 0x01;
    ASSERT_OK(WriteStringToFileSync(Env::Default(), copy, damaged));
  }
  ASSERT_OK(RemoveRecursively(Env::Default(), NodeRoot("b")));
  loads = Run("load", 3, 101);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(loads[r].ok()) << All(loads);
    EXPECT_NE(loads[r].output.find("loaded 10 who=rank " + std::to_string(r)), std::string::npos)
        << All(loads);
  }
  EXPECT_NE(loads[1].output.find("skipped step-00000011"), std::string::npos) << All(loads);
}

// Ranks of one node need one root: a rank on the committer's node whose
// root is not the committer's is refused with why, and nothing commits.
TEST_F(RankCommitTest, TwoRootsOnTheCommittersNodeAreRefused) {
  nodes_ = {"a", "a"};
  // Rank 1's root differs from rank 0's although they share a node.
  std::vector<std::unique_ptr<ChildProcess>> children;
  for (int r = 0; r < 2; ++r) {
    children.push_back(std::make_unique<ChildProcess>(
        STINT_RANK_SAVER,
        std::vector<std::string>{"save", NodeRoot(r == 0 ? "a" : "a2"),
                                 std::to_string(store_->getPort()), std::to_string(r), "2", "10",
                                 "none", "0", "a", "0"}));
  }
  for (int r = 0; r < 2; ++r) {
    bool killed = false;
    int status = children[r]->WaitAtMost(180, &killed);
    ASSERT_FALSE(killed) << children[r]->output();
    EXPECT_EQ(WEXITSTATUS(status), 3) << children[r]->output();
    EXPECT_NE(children[r]->output().find("ranks of one node need one root"), std::string::npos)
        << children[r]->output();
  }
  EXPECT_FALSE(Env::Default()->FileExists(NodeRoot("a") + "/" + StepDirName(10)));
  EXPECT_FALSE(Env::Default()->FileExists(NodeRoot("a2") + "/" + StepDirName(10)));
}

}  // namespace
}  // namespace stint
