// Shrink before preempt through a real stintd: an elastic LOW job running
// on 8 GPUs above its min_gpus 4 gives up 4 for a HIGH job instead of being
// preempted whole. The ranks that leave, and only they, see a "shrink"
// notice in their heartbeat answer; at its deadline they are released and
// the segment goes on with 4 GPUs while the HIGH job starts on the other 4.
// A shrink in flight survives a restart of stintd.
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "util/stintd_process.h"
#include "util/subprocess.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

using nlohmann::json;

TEST(StintdShrink, TheLeavingRanksGetTheNoticeAndTheRestRunOnSmaller) {
  TempDir dir;
  // Fast ticks, no minimum run before a segment may yield, leases long
  // enough that nothing expires while the test polls.
  StintdProcess daemon(STINTD_PATH, dir.path(),
                       {"--tick-seconds", "0.05", "--safety-seconds", "1", "--min-run-seconds", "0",
                        "--lease-ttl-seconds", "60", "--start-grace-seconds", "60"});
  ASSERT_TRUE(daemon.Start()) << daemon.output();
  HttpJson admin(daemon.port(), StintdProcess::kAdminToken);
  HttpJson worker_token(daemon.port(), StintdProcess::kWorkerToken);
  ASSERT_EQ(admin.Post("/v1/pools", {{"name", "p"}}).status, 201);
  ASSERT_EQ(admin.Post("/v1/windows", {{"pool", "p"}, {"gpus", 8}, {"end_ms", WallNowMs() + 3600000}})
                .status,
            201);
  auto submit = [&](json spec) {
    auto r = admin.Post("/v1/jobs", spec);
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  };
  auto job = [&](int64_t id) { return admin.Get("/v1/jobs/" + std::to_string(id)).body; };
  const int64_t elastic = submit({{"name", "elastic"}, {"min_gpus", 4}, {"max_gpus", 8},
                                  {"priority", "LOW"}, {"checkpoint_seconds", 2}});
  ASSERT_TRUE(Eventually([&] { return job(elastic).value("state", "") == "RUNNING"; }));

  // Four ranks of two GPUs each, registered in rank order.
  std::vector<int64_t> ids;
  std::vector<std::unique_ptr<HttpJson>> ranks;
  for (int i = 0; i < 4; i++) {
    auto r = worker_token.Post("/v1/jobs/" + std::to_string(elastic) + "/workers",
                               {{"name", "rank" + std::to_string(i)}});
    ASSERT_EQ(r.status, 201) << r.text;
    ids.push_back(r.body.value("worker_id", int64_t{0}));
    ranks.push_back(std::make_unique<HttpJson>(daemon.port(), r.body.value("worker_secret", "")));
  }
  auto beat = [&](int i) {
    return ranks[i]->Post("/v1/workers/" + std::to_string(ids[i]) + "/heartbeat", json::object());
  };

  const int64_t high = submit({{"name", "high"}, {"min_gpus", 4}, {"priority", "HIGH"}});
  HttpJson::Response leaving;
  ASSERT_TRUE(Eventually([&] {
    leaving = beat(3);
    return leaving.body.is_object() && leaving.body["notice"].is_object();
  })) << leaving.text;
  EXPECT_EQ(leaving.body["notice"]["reason"], "shrink") << leaving.text;
  EXPECT_GT(leaving.body["notice"]["deadline_ms"].get<int64_t>(), 0);
  EXPECT_TRUE(beat(2).body["notice"].is_object()) << "ranks 2 and 3 hold the 4 GPUs that go";
  for (int i : {0, 1}) {
    const auto r = beat(i);
    EXPECT_TRUE(r.body["notice"].is_null()) << i << ": " << r.text;
    EXPECT_TRUE(r.body.value("active", false)) << i;
  }
  EXPECT_EQ(job(elastic).value("state", ""), "RUNNING") << "shrunk, not preempted";

  // At the deadline the leaving ranks are released and the HIGH job starts.
  ASSERT_TRUE(Eventually([&] { return job(high).value("state", "") == "RUNNING"; }))
      << job(high).dump();
  // A released worker's secret is dead: 410, as for a worker that left.
  HttpJson::Response gone;
  ASSERT_TRUE(Eventually([&] {
    gone = beat(3);
    return gone.status == 410;
  })) << gone.status << " " << gone.text;
  EXPECT_TRUE(beat(0).body.value("active", false));
  const json e = job(elastic);
  EXPECT_EQ(e.value("state", ""), "RUNNING") << e.dump();
  EXPECT_EQ(e.value("preemptions", -1), 0) << e.dump();
}

// A shrink in flight is stored with its segment: a stintd killed (SIGKILL)
// and started again mid-shrink still shows the leaving ranks, and only
// them, their notice with the same deadline, and releases them at it.
TEST(StintdShrink, AShrinkInFlightSurvivesARestartOfStintd) {
  TempDir dir;
  StintdProcess daemon(STINTD_PATH, dir.path(),
                       {"--tick-seconds", "0.05", "--safety-seconds", "1", "--min-run-seconds", "0",
                        "--lease-ttl-seconds", "120", "--start-grace-seconds", "120"});
  ASSERT_TRUE(daemon.Start()) << daemon.output();
  auto admin = std::make_unique<HttpJson>(daemon.port(), StintdProcess::kAdminToken);
  HttpJson worker_token(daemon.port(), StintdProcess::kWorkerToken);
  ASSERT_EQ(admin->Post("/v1/pools", {{"name", "p"}}).status, 201);
  ASSERT_EQ(
      admin->Post("/v1/windows", {{"pool", "p"}, {"gpus", 4}, {"end_ms", WallNowMs() + 3600000}})
          .status,
      201);
  auto job = [&](int64_t id) {  // {} when stintd did not answer
    json j = admin->Get("/v1/jobs/" + std::to_string(id)).body;
    return j.is_object() ? j : json::object();
  };
  // The shrink's deadline is 20 s + 1 s safety after its notice: room for
  // the restart on a loaded machine.
  auto r = admin->Post("/v1/jobs", {{"name", "elastic"},
                                    {"min_gpus", 2},
                                    {"max_gpus", 4},
                                    {"priority", "LOW"},
                                    {"checkpoint_seconds", 20}});
  ASSERT_EQ(r.status, 201) << r.text;
  const int64_t elastic = r.body["id"];
  ASSERT_TRUE(Eventually([&] { return job(elastic).value("state", "") == "RUNNING"; }));
  std::vector<int64_t> ids;
  std::vector<std::string> secrets;
  for (int i = 0; i < 2; i++) {
    auto w = worker_token.Post("/v1/jobs/" + std::to_string(elastic) + "/workers",
                               {{"name", "rank" + std::to_string(i)}});
    ASSERT_EQ(w.status, 201) << w.text;
    ids.push_back(w.body.value("worker_id", int64_t{0}));
    secrets.push_back(w.body.value("worker_secret", ""));
  }
  auto beat = [&](int i) {
    HttpJson rank(daemon.port(), secrets[i]);
    return rank.Post("/v1/workers/" + std::to_string(ids[i]) + "/heartbeat", json::object());
  };
  r = admin->Post("/v1/jobs", {{"name", "high"}, {"min_gpus", 2}, {"priority", "HIGH"}});
  ASSERT_EQ(r.status, 201) << r.text;
  const int64_t high = r.body["id"];
  HttpJson::Response before;
  ASSERT_TRUE(Eventually([&] {
    before = beat(1);
    return before.body.is_object() && before.body["notice"].is_object();
  })) << before.text;
  ASSERT_EQ(before.body["notice"]["reason"], "shrink") << before.text;
  const int64_t deadline = before.body["notice"]["deadline_ms"];

  daemon.Kill(SIGKILL);
  ASSERT_TRUE(daemon.Start()) << daemon.output();
  admin = std::make_unique<HttpJson>(daemon.port(), StintdProcess::kAdminToken);
  const HttpJson::Response after = beat(1);
  ASSERT_EQ(after.status, 200) << after.text;
  ASSERT_TRUE(after.body["notice"].is_object())
      << "the shrink was forgotten (or its deadline passed during the restart): " << after.text;
  EXPECT_EQ(after.body["notice"]["reason"], "shrink") << after.text;
  EXPECT_EQ(after.body["notice"]["deadline_ms"], deadline) << after.text;
  const HttpJson::Response stays = beat(0);
  EXPECT_TRUE(stays.body["notice"].is_null()) << stays.text;
  // The segment shows the shrink in flight: what it gives up, who leaves.
  const json shrink = job(elastic)["segments"][0]["shrink"];
  ASSERT_TRUE(shrink.is_object()) << job(elastic).dump();
  EXPECT_EQ(shrink["deadline_ms"], deadline) << shrink.dump();
  EXPECT_EQ(shrink["leaving_workers"], json::array({ids[1]})) << shrink.dump();
  EXPECT_EQ(shrink["for_job_id"], high) << shrink.dump();
  ASSERT_EQ(shrink["release"].size(), 1u) << shrink.dump();
  EXPECT_EQ(shrink["release"][0]["gpus"], 2) << shrink.dump();
  // stintctl shows it too.
  RunResult ctl = RunProgram(STINTCTL_PATH, {"--url", daemon.url(), "--token",
                                             StintdProcess::kAdminToken, "segments", "--job",
                                             std::to_string(elastic)});
  ASSERT_EQ(ctl.exit_code, 0) << ctl.output;
  EXPECT_NE(ctl.output.find("shrink -2"), std::string::npos) << ctl.output;
  EXPECT_EQ(job(high).value("state", ""), "PENDING") << job(high).dump();

  // At the deadline the restarted stintd releases the leaving rank and the
  // HIGH job starts on its GPUs; the elastic job runs on with 2.
  ASSERT_TRUE(Eventually([&] { return job(high).value("state", "") == "RUNNING"; }, 60))
      << job(high).dump() << job(elastic).dump();
  EXPECT_EQ(beat(1).status, 410);
  EXPECT_TRUE(beat(0).body.value("active", false));
  const json e = job(elastic);
  EXPECT_EQ(e.value("state", ""), "RUNNING") << e.dump();
  EXPECT_EQ(e.value("preemptions", -1), 0) << e.dump();
  EXPECT_TRUE(e["segments"][0]["shrink"].is_null()) << e.dump();
  EXPECT_EQ(e["segments"][0]["gpus"], 2) << e.dump();
}

}  // namespace
}  // namespace stint
