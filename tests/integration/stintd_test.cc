// stintd end to end: a real daemon on loopback with a real SQLite file.
// Token rights, strict request validation, the segment lifecycle (start,
// notice, ack, fencing), preemption, lost segments, visibility, metrics,
// and kill -9 under load with nothing acknowledged lost.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <chrono>
#include <set>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "stint/coordinator_client.h"
#include "util/stintd_process.h"
#include "util/subprocess.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

using nlohmann::json;

// Fast ticks and short leases so lifecycles take seconds, not minutes.
const std::vector<std::string> kFastArgs = {
    "--tick-seconds",      "0.05", "--safety-seconds",      "1", "--min-run-seconds", "0",
    "--lease-ttl-seconds", "3",    "--start-grace-seconds", "3"};

class StintdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<StintdProcess>(STINTD_PATH, dir_.path(), kFastArgs);
    ASSERT_TRUE(daemon_->Start()) << daemon_->output();
    Connect();
  }
  void Connect() {
    admin_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kAdminToken);
    worker_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kWorkerToken);
    as_worker_.clear();
  }
  // A client with worker `wid`'s own secret (from Register()).
  HttpJson& As(int64_t wid) {
    auto& c = as_worker_[wid];
    if (!c) c = std::make_unique<HttpJson>(daemon_->port(), secrets_[wid]);
    return *c;
  }
  void Restart(int sig) {
    daemon_->Kill(sig);
    ASSERT_TRUE(daemon_->Start()) << daemon_->output();
    Connect();
  }

  json Job(int64_t id) { return admin_->Get("/v1/jobs/" + std::to_string(id)).body; }
  bool JobIn(int64_t id, const std::string& state) { return Job(id).value("state", "") == state; }

  int64_t AddWindow(const std::string& pool, int gpus, int64_t end_ms,
                    const std::string& kind = "hard") {
    json w = {{"pool", pool}, {"gpus", gpus}, {"end_ms", end_ms}, {"kind", kind}};
    auto r = admin_->Post("/v1/windows", w);
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  }
  // `spec` with checkpoints and restarts that take next to no time: a
  // checkpoint of `checkpoint_seconds` every second, restarts free.
  static json QuickCheckpoints(json spec, int checkpoint_seconds = 1) {
    spec["checkpoint_seconds"] = checkpoint_seconds;
    spec["restart_seconds"] = 0;
    spec["checkpoint_interval_seconds"] = 1;
    return spec;
  }
  // The queue holds `job` alone, waiting for a preemption's ack; in *queue.
  void ExpectPreempting(int64_t job, json* queue) {
    *queue = admin_->Get("/v1/queue").body;
    ASSERT_EQ((*queue)["pending"].size(), 1u) << queue->dump();
    EXPECT_EQ((*queue)["pending"][0]["job_id"], job);
    EXPECT_EQ((*queue)["pending"][0]["reason"], "preempting");
  }
  int64_t Submit(json spec) {
    auto r = admin_->Post("/v1/jobs", spec);
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  }
  json Register(int64_t job) {
    auto r = worker_->Post("/v1/jobs/" + std::to_string(job) + "/workers", {{"name", "w0"}});
    EXPECT_EQ(r.status, 201) << r.text;
    secrets_[r.body.value("worker_id", int64_t{0})] = r.body.value("worker_secret", "");
    return r.body;
  }

  TempDir dir_;
  std::unique_ptr<StintdProcess> daemon_;
  std::unique_ptr<HttpJson> admin_, worker_;
  std::map<int64_t, std::string> secrets_;  // worker id -> worker_secret
  std::map<int64_t, std::unique_ptr<HttpJson>> as_worker_;
};

TEST_F(StintdTest, TokensSeparateAdminAndWorkerRights) {
  HttpJson anonymous(daemon_->port(), "");
  HttpJson wrong(daemon_->port(), "not-a-token-of-this-server");
  EXPECT_EQ(anonymous.Get("/healthz").status, 200);
  EXPECT_EQ(anonymous.Get("/v1/jobs").status, 401);
  EXPECT_EQ(wrong.Get("/v1/jobs").status, 401);
  EXPECT_EQ(wrong.Get("/metrics").status, 401);
  auto denied = worker_->Post("/v1/pools", {{"name", "p"}});
  EXPECT_EQ(denied.status, 403);
  EXPECT_EQ(denied.body["error"]["code"], "PERMISSION_DENIED");
  EXPECT_EQ(worker_->Post("/v1/jobs", {{"name", "j"}, {"min_gpus", 1}}).status, 403);
  EXPECT_EQ(worker_->Get("/v1/queue").status, 200);
  EXPECT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
  // The refused attempt created nothing.
  EXPECT_EQ(admin_->Get("/v1/pools").body["pools"].size(), 1u);
  EXPECT_EQ(admin_->Get("/v1/jobs").body["jobs"].size(), 0u);
}

TEST_F(StintdTest, MalformedRequestsAreRefusedAndChangeNothing) {
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
  struct Case {
    std::string path, body, expect;
  } cases[] = {
      {"/v1/jobs", "{not json", "not valid JSON"},
      {"/v1/jobs", "[1,2]", "must be a JSON object"},
      {"/v1/jobs", R"({"name":"j","min_gpus":1,"min_gpu":2})", "unknown field \"min_gpu\""},
      {"/v1/jobs", R"({"name":"j","min_gpus":"two"})", "min_gpus must be an integer"},
      {"/v1/jobs", R"({"name":"j","min_gpus":0})", "min_gpus must be"},
      {"/v1/jobs", R"({"name":"j","min_gpus":4,"max_gpus":2})", "max_gpus must be >= min_gpus"},
      {"/v1/jobs", R"({"name":"j","min_gpus":1,"priority":"URGENT"})", "priority must be"},
      {"/v1/jobs", R"({"name":"j","min_gpus":1,"pool":"nope"})", "pool \"nope\" does not exist"},
      {"/v1/jobs", R"({"name":"j","min_gpus":1,"checkpoint_seconds":-1})", "checkpoint_seconds"},
      {"/v1/jobs", R"({"min_gpus":1})", "name is required"},
      {"/v1/windows", R"({"pool":"p","gpus":4})", "end_ms is required for a hard window"},
      {"/v1/windows", R"({"pool":"p","gpus":4,"end_ms":1000})", "end_ms"},
      {"/v1/windows", R"({"pool":"p","gpus":-4,"end_ms":99999999999999})", "gpus must be"},
      {"/v1/windows", R"({"pool":"p","gpus":4,"kind":"weird","end_ms":99999999999999})",
       "window kind"},
      {"/v1/pools", R"({"name":"bad name!"})", "pool name must match"},
      {"/v1/pools", R"({"name":"p"})", "already exists"},
  };
  for (const Case& c : cases) {
    auto r = admin_->PostRaw(c.path, c.body);
    EXPECT_GE(r.status, 400) << c.body;
    EXPECT_LT(r.status, 500) << c.body;
    ASSERT_TRUE(r.body.is_object()) << r.text;
    const std::string message = r.body["error"].value("message", "");
    EXPECT_NE(message.find(c.expect), std::string::npos) << c.body << " -> " << message;
  }
  EXPECT_EQ(admin_->Get("/v1/jobs").body["jobs"].size(), 0u);
  EXPECT_EQ(admin_->Get("/v1/windows").body["windows"].size(), 0u);
  EXPECT_EQ(admin_->Get("/v1/jobs/12345").status, 404);
  EXPECT_EQ(admin_->Get("/v1/jobs/abc").status, 404);  // no route matches
  EXPECT_EQ(admin_->Post("/v1/jobs/999/cancel", json::object()).status, 404);
  EXPECT_EQ(admin_->Post("/v1/workers/999/heartbeat", json::object()).status, 404);
}

// Per-worker secrets (API.md, "Credentials"): the shared worker token only
// registers and reads; /v1/workers/{wid}/* takes that worker's own secret
// and nothing else, so a worker of one job can never change another job,
// nor act for another worker of its own; a fenced worker's secret is dead,
// and secrets survive a restart of stintd.
TEST_F(StintdTest, WorkerSecretsActOnlyForTheirOwnWorker) {
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
  AddWindow("p", 8, WallNowMs() + 3600000);
  const int64_t job_a = Submit({{"name", "a"}, {"pool", "p"}, {"min_gpus", 4}});
  const int64_t job_b = Submit({{"name", "b"}, {"pool", "p"}, {"min_gpus", 4}});
  ASSERT_TRUE(Eventually([&] { return JobIn(job_a, "RUNNING") && JobIn(job_b, "RUNNING"); }))
      << Job(job_a).dump() << Job(job_b).dump();
  json reg_a = Register(job_a);
  json reg_a2 = Register(job_a);
  json reg_b = Register(job_b);
  const int64_t wa = reg_a["worker_id"], wa2 = reg_a2["worker_id"], wb = reg_b["worker_id"];
  const std::string secret_a = reg_a.value("worker_secret", "");
  ASSERT_EQ(secret_a.rfind("stw1." + std::to_string(wa) + ".", 0), 0u) << reg_a.dump();
  EXPECT_NE(secret_a, reg_a2.value("worker_secret", "")) << "each incarnation gets its own";
  auto path = [](int64_t wid, const char* what) {
    return "/v1/workers/" + std::to_string(wid) + "/" + what;
  };
  auto code = [](const HttpJson::Response& r) {
    return r.body.is_object() && r.body.contains("error") ? r.body["error"].value("code", "")
                                                          : std::string();
  };

  // The shared worker token registers and reads, but acts for nobody.
  for (const char* what : {"heartbeat", "finished", "leave", "ack"}) {
    auto r = worker_->Post(path(wa, what), json::object());
    EXPECT_EQ(r.status, 403) << what << ": " << r.text;
    EXPECT_EQ(code(r), "PERMISSION_DENIED") << r.text;
  }
  EXPECT_EQ(worker_->Get(path(wa, "notice") + "?wait_seconds=0").status, 403);
  EXPECT_EQ(worker_->Get("/v1/jobs/" + std::to_string(job_a)).status, 200);

  // A's secret cannot touch B, nor A's other worker.
  HttpJson& a = As(wa);
  for (const char* what : {"finished", "ack", "leave", "heartbeat"}) {
    auto r = a.Post(path(wb, what), json::object());
    EXPECT_EQ(r.status, 403) << what << ": " << r.text;
    EXPECT_NE(r.text.find("job " + std::to_string(job_b)), std::string::npos) << r.text;
  }
  EXPECT_EQ(a.Post(path(wa2, "leave"), json::object()).status, 403);
  EXPECT_EQ(a.Post(path(wb, "rendezvous/join"), {{"endpoint", "127.0.0.1:1"}}).status, 403);
  EXPECT_TRUE(JobIn(job_b, "RUNNING")) << Job(job_b).dump();
  EXPECT_EQ(As(wb).Post(path(wb, "heartbeat"), json::object()).status, 200);
  EXPECT_EQ(As(wa2).Post(path(wa2, "heartbeat"), json::object()).status, 200);

  // A secret is no admin or reading token, and a forged one is nobody's.
  EXPECT_EQ(a.Get("/v1/jobs").status, 401);
  EXPECT_EQ(a.Post("/v1/jobs", {{"name", "x"}, {"min_gpus", 1}}).status, 401);
  std::string forged = secret_a;
  forged.back() = forged.back() == '0' ? '1' : '0';
  for (const std::string& t : {forged, "stw1." + std::to_string(wb) + secret_a.substr(secret_a.rfind('.')),
                               std::string("stw1.999.") + std::string(64, 'a'), std::string("garbage")}) {
    HttpJson f(daemon_->port(), t);
    auto r = f.Post(path(wa, "heartbeat"), json::object());
    EXPECT_EQ(r.status, 401) << t << ": " << r.text;
    EXPECT_EQ(code(r), "UNAUTHENTICATED") << r.text;
  }
  // The admin token has every right, these included.
  EXPECT_EQ(admin_->Post(path(wa, "heartbeat"), json::object()).status, 200);

  // Secrets live in the database: they work across a restart.
  Restart(SIGKILL);
  EXPECT_EQ(As(wa).Post(path(wa, "heartbeat"), json::object()).status, 200);

  // Once A's worker left, its secret is dead (410), for every endpoint.
  ASSERT_EQ(As(wa).Post(path(wa, "leave"), json::object()).status, 200);
  for (const char* what : {"heartbeat", "finished", "leave", "progress"}) {
    auto r = As(wa).Post(path(wa, what), {{"step", 1}});
    EXPECT_EQ(r.status, 410) << what << ": " << r.text;
    EXPECT_EQ(code(r), "GONE") << r.text;
  }
  EXPECT_TRUE(JobIn(job_a, "RUNNING")) << "the left worker's calls changed its job";
  // B finishes with its own secret; then B's secret is dead too.
  ASSERT_EQ(As(wb).Post(path(wb, "finished"), json::object()).status, 200);
  EXPECT_TRUE(JobIn(job_b, "DONE"));
  EXPECT_EQ(As(wb).Post(path(wb, "heartbeat"), json::object()).status, 410);
  EXPECT_EQ(As(wa2).Post(path(wa2, "heartbeat"), json::object()).status, 200);
}

TEST_F(StintdTest, SegmentLifecycleNoticeAckAndFencing) {
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
  const int64_t end = WallNowMs() + 6000;
  const int64_t window = AddWindow("p", 8, end);
  const int64_t job = Submit(
      QuickCheckpoints({{"name", "train"}, {"pool", "p"}, {"min_gpus", 4}, {"max_gpus", 8}}));
  ASSERT_TRUE(Eventually([&] { return JobIn(job, "RUNNING"); })) << Job(job).dump();
  json j = Job(job);
  ASSERT_EQ(j["segments"].size(), 1u);
  EXPECT_EQ(j["segments"][0]["gpus"], 8);
  EXPECT_EQ(j["segments"][0]["allocs"][0]["window_id"], window);
  EXPECT_EQ(j["segments"][0]["planned_end_ms"], end);

  json reg = Register(job);
  const int64_t wid = reg["worker_id"];
  const uint64_t token = reg["fencing_token"];
  // The worker's token is its own, newer than its segment's, and the job
  // shows the newest token issued for it.
  EXPECT_EQ(j["fencing_token"], j["segments"][0]["fencing_token"]);
  EXPECT_GT(token, j["fencing_token"].get<uint64_t>());
  EXPECT_EQ(token, Job(job)["fencing_token"].get<uint64_t>());
  auto hb = As(wid).Post("/v1/workers/" + std::to_string(wid) + "/heartbeat", {{"step", 10}});
  ASSERT_EQ(hb.status, 200) << hb.text;
  EXPECT_TRUE(hb.body["active"].get<bool>());
  EXPECT_TRUE(hb.body["notice"].is_null());
  auto check = As(wid).Post("/v1/fencing/check", {{"job_id", job}, {"fencing_token", token}});
  EXPECT_TRUE(check.body["valid"].get<bool>()) << check.text;
  EXPECT_FALSE(As(wid).Post("/v1/fencing/check", {{"job_id", job}, {"fencing_token", token + 1}})
                   .body["valid"]
                   .get<bool>());

  // The long-poll answers with the notice at close - (checkpoint + safety).
  HttpJson poller(daemon_->port(), reg["worker_secret"].get<std::string>(), 30);
  json notice;
  ASSERT_TRUE(Eventually(
      [&] {
        auto r = poller.Get("/v1/workers/" + std::to_string(wid) + "/notice?wait_seconds=5");
        if (r.status != 200 || r.body["notice"].is_null()) return false;
        notice = r.body["notice"];
        return true;
      },
      15));
  EXPECT_EQ(notice["reason"], "window_close");
  EXPECT_EQ(notice["deadline_ms"], end);
  json seg = Job(job)["segments"][0];
  EXPECT_EQ(seg["state"], "notified");
  EXPECT_GE(seg["notice_ms"].get<int64_t>(), end - 2000)
      << "notice sent before close - (checkpoint + safety)";

  ASSERT_EQ(As(wid)
                .Post("/v1/workers/" + std::to_string(wid) + "/checkpoint",
                       {{"step", 42}, {"seconds", 0.5}, {"bytes", 1 << 20}})
                .status,
            200);
  ASSERT_EQ(As(wid).Post("/v1/workers/" + std::to_string(wid) + "/ack", {{"step", 42}}).status,
            200);
  j = Job(job);
  EXPECT_EQ(j["state"], "PENDING");
  EXPECT_EQ(j["checkpoint_step"], 42);
  EXPECT_EQ(j["segments"][0]["state"], "ended");
  // The old incarnation is fenced: its commit check (its secret is dead:
  // 410; asked by another, the token is not valid) and its heartbeats fail.
  EXPECT_EQ(As(wid).Post("/v1/fencing/check", {{"job_id", job}, {"fencing_token", token}}).status,
            410);
  EXPECT_FALSE(admin_->Post("/v1/fencing/check", {{"job_id", job}, {"fencing_token", token}})
                   .body["valid"]
                   .get<bool>());
  auto gone = As(wid).Post("/v1/workers/" + std::to_string(wid) + "/heartbeat", json::object());
  EXPECT_EQ(gone.status, 410) << gone.text;
  EXPECT_EQ(As(wid).Post("/v1/workers/" + std::to_string(wid) + "/ack", {{"step", 43}}).status,
            410);
  // The window ends in < 2 s: a minimum segment (3 s) no longer fits.
  auto queue = admin_->Get("/v1/queue").body;
  ASSERT_TRUE(Eventually([&] {
    queue = admin_->Get("/v1/queue").body;
    return queue["pending"].size() == 1 && queue["pending"][0]["reason"] == "window";
  })) << queue.dump();
}

// Fencing per worker incarnation through real HTTP: two workers of one
// segment hold different tokens and may both commit; once B's lease expires
// and the group re-forms without it, B's commit is refused while A's goes
// on, and B registering again gets a newer token.
TEST_F(StintdTest, ARankDroppedFromTheRendezvousCannotCommitWhileTheOthersCan) {
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
  AddWindow("p", 2, WallNowMs() + 3600000);
  const int64_t job =
      Submit(QuickCheckpoints({{"name", "elastic"}, {"min_gpus", 1}, {"max_gpus", 2}}));
  ASSERT_TRUE(Eventually([&] { return JobIn(job, "RUNNING"); }));
  auto client = [&](const std::string& name) {
    CoordinatorOptions o;
    o.url = daemon_->url();
    o.token = StintdProcess::kWorkerToken;
    o.job_id = uint64_t(job);
    o.worker_name = name;
    o.retry.initial_backoff = std::chrono::milliseconds(10);
    o.retry.max_backoff = std::chrono::milliseconds(200);
    auto c = CoordinatorClient::Create(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  };
  auto a = client("a"), b = client("b");
  ASSERT_TRUE(a && b);
  auto reg_a = a->Register();
  auto reg_b = b->Register();
  ASSERT_TRUE(reg_a.ok() && reg_b.ok()) << reg_a.status().ToString() << reg_b.status().ToString();
  const uint64_t segment_token = Job(job)["segments"][0]["fencing_token"];
  EXPECT_NE(reg_a->fencing_token, reg_b->fencing_token);
  EXPECT_GT(reg_a->fencing_token, segment_token);
  EXPECT_GT(reg_b->fencing_token, segment_token);
  EXPECT_FALSE(a->CheckFencing(uint64_t(job), segment_token)->valid)
      << "a segment's token is no worker's";

  // Both join; the segment's two GPUs are there, so generation 1 forms at once.
  Result<RendezvousInfo> joined_a = Status::Internal("not run");
  std::thread join_a(
      [&] { joined_a = a->JoinRendezvous("127.0.0.1:1", 0, std::chrono::seconds(20)); });
  auto joined_b = b->JoinRendezvous("127.0.0.1:2", 0, std::chrono::seconds(20));
  join_a.join();
  ASSERT_TRUE(joined_a.ok() && joined_b.ok()) << joined_a.status().ToString();
  ASSERT_TRUE(joined_a->ready(0) && joined_b->ready(0));
  EXPECT_TRUE(a->CheckFencing()->valid);
  EXPECT_TRUE(b->CheckFencing()->valid);
  EXPECT_TRUE(a->GuardCommit(1).ok());
  EXPECT_TRUE(b->GuardCommit(1).ok());

  // B falls silent; A keeps its lease.
  std::atomic<bool> stop{false};
  std::thread beats([&] {
    while (!stop) {
      a->Heartbeat(2).status().IgnoreError();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  // Joined on every way out, a failed ASSERT included.
  struct Joiner {
    std::atomic<bool>* stop;
    std::thread* t;
    ~Joiner() {
      *stop = true;
      t->join();
    }
  } joiner{&stop, &beats};
  ASSERT_TRUE(Eventually([&] { return !b->CheckFencing()->valid; }, 15)) << Job(job).dump();
  EXPECT_TRUE(a->CheckFencing()->valid) << "a survivor keeps its token while the round is open";
  EXPECT_TRUE(a->GuardCommit(2).ok());
  // A re-forms the group without B (the last call closes it with A alone;
  // a join waits at most half a lease, so A joins until it is answered).
  Result<RendezvousInfo> reformed = Status::Internal("not run");
  ASSERT_TRUE(Eventually([&] {
    reformed = a->JoinRendezvous("127.0.0.1:1", 1, std::chrono::seconds(20));
    return reformed.ok() && reformed->ready(1);
  })) << reformed.status().ToString()
      << Job(job).dump();
  EXPECT_EQ(reformed->world_size, 1);
  EXPECT_TRUE(a->GuardCommit(3).ok());
  auto check_b = b->CheckFencing();
  ASSERT_TRUE(check_b.ok());
  EXPECT_FALSE(check_b->valid);
  EXPECT_FALSE(check_b->reason.empty());
  const Status refused = b->GuardCommit(3);
  EXPECT_TRUE(IsFenced(refused)) << refused.ToString();
  // B is not released: it may re-join, but its incarnation cannot commit.
  auto view_b = b->Heartbeat(3);
  ASSERT_TRUE(view_b.ok()) << view_b.status().ToString();
  EXPECT_TRUE(view_b->active);
  EXPECT_EQ(view_b->fencing_token, reg_b->fencing_token);
  EXPECT_FALSE(b->CheckFencing()->valid);
  // A new incarnation of B gets a newer token.
  auto b2 = client("b");
  ASSERT_TRUE(b2);
  auto reg_b2 = b2->Register();
  ASSERT_TRUE(reg_b2.ok()) << reg_b2.status().ToString();
  EXPECT_GT(reg_b2->fencing_token, reg_b->fencing_token);
  EXPECT_GT(reg_b2->fencing_token, reg_a->fencing_token);
}

TEST_F(StintdTest, NoAckByTheDeadlineMarksTheSegmentLost) {
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
  const int64_t window = AddWindow("p", 4, WallNowMs() + 60000);
  const int64_t job = Submit(QuickCheckpoints({{"name", "zombie"}, {"min_gpus", 4}}));
  ASSERT_TRUE(Eventually([&] { return JobIn(job, "RUNNING"); }));
  json reg = Register(job);
  const int64_t wid = reg["worker_id"];
  // Revoke with a 2 s lead; the worker heartbeats but never acks.
  auto closed =
      admin_->Post("/v1/windows/" + std::to_string(window) + "/close", {{"lead_seconds", 2}});
  ASSERT_EQ(closed.status, 200) << closed.text;
  EXPECT_TRUE(closed.body["closed_early"].get<bool>());
  std::string reason;
  ASSERT_TRUE(Eventually([&] {
    auto hb = As(wid).Post("/v1/workers/" + std::to_string(wid) + "/heartbeat", json::object());
    if (hb.status == 200 && !hb.body["notice"].is_null()) reason = hb.body["notice"]["reason"];
    return hb.status == 410;
  }));
  EXPECT_EQ(reason, "revoked");
  json j = Job(job);
  EXPECT_EQ(j["state"], "PENDING");
  EXPECT_EQ(j["segments"][0]["state"], "lost");
  EXPECT_GT(j["lost_gpu_seconds"].get<double>(), 0);
  const std::string metrics = admin_->Get("/metrics").text;
  EXPECT_NE(metrics.find("stintd_segments_lost_total 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("stintd_revocations_total 1\n"), std::string::npos);
}

TEST_F(StintdTest, SilentWorkersLoseTheirSegment) {
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
  AddWindow("p", 4, WallNowMs() + 120000);
  const int64_t job = Submit(QuickCheckpoints({{"name", "crashy"}, {"min_gpus", 2}}));
  ASSERT_TRUE(Eventually([&] { return JobIn(job, "RUNNING"); }));
  Register(job);  // and never heartbeats again
  ASSERT_TRUE(Eventually([&] { return Job(job)["segments"][0]["state"] == "lost"; }, 15))
      << Job(job).dump();
  EXPECT_NE(Job(job)["message"].get<std::string>().find("lease"), std::string::npos);
  // It is pending again and gets a new segment with a new fencing token.
  ASSERT_TRUE(Eventually([&] { return JobIn(job, "RUNNING"); }));
  json j = Job(job);
  EXPECT_EQ(j["segments"].size(), 2u);
  EXPECT_NE(j["segments"][0]["fencing_token"], j["segments"][1]["fencing_token"]);
}

TEST_F(StintdTest, HigherPriorityPreemptsWithNoticeAndStartsOnAck) {
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
  AddWindow("p", 8, WallNowMs() + 600000);
  const int64_t low =
      Submit(QuickCheckpoints({{"name", "low"}, {"priority", "LOW"}, {"min_gpus", 8}}, 2));
  ASSERT_TRUE(Eventually([&] { return JobIn(low, "RUNNING"); }));
  const int64_t wid = Register(low)["worker_id"];
  const int64_t high =
      Submit(QuickCheckpoints({{"name", "high"}, {"priority", "HIGH"}, {"min_gpus", 8}}));
  json notice;
  ASSERT_TRUE(Eventually([&] {
    auto hb = As(wid).Post("/v1/workers/" + std::to_string(wid) + "/heartbeat", json::object());
    notice = hb.body["notice"];
    return !notice.is_null();
  }));
  EXPECT_EQ(notice["reason"], "preempted");
  json queue;
  ASSERT_NO_FATAL_FAILURE(ExpectPreempting(high, &queue));
  EXPECT_EQ(queue["pending"][0]["planned_start_ms"], notice["deadline_ms"]);
  ASSERT_EQ(As(wid).Post("/v1/workers/" + std::to_string(wid) + "/ack", {{"step", 7}}).status,
            200);
  // The ack releases the GPUs before the deadline.
  ASSERT_TRUE(Eventually([&] { return JobIn(high, "RUNNING"); }));
  EXPECT_LT(WallNowMs(), notice["deadline_ms"].get<int64_t>() + 1000);
  json l = Job(low);
  EXPECT_EQ(l["state"], "PENDING");
  EXPECT_EQ(l["preemptions"], 1);
  EXPECT_EQ(l["segments"][0]["preempted_for"], high);
}

// A team at its cap (guarantee 0 + borrow 8): its HIGH job preempts the
// team's own LOW job through the public API, never the other team's
// equally cheap one, and starts on the GPUs the ack gives back.
TEST_F(StintdTest, AJobItsQuotaBlocksPreemptsOnlyItsOwnTeamsJob) {
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
  ASSERT_EQ(admin_->Put("/v1/teams/q", {{"guaranteed_gpus", 0}, {"borrow_limit_gpus", 8}}).status,
            200);
  ASSERT_EQ(admin_->Put("/v1/teams/r", {{"guaranteed_gpus", 0}}).status, 200);
  AddWindow("p", 16, WallNowMs() + 600000);
  const json low_spec = QuickCheckpoints({{"priority", "LOW"}, {"min_gpus", 8}}, 2);
  json own_spec = low_spec, other_spec = low_spec;
  own_spec["name"] = "own";
  own_spec["team"] = "q";
  other_spec["name"] = "other";
  other_spec["team"] = "r";
  const int64_t own = Submit(own_spec);
  const int64_t other = Submit(other_spec);
  ASSERT_TRUE(Eventually([&] { return JobIn(own, "RUNNING") && JobIn(other, "RUNNING"); }));
  const int64_t own_wid = Register(own)["worker_id"];
  const int64_t other_wid = Register(other)["worker_id"];
  auto beat = [&](int64_t wid) {
    return As(wid).Post("/v1/workers/" + std::to_string(wid) + "/heartbeat", json::object());
  };
  const int64_t high = Submit(
      QuickCheckpoints({{"name", "high"}, {"team", "q"}, {"priority", "HIGH"}, {"min_gpus", 8}}));
  json notice;
  ASSERT_TRUE(Eventually([&] {
    EXPECT_TRUE(beat(other_wid).body["notice"].is_null()) << "the other team's job was noticed";
    notice = beat(own_wid).body["notice"];
    return !notice.is_null();
  }));
  EXPECT_EQ(notice["reason"], "preempted");
  json queue;
  ASSERT_NO_FATAL_FAILURE(ExpectPreempting(high, &queue));
  ASSERT_EQ(
      As(own_wid).Post("/v1/workers/" + std::to_string(own_wid) + "/ack", {{"step", 3}}).status,
      200);
  ASSERT_TRUE(Eventually([&] {
    EXPECT_TRUE(beat(other_wid).body["notice"].is_null()) << "the other team's job was noticed";
    return JobIn(high, "RUNNING");
  }));
  json o = Job(own);
  EXPECT_EQ(o["state"], "PENDING");
  EXPECT_EQ(o["segments"][0]["preempted_for"], high);
  json r = Job(other);
  EXPECT_EQ(r["state"], "RUNNING");
  EXPECT_EQ(r["preemptions"], 0);
}

TEST_F(StintdTest, QueueShowsPositionReasonAndPlannedStart) {
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "q"}}).status, 201);
  const int64_t now = WallNowMs();
  AddWindow("p", 4, now + 3600000);
  AddWindow("q", 4, now + 3600000);  // a gang spans windows of one pool, never two pools
  const int64_t gang = Submit({{"name", "gang8"}, {"min_gpus", 8}, {"checkpoint_seconds", 1}});
  const int64_t small = Submit({{"name", "small"}, {"min_gpus", 2}, {"checkpoint_seconds", 1}});
  ASSERT_TRUE(Eventually([&] { return JobIn(small, "RUNNING"); }));
  json queue;
  ASSERT_TRUE(Eventually([&] {
    queue = admin_->Get("/v1/queue").body;
    return queue["pending"].size() == 1 && queue["pending"][0]["job_id"] == gang;
  })) << queue.dump();
  EXPECT_EQ(queue["pending"][0]["position"], 1);
  EXPECT_EQ(queue["pending"][0]["reason"], "gang");
  EXPECT_FALSE(queue["pending"][0]["detail"].get<std::string>().empty());
  EXPECT_TRUE(queue["pending"][0]["planned_start_ms"].is_null())
      << "no single pool ever holds 8 GPUs";
  EXPECT_EQ(queue["running"].size(), 1u);
  EXPECT_EQ(queue["stats"]["open_window_gpus"], 8);
  // Cancel works for pending and running jobs.
  EXPECT_EQ(admin_->Post("/v1/jobs/" + std::to_string(gang) + "/cancel", {{"reason", "test"}})
                .body["state"],
            "CANCELLED");
  EXPECT_EQ(
      admin_->Post("/v1/jobs/" + std::to_string(small) + "/cancel", json::object()).body["state"],
      "CANCELLED");
  EXPECT_EQ(Job(small)["segments"][0]["state"], "cancelled");
  EXPECT_EQ(admin_->Post("/v1/jobs/" + std::to_string(small) + "/cancel", json::object()).status,
            409);
}

TEST_F(StintdTest, MetricsAreValidPrometheusText) {
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
  AddWindow("p", 4, WallNowMs() + 600000);
  Submit({{"name", "a"}, {"min_gpus", 2}});
  auto r = worker_->Get("/metrics");
  ASSERT_EQ(r.status, 200);
  std::set<std::string> families;
  size_t samples = 0;
  std::istringstream in(r.text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      families.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    // name{labels} value: the value parses as a number.
    const size_t sp = line.rfind(' ');
    ASSERT_NE(sp, std::string::npos) << line;
    size_t used = 0;
    std::stod(line.substr(sp + 1), &used);
    EXPECT_EQ(used, line.size() - sp - 1) << line;
    samples++;
  }
  EXPECT_GT(samples, 20u);
  for (const char* f : {"stintd_queue_length", "stintd_wait_seconds", "stintd_gpus",
                        "stintd_window_utilization", "stintd_preemptions_total",
                        "stintd_lost_work_gpu_seconds_total", "stintd_heartbeats_total"}) {
    EXPECT_TRUE(families.count(f)) << f;
  }
}

TEST_F(StintdTest, KvCompareAndSetAndLongPoll) {
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
  const int64_t job = Submit({{"name", "kv"}, {"min_gpus", 1}});
  const std::string key = "/v1/jobs/" + std::to_string(job) + "/kv/rdzv/gen";
  // The job's own token (the shared worker token reaches no job's KV).
  const std::string job_token = Job(job)["registration_token"].get<std::string>();
  HttpJson kv(daemon_->port(), job_token);
  EXPECT_EQ(kv.Get(key).status, 404);
  EXPECT_EQ(kv.Put(key, {{"value", "1"}, {"if_version", 0}}).body["version"], 1);
  auto lost = kv.Put(key, {{"value", "x"}, {"if_version", 0}});
  EXPECT_EQ(lost.status, 409);
  EXPECT_EQ(lost.body["error"]["code"], "ABORTED");
  // A long-poll for version 2 is answered by the write that makes it.
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    HttpJson w(daemon_->port(), job_token);
    w.Put(key, {{"value", "2"}, {"if_version", 1}});
  });
  auto got = kv.Get(key + "?wait_seconds=10&min_version=2");
  writer.join();
  EXPECT_EQ(got.status, 200) << got.text;
  EXPECT_EQ(got.body["value"], "2");
  Restart(SIGKILL);
  EXPECT_EQ(kv.Get(key).body["version"], 2);
  EXPECT_EQ(kv.Delete(key).status, 200);
  EXPECT_EQ(kv.Get(key).status, 404);
}

// A job's KV is bounded (API.md, "KV"): a value past 1 MiB is 413, a key
// or byte past the job's caps (--kv-max-keys-per-job,
// --kv-max-bytes-per-job) is 429 and changes nothing; overwriting within
// the caps and other jobs' KV go on. A job that ends (CANCELLED, DONE)
// keeps no KV, across a restart too, and takes no more writes.
TEST_F(StintdTest, KvCapsRefuseClearlyAndAJobThatEndsKeepsNoKv) {
  daemon_->Kill(SIGTERM);
  std::vector<std::string> args = kFastArgs;
  args.insert(args.end(), {"--kv-max-keys-per-job", "3", "--kv-max-bytes-per-job", "64"});
  daemon_ = std::make_unique<StintdProcess>(STINTD_PATH, dir_.path(), args);
  ASSERT_TRUE(daemon_->Start()) << daemon_->output();
  Connect();
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
  const int64_t a = Submit({{"name", "a"}, {"min_gpus", 1}});
  const int64_t b = Submit({{"name", "b"}, {"min_gpus", 1}});
  // The shared worker token reaches no job's KV: each job's own token does.
  HttpJson ja(daemon_->port(), Job(a)["registration_token"].get<std::string>());
  HttpJson jb(daemon_->port(), Job(b)["registration_token"].get<std::string>());
  auto kv = [](int64_t job, const std::string& key) {
    return "/v1/jobs/" + std::to_string(job) + "/kv/" + key;
  };
  for (const char* key : {"k1", "k2", "k3"})
    ASSERT_EQ(ja.Put(kv(a, key), {{"value", "v"}}).status, 200) << key;
  auto full = ja.Put(kv(a, "k4"), {{"value", "v"}});
  EXPECT_EQ(full.status, 429) << full.text;
  EXPECT_EQ(full.body["error"]["code"], "RESOURCE_EXHAUSTED");
  EXPECT_NE(full.text.find("--kv-max-keys-per-job"), std::string::npos) << full.text;
  EXPECT_EQ(ja.Get(kv(a, "k4")).status, 404);
  EXPECT_EQ(ja.Put(kv(a, "k1"), {{"value", "again"}}).status, 200);  // no new key
  EXPECT_EQ(jb.Put(kv(b, "k1"), {{"value", "v"}}).status, 200);      // caps are per job
  ASSERT_EQ(ja.Delete(kv(a, "k3")).status, 200);
  EXPECT_EQ(ja.Put(kv(a, "k4"), {{"value", "v"}}).status, 200);

  // b holds 3 bytes ("k1" + "v"); 2 + 60 more would be 65 > 64.
  auto heavy = jb.Put(kv(b, "k2"), {{"value", std::string(60, 'x')}});
  EXPECT_EQ(heavy.status, 429) << heavy.text;
  EXPECT_NE(heavy.text.find("--kv-max-bytes-per-job"), std::string::npos) << heavy.text;
  EXPECT_EQ(jb.Put(kv(b, "k2"), {{"value", std::string(59, 'x')}}).status, 200);
  auto huge = jb.Put(kv(b, "k1"), {{"value", std::string((1 << 20) + 1, 'x')}});
  EXPECT_EQ(huge.status, 413) << huge.text.substr(0, 300);
  EXPECT_EQ(huge.body["error"]["code"], "PAYLOAD_TOO_LARGE");
  EXPECT_EQ(jb.Get(kv(b, "k1")).body["value"], "v");

  // Cancelled: a's KV is gone at once and stays gone; b's stays.
  ASSERT_EQ(admin_->Post("/v1/jobs/" + std::to_string(a) + "/cancel", json::object()).status, 200);
  EXPECT_EQ(admin_->Get(kv(a, "k1")).status, 404);
  auto late = ja.Put(kv(a, "k1"), {{"value", "v"}});
  EXPECT_EQ(late.status, 409) << late.text;
  Restart(SIGKILL);
  EXPECT_EQ(admin_->Get(kv(a, "k1")).status, 404);
  EXPECT_EQ(admin_->Get(kv(b, "k1")).body["value"], "v");

  // Done: the job runs, its worker writes and finishes; its KV goes.
  AddWindow("p", 1, WallNowMs() + 24 * 3600 * 1000);
  ASSERT_TRUE(Eventually([&] { return JobIn(a, "CANCELLED") && JobIn(b, "RUNNING"); }))
      << Job(b).dump();
  const int64_t wid = Register(b)["worker_id"];
  EXPECT_EQ(As(wid).Put(kv(b, "k1"), {{"value", "w"}}).status, 200);
  ASSERT_EQ(As(wid).Post("/v1/workers/" + std::to_string(wid) + "/finished", json::object()).status,
            200);
  EXPECT_TRUE(JobIn(b, "DONE")) << Job(b).dump();
  for (const char* key : {"k1", "k2"}) EXPECT_EQ(admin_->Get(kv(b, key)).status, 404) << key;
  Restart(SIGKILL);
  EXPECT_EQ(admin_->Get(kv(b, "k1")).status, 404);
}

// Numbers from workers are checked at the edge (API.md): seconds must be
// finite, >= 0 and at most 1e9 (1e300 reached SecondsToMs before, an
// undefined conversion), steps >= 0; a refused report changes nothing.
TEST_F(StintdTest, OutOfRangeNumbersFromWorkersAreRefusedAndChangeNothing) {
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
  AddWindow("p", 1, WallNowMs() + 24 * 3600 * 1000);
  for (const char* spec : {R"({"name":"j","min_gpus":1,"remaining_seconds":1e300})",
                           R"({"name":"j","min_gpus":1,"restart_seconds":1e10})",
                           R"({"name":"j","min_gpus":1,"checkpoint_seconds":-1})"}) {
    auto r = admin_->PostRaw("/v1/jobs", spec);
    EXPECT_EQ(r.status, 400) << spec << " -> " << r.text;
  }
  const int64_t job = Submit({{"name", "j"}, {"min_gpus", 1}, {"remaining_seconds", 600}});
  ASSERT_TRUE(Eventually([&] { return JobIn(job, "RUNNING"); })) << Job(job).dump();
  const int64_t wid = Register(job)["worker_id"];
  const std::string w = "/v1/workers/" + std::to_string(wid);
  struct Case {
    std::string path, body, expect;
  } cases[] = {
      {"/progress", R"({"step":5,"remaining_seconds":1e300})", "remaining_seconds must be"},
      {"/progress", R"({"step":5,"remaining_seconds":-1})", "remaining_seconds must be"},
      {"/progress", R"({"step":5,"remaining_seconds":NaN})", "JSON"},
      {"/progress", R"({"step":5,"remaining_seconds":1e400})", ""},
      {"/progress", R"({"step":-5,"remaining_seconds":60})", "step must be >= 0"},
      {"/checkpoint", R"({"step":5,"seconds":1e300})", "seconds must be"},
      {"/checkpoint", R"({"step":5,"seconds":-0.5})", "seconds must be"},
      {"/heartbeat", R"({"step":-1})", "step must be >= 0"},
  };
  for (const Case& c : cases) {
    auto r = As(wid).PostRaw(w + c.path, c.body);
    EXPECT_EQ(r.status, 400) << c.path << " " << c.body << " -> " << r.text;
    EXPECT_NE(r.text.find(c.expect), std::string::npos) << c.body << " -> " << r.text;
  }
  json j = Job(job);
  EXPECT_EQ(j["remaining_seconds"], 600.0);
  EXPECT_EQ(j["last_step"], 0);
  EXPECT_EQ(j["checkpoint_seconds"], 30.0);
  // The edge of the range is taken, and stintd plans on with it.
  auto edge = As(wid).Post(w + "/progress", {{"step", 5}, {"remaining_seconds", 1e9}});
  EXPECT_EQ(edge.status, 200) << edge.text;
  EXPECT_EQ(Job(job)["remaining_seconds"], 1e9);
  EXPECT_EQ(admin_->Get("/v1/queue").status, 200);
}

// A TCP connection to 127.0.0.1:port that has sent one keep-alive request
// and then neither reads nor closes: a client's idle pooled connection at
// its worst. -1 if the socket calls fail.
int IdleConnection(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const std::string request = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      send(fd, request.data(), request.size(), MSG_NOSIGNAL) != ssize_t(request.size())) {
    close(fd);
    return -1;
  }
  return fd;
}

// Everything `fd` receives until the peer closes it, or until `deadline`.
std::string ReadUntilClosed(int fd, std::chrono::steady_clock::time_point deadline) {
  std::string got;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) return got;
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) return got + "<closed>";
    got.append(buf, static_cast<size_t>(n));
  }
}

// stintd's HTTP threads: an idle connection gives its thread back after
// --http-keep-alive-seconds (2), and one past --http-threads (128) is
// answered 503 at once and closed. 300 clients that hold connections open
// then do not stall a worker's heartbeats: before, each idle connection
// held a thread for 30 s, and a heartbeat queued behind them waited ~50 s,
// past a lease.
TEST_F(StintdTest, HeartbeatsFlowWhile300IdleClientsHoldConnectionsOpen) {
  // stintd's default lease (6 heartbeat intervals): a heartbeat answered
  // later would have lost the worker its lease. (The lease is longer here,
  // so that a slow heartbeat fails this check, not the segment.)
  constexpr auto kAnswerWithin = std::chrono::seconds(30);
  daemon_->Kill(SIGTERM);
  std::vector<std::string> args = kFastArgs;
  *(std::find(args.begin(), args.end(), "--lease-ttl-seconds") + 1) = "600";
  daemon_ = std::make_unique<StintdProcess>(STINTD_PATH, dir_.path(), args);
  ASSERT_TRUE(daemon_->Start()) << daemon_->output();
  Connect();
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
  AddWindow("p", 1, WallNowMs() + 24 * 3600 * 1000);
  const int64_t job = Submit({{"name", "j"}, {"min_gpus", 1}});
  ASSERT_TRUE(Eventually([&] { return JobIn(job, "RUNNING"); })) << Job(job).dump();
  json reg = Register(job);
  const std::string heartbeat =
      "/v1/workers/" + std::to_string(reg["worker_id"].get<int64_t>()) + "/heartbeat";

  // The worker heartbeats all along, as a client does: a 503 (at the cap)
  // or a closed connection is tried again.
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0};
  std::atomic<bool> failed{false};
  std::string failure;  // set by the heartbeat thread before `failed`
  std::thread worker([&] {
    HttpJson client(daemon_->port(), reg["worker_secret"].get<std::string>(),
                    static_cast<int>(kAnswerWithin.count()));
    while (!stop && !failed) {
      const auto deadline = std::chrono::steady_clock::now() + kAnswerWithin;
      HttpJson::Response r;
      while (std::chrono::steady_clock::now() < deadline) {
        r = client.Post(heartbeat, {{"step", answered.load()}});
        if (r.status != 503 && r.status != 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the client's backoff
      }
      if (r.status != 200 || !r.body.value("active", false)) {
        failure = "heartbeat " + std::to_string(answered) + ": " + std::to_string(r.status) +
                  " " + r.text;
        failed = true;
      } else {
        answered++;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the interval
    }
  });
  std::vector<int> idle;
  for (int i = 0; i < 300; ++i) {
    const int fd = IdleConnection(daemon_->port());
    EXPECT_GE(fd, 0) << "client " << i << ": " << std::strerror(errno);
    if (fd < 0) break;
    idle.push_back(fd);
  }
  // Ten more heartbeats with all of them open (each bounded by kAnswerWithin).
  const int before = answered;
  while (!failed && answered < before + 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop = true;
  worker.join();
  EXPECT_EQ(failure, "");
  EXPECT_GE(answered, before + 10);

  // Every idle client got an answer (its healthz, or a 503 at the cap) and
  // was closed, though it kept its end open.
  const auto deadline = std::chrono::steady_clock::now() + kAnswerWithin;
  for (int fd : idle) {
    const std::string got = ReadUntilClosed(fd, deadline);
    close(fd);
    EXPECT_TRUE(got.rfind("HTTP/1.1 200", 0) == 0 || got.rfind("HTTP/1.1 503", 0) == 0) << got;
    EXPECT_NE(got.find("<closed>"), std::string::npos) << got;
  }
}

// The cap itself: with every thread held by a connection (served, then
// idle for its long keep-alive), the next connection is answered 503 at
// once, with a message naming the limit, and closed.
TEST_F(StintdTest, AConnectionPastTheCapIsAnswered503AndClosed) {
  daemon_->Kill(SIGTERM);
  std::vector<std::string> args = kFastArgs;
  args.insert(args.end(), {"--http-threads", "4", "--http-keep-alive-seconds", "300"});
  daemon_ = std::make_unique<StintdProcess>(STINTD_PATH, dir_.path(), args);
  ASSERT_TRUE(daemon_->Start()) << daemon_->output();
  // The deadline only turns a hang into a failure.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(IdleConnection(daemon_->port()));
    ASSERT_GE(held.back(), 0) << std::strerror(errno);
    std::string got;
    char buf[4096];
    while (got.find("{\"ok\":true}") == std::string::npos) {  // its healthz answer
      pollfd p{held.back(), POLLIN, 0};
      ASSERT_EQ(poll(&p, 1, 60000), 1) << got;
      const ssize_t n = read(held.back(), buf, sizeof(buf));
      ASSERT_GT(n, 0) << got;
      got.append(buf, static_cast<size_t>(n));
    }
    ASSERT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
  }
  const int next = IdleConnection(daemon_->port());
  ASSERT_GE(next, 0) << std::strerror(errno);
  const std::string got = ReadUntilClosed(next, deadline);
  close(next);
  EXPECT_EQ(got.rfind("HTTP/1.1 503", 0), 0u) << got;
  EXPECT_NE(got.find("at most 4 connections at once (--http-threads)"), std::string::npos) << got;
  EXPECT_NE(got.find("<closed>"), std::string::npos) << got;
  for (int fd : held) close(fd);
}

// Clients submit jobs and heartbeat while stintd is SIGKILLed; after the
// restart every job whose submission was acknowledged is there, the running
// segment still holds its fencing token, and the counters went on.
TEST_F(StintdTest, KillNineUnderLoadLosesNothingAcknowledged) {
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
  AddWindow("p", 2, WallNowMs() + 3600000);
  const int64_t runner = Submit({{"name", "runner"}, {"min_gpus", 2}, {"checkpoint_seconds", 1}});
  ASSERT_TRUE(Eventually([&] { return JobIn(runner, "RUNNING"); }));
  json reg = Register(runner);
  const int64_t wid = reg["worker_id"];
  const uint64_t token = reg["fencing_token"];

  for (int round = 0; round < 3; round++) {
    std::atomic<bool> stop{false};
    std::vector<int64_t> acknowledged[2];
    std::vector<std::thread> clients;
    for (int c = 0; c < 2; c++) {
      clients.emplace_back([&, c] {
        HttpJson client(daemon_->port(), StintdProcess::kAdminToken, 2);
        for (int i = 0; !stop; i++) {
          auto r = client.Post(
              "/v1/jobs",
              {{"name", "load-" + std::to_string(c) + "-" + std::to_string(i)}, {"min_gpus", 4}});
          if (r.status == 201) acknowledged[c].push_back(r.body["id"].get<int64_t>());
          if (r.status == 0) break;  // the daemon is gone
        }
      });
    }
    std::thread heartbeats([&] {
      HttpJson client(daemon_->port(), reg["worker_secret"].get<std::string>(), 2);
      while (!stop) {
        if (client.Post("/v1/workers/" + std::to_string(wid) + "/heartbeat", json::object())
                .status == 0)
          break;
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300 + 200 * round));
    daemon_->Kill(SIGKILL);
    stop = true;
    for (auto& t : clients) t.join();
    heartbeats.join();
    ASSERT_TRUE(daemon_->Start()) << daemon_->output();
    Connect();

    std::set<int64_t> present;
    auto listed = admin_->Get("/v1/jobs");
    ASSERT_EQ(listed.status, 200) << listed.text;
    for (const json& j : listed.body["jobs"]) present.insert(j["id"].get<int64_t>());
    size_t total = 0;
    for (const auto& ids : acknowledged) {
      total += ids.size();
      for (int64_t id : ids) EXPECT_TRUE(present.count(id)) << "acknowledged job " << id << " lost";
    }
    EXPECT_GT(total, 0u) << "the load never got an answer";
    // The running segment survived with its token; its worker's lease got a
    // fresh TTL instead of expiring across the restart.
    auto check = As(wid).Post("/v1/fencing/check", {{"job_id", runner}, {"fencing_token", token}});
    EXPECT_TRUE(check.body["valid"].get<bool>()) << check.text;
    EXPECT_EQ(
        As(wid).Post("/v1/workers/" + std::to_string(wid) + "/heartbeat", json::object()).status,
        200);
  }
  // Ids are never reused across restarts.
  std::set<int64_t> ids;
  // The reply is kept: a range-for over a member of the temporary would dangle.
  auto jobs = admin_->Get("/v1/jobs");
  for (const json& j : jobs.body["jobs"]) EXPECT_TRUE(ids.insert(j["id"].get<int64_t>()).second);
}

TEST_F(StintdTest, SecondDaemonOnTheSameDatabaseIsRefused) {
  StintdProcess second(STINTD_PATH, dir_.path(), kFastArgs);
  EXPECT_FALSE(second.Start());
  EXPECT_NE(second.output().find("in use"), std::string::npos) << second.output();
}

TEST_F(StintdTest, CorruptDatabaseIsRefusedWithItsPath) {
  daemon_->Kill(SIGTERM);
  {
    std::ofstream f(daemon_->db_path(), std::ios::trunc | std::ios::binary);
    f << "this is not an sqlite database, just bytes that used to be one";
  }
  // Also remove the WAL so only the damaged main file remains.
  std::remove((daemon_->db_path() + "-wal").c_str());
  EXPECT_FALSE(daemon_->Start());
  EXPECT_NE(daemon_->output().find(daemon_->db_path()), std::string::npos) << daemon_->output();
}

// A SIGTERM that arrives as soon as stintd says it listens, while its HTTP
// thread may not have begun to accept yet, stops it (it once hung there:
// cpp-httplib's stop() does nothing before listen starts).
// Plain HTTP beyond loopback would send every token in clear: refused at
// start unless --insecure says so explicitly.
TEST(StintdListen, ANonLoopbackAddressNeedsInsecure) {
  TempDir dir;
  std::ofstream(dir.path() + "/admin.tokens") << StintdProcess::kAdminToken << "\n";
  std::ofstream(dir.path() + "/worker.tokens") << StintdProcess::kWorkerToken << "\n";
  const std::vector<std::string> base = {"--db",          dir.path() + "/stintd.db",
                                         "--admin-token-file", dir.path() + "/admin.tokens",
                                         "--worker-token-file", dir.path() + "/worker.tokens",
                                         "--listen",      "0.0.0.0:0"};
  RunResult refused = RunProgram(STINTD_PATH, base);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("not a loopback address"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("--insecure"), std::string::npos) << refused.output;
  std::vector<std::string> insecure = base;
  insecure.push_back("--insecure");
  ChildProcess daemon(STINTD_PATH, insecure);
  ASSERT_TRUE(daemon.WaitForLine("stintd: listening on ")) << daemon.output();
  ASSERT_EQ(kill(daemon.pid(), SIGTERM), 0);
  bool killed = false;
  const int status = daemon.WaitAtMost(30, &killed);
  EXPECT_TRUE(!killed && WIFEXITED(status) && WEXITSTATUS(status) == 0) << daemon.output();
}

// A long-poll in flight does not hold stintd's stop for its wait (the
// server waits for every request): SIGTERM answers it and stintd exits.
// (Clients close their connections once answered: an idle keep-alive
// connection holds a server thread too, up to its 30 s timeout.)
TEST(StintdStop, SigtermDuringALongPollExitsWithoutWaitingItOut) {
  TempDir dir;
  StintdProcess daemon(STINTD_PATH, dir.path(), kFastArgs);
  ASSERT_TRUE(daemon.Start()) << daemon.output();
  std::string key;
  {
    HttpJson admin(daemon.port(), StintdProcess::kAdminToken);
    ASSERT_EQ(admin.Post("/v1/pools", {{"name", "p"}}).status, 201);
    auto job = admin.Post("/v1/jobs", {{"name", "j"}, {"pool", "p"}, {"min_gpus", 1}});
    ASSERT_EQ(job.status, 201) << job.text;
    key = "/v1/jobs/" + std::to_string(job.body["id"].get<int64_t>()) + "/kv/never?wait_seconds=60";
  }
  // stintd's sockets: the poll's connection is one more.
  auto sockets = [&] {
    int n = 0;
    const std::string fds = "/proc/" + std::to_string(daemon.pid()) + "/fd";
    for (const auto& e : std::filesystem::directory_iterator(fds)) {
      std::error_code ec;
      n += std::filesystem::read_symlink(e.path(), ec).string().rfind("socket:", 0) == 0;
    }
    return n;
  };
  ASSERT_TRUE(Eventually([&] { return sockets() == 1; })) << "only the listener is left";
  int answered = -1;
  std::thread poll([&] {
    HttpJson poller(daemon.port(), StintdProcess::kAdminToken, /*timeout_seconds=*/90);
    answered = poller.Get(key).status;
  });
  ASSERT_TRUE(Eventually([&] { return sockets() > 1; }));
  const auto start = std::chrono::steady_clock::now();
  const int status = daemon.Kill(SIGTERM, 90);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  poll.join();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << daemon.output();
  EXPECT_LT(seconds, 20) << "the stop waited for the 60 s long-poll";
  EXPECT_EQ(answered, 404) << "the poll is answered as a wait that ended";
}

TEST(StintdStop, SigtermRightAfterListeningExitsCleanly) {
  TempDir dir;
  for (int i = 0; i < 100; ++i) {
    StintdProcess daemon(STINTD_PATH, dir.path(), kFastArgs);
    ASSERT_TRUE(daemon.Start()) << daemon.output();
    const int status = daemon.Kill(SIGTERM, 30);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "start " << i << ": wait status " << status << "\n"
        << daemon.output();
  }
}

// --- prices, price rules, budgets, loss curves (issue 33) ---

TEST_F(StintdTest, PoolPricesRulesAndBudgetsOverHttp) {
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "a"}, {"price_per_gpu_hour", 3}}).status, 201);
  auto spot =
      admin_->Post("/v1/pools", {{"name", "b"}, {"pricing", "spot"}, {"price_per_gpu_hour", 1}});
  ASSERT_EQ(spot.status, 201) << spot.text;
  EXPECT_EQ(spot.body["pricing"], "spot");
  EXPECT_EQ(admin_->Post("/v1/pools", {{"name", "c"}, {"pricing", "barter"}}).status, 400);
  EXPECT_EQ(admin_->Post("/v1/pools", {{"name", "c"}, {"price_per_gpu_hour", -1}}).status, 400);
  auto priced = admin_->Post("/v1/pools/a/price", {{"price_per_gpu_hour", 2.5}});
  ASSERT_EQ(priced.status, 200) << priced.text;
  EXPECT_EQ(priced.body["price_per_gpu_hour"], 2.5);
  ASSERT_EQ(priced.body["price_history"].size(), 2u) << priced.text;
  EXPECT_EQ(priced.body["price_history"][0]["price_per_gpu_hour"], 3);
  EXPECT_EQ(admin_->Post("/v1/pools/a/price", {{"price_per_gpu_hour", -2}}).status, 400);
  EXPECT_EQ(admin_->Post("/v1/pools/nowhere/price", {{"price_per_gpu_hour", 2}}).status, 404);
  EXPECT_EQ(worker_->Post("/v1/pools/a/price", {{"price_per_gpu_hour", 0}}).status, 403);

  auto rule = admin_->Put("/v1/price-rules/low",
                          {{"max_price_per_gpu_hour", 2}, {"spot_fallback_revocations", 3}});
  ASSERT_EQ(rule.status, 200) << rule.text;
  EXPECT_EQ(rule.body["rules"][0]["priority"], "LOW");
  EXPECT_EQ(rule.body["rules"][0]["max_price_per_gpu_hour"], 2);
  EXPECT_EQ(rule.body["rules"][0]["spot_fallback_revocations"], 3);
  EXPECT_TRUE(rule.body["rules"][1]["max_price_per_gpu_hour"].is_null());  // MEDIUM: any price
  EXPECT_EQ(admin_->Put("/v1/price-rules/URGENT", json::object()).status, 400);
  EXPECT_EQ(admin_->Put("/v1/price-rules/LOW", {{"spot_fallback_window_seconds", 0}}).status, 400);

  auto team =
      admin_->Put("/v1/teams/vision",
                  {{"guaranteed_gpus", 0}, {"budget", 50}, {"budget_period_seconds", 86400}});
  ASSERT_EQ(team.status, 200) << team.text;
  EXPECT_EQ(team.body["budget"], 50);
  EXPECT_EQ(team.body["left"], 50);
  EXPECT_EQ(team.body["spent"], 0);
  EXPECT_EQ(admin_->Put("/v1/teams/vision", {{"budget", -3}}).status, 400);

  // A LOW job may use only pools under its cap; a job names several pools.
  AddWindow("a", 4, WallNowMs() + 3'600'000);
  const int64_t low = Submit(
      {{"name", "low"}, {"team", "vision"}, {"pool", "a"}, {"priority", "LOW"}, {"min_gpus", 1}});
  const int64_t any = Submit({{"name", "any"}, {"pools", {"a", "b"}}, {"min_gpus", 1}});
  EXPECT_EQ(Job(any)["pools"], json::array({"a", "b"}));
  ASSERT_TRUE(Eventually([&] { return JobIn(any, "RUNNING"); })) << Job(any).dump();
  ASSERT_TRUE(Eventually([&] { return Job(low).contains("pending"); })) << Job(low).dump();
  EXPECT_EQ(Job(low)["pending"]["reason"], "price") << Job(low).dump();
  EXPECT_EQ(Job(any)["segments"][0]["price_per_gpu_hour"], 2.5);
}

// Jobs of one team submitted at once from many connections: the budget
// admits what it pays for, the rest wait with "budget" and the amounts, and
// once it is spent the running segments are told to checkpoint and stop.
TEST_F(StintdTest, ABudgetHoldsUnderConcurrentSubmissions) {
  // 3600 per GPU-hour: a GPU costs 1 a second, so the budget goes in seconds.
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}, {"price_per_gpu_hour", 3600}}).status, 201);
  AddWindow("p", 64, WallNowMs() + 3'600'000);
  ASSERT_EQ(admin_->Put("/v1/teams/t", {{"guaranteed_gpus", 0}, {"budget", 60}}).status, 200);
  // A minimum segment: restart 0 + interval 1 + checkpoint 1 + safety 1 s
  // on 4 GPUs costs 12: the budget admits at most five at a time.
  constexpr int kJobs = 16;
  std::vector<std::thread> submitters;
  std::atomic<int> submitted{0};
  for (int t = 0; t < 8; t++) {
    submitters.emplace_back([&, t] {
      HttpJson admin(daemon_->port(), StintdProcess::kAdminToken);
      for (int i = 0; i < kJobs / 8; i++) {
        json spec = QuickCheckpoints({{"name", "j" + std::to_string(t) + "-" + std::to_string(i)},
                                      {"team", "t"},
                                      {"min_gpus", 4}});
        if (admin.Post("/v1/jobs", spec).status == 201) submitted++;
      }
    });
  }
  for (std::thread& t : submitters) t.join();
  ASSERT_EQ(submitted.load(), kJobs);
  // The workers: one per running job, heartbeating, acking a notice at once.
  std::map<int64_t, int64_t> worker_of;  // job -> worker
  bool saw_budget_wait = false, saw_budget_notice = false;
  auto drive = [&] {
    const json running = admin_->Get("/v1/jobs?state=RUNNING").body["jobs"];
    for (const json& j : running) {
      const int64_t job = j["id"];
      const int64_t seg = j["segment_id"];
      auto w = worker_of.find(job);
      if (w == worker_of.end() || Job(job)["segments"].back()["id"] != seg) {
        auto r = worker_->Post("/v1/jobs/" + std::to_string(job) + "/workers", {{"name", "w"}});
        if (r.status != 201) continue;
        const int64_t wid = r.body["worker_id"];
        secrets_[wid] = r.body["worker_secret"];
        worker_of[job] = wid;
      }
      const int64_t wid = worker_of[job];
      auto hb = As(wid).Post("/v1/workers/" + std::to_string(wid) + "/heartbeat", {{"step", 1}});
      if (hb.status == 200 && hb.body["notice"].is_object()) {
        saw_budget_notice = saw_budget_notice || hb.body["notice"]["reason"] == "budget";
        As(wid).Post("/v1/workers/" + std::to_string(wid) + "/ack", {{"step", 1}});
      }
    }
    // Settled: nothing runs and the budget left pays no job's minimum segment.
    bool all_wait_for_budget = true;
    const json queue = admin_->Get("/v1/queue").body;
    for (const json& p : queue["pending"]) {
      if (p["reason"] != "budget") {
        all_wait_for_budget = false;
        continue;
      }
      saw_budget_wait = true;
      EXPECT_NE(p["detail"].get<std::string>().find("of its budget 60.00"), std::string::npos)
          << p.dump();
    }
    return running.empty() && all_wait_for_budget && saw_budget_notice;
  };
  ASSERT_TRUE(Eventually(drive, 60)) << admin_->Get("/v1/teams").text;
  EXPECT_TRUE(saw_budget_wait) << admin_->Get("/v1/jobs").text;
  json t = admin_->Get("/v1/teams").body["teams"];
  double spent = -1;
  for (const json& team : t) {
    if (team["name"] == "t") spent = team["spent"];
  }
  // What was charged: within the budget, up to the ticks and round trips
  // between the last charge and the acks; and no less than what is left
  // unable to pay a minimum segment (12).
  EXPECT_GT(spent, 60 - 12) << t.dump();
  EXPECT_LE(spent, 60 * 1.1) << t.dump();
  double charged = 0;
  const json jobs = admin_->Get("/v1/jobs").body["jobs"];
  for (const json& j : jobs) charged += j["cost"].get<double>();
  EXPECT_NEAR(charged, spent, 1e-6);
  // Raising the budget lets the waiting jobs start again.
  ASSERT_EQ(admin_->Put("/v1/teams/t", {{"budget", 10000}}).status, 200);
  ASSERT_TRUE(Eventually([&] {
    return !admin_->Get("/v1/jobs?state=RUNNING").body["jobs"].empty();
  })) << admin_->Get("/v1/queue").text;
}

TEST_F(StintdTest, HeartbeatsBuildTheLossCurveAndEfficiency) {
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}, {"price_per_gpu_hour", 1.5}}).status, 201);
  AddWindow("p", 2, WallNowMs() + 3'600'000);
  const int64_t job = Submit({{"name", "train"}, {"min_gpus", 2}});
  ASSERT_TRUE(Eventually([&] { return JobIn(job, "RUNNING"); }));
  const int64_t wid = Register(job)["worker_id"];
  const std::string beat = "/v1/workers/" + std::to_string(wid) + "/heartbeat";
  EXPECT_EQ(As(wid).Post(beat, {{"step", 1}, {"loss", "low"}}).status, 400);
  EXPECT_EQ(As(wid).Post(beat, {{"step", 1}, {"samples", -1}}).status, 400);
  // One step per heartbeat, each merged at a tick before the next.
  for (int step = 1; step <= 5; step++) {
    ASSERT_EQ(As(wid)
                  .Post(beat, {{"step", step}, {"loss", 3.0 - 0.5 * step}, {"samples", 64 * step}})
                  .status,
              200);
    ASSERT_TRUE(Eventually([&] {
      json l = admin_->Get("/v1/jobs/" + std::to_string(job) + "/losses").body;
      return l["points"].size() == static_cast<size_t>(step);
    }));
  }
  ASSERT_EQ(As(wid)
                .Post("/v1/workers/" + std::to_string(wid) + "/checkpoint",
                      {{"step", 5}, {"seconds", 0.5}})
                .status,
            200);
  json losses = admin_->Get("/v1/jobs/" + std::to_string(job) + "/losses").body;
  EXPECT_EQ(losses["points"][0][0], 1);
  EXPECT_EQ(losses["points"][4][1], 0.5);
  ASSERT_EQ(losses["segments"].size(), 1u);
  EXPECT_EQ(losses["segments"][0]["start_step"], 0);
  json j = Job(job);
  EXPECT_EQ(j["samples"], 320);
  EXPECT_EQ(j["figures"]["kept_steps"], 5);
  EXPECT_GT(j["figures"]["held_gpu_seconds"].get<double>(), 0);
  ASSERT_TRUE(j["step_seconds"].contains("2")) << j.dump();
  // Useful = kept steps at the pace for 2 GPUs; efficiency = useful / held.
  // (Not bounded by 1 here: these steps take a tick each, and the first
  // came right after the start.)
  const json& f = j["figures"];
  const double pace = j["step_seconds"]["2"].get<double>();
  EXPECT_GT(pace, 0);
  EXPECT_NEAR(f["useful_gpu_seconds"].get<double>(), 5 * pace * 2, 1e-9) << j.dump();
  EXPECT_NEAR(f["efficiency"].get<double>(),
              f["useful_gpu_seconds"].get<double>() / f["held_gpu_seconds"].get<double>(), 1e-9);
  ASSERT_TRUE(Eventually([&] { return Job(job)["cost"].get<double>() > 0; }));
  const std::map<std::string, double> m = ParseMetrics(admin_->Get("/metrics").text);
  const std::string label = "{job=\"" + std::to_string(job) + "\"}";
  EXPECT_TRUE(m.count("stintd_job_efficiency" + label));
  EXPECT_TRUE(m.count("stintd_job_cost" + label));
  EXPECT_EQ(m.at("stintd_pool_price_per_gpu_hour{pool=\"p\"}"), 1.5);
  EXPECT_EQ(admin_->Get("/v1/jobs/999999/losses").status, 404);
}

}  // namespace
}  // namespace stint
