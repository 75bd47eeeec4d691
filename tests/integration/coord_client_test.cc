// The worker client, CoordinatorSession and stintctl against a real stintd
// on loopback with its own SQLite file: a notice travels from an admin's
// window close to the PreemptionWatcher; the fencing check guards a real
// Checkpointer's commit; a call rides out a stintd restart; stintctl drives
// the admin API end to end.
#include <signal.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "checkpoint/commit.h"
#include "stint/checkpointer.h"
#include "stint/coordinator_commit_channel.h"
#include "stint/coordinator_client.h"
#include "stint/preemption.h"
#include "util/status_matchers.h"
#include "util/stintd_process.h"
#include "util/subprocess.h"
#include "util/temp_dir.h"

#ifndef STINTD_PATH
#error "STINTD_PATH must name the stintd binary (see coord_client_tests.cmake)"
#endif
#ifndef STINTCTL_PATH
#error "STINTCTL_PATH must name the stintctl binary (see coord_client_tests.cmake)"
#endif

namespace stint {
namespace {

using nlohmann::json;

// Fast policy passes and heartbeats so a lifecycle takes seconds; a lease
// long enough that a slow test machine (or a restart) does not lose it.
const std::vector<std::string> kArgs = {"--tick-seconds",
                                        "0.05",
                                        "--safety-seconds",
                                        "1",
                                        "--min-run-seconds",
                                        "0",
                                        "--lease-ttl-seconds",
                                        "20",
                                        "--start-grace-seconds",
                                        "20",
                                        "--heartbeat-interval-seconds",
                                        "0.2"};

class CoordClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<StintdProcess>(STINTD_PATH, dir_.path(), kArgs);
    ASSERT_TRUE(daemon_->Start()) << daemon_->output();
    admin_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kAdminToken);
  }

  json Job(int64_t id) { return admin_->Get("/v1/jobs/" + std::to_string(id)).body; }
  bool JobIn(int64_t id, const std::string& state) { return Job(id).value("state", "") == state; }

  // A pool with one hard window and one running 1-GPU job whose checkpoint
  // estimate is checkpoint_seconds; returns the job.
  int64_t RunningJob(int64_t* window = nullptr, int checkpoint_seconds = 1) {
    EXPECT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
    auto w = admin_->Post("/v1/windows",
                          {{"pool", "p"}, {"gpus", 4}, {"end_ms", WallNowMs() + 3600 * 1000}});
    EXPECT_EQ(w.status, 201) << w.text;
    if (window != nullptr) *window = w.body.value("id", int64_t{0});
    auto j = admin_->Post("/v1/jobs", {{"name", "train"},
                                       {"pool", "p"},
                                       {"min_gpus", 1},
                                       {"checkpoint_seconds", checkpoint_seconds},
                                       {"restart_seconds", 0},
                                       {"checkpoint_interval_seconds", 1}});
    EXPECT_EQ(j.status, 201) << j.text;
    const int64_t id = j.body.value("id", int64_t{0});
    EXPECT_TRUE(Eventually([&] { return JobIn(id, "RUNNING"); })) << Job(id).dump();
    return id;
  }

  CoordinatorOptions WorkerOptions(int64_t job) {
    CoordinatorOptions o;
    o.url = daemon_->url();
    o.token = StintdProcess::kWorkerToken;
    o.job_id = uint64_t(job);
    o.worker_name = "it-worker";
    o.retry.initial_backoff = std::chrono::milliseconds(10);
    o.retry.max_backoff = std::chrono::milliseconds(200);
    return o;
  }

  RunResult Ctl(std::vector<std::string> args,
                const std::string& token = StintdProcess::kAdminToken) {
    std::vector<std::string> all = {"--url", daemon_->url(), "--token", token};
    all.insert(all.end(), args.begin(), args.end());
    return RunProgram(STINTCTL_PATH, all);
  }

  TempDir dir_;
  std::unique_ptr<StintdProcess> daemon_;
  std::unique_ptr<HttpJson> admin_;
};

// The client keeps the secret Register() got and sends it on every worker
// call by itself; a registration naming another job's worker, or one
// without its secret (the shared token is then sent), is refused (403) and
// changes nothing; a worker that left is fenced (410).
TEST_F(CoordClientTest, TheClientActsWithItsOwnSecretAndForNoOtherWorker) {
  const int64_t job_a = RunningJob();
  auto j = admin_->Post("/v1/jobs", {{"name", "other"}, {"pool", "p"}, {"min_gpus", 1}});
  ASSERT_EQ(j.status, 201) << j.text;
  const int64_t job_b = j.body.value("id", int64_t{0});
  ASSERT_TRUE(Eventually([&] { return JobIn(job_b, "RUNNING"); })) << Job(job_b).dump();

  auto a = CoordinatorClient::Create(WorkerOptions(job_a));
  auto b = CoordinatorClient::Create(WorkerOptions(job_b));
  ASSERT_OK(a);
  ASSERT_OK(b);
  Result<WorkerRegistration> reg_a = (*a)->Register();
  Result<WorkerRegistration> reg_b = (*b)->Register();
  ASSERT_OK(reg_a);
  ASSERT_OK(reg_b);
  EXPECT_EQ(reg_a->secret.rfind("stw1." + std::to_string(reg_a->worker_id) + ".", 0), 0u)
      << reg_a->secret;
  ASSERT_OK((*a)->Heartbeat(3));
  ASSERT_OK((*a)->ReportProgress(3));

  // A's client made to act for B's worker: with A's secret, and with none.
  auto forger = CoordinatorClient::Create(WorkerOptions(job_a));
  ASSERT_OK(forger);
  WorkerRegistration stolen = *reg_b;
  stolen.secret = reg_a->secret;
  (*forger)->UseRegistration(stolen);
  EXPECT_EQ((*forger)->Finished().code(), Code::kPermissionDenied);
  EXPECT_EQ((*forger)->Ack(1).code(), Code::kPermissionDenied);
  stolen.secret.clear();
  (*forger)->UseRegistration(stolen);
  EXPECT_EQ((*forger)->Finished().code(), Code::kPermissionDenied);
  EXPECT_EQ((*forger)->Heartbeat().status().code(), Code::kPermissionDenied);
  EXPECT_TRUE(JobIn(job_b, "RUNNING")) << Job(job_b).dump();

  ASSERT_OK((*a)->Leave());
  Result<WorkerView> after = (*a)->Heartbeat();
  EXPECT_TRUE(IsFenced(after.status())) << after.status().ToString();
  ASSERT_OK((*b)->Finished());
  EXPECT_TRUE(JobIn(job_b, "DONE")) << Job(job_b).dump();
}

TEST_F(CoordClientTest, RegisterBeforeTheJobRunsIsAFailedPrecondition) {
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
  auto j =
      admin_->Post("/v1/jobs", {{"name", "waits"}, {"min_gpus", 1}});  // no window: stays pending
  ASSERT_EQ(j.status, 201) << j.text;
  auto client = CoordinatorClient::Create(WorkerOptions(j.body["id"].get<int64_t>()));
  ASSERT_OK(client);
  auto reg = (*client)->Register();
  EXPECT_EQ(reg.status().code(), Code::kFailedPrecondition) << reg.status().ToString();
  // A wrong token is the server's 401, unretried.
  CoordinatorOptions bad = WorkerOptions(j.body["id"].get<int64_t>());
  bad.token = "not-a-token";
  auto anonymous = CoordinatorClient::Create(bad);
  ASSERT_OK(anonymous);
  EXPECT_EQ((*anonymous)->Register().status().code(), Code::kUnauthenticated);
}

TEST_F(CoordClientTest, AWindowCloseNoticeReachesThePreemptionWatcherThroughTheSession) {
  // A checkpoint estimate of 6 s leaves the worker 7 s between the notice
  // and the deadline to ack: room for a loaded test machine.
  int64_t window = 0;
  const int64_t job = RunningJob(&window, 6);
  auto watcher = PreemptionWatcher::Install();
  ASSERT_OK(watcher);
  auto session = CoordinatorSession::Start(WorkerOptions(job), watcher->get());
  ASSERT_OK(session);
  EXPECT_EQ((*session)->fencing_token(), Job(job)["fencing_token"].get<uint64_t>());
  (*session)->SetStep(5);
  EXPECT_FALSE((*watcher)->requested());

  // The admin closes the window 9 s from now; stintd sends the notice at
  // close - (checkpoint estimate + safety) = close - 7 s.
  auto closed =
      admin_->Post("/v1/windows/" + std::to_string(window) + "/close", {{"lead_seconds", 9}});
  ASSERT_EQ(closed.status, 200) << closed.text;
  ASSERT_TRUE(Eventually([&] { return (*watcher)->requested(); })) << Job(job).dump();
  auto notice = (*watcher)->notice();
  ASSERT_TRUE(notice.has_value());
  json segment = Job(job)["segments"][0];
  EXPECT_EQ(notice->source, "coordinator " + segment["notice_reason"].get<std::string>());
  EXPECT_GT(notice->deadline, notice->received);
  EXPECT_LE(notice->deadline - notice->received, std::chrono::seconds(7));
  auto coord_notice = (*session)->notice();
  ASSERT_TRUE(coord_notice.has_value());
  EXPECT_EQ(coord_notice->deadline_ms, segment["deadline_ms"].get<int64_t>());
  EXPECT_FALSE((*session)->fenced());

  // The emergency checkpoint is durable: report it, give the GPUs back. It
  // took the estimated 6 s, so a minimum segment (interval + checkpoint +
  // safety = 8 s) no longer fits before the close and the job waits.
  Status reported = (*session)->ReportCheckpoint(5, 6.0, 4096);
  ASSERT_OK(reported);
  Status acked = (*session)->Ack(5);
  ASSERT_OK(acked) << Job(job).dump();
  json j = Job(job);
  EXPECT_EQ(j["state"], "PENDING") << j.dump();
  EXPECT_EQ(j["checkpoint_step"], 5);
  // The segment is over: stintd fences the worker, which after its own ack
  // is expected, so the session stays quiet about it.
  EXPECT_TRUE(IsFenced((*session)->client()->Heartbeat(6).status()));
  EXPECT_FALSE((*session)->fenced());
  EXPECT_EQ((*watcher)->notice()->source, notice->source);
  session->reset();  // joins promptly: no long-poll left hanging
}

TEST_F(CoordClientTest, FencingGuardsARealCommitAndRefusesOnceTheSegmentEnded) {
  const int64_t job = RunningJob();
  auto client = CoordinatorClient::Create(WorkerOptions(job));
  ASSERT_OK(client);
  auto reg = (*client)->Register();
  ASSERT_OK(reg);
  auto check = (*client)->CheckFencing();
  ASSERT_OK(check);
  EXPECT_TRUE(check->valid);
  EXPECT_FALSE((*client)->CheckFencing(uint64_t(job), reg->fencing_token + 1)->valid);

  CheckpointOptions co;
  co.root = dir_.Sub("ckpt");
  co.job_id = std::to_string(job);
  co.fencing_token = reg->fencing_token;
  co.commit_guard = (*client)->CommitGuard();
  co.io_engine = "posix";
  auto ckpt = Checkpointer::Open(co);
  ASSERT_OK(ckpt);
  std::vector<float> w(4096, 2.0f);
  State state;
  state.tensors.push_back({"w", DType::kFloat32, {int64_t(w.size())}, {}, {}, w.data()});
  auto first = (*ckpt)->Save(1, state);
  ASSERT_OK(first);
  ASSERT_OK(first->durable.get());

  ASSERT_OK((*client)->Ack(1));  // the segment ends here
  // The worker's secret died with its segment: its check is refused as
  // fenced (410), as every call of it now is.
  check = (*client)->CheckFencing();
  EXPECT_TRUE(IsFenced(check.status())) << check.status().ToString();
  auto second = (*ckpt)->Save(2, state);
  ASSERT_OK(second);
  Status refused = second->durable.get();
  EXPECT_TRUE(IsFenced(refused)) << refused.ToString();
  EXPECT_FALSE(Env::Default()->FileExists(co.root + "/" + StepDirName(2)));
  auto latest = ReadLatest(Env::Default(), co.root);
  ASSERT_OK(latest);
  EXPECT_EQ(*latest, StepDirName(1));
  EXPECT_TRUE(IsFenced((*client)->Heartbeat(2).status()));
}

// A checkpoint an evaluation is queued or running on stays through
// retention (FenceCommits asks stintd for the job's pinned steps): with
// keep_last=3 the step of an evaluation that waits for a node survives three
// newer saves, and more while a node runs it; the first save after it ended
// deletes it.
TEST_F(CoordClientTest, RetentionKeepsTheStepOfAQueuedOrRunningEvaluationUntilItEnds) {
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
  ASSERT_EQ(
      admin_
          ->Post("/v1/windows", {{"pool", "p"}, {"gpus", 1}, {"end_ms", WallNowMs() + 3600 * 1000}})
          .status,
      201);
  auto submitted = admin_->Post("/v1/jobs", {{"name", "train"},
                                             {"pool", "p"},
                                             {"min_gpus", 1},
                                             {"eval", {{"command", {"true"}}, {"every", 4}}}});
  ASSERT_EQ(submitted.status, 201) << submitted.text;
  const int64_t job = submitted.body["id"];
  ASSERT_TRUE(Eventually([&] { return JobIn(job, "RUNNING"); })) << Job(job).dump();
  auto client = CoordinatorClient::Create(WorkerOptions(job));
  ASSERT_OK(client);
  ASSERT_OK((*client)->Register());

  CheckpointOptions co;
  co.root = dir_.Sub("ckpt");
  co.keep_last = 3;
  co.io_engine = "posix";
  ASSERT_OK(FenceCommits(client->get(), &co));
  auto ckpt = Checkpointer::Open(co);
  ASSERT_OK(ckpt);
  std::vector<float> w(1024, 1.0f);
  State state;
  state.tensors.push_back({"w", DType::kFloat32, {int64_t(w.size())}, {}, {}, w.data()});
  // Each save is durable, reported (every 4th queues an evaluation), and
  // its retention has run.
  auto save = [&](uint64_t step) {
    auto saved = (*ckpt)->Save(step, state);
    ASSERT_OK(saved);
    ASSERT_OK(saved->durable.get());
    ASSERT_OK((*ckpt)->Flush());
    ASSERT_OK((*client)->ReportCheckpoint(step, 0.1));
  };
  auto steps = [&] {
    auto listed = ListCheckpointSteps(Env::Default(), co.root);
    return listed.ok() ? *listed : std::vector<uint64_t>{};
  };
  auto evals = [&] {
    return admin_->Get("/v1/jobs/" + std::to_string(job) + "/losses").body["evals"];
  };

  for (uint64_t step = 1; step <= 7; step++) save(step);
  ASSERT_EQ(evals().size(), 1u) << evals().dump();
  EXPECT_EQ(evals()[0]["step"], 4);
  EXPECT_EQ(evals()[0]["state"], "pending");
  EXPECT_EQ(steps(), (std::vector<uint64_t>{4, 5, 6, 7}));
  auto pinned = (*client)->PinnedSteps();
  ASSERT_OK(pinned);
  EXPECT_EQ(*pinned, (std::set<uint64_t>{4}));
  // A job stintd does not know has none: its retention is not held back.
  CoordinatorOptions unknown = WorkerOptions(job + 1000);
  unknown.token = StintdProcess::kAdminToken;
  auto stranger = CoordinatorClient::Create(unknown);
  ASSERT_OK(stranger);
  pinned = (*stranger)->PinnedSteps();
  ASSERT_OK(pinned);
  EXPECT_TRUE(pinned->empty());

  // A node takes it up: running, it stays pinned.
  HttpJson agent(daemon_->port(), StintdProcess::kAgentToken);
  auto node =
      agent.Post("/v1/nodes", {{"name", "n1"}, {"pool", "p"}, {"gpus", {0}}, {"kind", "spot"}});
  ASSERT_EQ(node.status, 201) << node.text;
  auto beat = agent.Post("/v1/nodes/n1/heartbeat", {{"eval_slots", 1}});
  ASSERT_EQ(beat.status, 200) << beat.text;
  ASSERT_EQ(beat.body["evals"].size(), 1u) << beat.text;
  const int64_t eval_id = beat.body["evals"][0]["id"];
  EXPECT_EQ(beat.body["evals"][0]["step"], 4);
  save(8);
  EXPECT_EQ(steps(), (std::vector<uint64_t>{4, 6, 7, 8}));

  // It ended: the next save's retention deletes its step.
  const json exit = {{"id", eval_id}, {"exit_code", 0}, {"result", {{"acc", 1}}}};
  beat = agent.Post("/v1/nodes/n1/heartbeat",
                    {{"eval_slots", 0}, {"eval_exits", json::array({exit})}});
  ASSERT_EQ(beat.status, 200) << beat.text;
  EXPECT_EQ(evals()[0]["state"], "done") << evals().dump();
  save(9);
  EXPECT_EQ(steps(), (std::vector<uint64_t>{7, 8, 9}));
  EXPECT_EQ((*ckpt)->stats().retention_held_back, "");
}

// CoordinatorCommitChannel::Add is atomic over stintd's KV: ranks adding
// at once lose none of their adds (a compare-and-set, again on a lost race).
TEST_F(CoordClientTest, CommitChannelAddsFromManyRanksAtOnceAllCount) {
  const int64_t job = RunningJob();
  constexpr int kRanks = 4, kAdds = 25;
  std::vector<std::thread> ranks;
  std::vector<Status> errors(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      auto client = CoordinatorClient::Create(WorkerOptions(job));
      if (!client.ok()) {
        errors[r] = client.status();
        return;
      }
      // The shared worker token reaches no job's KV: each rank registers.
      errors[r] = (*client)->Register().status();
      CoordinatorCommitChannel channel(client->get(), "adds");
      for (int i = 0; i < kAdds && errors[r].ok(); ++i)
        errors[r] = channel.Add("count", 1).status();
    });
  }
  for (auto& t : ranks) t.join();
  for (const Status& s : errors) EXPECT_OK(s);
  auto client = CoordinatorClient::Create(WorkerOptions(job));
  ASSERT_OK(client);
  ASSERT_OK((*client)->Register());
  CoordinatorCommitChannel channel(client->get(), "adds");
  auto sum = channel.Add("count", 0);
  ASSERT_OK(sum);
  EXPECT_EQ(*sum, kRanks * kAdds);
}

// Two ranks of one job commit through the job's KV in stintd; once rank 1's
// worker incarnation is gone (it left), its secret is dead: it writes
// nothing to the job's KV (fenced at once), and the commit is refused on
// both ranks (rank 0 waits for its report in vain, up to commit_timeout).
TEST_F(CoordClientTest, RanksCommitThroughTheJobKvAndAStaleRankCannot) {
  const int64_t job = RunningJob();
  std::unique_ptr<CoordinatorClient> clients[2];
  WorkerRegistration regs[2];
  for (int r = 0; r < 2; ++r) {
    auto client = CoordinatorClient::Create(WorkerOptions(job));
    ASSERT_OK(client);
    auto reg = (*client)->Register();
    ASSERT_OK(reg);
    clients[r] = std::move(*client);
    regs[r] = *reg;
  }
  EXPECT_NE(regs[0].fencing_token, regs[1].fencing_token);
  std::unique_ptr<CoordinatorCommitChannel> channels[2];
  std::unique_ptr<Checkpointer> ckpts[2];
  std::vector<float> rows(2 * 1024, 1.0f);
  for (int r = 0; r < 2; ++r) {
    channels[r] = std::make_unique<CoordinatorCommitChannel>(
        clients[r].get(), "seg-" + std::to_string(regs[r].segment_id));
    CheckpointOptions co;
    co.root = dir_.Sub("ckpt");
    co.job_id = std::to_string(job);
    co.rank = r;
    co.world_size = 2;
    co.commit_channel = channels[r].get();
    co.commit_timeout = std::chrono::seconds(5);
    co.fencing_token = regs[r].fencing_token;
    co.token_guard = CoordinatorTokenGuard(clients[0].get());
    co.io_engine = "posix";
    auto ckpt = Checkpointer::Open(co);
    ASSERT_OK(ckpt);
    ckpts[r] = std::move(*ckpt);
  }
  auto save = [&](uint64_t step) {
    std::vector<Status> out;
    std::vector<SaveHandle> handles;
    for (int r = 0; r < 2; ++r) {
      State state;
      state.tensors.push_back(
          {"w", DType::kFloat32, {4, 1024}, {2 * r, 0}, {2, 1024}, rows.data()});
      auto h = ckpts[r]->Save(step, state);
      EXPECT_OK(h);
      if (h.ok()) handles.push_back(*h);
    }
    for (auto& h : handles) out.push_back(h.durable.get());
    return out;
  };
  for (const Status& s : save(1)) ASSERT_OK(s);
  EXPECT_TRUE(Env::Default()->FileExists(dir_.Sub("ckpt") + "/" + StepDirName(1)));
  // Every rank is done with the save (its keys are cleaned after the
  // durable future is set, off time-to-durable): they are gone from the
  // job's KV.
  for (auto& ckpt : ckpts) ASSERT_OK(ckpt->Flush());
  for (const char* key : {"tmp", "done", "abort", "reported", "bell", "report/1"}) {
    auto left = clients[0]->Get("seg-" + std::to_string(regs[0].segment_id) + "/stint-ckpt/" +
                                std::to_string(job) + "/save-0-step-1/" + key);
    EXPECT_EQ(left.status().code(), Code::kNotFound) << key;
  }

  ASSERT_OK(clients[1]->Leave());  // rank 1's incarnation ends; its process goes on as a zombie
  const std::vector<Status> second = save(2);
  ASSERT_EQ(second.size(), 2u);
  EXPECT_FALSE(second[0].ok()) << "rank 0 committed without rank 1";
  EXPECT_TRUE(IsFenced(second[1])) << second[1].ToString();
  EXPECT_FALSE(Env::Default()->FileExists(dir_.Sub("ckpt") + "/" + StepDirName(2)));
  EXPECT_EQ(*ReadLatest(Env::Default(), dir_.Sub("ckpt")), StepDirName(1));
}

TEST_F(CoordClientTest, ACallRidesOutAStintdRestart) {
  const int64_t job = RunningJob();
  std::mutex mu;
  std::condition_variable cv;
  int retries = 0;
  CoordinatorOptions o = WorkerOptions(job);
  o.retry.on_retry = [&](int, const Status&) {
    std::lock_guard<std::mutex> lock(mu);
    ++retries;
    cv.notify_all();
  };
  auto client = CoordinatorClient::Create(o);
  ASSERT_OK(client);
  auto reg = (*client)->Register();
  ASSERT_OK(reg);
  ASSERT_OK((*client)->Heartbeat(1));

  daemon_->Kill(SIGKILL);
  Result<WorkerView> view = Status::Internal("not run");
  std::thread beat([&] { view = (*client)->Heartbeat(2); });
  {
    // Restart only once the call has met the dead server.
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return retries > 0; }));
  }
  ASSERT_TRUE(daemon_->Start()) << daemon_->output();
  beat.join();
  // The same worker, known to the new process from SQLite.
  ASSERT_OK(view);
  EXPECT_TRUE(view->active);
  EXPECT_EQ(view->fencing_token, reg->fencing_token);
  auto check = (*client)->CheckFencing();
  ASSERT_OK(check);
  EXPECT_TRUE(check->valid);
}

TEST_F(CoordClientTest, KvRoundTripsThroughTheServer) {
  const int64_t job = RunningJob();
  auto client = CoordinatorClient::Create(WorkerOptions(job));
  ASSERT_OK(client);
  // The shared worker token reaches no job's KV; the worker's secret does.
  EXPECT_EQ((*client)->Put("rdzv/early", "x").status().code(), Code::kPermissionDenied);
  ASSERT_OK((*client)->Register());
  auto v1 = (*client)->Put("rdzv/gen-1", "host-a:29500", 0);
  ASSERT_OK(v1);
  EXPECT_EQ((*client)->Put("rdzv/gen-1", "host-b:29500", 0).status().code(), Code::kAborted);
  auto e = (*client)->Get("rdzv/gen-1");
  ASSERT_OK(e);
  EXPECT_EQ(e->value, "host-a:29500");
  EXPECT_EQ(e->version, *v1);
  auto v2 = (*client)->Put("rdzv/gen-1", "host-c:29500", *v1);
  ASSERT_OK(v2);
  auto newer = (*client)->Get("rdzv/gen-1", std::chrono::seconds(1), *v2);
  ASSERT_OK(newer);
  EXPECT_EQ(newer->value, "host-c:29500");
  ASSERT_OK((*client)->Delete("rdzv/gen-1"));
  EXPECT_EQ((*client)->Get("rdzv/gen-1").status().code(), Code::kNotFound);

  // A counter: from absent, added in one write each; a value that is not
  // an integer is refused, named, and left as it was.
  EXPECT_EQ(*(*client)->Add("count", 3), 3);
  EXPECT_EQ(*(*client)->Add("count", -1), 2);
  EXPECT_EQ((*client)->Get("count")->value, "2");
  ASSERT_OK((*client)->Put("rdzv/host", "host-a"));
  auto refused = (*client)->Add("rdzv/host", 1);
  EXPECT_EQ(refused.status().code(), Code::kFailedPrecondition) << refused.status().ToString();
  EXPECT_NE(refused.status().ToString().find("rdzv/host"), std::string::npos)
      << refused.status().ToString();
  EXPECT_EQ((*client)->Get("rdzv/host")->value, "host-a");
}

TEST_F(CoordClientTest, StintctlDrivesTheAdminApi) {
  auto r = Ctl({"pools", "add", "p", "--description", "test pool"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("pool p created"), std::string::npos) << r.output;
  r = Ctl({"pools", "list"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("test pool"), std::string::npos) << r.output;

  r = Ctl({"windows", "add", "--pool", "p", "--gpus", "4", "--duration", "2h"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("until in 2h"), std::string::npos) << r.output;
  r = Ctl({"windows", "list", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json windows = json::parse(r.output, nullptr, false);
  ASSERT_FALSE(windows.is_discarded()) << r.output;
  ASSERT_EQ(windows["windows"].size(), 1u);
  EXPECT_EQ(windows["windows"][0]["gpus"], 4);

  r = Ctl({"teams", "set", "research", "--guaranteed", "2", "--borrow-limit", "-1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("unlimited"), std::string::npos) << r.output;

  // One job that fits and one that cannot (8 GPUs in a 4-GPU window).
  r = Ctl({"jobs", "submit", "--name", "small", "--gpus", "1:2", "--pool", "p", "--team",
           "research", "--checkpoint-seconds", "1", "--restart-seconds", "0", "--interval-seconds",
           "1", "--remaining", "1h", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const int64_t small = json::parse(r.output)["id"].get<int64_t>();
  r = Ctl({"jobs", "submit", "--name", "big", "--gpus", "8", "--priority", "high", "--pool", "p"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("submitted (PENDING)"), std::string::npos) << r.output;

  json queue;
  ASSERT_TRUE(Eventually([&] {
    auto q = Ctl({"queue", "--json"});
    if (q.exit_code != 0) return false;
    queue = json::parse(q.output, nullptr, false);
    return !queue.is_discarded() && queue["running"].size() == 1 && queue["pending"].size() == 1;
  })) << queue.dump();
  EXPECT_EQ(queue["running"][0]["job_id"], small);
  EXPECT_EQ(queue["pending"][0]["name"], "big");
  const int64_t big = queue["pending"][0]["job_id"].get<int64_t>();

  r = Ctl({"queue"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("POS  JOB"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("big"), std::string::npos);
  EXPECT_NE(r.output.find("RUNNING: 1 job"), std::string::npos) << r.output;
  r = Ctl({"jobs", "show", std::to_string(big)});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("pending: position 1"), std::string::npos) << r.output;
  r = Ctl({"jobs", "list", "--state", "running"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("small"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("big"), std::string::npos) << r.output;
  r = Ctl({"segments", "--job", std::to_string(small)});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("running"), std::string::npos) << r.output;
  r = Ctl({"jobs", "priority", std::to_string(big), "low"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("priority LOW"), std::string::npos) << r.output;
  r = Ctl({"jobs", "cancel", std::to_string(big), "--reason", "test over"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("CANCELLED"), std::string::npos) << r.output;

  // Exit codes: 1 refused (with the server's message), 2 usage, 3 unreachable.
  r = Ctl({"pools", "add", "p"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  r = Ctl({"jobs", "show", "999"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  r = Ctl({"pools", "add", "q"}, StintdProcess::kWorkerToken);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("admin token"), std::string::npos) << r.output;
  r = Ctl({"windows", "add", "--pool", "p", "--gpus", "4", "--end", "yesterday"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = Ctl({"jobs", "frobnicate"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = RunProgram(STINTCTL_PATH, {"--token-file", dir_.path() + "/admin.tokens", "--url",
                                 daemon_->url(), "teams", "list"});
  EXPECT_EQ(r.exit_code, 0) << r.output;  // the token file's comment line is skipped
  EXPECT_NE(r.output.find("research"), std::string::npos) << r.output;
  daemon_->Kill(SIGKILL);
  r = Ctl({"queue"});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("cannot reach stintd"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace stint
