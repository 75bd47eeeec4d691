// Credentials against a real stintd (and stint-agent) on loopback, over
// HTTP: one job's credentials (its registration token, its workers'
// secrets, a segment's token) reach only that job; the shared worker token
// only registers and reads; agents read only the jobs placed on their node
// and nobody but an admin sees launch.env or eval.env; a node's heartbeat
// keeps only its own segments alive; under a torchrun launch every rank
// registers itself; a job's evaluations go only to nodes of its pools.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "util/stintd_process.h"
#include "util/subprocess.h"
#include "util/temp_dir.h"

#if !defined(STINTD_PATH) || !defined(STINT_AGENT_PATH) || !defined(STINT_COORD_WORKER)
#error "STINTD_PATH, STINT_AGENT_PATH and STINT_COORD_WORKER must name the binaries"
#endif

namespace stint {
namespace {

using nlohmann::json;

class StintdAuthTest : public ::testing::Test {
 protected:
  // Fast ticks; leases and start grace of `lease_seconds` (long enough by
  // default that nothing expires unless a test means it).
  void Start(const std::string& lease_seconds = "60") {
    const std::vector<std::string> args = {
        "--tick-seconds",        "0.05",        "--safety-seconds",    "1",
        "--min-run-seconds",     "0",           "--lease-ttl-seconds", lease_seconds,
        "--start-grace-seconds", lease_seconds, "--node-ttl-seconds",  "60"};
    daemon_ = std::make_unique<StintdProcess>(STINTD_PATH, dir_.path(), args);
    ASSERT_TRUE(daemon_->Start()) << daemon_->output();
    admin_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kAdminToken);
    worker_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kWorkerToken);
    agent_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kAgentToken);
  }

  json Job(int64_t id) { return admin_->Get("/v1/jobs/" + std::to_string(id)).body; }
  // The job's active segment id, once it runs (0 until then).
  int64_t RunningSegment(int64_t job) {
    int64_t sid = 0;
    EXPECT_TRUE(Eventually([&] {
      const json j = Job(job);
      sid = j.value("state", "") == "RUNNING" ? j.value("segment_id", int64_t{0}) : 0;
      return sid != 0;
    })) << Job(job).dump();
    return sid;
  }
  // A job of one GPU in `pool`; `*token` its registration token.
  int64_t Submit(const std::string& pool, std::string* token = nullptr,
                 json extra = json::object()) {
    json spec = {{"name", "j-" + pool}, {"pool", pool}, {"min_gpus", 1}};
    spec.update(extra);
    auto r = admin_->Post("/v1/jobs", spec);
    EXPECT_EQ(r.status, 201) << r.text;
    if (token != nullptr) *token = r.body.value("registration_token", "");
    return r.body.value("id", int64_t{0});
  }
  // Nodes n1 (pool p1) and n2 (pool p2); n1 gets a token of its own, and
  // `*n1` a client holding it. n2 is the shared agent token's.
  void TwoNodesN1WithItsOwnToken(std::unique_ptr<HttpJson>* n1) {
    AddNode("n1", "p1");
    AddNode("n2", "p2");
    auto issued = admin_->Post("/v1/nodes/n1/token", json::object());
    ASSERT_EQ(issued.status, 201) << issued.text;
    *n1 = std::make_unique<HttpJson>(daemon_->port(), issued.body["token"].get<std::string>());
  }
  // Node `name` lending GPU 0 to `pool` (made too) until an hour from now,
  // with the shared agent token.
  void AddNode(const std::string& name, const std::string& pool) {
    ASSERT_EQ(admin_->Post("/v1/pools", {{"name", pool}}).status, 201);
    auto r = agent_->Post("/v1/nodes", {{"name", name},
                                        {"pool", pool},
                                        {"gpus", {0}},
                                        {"end_ms", WallNowMs() + 3600 * 1000}});
    ASSERT_EQ(r.status, 201) << r.text;
  }
  static std::string Kv(int64_t job, const std::string& key) {
    return "/v1/jobs/" + std::to_string(job) + "/kv/" + key;
  }
  static std::string Workers(int64_t job) { return "/v1/jobs/" + std::to_string(job) + "/workers"; }
  static json Check(int64_t job, uint64_t token) {
    return {{"job_id", job}, {"fencing_token", token}};
  }

  TempDir dir_;
  std::unique_ptr<StintdProcess> daemon_;
  std::unique_ptr<HttpJson> admin_, worker_, agent_;
};

// Every job-scoped call of job `other` with `who`'s credential is refused
// with 403: its KV (write, read, delete), its fencing check, registering.
void ExpectNoReach(HttpJson& who, int64_t other, uint64_t other_token, const std::string& what) {
  const std::string kv = "/v1/jobs/" + std::to_string(other) + "/kv/rdzv";
  auto put = who.Put(kv, {{"value", "forged"}});
  EXPECT_EQ(put.status, 403) << what << ": " << put.text;
  EXPECT_EQ(who.Get(kv).status, 403) << what;
  EXPECT_EQ(who.Delete(kv).status, 403) << what;
  auto check = who.Post("/v1/fencing/check", {{"job_id", other}, {"fencing_token", other_token}});
  EXPECT_EQ(check.status, 403) << what << ": " << check.text;
  auto reg = who.Post("/v1/jobs/" + std::to_string(other) + "/workers", {{"name", "intruder"}});
  EXPECT_EQ(reg.status, 403) << what << ": " << reg.text;
}

TEST_F(StintdAuthTest, OneJobsCredentialsNeverReachAnotherJob) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
  ASSERT_EQ(admin_->Post("/v1/windows", {{"pool", "p"}, {"gpus", 2}, {"kind", "spot"}}).status, 201);
  std::string a_token, b_token;
  const int64_t a = Submit("p", &a_token), b = Submit("p", &b_token);
  ASSERT_EQ(a_token.rfind("stj1.", 0), 0u) << a_token;
  ASSERT_NE(a_token, b_token);
  RunningSegment(a);
  RunningSegment(b);
  // An admin reads the token again; nobody else sees it.
  EXPECT_EQ(Job(a).value("registration_token", ""), a_token);
  EXPECT_FALSE(worker_->Get("/v1/jobs/" + std::to_string(a)).body.contains("registration_token"));

  // Each job's token registers into its own job; the worker's secret then
  // does its work there.
  HttpJson a_job(daemon_->port(), a_token), b_job(daemon_->port(), b_token);
  auto a_reg = a_job.Post(Workers(a), {{"name", "a0"}});
  ASSERT_EQ(a_reg.status, 201) << a_reg.text;
  auto b_reg = b_job.Post(Workers(b), {{"name", "b0"}});
  ASSERT_EQ(b_reg.status, 201) << b_reg.text;
  const uint64_t b_fencing = b_reg.body["fencing_token"].get<uint64_t>();
  HttpJson a_secret(daemon_->port(), a_reg.body["worker_secret"].get<std::string>());
  EXPECT_EQ(a_secret.Put(Kv(a, "rdzv"), {{"value", "a's"}}).status, 200);
  EXPECT_EQ(a_job.Put(Kv(a, "state"), {{"value", "a's"}}).status, 200);
  EXPECT_TRUE(a_secret
                  .Post("/v1/fencing/check", Check(a, a_reg.body["fencing_token"].get<uint64_t>()))
                  .body.value("valid", false));
  ASSERT_EQ(b_job.Put(Kv(b, "rdzv"), {{"value", "b's"}}).status, 200);

  // Job a's credentials get 403 on everything of job b.
  ExpectNoReach(a_job, b, b_fencing, "job a's registration token");
  ExpectNoReach(a_secret, b, b_fencing, "the secret of a worker of job a");
  // b's state is as b left it.
  EXPECT_EQ(b_job.Get(Kv(b, "rdzv")).body.value("value", ""), "b's");

  // The shared worker token registers (into any job), and reaches no job's
  // KV or fencing check: only a worker's secret or the job's token do.
  EXPECT_EQ(worker_->Post(Workers(b), {{"name", "shared"}}).status, 201);
  EXPECT_EQ(worker_->Put(Kv(b, "rdzv"), {{"value", "forged"}}).status, 403);
  EXPECT_EQ(worker_->Get(Kv(b, "rdzv")).status, 403);
  EXPECT_EQ(worker_->Post("/v1/fencing/check", Check(b, b_fencing)).status, 403);
  // A forged job token is no token.
  std::string forged = b_token;
  forged.back() = forged.back() == '0' ? '1' : '0';
  EXPECT_EQ(HttpJson(daemon_->port(), forged).Get(Kv(b, "rdzv")).status, 401);
}

TEST_F(StintdAuthTest, ASegmentTokenReachesItsJobOnlyWhileTheSegmentRuns) {
  ASSERT_NO_FATAL_FAILURE(Start());
  AddNode("n1", "p1");
  AddNode("n2", "p2");
  json torchrun = {{"launch", {{"command", {"/bin/true"}}, {"torchrun", {"torchrun"}}}}};
  const int64_t a = Submit("p1", nullptr, torchrun);
  const int64_t b = Submit("p2", nullptr, torchrun);
  const int64_t a_seg = RunningSegment(a);
  RunningSegment(b);
  // n1's assignment carries the token of a's segment on n1.
  auto beat = agent_->Post("/v1/nodes/n1/heartbeat", json::object());
  ASSERT_EQ(beat.status, 200) << beat.text;
  ASSERT_EQ(beat.body["assignments"].size(), 1u) << beat.text;
  const std::string seg_token = beat.body["assignments"][0].value("registration_token", "");
  ASSERT_EQ(seg_token.rfind("stg1." + std::to_string(a_seg) + ".n1.", 0), 0u) << beat.text;

  HttpJson seg(daemon_->port(), seg_token);
  EXPECT_EQ(seg.Put(Kv(a, "torchrun/state"), {{"value", "s"}}).status, 200);
  auto reg = seg.Post(Workers(a), {{"name", "rank0"}});
  ASSERT_EQ(reg.status, 201) << reg.text;
  EXPECT_EQ(reg.body.value("segment_id", int64_t{0}), a_seg);
  // Not on another node than its own.
  EXPECT_EQ(seg.Post(Workers(a), {{"name", "x"}, {"node", "n2"}}).status, 403);
  auto b_reg = HttpJson(daemon_->port(), StintdProcess::kAdminToken)
                   .Post(Workers(b), {{"name", "b0"}});
  ASSERT_EQ(b_reg.status, 201);
  ExpectNoReach(seg, b, b_reg.body["fencing_token"].get<uint64_t>(), "a segment token of job a");

  // Once the segment ended its token is dead: a stale launcher or rank
  // cannot register into the job's next segment.
  ASSERT_EQ(admin_->Post("/v1/jobs/" + std::to_string(a) + "/cancel", json::object()).status, 200);
  EXPECT_EQ(seg.Put(Kv(a, "torchrun/state"), {{"value", "stale"}}).status, 410);
  EXPECT_EQ(seg.Post(Workers(a), {{"name", "late"}}).status, 410);
}

TEST_F(StintdAuthTest, AgentsReadOnlyTheJobsOnTheirNodeAndOnlyAdminsSeeLaunchEnv) {
  ASSERT_NO_FATAL_FAILURE(Start());
  std::unique_ptr<HttpJson> n1_client;
  ASSERT_NO_FATAL_FAILURE(TwoNodesN1WithItsOwnToken(&n1_client));
  HttpJson& n1 = *n1_client;
  json launch = {{"launch", {{"command", {"/bin/true"}}, {"env", {{"HF_TOKEN", "hush"}}}}}};
  const int64_t on_n1 = Submit("p1", nullptr, launch);
  const int64_t on_n2 = Submit("p2", nullptr, launch);
  RunningSegment(on_n1);
  RunningSegment(on_n2);

  auto ids = [](const HttpJson::Response& r) {
    std::set<int64_t> out;
    for (const json& j : r.body.value("jobs", json::array())) out.insert(j["id"].get<int64_t>());
    return out;
  };
  auto no_env = [](const HttpJson::Response& r) {
    for (const json& j : r.body.value("jobs", json::array())) {
      if (j["launch"].is_object() && j["launch"].contains("env")) return false;
    }
    return true;
  };
  const std::string job1 = "/v1/jobs/" + std::to_string(on_n1);
  const std::string job2 = "/v1/jobs/" + std::to_string(on_n2);

  // n1's own token: job 1 only, without its env.
  auto listed = n1.Get("/v1/jobs");
  ASSERT_EQ(listed.status, 200) << listed.text;
  EXPECT_EQ(ids(listed), std::set<int64_t>({on_n1})) << listed.text;
  EXPECT_TRUE(no_env(listed)) << listed.text;
  auto one = n1.Get(job1);
  ASSERT_EQ(one.status, 200) << one.text;
  EXPECT_FALSE(one.body["launch"].contains("env")) << one.text;
  EXPECT_EQ(n1.Get(job2).status, 403);
  EXPECT_EQ(n1.Get(job1 + "/logs").status, 200);
  EXPECT_EQ(n1.Get(job2 + "/logs").status, 403);

  // The shared agent token acts for the nodes without a token of their own.
  listed = agent_->Get("/v1/jobs");
  EXPECT_EQ(ids(listed), std::set<int64_t>({on_n2})) << listed.text;
  EXPECT_TRUE(no_env(listed)) << listed.text;
  EXPECT_EQ(agent_->Get(job1).status, 403);
  EXPECT_EQ(agent_->Get(job1 + "/logs").status, 403);

  // The shared worker token reads every job, never an env; an admin does.
  listed = worker_->Get("/v1/jobs");
  EXPECT_EQ(ids(listed), std::set<int64_t>({on_n1, on_n2})) << listed.text;
  EXPECT_TRUE(no_env(listed)) << listed.text;
  EXPECT_FALSE(worker_->Get(job2).body["launch"].contains("env"));
  EXPECT_EQ(admin_->Get(job2).body["launch"]["env"]["HF_TOKEN"], "hush");
  EXPECT_FALSE(no_env(admin_->Get("/v1/jobs")));
}

TEST_F(StintdAuthTest, AgentsListOnlyTheirNodesJobsInSegmentsQueueAndNodes) {
  ASSERT_NO_FATAL_FAILURE(Start());
  std::unique_ptr<HttpJson> n1_client;
  ASSERT_NO_FATAL_FAILURE(TwoNodesN1WithItsOwnToken(&n1_client));
  HttpJson& n1 = *n1_client;
  const int64_t on_n1 = Submit("p1", nullptr, {{"name", "visible-on-n1"}});
  const int64_t on_n2 = Submit("p2", nullptr, {{"name", "secret-on-n2"}});
  RunningSegment(on_n1);
  RunningSegment(on_n2);
  // Waits for a GPU that n1's job holds: pending, placed nowhere.
  const int64_t waiting = Submit("p1", nullptr, {{"name", "secret-pending"}});
  ASSERT_TRUE(Eventually([&] {
    return admin_->Get("/v1/queue").body.value("pending", json::array()).size() == 1;
  }));

  // Segments name no job, only its id (checked below).
  for (const std::string path : {"/v1/queue", "/v1/nodes"}) {
    auto r = n1.Get(path);
    ASSERT_EQ(r.status, 200) << path << ": " << r.text;
    EXPECT_NE(r.text.find("visible-on-n1"), std::string::npos) << path << ": " << r.text;
    EXPECT_EQ(r.text.find("secret-"), std::string::npos) << path << ": " << r.text;
    auto everything = worker_->Get(path).text;  // the shared worker token reads all
    EXPECT_NE(everything.find("secret-on-n2"), std::string::npos) << path << ": " << everything;
  }
  auto segment_jobs = [](HttpJson& as) {
    const json segments = as.Get("/v1/segments").body["segments"];
    std::set<int64_t> jobs;
    for (const json& seg : segments) jobs.insert(seg["job_id"].get<int64_t>());
    return jobs;
  };
  EXPECT_EQ(segment_jobs(n1), std::set<int64_t>({on_n1}));
  EXPECT_EQ(segment_jobs(*worker_), std::set<int64_t>({on_n1, on_n2}));
  const json queue = n1.Get("/v1/queue").body;
  EXPECT_TRUE(queue["pending"].empty()) << queue.dump();
  ASSERT_EQ(queue["running"].size(), 1u) << queue.dump();
  EXPECT_EQ(queue["running"][0]["job_id"], on_n1);
  // Other nodes' GPUs in use are shown, not whose they are.
  const json nodes = n1.Get("/v1/nodes").body["nodes"];
  ASSERT_EQ(nodes.size(), 2u) << nodes.dump();
  for (const json& node : nodes) {
    ASSERT_EQ(node["running"].size(), 1u) << node.dump();
    EXPECT_EQ(node["running"][0].contains("job_id"), node["name"] == "n1") << node.dump();
  }
  // The shared agent token acts for n2 (no token of its own): job 2 only.
  EXPECT_EQ(segment_jobs(*agent_), std::set<int64_t>({on_n2}));
  EXPECT_EQ(admin_->Get("/v1/jobs/" + std::to_string(waiting)).body["state"], "PENDING");
}

TEST_F(StintdAuthTest, ANodeHeartbeatKeepsOnlyTheSegmentsPlacedOnThatNode) {
  // Short leases: a segment no beat refreshes is lost within seconds.
  ASSERT_NO_FATAL_FAILURE(Start("2"));
  AddNode("n1", "p1");
  AddNode("n2", "p2");
  const int64_t on_n2 = Submit("p2");
  const int64_t seg = RunningSegment(on_n2);
  // n1 names n2's segment as running, again and again; n2 is up but says
  // nothing of it. The segment must expire at its lease as if unrefreshed.
  const json says = {{"running", {seg}}};
  bool lost = false;
  ASSERT_TRUE(Eventually(
      [&] {
        EXPECT_EQ(agent_->Post("/v1/nodes/n1/heartbeat", says).status, 200);
        EXPECT_EQ(agent_->Post("/v1/nodes/n2/heartbeat", json::object()).status, 200);
        for (const json& s : Job(on_n2).value("segments", json::array())) {
          if (s.value("id", int64_t{0}) == seg) lost = s.value("state", "") == "lost";
        }
        return lost;
      },
      60))
      << "another node's heartbeat kept segment " << seg << " alive: " << Job(on_n2).dump();
}

// A stand-in for torchrun that starts --nproc-per-node copies of the
// command, as torchrun starts its local workers: all inherit the
// launcher's environment.
constexpr char kFakeTorchrun[] = R"(#!/bin/sh
n=1
while [ $# -gt 0 ]; do
  case "$1" in
    --nproc-per-node=*) n="${1#*=}" ;;
    --*) ;;
    *) break ;;
  esac
  shift
done
i=0
pids=""
while [ "$i" -lt "$n" ]; do
  LOCAL_RANK=$i RANK=$i "$@" &
  pids="$pids $!"
  i=$((i + 1))
done
rc=0
for p in $pids; do wait "$p" || rc=1; done
exit $rc
)";

TEST_F(StintdAuthTest, UnderATorchrunLaunchEachRankRegistersItself) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "gpu"}}).status, 201);
  const std::string launcher = dir_.Sub("fake-torchrun");
  std::ofstream(launcher) << kFakeTorchrun;
  ASSERT_EQ(chmod(launcher.c_str(), 0755), 0);
  ChildProcess agent(STINT_AGENT_PATH,
                     {"--coord", daemon_->url(), "--token-file", daemon_->agent_token_file(),
                      "--gpus", "0,1", "--node", "n1", "--pool", "gpu", "--for", "1h",
                      "--heartbeat-seconds", "0.1", "--workdir", dir_.Sub("agent")});
  auto r = admin_->Post("/v1/jobs", {{"name", "tr"},
                                     {"pool", "gpu"},
                                     {"min_gpus", 2},
                                     {"launch",
                                      {{"command", {STINT_COORD_WORKER, "--self-register"}},
                                       {"torchrun", {launcher}}}}});
  ASSERT_EQ(r.status, 201) << r.text;
  const int64_t job = r.body["id"].get<int64_t>();
  // Two ranks start, register, beat, write the KV and check their tokens,
  // then exit 0: the job is DONE (generous: two processes on a loaded host).
  std::string state;
  ASSERT_TRUE(Eventually(
      [&] {
        state = Job(job).value("state", "");
        return state == "DONE" || state == "FAILED";
      },
      120));
  ASSERT_EQ(state, "DONE") << Job(job).dump() << "\n"
      << admin_->Get("/v1/jobs/" + std::to_string(job) + "/logs").text << "\n"
      << agent.output();
  // Each said which worker it is: two registrations, not one shared.
  std::string text;
  const json logs = admin_->Get("/v1/jobs/" + std::to_string(job) + "/logs").body;
  for (const json& c : logs.value("chunks", json::array())) text += c["text"].get<std::string>();
  std::set<std::string> workers;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const std::string ok = "coord_worker: ok worker ";
    if (line.rfind(ok, 0) == 0) workers.insert(line.substr(ok.size()));
  }
  EXPECT_EQ(workers.size(), 2u) << text;
}

// A job's evaluation (its command and env) goes only to a node of the job's
// pools, at most one per GPU the node lends whatever eval_slots it claims;
// eval.env is for admins and for the node that runs it, no other reader.
TEST_F(StintdAuthTest, EvaluationsGoOnlyToTheJobsPoolsAndOnlyTheirNodeSeesTheirEnv) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "trusted"}}).status, 201);
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "spot"}}).status, 201);
  auto node = [&](const std::string& name, const std::string& pool, const json& gpus) {
    auto r = agent_->Post(
        "/v1/nodes",
        {{"name", name}, {"pool", pool}, {"gpus", gpus}, {"end_ms", WallNowMs() + 3600 * 1000}});
    ASSERT_EQ(r.status, 201) << r.text;
  };
  ASSERT_NO_FATAL_FAILURE(node("t2", "trusted", {0, 1}));
  ASSERT_NO_FATAL_FAILURE(node("t1", "trusted", {0}));
  ASSERT_NO_FATAL_FAILURE(node("spot", "spot", {0, 1, 2, 3}));
  const json eval = {
      {"eval",
       {{"command", {"/bin/true"}}, {"env", {{"EVAL_KEY", "hush"}}}, {"gpus", 0}, {"every", 1}}}};
  // Two jobs of the trusted pool, each with a checkpoint to evaluate.
  std::vector<int64_t> jobs;
  for (int k = 0; k < 2; k++) {
    const int64_t job = Submit("trusted", nullptr, eval);
    RunningSegment(job);
    auto reg = worker_->Post(Workers(job), {{"name", "w"}});
    ASSERT_EQ(reg.status, 201) << reg.text;
    HttpJson w(daemon_->port(), reg.body["worker_secret"].get<std::string>());
    auto cp = w.Post(
        "/v1/workers/" + std::to_string(reg.body["worker_id"].get<int64_t>()) + "/checkpoint",
        {{"step", 1}, {"seconds", 0.1}});
    ASSERT_EQ(cp.status, 200) << cp.text;
    jobs.push_back(job);
  }
  auto pending = [&] {
    int n = 0;
    for (int64_t job : jobs) {
      for (const json& e : Job(job).value("evaluations", json::array()))
        n += e.value("state", "") == "pending" ? 1 : 0;
    }
    return n;
  };
  ASSERT_EQ(pending(), 2);

  // Only admins read eval.env.
  const std::string job0 = "/v1/jobs/" + std::to_string(jobs[0]);
  for (HttpJson* reader : {worker_.get(), agent_.get()}) {
    auto one = reader->Get(job0);
    ASSERT_EQ(one.status, 200) << one.text;
    EXPECT_EQ(one.body["eval"]["command"], json::array({"/bin/true"})) << one.text;
    EXPECT_FALSE(one.body["eval"].contains("env")) << one.text;
    EXPECT_EQ(reader->Get("/v1/jobs").text.find("hush"), std::string::npos);
  }
  EXPECT_EQ(admin_->Get(job0).body["eval"]["env"]["EVAL_KEY"], "hush");

  // A node outside the jobs' pools gets none, whatever it claims; an absurd
  // claim is refused.
  auto spot = agent_->Post("/v1/nodes/spot/heartbeat", {{"eval_slots", 1024}});
  ASSERT_EQ(spot.status, 200) << spot.text;
  EXPECT_EQ(spot.body["evals"], json::array()) << spot.text;
  EXPECT_EQ(spot.text.find("hush"), std::string::npos) << spot.text;
  EXPECT_EQ(pending(), 2);
  auto absurd = agent_->Post("/v1/nodes/spot/heartbeat", {{"eval_slots", 100000}});
  EXPECT_EQ(absurd.status, 400) << absurd.text;
  EXPECT_NE(absurd.text.find("eval_slots"), std::string::npos) << absurd.text;

  // A node of the pool with one GPU runs one at a time, with its env.
  auto t1 = agent_->Post("/v1/nodes/t1/heartbeat", {{"eval_slots", 1024}});
  ASSERT_EQ(t1.status, 200) << t1.text;
  ASSERT_EQ(t1.body["evals"].size(), 1u) << t1.text;
  EXPECT_EQ(t1.body["evals"][0]["eval"]["env"]["EVAL_KEY"], "hush") << t1.text;
  EXPECT_EQ(pending(), 1);
}

}  // namespace
}  // namespace stint
