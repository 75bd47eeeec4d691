// Prices, budgets, storage and evaluation cadence through a real stintd on
// loopback (issue 41, items 13 and 14; issue 43): a segment that started
// unpriced never migrates (it pays nothing where it is); an elastic job
// grows only as far as its team's budget pays; a job's checkpoints are
// counted once per step, whichever ranks report them how often; `stintctl
// teams set` changes only what it names; pools declare their storage and a
// job waits for a pool that reaches its newest step.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "util/stintd_process.h"
#include "util/subprocess.h"
#include "util/temp_dir.h"

#ifndef STINTCTL_PATH
#error "STINTCTL_PATH must name the stintctl binary"
#endif

namespace stint {
namespace {

using nlohmann::json;

class StintdCostsTest : public ::testing::Test {
 protected:
  void Start(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = SteadyStintdArgs();
    args.insert(args.end(), extra.begin(), extra.end());
    daemon_ = std::make_unique<StintdProcess>(STINTD_PATH, dir_.path(), args);
    ASSERT_TRUE(daemon_->Start()) << daemon_->output();
    admin_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kAdminToken);
    worker_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kWorkerToken);
    agent_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kAgentToken);
  }

  json Post(const std::string& path, const json& body, int want) {
    auto r = admin_->Post(path, body);
    EXPECT_EQ(r.status, want) << "POST " << path << " " << body.dump() << ": " << r.text;
    return r.body;
  }
  int64_t Submit(json spec) {
    spec["checkpoint_seconds"] = 1;
    spec["restart_seconds"] = 0;
    spec["checkpoint_interval_seconds"] = 100;
    return Post("/v1/jobs", spec, 201).value("id", int64_t{0});
  }
  // The job; {} when stintd did not answer it.
  json Job(int64_t id) {
    json j = admin_->Get("/v1/jobs/" + std::to_string(id)).body;
    return j.is_object() ? j : json::object();
  }
  // The job's current segment; {} while it has none.
  json Segment(int64_t job) {
    const json j = Job(job);
    for (const json& s : j.value("segments", json::array())) {
      if (s.value("id", int64_t{-1}) == j.value("segment_id", int64_t{0})) return s;
    }
    return json::object();
  }
  bool Running(int64_t job) { return Segment(job).value("state", "") == "running"; }

  RunResult Ctl(const std::vector<std::string>& command) {
    std::vector<std::string> args = {"--url", daemon_->url(), "--token",
                                     StintdProcess::kAdminToken};
    args.insert(args.end(), command.begin(), command.end());
    return RunProgram(STINTCTL_PATH, args, /*merge_stderr=*/false);
  }
  json Team(const std::string& name) {
    for (const json& t : admin_->Get("/v1/teams").body.value("teams", json::array())) {
      if (t.value("name", "") == name) return t;
    }
    return json::object();
  }

  TempDir dir_;
  std::unique_ptr<StintdProcess> daemon_;
  std::unique_ptr<HttpJson> admin_, worker_, agent_;
};

// Two 8-GPU jobs in pool "od", 4 h of work left each: `free` started while
// od was unpriced (charged nothing), `paying` after od was priced 3.00.
// Then a pool at 1.00 opens 16 GPUs. Only `paying` moves there: a move of
// `free` (which it would get first, as the older segment) costs its
// checkpoint and restart and saves nothing.
TEST_F(StintdCostsTest, ASegmentStartedUnpricedIsNeverMigrated) {
  ASSERT_NO_FATAL_FAILURE(
      Start({"--price-migration", "true", "--price-migration-min-left-seconds", "0"}));
  Post("/v1/pools", {{"name", "od"}}, 201);
  Post("/v1/pools", {{"name", "cheap"}, {"price_per_gpu_hour", 1}}, 201);
  const int64_t far = WallNowMs() + 24 * 3600000;
  Post("/v1/windows", {{"pool", "od"}, {"gpus", 16}, {"end_ms", far}}, 201);
  const json spec = {{"pool", "od,cheap"}, {"min_gpus", 8}, {"remaining_seconds", 4 * 3600}};
  json free_spec = spec, paying_spec = spec;
  free_spec["name"] = "free";
  paying_spec["name"] = "paying";
  const int64_t free = Submit(free_spec);
  ASSERT_TRUE(Eventually([&] { return Running(free); })) << Job(free).dump();
  Post("/v1/pools/od/price", {{"price_per_gpu_hour", 3}}, 200);
  const int64_t paying = Submit(paying_spec);
  ASSERT_TRUE(Eventually([&] { return Running(paying); })) << Job(paying).dump();
  ASSERT_EQ(Segment(free).value("price_per_gpu_hour", -1.0), 0.0);
  ASSERT_EQ(Segment(paying).value("price_per_gpu_hour", -1.0), 3.0);

  Post("/v1/windows", {{"pool", "cheap"}, {"gpus", 16}, {"end_ms", far}}, 201);
  ASSERT_TRUE(Eventually([&] { return Segment(paying).value("state", "") == "notified"; }))
      << Segment(paying).dump();
  EXPECT_EQ(Segment(paying).value("notice_reason", ""), "migrate");
  const json kept = Segment(free);
  EXPECT_EQ(kept.value("state", ""), "running") << kept.dump();
  EXPECT_EQ(kept.value("notice_reason", ""), "none") << kept.dump();
}

// A node of 4 GPUs at 36.00 per GPU-hour (0.01 per GPU-second); team t has
// a budget of 2.50. An elastic job of t (1 to 4 GPUs, minimum segment
// 102 s: 1.02 per GPU) starts on the one GPU a 3-GPU job leaves. When that
// job ends, the elastic one grows by the one GPU its budget pays a minimum
// segment of, not by all three: growing to 4 committed 4.08, so the next
// pass told it to stop for its budget (and it would start small and grow
// again).
TEST_F(StintdCostsTest, AnElasticJobGrowsOnlyAsFarAsItsTeamsBudgetPays) {
  ASSERT_NO_FATAL_FAILURE(Start({"--grow-min-seconds", "0", "--node-ttl-seconds", "600"}));
  Post("/v1/pools", {{"name", "p"}, {"price_per_gpu_hour", 36}}, 201);
  auto put = admin_->Put("/v1/teams/t", {{"budget", 2.5}});
  ASSERT_EQ(put.status, 200) << put.text;
  auto node = agent_->Post(
      "/v1/nodes",
      {{"name", "n1"}, {"pool", "p"}, {"gpus", {0, 1, 2, 3}}, {"end_ms", WallNowMs() + 3600000}});
  ASSERT_EQ(node.status, 201) << node.text;
  const json launch = {{"command", {"/bin/true"}}};
  const int64_t blocker =
      Submit({{"name", "blocker"}, {"pool", "p"}, {"min_gpus", 3}, {"launch", launch}});
  ASSERT_TRUE(Eventually([&] { return Running(blocker); })) << Job(blocker).dump();
  const int64_t elastic = Submit({{"name", "elastic"},
                                  {"team", "t"},
                                  {"pool", "p"},
                                  {"min_gpus", 1},
                                  {"max_gpus", 4},
                                  {"gang", false},
                                  {"remaining_seconds", 3600},
                                  {"launch", launch}});
  ASSERT_TRUE(Eventually([&] { return Running(elastic); })) << Job(elastic).dump();
  ASSERT_EQ(Segment(elastic).value("gpus", 0), 1);

  Post("/v1/jobs/" + std::to_string(blocker) + "/cancel", json::object(), 200);
  ASSERT_TRUE(Eventually([&] { return Segment(elastic).value("gpus", 0) > 1; }))
      << Segment(elastic).dump();
  EXPECT_EQ(Segment(elastic).value("gpus", 0), 2) << Segment(elastic).dump();
  // Passes go on (a job started after the grow proves one did): the grown
  // segment runs on, not told to stop for its budget, and grows no more.
  const int64_t later = Submit({{"name", "later"}, {"pool", "p"}, {"min_gpus", 1}});
  ASSERT_TRUE(Eventually([&] { return Running(later); })) << Job(later).dump();
  const json seg = Segment(elastic);
  EXPECT_EQ(seg.value("state", ""), "running") << seg.dump();
  EXPECT_EQ(seg.value("notice_reason", ""), "none") << seg.dump();
  EXPECT_EQ(seg.value("gpus", 0), 2) << seg.dump();
}

// The same budget at the start: with all 4 GPUs free, the elastic job
// starts on the 2 whose minimum segment its team can pay (it took all 4,
// and was told to stop for its budget on the next pass).
TEST_F(StintdCostsTest, AnElasticJobStartsOnlyWithTheGpusItsTeamsBudgetPays) {
  ASSERT_NO_FATAL_FAILURE(Start());
  Post("/v1/pools", {{"name", "p"}, {"price_per_gpu_hour", 36}}, 201);
  auto put = admin_->Put("/v1/teams/t", {{"budget", 2.5}});
  ASSERT_EQ(put.status, 200) << put.text;
  Post("/v1/windows", {{"pool", "p"}, {"gpus", 5}, {"end_ms", WallNowMs() + 3600000}}, 201);
  const int64_t elastic = Submit({{"name", "elastic"},
                                  {"team", "t"},
                                  {"pool", "p"},
                                  {"min_gpus", 1},
                                  {"max_gpus", 4},
                                  {"gang", false},
                                  {"remaining_seconds", 3600}});
  ASSERT_TRUE(Eventually([&] { return Running(elastic); })) << Job(elastic).dump();
  EXPECT_EQ(Segment(elastic).value("gpus", 0), 2) << Segment(elastic).dump();
  const int64_t later = Submit({{"name", "later"}, {"pool", "p"}, {"min_gpus", 1}});
  ASSERT_TRUE(Eventually([&] { return Running(later); })) << Job(later).dump();
  const json seg = Segment(elastic);
  EXPECT_EQ(seg.value("state", ""), "running") << seg.dump();
  EXPECT_EQ(seg.value("notice_reason", ""), "none") << seg.dump();
}

// Evaluated every 2nd checkpoint: two ranks report step 10 (one of them
// twice) and it is one checkpoint, not evaluated; step 20 is the second,
// evaluated. Before, each report counted: step 10 was "the 2nd".
TEST_F(StintdCostsTest, CheckpointsAreCountedOncePerStepForTheEvaluationCadence) {
  ASSERT_NO_FATAL_FAILURE(Start());
  Post("/v1/pools", {{"name", "p"}}, 201);
  Post("/v1/windows", {{"pool", "p"}, {"gpus", 2}, {"end_ms", WallNowMs() + 3600000}}, 201);
  const int64_t job = Submit({{"name", "train"},
                              {"pool", "p"},
                              {"min_gpus", 2},
                              {"eval", {{"command", {"/bin/true"}}, {"every", 2}}}});
  ASSERT_TRUE(Eventually([&] { return Running(job); })) << Job(job).dump();
  std::vector<std::unique_ptr<HttpJson>> ranks;
  std::vector<std::string> paths;
  for (const char* name : {"rank0", "rank1"}) {
    auto r = worker_->Post("/v1/jobs/" + std::to_string(job) + "/workers", {{"name", name}});
    ASSERT_EQ(r.status, 201) << r.text;
    ranks.push_back(std::make_unique<HttpJson>(daemon_->port(), r.body.value("worker_secret", "")));
    paths.push_back("/v1/workers/" + std::to_string(r.body.value("worker_id", 0)) + "/checkpoint");
  }
  auto report = [&](size_t rank, int64_t step) {
    auto r = ranks[rank]->Post(paths[rank], {{"step", step}, {"seconds", 1}});
    ASSERT_EQ(r.status, 200) << r.text;
  };
  ASSERT_NO_FATAL_FAILURE(report(0, 10));
  ASSERT_NO_FATAL_FAILURE(report(1, 10));
  ASSERT_NO_FATAL_FAILURE(report(0, 10));
  json j = Job(job);
  EXPECT_EQ(j.value("checkpoints", 0), 1) << j.dump();
  EXPECT_TRUE(j.value("evaluations", json::array()).empty()) << j["evaluations"].dump();

  ASSERT_NO_FATAL_FAILURE(report(1, 20));
  ASSERT_NO_FATAL_FAILURE(report(0, 20));
  j = Job(job);
  EXPECT_EQ(j.value("checkpoints", 0), 2) << j.dump();
  const json evals = j.value("evaluations", json::array());
  ASSERT_EQ(evals.size(), 1u) << evals.dump();
  EXPECT_EQ(evals[0].value("step", 0), 20);
}

// `stintctl teams set NAME --budget X` changes the budget alone (it
// required --guaranteed, whose default 0 then replaced the team's
// guarantee); --guaranteed alone keeps the budget and the borrow limit.
TEST_F(StintdCostsTest, StintctlTeamsSetChangesOnlyWhatItNames) {
  ASSERT_NO_FATAL_FAILURE(Start());
  RunResult r = Ctl({"teams", "set", "vision", "--guaranteed", "8", "--borrow-limit", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = Ctl({"teams", "set", "vision", "--budget", "5000"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json t = Team("vision");
  EXPECT_EQ(t.value("guaranteed_gpus", -1), 8) << t.dump();
  EXPECT_EQ(t.value("borrow_limit_gpus", -2), 4) << t.dump();
  EXPECT_EQ(t.value("budget", -1.0), 5000.0) << t.dump();

  r = Ctl({"teams", "set", "vision", "--guaranteed", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  t = Team("vision");
  EXPECT_EQ(t.value("guaranteed_gpus", -1), 2) << t.dump();
  EXPECT_EQ(t.value("borrow_limit_gpus", -2), 4) << t.dump();
  EXPECT_EQ(t.value("budget", -1.0), 5000.0) << t.dump();
}

// Storage through the routes and stintctl: pools declare it (normalized,
// bad prefixes refused naming them), a worker reports where its steps are,
// `stintctl jobs show` lists them. The job's newest step is on onprem's
// node disk: once onprem's window closes it waits with reason "storage"
// although the cloud has room, and starts there once the admin declares
// that the cloud reaches that disk.
TEST_F(StintdCostsTest, AJobWaitsForAPoolThatReachesItsNewestStep) {
  ASSERT_NO_FATAL_FAILURE(Start());
  RunResult r = Ctl({"pools", "add", "onprem", "--storage", "s3://ckpts/runs/", "--storage",
                     "/shared"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = Ctl({"pools", "add", "cloud", "--storage", "s3://ckpts/runs"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = Ctl({"pools", "list"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("s3://ckpts/runs,/shared"), std::string::npos) << r.output;
  auto bad = admin_->Put("/v1/pools/cloud/storage", {{"storage", {"relative/dir"}}});
  EXPECT_EQ(bad.status, 400) << bad.text;
  EXPECT_NE(bad.text.find("relative/dir"), std::string::npos) << bad.text;
  EXPECT_EQ(admin_->Put("/v1/pools/cloud/storage", {{"storage", "s3://x"}}).status, 400);
  EXPECT_EQ(admin_->Put("/v1/pools/cloud/storage", json::object()).status, 400);
  EXPECT_EQ(admin_->Put("/v1/pools/nowhere/storage", {{"storage", json::array()}}).status, 404);
  EXPECT_EQ(worker_->Put("/v1/pools/cloud/storage", {{"storage", json::array()}}).status, 403);

  const json window =
      Post("/v1/windows", {{"pool", "onprem"}, {"gpus", 1}, {"end_ms", WallNowMs() + 3600000}}, 201);
  const int64_t job = Submit({{"name", "train"}, {"pool", "onprem,cloud"}, {"min_gpus", 1}});
  ASSERT_TRUE(Eventually([&] { return Running(job); })) << Job(job).dump();
  auto reg = worker_->Post("/v1/jobs/" + std::to_string(job) + "/workers", {{"name", "rank0"}});
  ASSERT_EQ(reg.status, 201) << reg.text;
  HttpJson rank0(daemon_->port(), reg.body.value("worker_secret", ""));
  const std::string worker = "/v1/workers/" + std::to_string(reg.body.value("worker_id", 0));
  auto stored = [&](const json& body) { return rank0.Post(worker + "/stored", body); };
  EXPECT_EQ(stored({{"location", "s3://ckpts/runs/train"}, {"tier", 2}, {"step", 5}}).status, 200);
  EXPECT_EQ(
      stored({{"location", "/nvme/train/"}, {"tier", 1}, {"step", 7}, {"bytes", 4096}}).status,
      200);
  auto refused = stored({{"location", "nvme/train"}, {"step", 8}});
  EXPECT_EQ(refused.status, 400) << refused.text;
  EXPECT_NE(refused.text.find("nvme/train"), std::string::npos) << refused.text;
  EXPECT_EQ(stored({{"location", "/x"}, {"tier", 3}, {"step", 8}}).status, 400);
  EXPECT_EQ(stored({{"location", "s3://key:secret@ckpts/x"}, {"step", 8}}).status, 400);
  const json listed = Job(job).value("stored", json::array());
  ASSERT_EQ(listed.size(), 2u) << listed.dump();
  EXPECT_EQ(listed[0].value("location", ""), "/nvme/train");  // newest step first
  EXPECT_EQ(listed[0].value("step", 0), 7);
  EXPECT_EQ(listed[0].value("bytes", 0), 4096);
  EXPECT_EQ(listed[0].value("pool", ""), "onprem");
  r = Ctl({"jobs", "show", std::to_string(job)});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("checkpoints stored at:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/nvme/train"), std::string::npos) << r.output;

  // onprem closes: the job acks its notice and waits, although the cloud has room.
  Post("/v1/windows", {{"pool", "cloud"}, {"gpus", 1}, {"end_ms", WallNowMs() + 3600000}}, 201);
  Post("/v1/windows/" + std::to_string(window.value("id", 0)) + "/close", json::object(), 200);
  EXPECT_EQ(rank0.Post(worker + "/ack", {{"step", 7}}).status, 200);
  auto queued = [&] {
    for (const json& p : admin_->Get("/v1/queue").body.value("pending", json::array())) {
      if (p.value("job_id", 0) == job) return p;
    }
    return json::object();
  };
  ASSERT_TRUE(Eventually([&] { return queued().value("reason", "") == "storage"; }))
      << queued().dump();
  EXPECT_NE(queued().value("detail", "").find("step 7 at /nvme/train"), std::string::npos)
      << queued().dump();
  EXPECT_FALSE(Running(job));

  r = Ctl({"pools", "set-storage", "cloud", "s3://ckpts/runs", "/nvme"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(Eventually([&] { return Running(job); })) << Job(job).dump();
}

}  // namespace
}  // namespace stint
