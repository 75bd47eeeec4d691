// A node's heartbeat answers with the segments placed on it from stintd's
// per-node index (server/placement_index.h), not a walk over every segment.
// Against a real stintd on loopback, with the nodes' heartbeats sent by the
// test over HTTP (agent token, as stint-agent sends them): after starts,
// segments spanning two nodes, an end reported by the nodes, a start on the
// GPUs it freed, a node closing (its segments notified, still placed) and a
// restart of stintd (the index rebuilt from SQLite), every node's
// assignments are exactly the active segments GET /v1/segments places on its
// window. Shrink and grow go through the same index in
// agent_elastic_test.cc, where real agents act on the assignments.
#include <signal.h>

#include <gtest/gtest.h>

#include <map>
#include <utility>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "util/stintd_process.h"
#include "util/temp_dir.h"

#ifndef STINTD_PATH
#error "STINTD_PATH must name the stintd binary"
#endif

namespace stint {
namespace {

using nlohmann::json;

const std::vector<std::string> kNodes = {"n0", "n1", "n2"};

class PlacementIndexTest : public ::testing::Test {
 protected:
  // Nodes silent for 10 minutes are not closed: the test beats them only
  // when it looks.
  void SetUp() override {
    daemon_ = std::make_unique<StintdProcess>(
        STINTD_PATH, dir_.path(),
        std::vector<std::string>{"--tick-seconds", "0.05", "--safety-seconds", "1",
                                 "--min-run-seconds", "0", "--lease-ttl-seconds", "600",
                                 "--start-grace-seconds", "600", "--node-ttl-seconds", "600"});
    ASSERT_TRUE(daemon_->Start()) << daemon_->output();
    Connect();
    ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "gpu"}}).status, 201);
  }

  void Connect() {
    admin_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kAdminToken);
    agent_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kAgentToken);
  }

  int64_t Submit(int gpus, bool gang) {
    auto r = admin_->Post("/v1/jobs",
                          {{"name", "job"},
                           {"pool", "gpu"},
                           {"min_gpus", gpus},
                           {"gang", gang},
                           {"checkpoint_seconds", 0},
                           {"restart_seconds", 0},
                           {"launch", {{"command", {"/bin/true"}}, {"gpus_per_worker", 1}}}});
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  }

  json Job(int64_t id) { return admin_->Get("/v1/jobs/" + std::to_string(id)).body; }

  // node -> the active segments GET /v1/segments places on its window.
  std::map<std::string, std::set<int64_t>> FromSegments() {
    std::map<int64_t, std::string> node_of;
    for (const json& w : admin_->Get("/v1/windows").body.value("windows", json::array())) {
      const json node = w.value("node", json());
      if (node.is_string()) node_of[w.value("id", int64_t{0})] = node.get<std::string>();
    }
    std::map<std::string, std::set<int64_t>> out;
    for (const std::string& n : kNodes) {
      if (!closed_.count(n)) out[n];
    }
    for (const json& s : admin_->Get("/v1/segments").body.value("segments", json::array())) {
      const std::string state = s.value("state", "");
      if (state != "running" && state != "notified") continue;
      for (const json& p : s.value("placement", json::array())) {
        auto node = node_of.find(p.value("window_id", int64_t{0}));
        if (node != node_of.end() && !closed_.count(node->second))
          out[node->second].insert(s.value("id", int64_t{0}));
      }
    }
    return out;
  }

  // node -> the segments its heartbeat's answer assigns to it.
  std::map<std::string, std::set<int64_t>> FromHeartbeats() {
    std::map<std::string, std::set<int64_t>> out;
    for (const std::string& n : kNodes) {
      if (closed_.count(n)) continue;  // a closed node's beat is refused (410)
      auto r = agent_->Post("/v1/nodes/" + n + "/heartbeat", json::object());
      EXPECT_EQ(r.status, 200) << n << ": " << r.text;
      for (const json& a : r.body.value("assignments", json::array()))
        out[n].insert(a.value("segment_id", int64_t{0}));
      out[n];
    }
    return out;
  }

  // Both views, read until the tick between the two reads is not in the
  // way (a plan may start a segment between them): they agree at once but
  // for that.
  ::testing::AssertionResult Agree(const std::string& when) {
    std::map<std::string, std::set<int64_t>> beats, segments;
    if (Eventually([&] {
          segments = FromSegments();
          beats = FromHeartbeats();
          return beats == segments && segments == FromSegments();
        })) {
      return ::testing::AssertionSuccess();
    }
    auto failure = ::testing::AssertionFailure() << when << ":";
    for (const std::string& n : kNodes) {
      failure << " " << n << " beats {";
      for (int64_t id : beats[n]) failure << id << " ";
      failure << "} segments {";
      for (int64_t id : segments[n]) failure << id << " ";
      failure << "}";
    }
    return failure;
  }

  TempDir dir_;
  std::unique_ptr<StintdProcess> daemon_;
  std::unique_ptr<HttpJson> admin_, agent_;
  std::set<std::string> closed_;  // nodes whose window the test closed
};

TEST_F(PlacementIndexTest, EveryNodeIsAssignedExactlyTheSegmentsPlacedOnIt) {
  for (const std::string& n : kNodes) {
    auto r = agent_->Post("/v1/nodes",
                          {{"name", n}, {"pool", "gpu"}, {"gpus", {0, 1, 2, 3}}, {"kind", "spot"}});
    ASSERT_EQ(r.status, 201) << r.text;
  }
  ASSERT_TRUE(Agree("no jobs"));
  // 3 + 3 + 2 GPUs on three nodes (each a gang on a node of its own)
  // leave 1 + 1 + 2 free: the 4-GPU job that is no gang spans all three.
  std::vector<int64_t> jobs;
  for (const auto& [gpus, gang] :
       std::vector<std::pair<int, bool>>{{3, true}, {3, true}, {2, true}, {4, false}}) {
    jobs.push_back(Submit(gpus, gang));
    ASSERT_TRUE(Eventually([&] { return Job(jobs.back()).value("state", "") == "RUNNING"; }))
        << Job(jobs.back()).dump();
    ASSERT_TRUE(Agree("job " + std::to_string(jobs.back()) + " started"));
  }
  std::map<std::string, std::set<int64_t>> placed = FromSegments();
  const int64_t spanning_segment = Job(jobs[3]).value("segment_id", int64_t{0});
  size_t spans = 0;
  for (const auto& [node, segments] : placed) spans += segments.count(spanning_segment);
  EXPECT_EQ(spans, 3u) << "the last job takes the 1 + 1 + 2 GPUs left on the three nodes";

  // The 2-GPU job's workers exit 0 on its node: the job is DONE and its
  // segment leaves that node's assignments.
  const int64_t ended = jobs[2];
  const int64_t ended_segment = Job(ended).value("segment_id", int64_t{0});
  for (const auto& [node, segments] : placed) {
    if (!segments.count(ended_segment)) continue;
    auto r = agent_->Post("/v1/nodes/" + node + "/heartbeat",
                          {{"exited", {{{"segment_id", ended_segment}, {"exit_code", 0}}}}});
    ASSERT_EQ(r.status, 200) << r.text;
  }
  ASSERT_TRUE(Eventually([&] { return Job(ended).value("state", "") == "DONE"; }))
      << Job(ended).dump();
  ASSERT_TRUE(Agree("one ended"));
  for (const auto& [node, segments] : FromHeartbeats())
    EXPECT_EQ(segments.count(ended_segment), 0u) << node;

  // A new job takes the GPUs a's segment freed.
  const int64_t c = Submit(2, true);
  ASSERT_TRUE(Eventually([&] { return Job(c).value("state", "") == "RUNNING"; })) << Job(c).dump();
  ASSERT_TRUE(Agree("a start on freed GPUs"));

  // A node closes: its segments are notified (what follows is the window
  // close's business); the others keep exactly theirs.
  auto closed = agent_->Post("/v1/nodes/n2/close", json::object());
  ASSERT_EQ(closed.status, 200) << closed.text;
  closed_.insert("n2");
  ASSERT_TRUE(Agree("n2 closed"));

  // stintd restarts: the index is rebuilt from what it loads.
  daemon_->Kill(SIGTERM);
  ASSERT_TRUE(daemon_->Start()) << daemon_->output();
  Connect();
  ASSERT_TRUE(Agree("after a restart"));
  size_t assigned = 0;
  for (const auto& [node, segments] : FromHeartbeats()) assigned += segments.size();
  EXPECT_GT(assigned, 0u) << "n0 and n1 still run their segments";
}

}  // namespace
}  // namespace stint
