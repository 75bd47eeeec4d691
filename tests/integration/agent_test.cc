// stint-agent end to end: a real stintd and real agent processes on
// loopback. A node lends its GPUs as a window a job runs in; SIGTERM closes
// it and the job's segment goes; a restarted agent finds its window again;
// a silent node's window is closed by stintd; agent tokens have a right of
// their own.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "util/agent_stintd.h"
#include "util/subprocess.h"

namespace stint {
namespace {

using nlohmann::json;

// Fast ticks; leases long enough that nothing expires unless a test means it.
std::vector<std::string> DaemonArgs(const std::string& node_ttl_seconds = "30") {
  return {"--tick-seconds",      "0.05", "--safety-seconds",      "1",
          "--min-run-seconds",   "0",    "--lease-ttl-seconds",   "20",
          "--start-grace-seconds", "20", "--node-ttl-seconds", node_ttl_seconds};
}

class AgentTest : public AgentStintdTest {
 protected:
  void Start(const std::vector<std::string>& args = DaemonArgs()) { StartStintd(args); }

  // An agent for `node`; `extra` e.g. {"--spot"}. Not yet waited for.
  std::unique_ptr<ChildProcess> Agent(const std::string& node, const std::string& gpus,
                                      std::vector<std::string> extra) {
    std::vector<std::string> args = {"--coord",       daemon_->url(),
                                     "--token-file",  daemon_->agent_token_file(),
                                     "--pool",        "gpu",
                                     "--gpus",        gpus,
                                     "--node",        node,
                                     "--heartbeat-seconds", "0.1",
                                     "--workdir",     dir_.Sub("agent-" + node)};
    // `extra` may set the heartbeat interval itself.
    if (std::find(extra.begin(), extra.end(), "--heartbeat-seconds") != extra.end())
      args.erase(args.begin() + 10, args.begin() + 12);
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<ChildProcess>(STINT_AGENT_PATH, args);
  }

  json NodeInfo(const std::string& name) {
    for (const json& n : admin_->Get("/v1/nodes").body.value("nodes", json::array())) {
      if (n.value("name", "") == name) return n;
    }
    return json();
  }
  json Window(int64_t id) {
    for (const json& w : admin_->Get("/v1/windows").body.value("windows", json::array())) {
      if (w.value("id", int64_t{0}) == id) return w;
    }
    return json();
  }
  json Job(int64_t id) { return admin_->Get("/v1/jobs/" + std::to_string(id)).body; }
  // stintctl's arguments: the admin token and `args`.
  std::vector<std::string> CtlArgs(const std::vector<std::string>& args) {
    std::vector<std::string> all = {"--url", daemon_->url(), "--token", StintdProcess::kAdminToken};
    all.insert(all.end(), args.begin(), args.end());
    return all;
  }
};

TEST_F(AgentTest, ANodeLendsItsGpusAndSigtermClosesItsWindow) {
  Start();
  auto agent = Agent("n1", "0,1", {"--spot", "--notice-lead", "0"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n1 registered: window ")) << agent->output();
  const int64_t window = RegisteredWindow(agent->output());
  ASSERT_GT(window, 0) << agent->output();
  json node = NodeInfo("n1");
  ASSERT_TRUE(node.is_object()) << admin_->Get("/v1/nodes").text;
  EXPECT_EQ(node["gpus"], json::array({0, 1}));
  EXPECT_EQ(node["pool"], "gpu");
  EXPECT_TRUE(node["open"].get<bool>());
  EXPECT_EQ(node["window"]["id"], window);
  json w = Window(window);
  EXPECT_EQ(w["node"], "n1");
  EXPECT_EQ(w["node_gpus"], json::array({0, 1}));
  EXPECT_EQ(w["gpus"], 2);
  EXPECT_EQ(w["kind"], "spot");

  auto submitted = admin_->Post("/v1/jobs", {{"name", "j"}, {"pool", "gpu"}, {"min_gpus", 2}});
  ASSERT_EQ(submitted.status, 201) << submitted.text;
  const int64_t job = submitted.body["id"];
  ASSERT_TRUE(Eventually([&] { return Job(job).value("state", "") == "RUNNING"; }))
      << Job(job).dump();
  EXPECT_EQ(Job(job)["segments"][0]["allocs"][0]["window_id"], window);

  ASSERT_EQ(kill(agent->pid(), SIGTERM), 0);
  bool killed = false;
  const int status = agent->WaitAtMost(20, &killed);
  ASSERT_FALSE(killed) << "stint-agent did not stop on SIGTERM: " << agent->output();
  ASSERT_TRUE(WIFEXITED(status)) << agent->output();
  EXPECT_EQ(WEXITSTATUS(status), 0) << agent->output();
  EXPECT_NE(agent->output().find("window " + std::to_string(window) + " closed"),
            std::string::npos)
      << agent->output();
  w = Window(window);
  EXPECT_TRUE(w["closed_early"].get<bool>()) << w.dump();
  EXPECT_FALSE(w["open"].get<bool>()) << w.dump();
  EXPECT_FALSE(NodeInfo("n1")["open"].get<bool>());
  // No notice lead and no ack: the segment is lost and the job queued again.
  ASSERT_TRUE(Eventually([&] { return Job(job)["segments"][0].value("state", "") == "lost"; }))
      << Job(job).dump();
  EXPECT_EQ(Job(job)["state"], "PENDING");
}

TEST_F(AgentTest, ARestartedAgentFindsItsWindowAndOtherGpusAreRefused) {
  Start();
  auto first = Agent("n2", "0,1,2,3", {"--for", "1h"});
  ASSERT_TRUE(first->WaitForLine("stint-agent: node n2 registered: window ")) << first->output();
  const int64_t window = RegisteredWindow(first->output());
  EXPECT_NE(first->output().find("(new)"), std::string::npos) << first->output();
  EXPECT_EQ(Window(window)["kind"], "hard");
  EXPECT_FALSE(Window(window)["end_ms"].is_null());
  ASSERT_EQ(kill(first->pid(), SIGKILL), 0);
  first->Wait();

  auto again = Agent("n2", "0,1,2,3", {"--for", "1h"});
  ASSERT_TRUE(again->WaitForLine("stint-agent: node n2 registered: window ")) << again->output();
  EXPECT_EQ(RegisteredWindow(again->output()), window);
  EXPECT_NE(again->output().find("(found again)"), std::string::npos) << again->output();
  EXPECT_TRUE(Window(window)["open"].get<bool>());

  // The same node name with other GPUs is another machine's claim: refused.
  auto other = Agent("n2", "0", {"--for", "1h"});
  bool killed = false;
  const int status = other->WaitAtMost(20, &killed);
  ASSERT_FALSE(killed) << other->output();
  EXPECT_EQ(WEXITSTATUS(status), 1) << other->output();
  EXPECT_NE(other->output().find("is registered with window " + std::to_string(window)),
            std::string::npos)
      << other->output();
  EXPECT_EQ(admin_->Get("/v1/windows").body["windows"].size(), 1u);
}

TEST_F(AgentTest, ASilentNodeHasItsWindowClosedAndAnAdminCloseStopsTheAgent) {
  // A 5 s TTL against 0.1 s heartbeats: a loaded CI machine may stall the
  // agent for a second or two without closing its window.
  Start(DaemonArgs("5"));
  auto silent = Agent("quiet", "0", {"--spot"});
  ASSERT_TRUE(silent->WaitForLine("stint-agent: node quiet registered: window "))
      << silent->output();
  const int64_t quiet_window = RegisteredWindow(silent->output());
  // Heartbeats keep it open past the TTL...
  ASSERT_TRUE(Eventually([&] { return !NodeInfo("quiet")["last_heartbeat_ms"].is_null(); }));
  const int64_t registered_ms = WallNowMs();
  ASSERT_TRUE(Eventually([&] { return WallNowMs() - registered_ms > 6000; }, 15));
  EXPECT_TRUE(Window(quiet_window)["open"].get<bool>()) << Window(quiet_window).dump();
  // ...and once it is gone, stintd closes the window within the TTL.
  ASSERT_EQ(kill(silent->pid(), SIGKILL), 0);
  silent->Wait();
  ASSERT_TRUE(Eventually([&] { return !Window(quiet_window)["open"].get<bool>(); }, 20))
      << Window(quiet_window).dump();
  EXPECT_TRUE(Window(quiet_window)["closed_early"].get<bool>());

  auto agent = Agent("closed-by-admin", "1", {"--spot"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node closed-by-admin registered: window "))
      << agent->output();
  const int64_t window = RegisteredWindow(agent->output());
  ASSERT_EQ(admin_->Post("/v1/windows/" + std::to_string(window) + "/close", json::object()).status,
            200);
  bool killed = false;
  const int status = agent->WaitAtMost(20, &killed);
  ASSERT_FALSE(killed) << agent->output();
  EXPECT_EQ(WEXITSTATUS(status), 0) << agent->output();
  EXPECT_NE(agent->output().find("stintd closed window " + std::to_string(window)),
            std::string::npos)
      << agent->output();
}

TEST_F(AgentTest, AgentTokensHaveARightOfTheirOwn) {
  Start();
  HttpJson agent(daemon_->port(), StintdProcess::kAgentToken);
  HttpJson worker(daemon_->port(), StintdProcess::kWorkerToken);
  HttpJson nobody(daemon_->port(), "");
  const json spec = {{"name", "n3"}, {"pool", "gpu"}, {"gpus", {0, 1}}, {"kind", "spot"}};
  EXPECT_EQ(worker.Post("/v1/nodes", spec).status, 403);
  EXPECT_EQ(nobody.Post("/v1/nodes", spec).status, 401);
  EXPECT_EQ(agent.Post("/v1/jobs", {{"name", "x"}, {"min_gpus", 1}}).status, 403);
  EXPECT_EQ(agent.Post("/v1/pools", {{"name", "x"}}).status, 403);
  EXPECT_EQ(agent.Get("/v1/jobs").status, 200);
  struct Bad {
    json body;
    int status;
  };
  for (const Bad& b : std::vector<Bad>{
           {{{"name", "n3"}, {"pool", "gpu"}, {"gpus", json::array()}, {"kind", "spot"}}, 400},
           {{{"name", "n3"}, {"pool", "gpu"}, {"gpus", {0, 0}}, {"kind", "spot"}}, 400},
           {{{"name", "n 3"}, {"pool", "gpu"}, {"gpus", {0}}, {"kind", "spot"}}, 400},
           {{{"name", "n3"}, {"pool", "gpu"}, {"gpus", {-1}}, {"kind", "spot"}}, 400},
           {{{"name", "n3"}, {"pool", "nope"}, {"gpus", {0}}, {"kind", "spot"}}, 404},
           {{{"name", "n3"}, {"pool", "gpu"}, {"gpus", {0}}}, 400},  // hard without an end
           {{{"name", "n3"}, {"pool", "gpu"}, {"gpus", {0}}, {"typo", 1}}, 400}}) {
    auto r = agent.Post("/v1/nodes", b.body);
    EXPECT_EQ(r.status, b.status) << b.body.dump() << " -> " << r.text;
  }
  EXPECT_EQ(admin_->Get("/v1/windows").body["windows"].size(), 0u) << "a refusal changed something";
  auto made = agent.Post("/v1/nodes", spec);
  ASSERT_EQ(made.status, 201) << made.text;
  EXPECT_EQ(agent.Post("/v1/nodes", spec).status, 200);  // the same node again
  EXPECT_EQ(agent.Post("/v1/nodes/n3/heartbeat", json::object()).status, 200);
  // An agent registers workers only into a job running on the node it names.
  auto job = admin_->Post("/v1/jobs", {{"name", "j"}, {"pool", "gpu"}, {"min_gpus", 2}});
  ASSERT_EQ(job.status, 201) << job.text;
  const std::string workers =
      "/v1/jobs/" + std::to_string(job.body["id"].get<int64_t>()) + "/workers";
  ASSERT_TRUE(Eventually([&] { return Job(job.body["id"])["state"] == "RUNNING"; }));
  EXPECT_EQ(agent.Post(workers, {{"name", "w"}}).status, 403);
  EXPECT_EQ(agent.Post(workers, {{"name", "w"}, {"node", "elsewhere"}}).status, 403);
  EXPECT_EQ(worker.Post(workers, {{"name", "w"}, {"node", "elsewhere"}}).status, 403);
  EXPECT_EQ(agent.Post(workers, {{"name", "w"}, {"node", "n3"}}).status, 201);
  EXPECT_EQ(worker.Post(workers, {{"name", "w"}}).status, 201);  // the worker token: as before
  EXPECT_EQ(worker.Post("/v1/nodes/n3/heartbeat", json::object()).status, 403);
  EXPECT_EQ(agent.Post("/v1/nodes/unknown/heartbeat", json::object()).status, 404);
  EXPECT_EQ(worker.Post("/v1/nodes/n3/close", json::object()).status, 403);
  EXPECT_EQ(agent.Post("/v1/nodes/n3/close", json::object()).status, 200);
  auto gone = agent.Post("/v1/nodes/n3/heartbeat", json::object());
  EXPECT_EQ(gone.status, 410) << gone.text;
  // Without an end or --spot the agent joins an admin window naming its
  // node; there is none for n4.
  RunResult r = RunProgram(STINT_AGENT_PATH, {"--coord", daemon_->url(), "--token-file",
                                              daemon_->agent_token_file(), "--pool", "gpu",
                                              "--gpus", "0", "--node", "n4"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no admin window names node n4"), std::string::npos) << r.output;
}

// --- launching ---

// A job of `gpus` GPUs in pool gpu whose workers run `script` with sh.
int64_t SubmitLaunch(HttpJson& admin, int gpus, const std::string& script,
                     const json& env = json::object(), double checkpoint_seconds = 0) {
  json spec = {{"name", "launched"},
               {"pool", "gpu"},
               {"min_gpus", gpus},
               {"checkpoint_seconds", checkpoint_seconds},
               {"restart_seconds", 0},
               {"launch",
                {{"command", {"/bin/sh", "-c", script}}, {"env", env}, {"gpus_per_worker", 1}}}};
  auto r = admin.Post("/v1/jobs", spec);
  EXPECT_EQ(r.status, 201) << r.text;
  return r.body.value("id", int64_t{0});
}

TEST_F(AgentTest, AJobRunsOnItsNodeWithTorchrunsEnvironmentAndCompletes) {
  Start();
  auto agent = Agent("n5", "2,3", {"--spot", "--addr", "127.0.0.1"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n5 registered: window ")) << agent->output();
  const std::string out = dir_.Sub("out");
  ASSERT_EQ(mkdir(out.c_str(), 0755), 0);
  const int64_t job =
      SubmitLaunch(*admin_, 2, "env > \"$OUT/env-$RANK\"; echo hello from rank $RANK", {{"OUT", out}});
  ASSERT_TRUE(Eventually([&] { return Job(job).value("state", "") == "DONE"; }, 30))
      << Job(job).dump() << agent->output();
  const json seg = Job(job)["segments"][0];
  EXPECT_EQ(seg["state"], "completed");
  ASSERT_EQ(seg["placement"].size(), 1u) << seg.dump();
  EXPECT_EQ(seg["placement"][0]["gpus"], json::array({2, 3}));
  const int64_t sid = seg["id"];
  for (int rank = 0; rank < 2; rank++) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const std::string env = ReadWholeFile(out + "/env-" + std::to_string(rank));
    EXPECT_NE(env.find("\nCUDA_VISIBLE_DEVICES=" + std::to_string(2 + rank) + "\n"),
              std::string::npos)
        << env;
    EXPECT_NE(env.find("\nRANK=" + std::to_string(rank) + "\n"), std::string::npos) << env;
    EXPECT_NE(env.find("\nLOCAL_RANK=" + std::to_string(rank) + "\n"), std::string::npos) << env;
    EXPECT_NE(env.find("\nWORLD_SIZE=2\n"), std::string::npos) << env;
    EXPECT_NE(env.find("\nLOCAL_WORLD_SIZE=2\n"), std::string::npos) << env;
    EXPECT_NE(env.find("\nMASTER_ADDR=127.0.0.1\n"), std::string::npos) << env;
    EXPECT_NE(env.find("\nMASTER_PORT=" + std::to_string(seg["master_port"].get<int>()) + "\n"),
              std::string::npos)
        << env;
    EXPECT_GE(seg["master_port"].get<int>(), 29500);  // stintd's default --master-ports
    EXPECT_LE(seg["master_port"].get<int>(), 29999);
    EXPECT_NE(env.find("\nSTINT_COORD_URL=" + daemon_->url() + "\n"), std::string::npos) << env;
    EXPECT_NE(env.find("\nSTINT_JOB_ID=" + std::to_string(job) + "\n"), std::string::npos) << env;
    const std::string log = ReadWholeFile(dir_.Sub("agent-n5") + "/job-" + std::to_string(job) +
                                     "/segment-" + std::to_string(sid) + "/rank-" +
                                     std::to_string(rank) + ".log");
    EXPECT_NE(log.find("hello from rank " + std::to_string(rank)), std::string::npos) << log;
  }
}

TEST_F(AgentTest, ANoticeIsForwardedAsTheSignalAndExit75RequeuesTheJob) {
  Start();
  // The notice goes out at close + lead - (checkpoint 11 s + safety 1 s): 2 s
  // after the close, 12 s before the deadline (room for a loaded machine).
  auto agent = Agent("n6", "0", {"--spot", "--notice-lead", "14"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n6 registered: window ")) << agent->output();
  const int64_t window = RegisteredWindow(agent->output());
  const std::string out = dir_.Sub("started");
  const int64_t job = SubmitLaunch(
      *admin_, 1,
      "trap 'echo got TERM; exit 75' TERM; touch \"$OUT\"; while :; do sleep 0.05; done",
      {{"OUT", out}}, /*checkpoint_seconds=*/11);
  ASSERT_TRUE(Eventually([&] { return access(out.c_str(), F_OK) == 0; }, 30))
      << Job(job).dump() << agent->output();
  ASSERT_EQ(admin_->Post("/v1/windows/" + std::to_string(window) + "/close", json::object()).status,
            200);
  // The notice reaches the worker as SIGTERM; it exits 75 and the job waits
  // in the queue again, before the deadline (a segment not ended by then is
  // lost, not ended).
  ASSERT_TRUE(Eventually([&] { return Job(job)["segments"][0].value("state", "") == "ended"; }, 25))
      << Job(job).dump() << agent->output();
  EXPECT_EQ(Job(job)["state"], "PENDING");
  const int64_t sid = Job(job)["segments"][0]["id"];
  const std::string log = ReadWholeFile(dir_.Sub("agent-n6") + "/job-" + std::to_string(job) +
                                   "/segment-" + std::to_string(sid) + "/rank-0.log");
  EXPECT_NE(log.find("got TERM"), std::string::npos) << log;
  // Printed (and flushed) before the signal was sent, so already in the pipe.
  EXPECT_TRUE(agent->WaitForLine("stint-agent: segment " + std::to_string(sid) +
                                 ": notice (revoked), signal"))
      << agent->output();
}

TEST_F(AgentTest, Exit76FailsTheJobWithTheWorkersLastMessage) {
  Start();
  auto agent = Agent("n7", "0", {"--spot"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n7 registered: window ")) << agent->output();
  const int64_t job = SubmitLaunch(*admin_, 1, "echo loading; echo 'bad config: lr < 0'; exit 76");
  ASSERT_TRUE(Eventually([&] { return Job(job).value("state", "") == "FAILED"; }, 30))
      << Job(job).dump() << agent->output();
  EXPECT_NE(Job(job)["message"].get<std::string>().find("bad config: lr < 0"), std::string::npos)
      << Job(job).dump();
}

// stintctl submits the launch spec (everything after --, env, signal) and
// lists the node; the agent runs the command.
TEST_F(AgentTest, StintctlSubmitsACommandAndListsNodes) {
  Start();
  auto agent = Agent("n9", "0", {"--spot"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n9 registered: window ")) << agent->output();
  auto ctl = [&](std::vector<std::string> args) {
    return RunProgram(STINTCTL_PATH, CtlArgs(args));
  };
  RunResult nodes = ctl({"nodes"});
  EXPECT_EQ(nodes.exit_code, 0) << nodes.output;
  EXPECT_NE(nodes.output.find("n9"), std::string::npos) << nodes.output;
  EXPECT_NE(nodes.output.find("open"), std::string::npos) << nodes.output;
  const std::string out = dir_.Sub("said");
  RunResult submitted =
      ctl({"jobs", "submit", "--name", "said", "--gpus", "1", "--pool", "gpu", "--signal",
           "SIGUSR1", "--env", "WORD=hello world", "--env", "OUT=" + out, "--", "/bin/sh", "-c",
           "echo \"$WORD\" > \"$OUT\""});  // --env right before the command's `--`
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  const int64_t job = std::stoll(submitted.output.substr(submitted.output.find("job ") + 4));
  const json launch = Job(job)["launch"];
  EXPECT_EQ(launch["command"], json::array({"/bin/sh", "-c", "echo \"$WORD\" > \"$OUT\""}));
  EXPECT_EQ(launch["env"]["WORD"], "hello world");
  EXPECT_EQ(launch["signal"], "USR1");
  ASSERT_TRUE(Eventually([&] { return Job(job).value("state", "") == "DONE"; }, 30))
      << Job(job).dump() << agent->output();
  EXPECT_EQ(ReadWholeFile(out), "hello world\n");
  RunResult bad = ctl({"jobs", "submit", "--name", "x", "--gpus", "1", "--env", "A=1"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
}

// The workers' output reaches stintctl through their agent's heartbeats:
// `logs --follow` prints it as it comes (each line with its rank, bytes that
// are not UTF-8 replaced) and returns once the job ended; `logs` prints it
// all again afterwards.
TEST_F(AgentTest, StintctlLogsFollowsTheWorkersOutputUntilTheJobEnds) {
  Start();
  auto agent = Agent("n14", "0,1", {"--spot"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n14 registered: window ")) << agent->output();
  const std::string go = dir_.Sub("go");
  const int64_t job =
      SubmitLaunch(*admin_, 2,
                   "echo \"start $RANK\"; while [ ! -e \"$GO\" ]; do sleep 0.05; done; "
                   "printf 'caf\\303\\251 \\377 %s\\n' $RANK; printf 'end %s' $RANK",
                   {{"GO", go}});
  ChildProcess follow(STINTCTL_PATH, CtlArgs({"logs", std::to_string(job), "--follow"}));
  // Both ranks' first lines arrive while the job still runs.
  ASSERT_TRUE(follow.WaitForLine("[rank 0] start 0", 30)) << follow.output() << agent->output();
  EXPECT_EQ(Job(job)["state"], "RUNNING");
  // stintctl nodes names the job running there.
  RunResult nodes = RunProgram(STINTCTL_PATH, CtlArgs({"nodes"}));
  EXPECT_EQ(nodes.exit_code, 0) << nodes.output;
  EXPECT_NE(nodes.output.find("job " + std::to_string(job) + " launched (segment "),
            std::string::npos)
      << nodes.output;
  EXPECT_NE(nodes.output.find("GPUs 0,1)"), std::string::npos) << nodes.output;
  std::ofstream(go) << "go\n";
  bool killed = false;
  const int status = follow.WaitAtMost(60, &killed);
  ASSERT_TRUE(!killed && WIFEXITED(status) && WEXITSTATUS(status) == 0) << follow.output();
  EXPECT_EQ(Job(job)["state"], "DONE");
  for (const char* line :
       {"[rank 1] start 1", "[rank 0] caf\u00e9 \ufffd 0", "[rank 1] caf\u00e9 \ufffd 1",
        "[rank 0] end 0", "[rank 1] end 1"}) {
    EXPECT_NE(follow.output().find(std::string(line) + "\n"), std::string::npos) << line << "\n"
                                                                    << follow.output();
  }
  RunResult again = RunProgram(STINTCTL_PATH, CtlArgs({"logs", std::to_string(job)}));
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("[rank 1] end 1\n"), std::string::npos) << again.output;
  EXPECT_EQ(again.output.find("start 0"), again.output.rfind("start 0")) << "printed twice:\n"
                                                                         << again.output;
  RunResult unknown = RunProgram(STINTCTL_PATH, CtlArgs({"logs", "999"}));
  EXPECT_EQ(unknown.exit_code, 1) << unknown.output;
}

// The workers' output survives a restart of stintd: `logs` prints what it
// had, and a `logs --follow` that ran across the restart goes on where it
// was (nothing twice, nothing missing) until the job ends.
TEST_F(AgentTest, TheWorkersOutputSurvivesAStintdRestartAndFollowGoesOn) {
  Start();
  auto agent = Agent("n15", "0", {"--spot"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n15 registered: window ")) << agent->output();
  const std::string go = dir_.Sub("go");
  const int64_t job = SubmitLaunch(
      *admin_, 1,
      "echo \"before $RANK\"; while [ ! -e \"$GO\" ]; do sleep 0.05; done; echo \"after $RANK\"",
      {{"GO", go}});
  ChildProcess follow(STINTCTL_PATH, CtlArgs({"logs", std::to_string(job), "--follow"}));
  ASSERT_TRUE(follow.WaitForLine("[rank 0] before 0", 60)) << follow.output() << agent->output();

  const int stopped = daemon_->Kill(SIGTERM);
  ASSERT_TRUE(WIFEXITED(stopped) && WEXITSTATUS(stopped) == 0) << daemon_->output();
  ASSERT_TRUE(daemon_->Start()) << daemon_->output();  // the same port, database and logs
  admin_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kAdminToken);
  RunResult held = RunProgram(STINTCTL_PATH, CtlArgs({"logs", std::to_string(job)}));
  EXPECT_EQ(held.exit_code, 0) << held.output;
  EXPECT_NE(held.output.find("[rank 0] before 0\n"), std::string::npos) << held.output;

  std::ofstream(go) << "go\n";
  bool killed = false;
  const int status = follow.WaitAtMost(120, &killed);
  ASSERT_TRUE(!killed && WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << follow.output() << agent->output();
  EXPECT_EQ(Job(job)["state"], "DONE");
  const std::string& out = follow.output();
  EXPECT_NE(out.find("[rank 0] after 0\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("before 0"), out.rfind("before 0")) << "printed twice:\n" << out;
}

// Kept output is bounded per job (the newest 4 MiB in memory and after a
// restart; at most twice that on disk, in two rotated files) and the output
// of a job that ended goes once it is older than --log-retention-hours,
// while a running job's stays.
TEST_F(AgentTest, KeptOutputIsBoundedPerJobAndAnEndedJobsIsPruned) {
  Start();
  auto agent = Agent("n16", "0,1", {"--spot"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n16 registered: window ")) << agent->output();
  // 14 MB of numbered lines, then a last line; it ends when told (the
  // agent uploads 256 KiB a beat while it runs).
  const std::string go_big = dir_.Sub("go-big");
  const int64_t big = SubmitLaunch(
      *admin_, 1,
      "seq -f '%09g xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' 0 199999; "
      "echo LAST-LINE; while [ ! -e \"$GO\" ]; do sleep 0.05; done",
      {{"GO", go_big}});
  const std::string go = dir_.Sub("go");
  const int64_t running = SubmitLaunch(
      *admin_, 1, "echo still here; while [ ! -e \"$GO\" ]; do sleep 0.05; done", {{"GO", go}});
  auto reader = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kWorkerToken);
  auto logs = [&](int64_t job) { return reader->Get("/v1/jobs/" + std::to_string(job) + "/logs"); };
  auto text = [](const HttpJson::Response& r) {
    std::string all;
    for (const json& c : r.body.value("chunks", json::array())) all += c.value("text", "");
    return all;
  };
  const std::string last_lines = "000199999 " + std::string(61, 'x') + "\nLAST-LINE\n";
  auto ends_with_last = [&](const std::string& t) {
    return t.size() >= last_lines.size() && t.substr(t.size() - last_lines.size()) == last_lines;
  };
  ASSERT_TRUE(Eventually([&] { return ends_with_last(text(logs(big))); }, 300))
      << Job(big).dump() << agent->output();
  ASSERT_TRUE(Eventually([&] { return text(logs(running)) == "still here\n"; }, 60))
      << logs(running).text;

  auto check_big = [&](const char* when) {
    const HttpJson::Response r = logs(big);
    ASSERT_EQ(r.status, 200) << when << ": " << r.text.substr(0, 200);
    const std::string t = text(r);
    EXPECT_LE(t.size(), 4u << 20) << when;
    EXPECT_GT(t.size(), 3u << 20) << when;
    EXPECT_TRUE(r.body.value("dropped", false)) << when;
    EXPECT_TRUE(ends_with_last(t)) << when << ": the newest output is kept";
  };
  check_big("before the restart");
  const std::string logs_dir = daemon_->db_path() + ".logs";
  auto disk_bytes = [&](int64_t job) {
    uint64_t total = 0;
    for (const std::string suffix : {".log", ".log.1"}) {
      struct stat st;
      if (stat((logs_dir + "/job-" + std::to_string(job) + suffix).c_str(), &st) == 0)
        total += static_cast<uint64_t>(st.st_size);
    }
    return total;
  };
  EXPECT_GT(disk_bytes(big), 4u << 20);
  // Two files of at most 4 MiB each (a record head is some 40 bytes a chunk).
  EXPECT_LE(disk_bytes(big), 8u << 20);

  int stopped = daemon_->Kill(SIGTERM);
  ASSERT_TRUE(WIFEXITED(stopped) && WEXITSTATUS(stopped) == 0) << daemon_->output();
  ASSERT_TRUE(daemon_->Start()) << daemon_->output();
  reader = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kWorkerToken);
  check_big("after a restart");
  EXPECT_EQ(text(logs(running)), "still here\n");

  // With no retention the ended job's output goes at start; the running
  // job's stays.
  std::ofstream(go_big) << "go\n";
  ASSERT_TRUE(Eventually([&] { return Job(big).value("state", "") == "DONE"; }, 60))
      << Job(big).dump() << agent->output();
  stopped = daemon_->Kill(SIGTERM);
  ASSERT_TRUE(WIFEXITED(stopped) && WEXITSTATUS(stopped) == 0) << daemon_->output();
  std::vector<std::string> args = DaemonArgs();
  args.insert(args.end(), {"--log-retention-hours", "0"});
  daemon_ = std::make_unique<StintdProcess>(STINTD_PATH, dir_.path(), args);
  ASSERT_TRUE(daemon_->Start()) << daemon_->output();
  HttpJson after_prune(daemon_->port(), StintdProcess::kWorkerToken);
  const HttpJson::Response gone = after_prune.Get("/v1/jobs/" + std::to_string(big) + "/logs");
  ASSERT_EQ(gone.status, 200) << gone.text;
  EXPECT_TRUE(gone.body["chunks"].empty()) << gone.text.substr(0, 200);
  EXPECT_EQ(disk_bytes(big), 0u);
  const HttpJson::Response kept = after_prune.Get("/v1/jobs/" + std::to_string(running) + "/logs");
  EXPECT_EQ(text(kept), "still here\n") << kept.text;
  std::ofstream(go) << "go\n";
}

// A launched worker holds its own credential and no shared token: its
// CoordinatorSession adopts the agent's registration, its KV and fencing
// calls work for its job and are refused for another one.
TEST_F(AgentTest, LaunchedWorkersActWithTheirOwnCredentialOnly) {
  Start();
  // Another job (pending in a pool with no GPUs) the workers must not reach.
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "elsewhere"}}).status, 201);
  auto other = admin_->Post("/v1/jobs", {{"name", "other"}, {"pool", "elsewhere"}, {"min_gpus", 1}});
  ASSERT_EQ(other.status, 201) << other.text;
  auto agent = Agent("n10", "0,1", {"--spot"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n10 registered: window ")) << agent->output();
  json spec = {{"name", "client"},
               {"pool", "gpu"},
               {"min_gpus", 2},
               {"launch",
                {{"command", {STINT_COORD_WORKER}},
                 {"env", {{"OTHER_JOB", std::to_string(other.body["id"].get<int64_t>())}}}}}};
  auto r = admin_->Post("/v1/jobs", spec);
  ASSERT_EQ(r.status, 201) << r.text;
  const int64_t job = r.body["id"];
  ASSERT_TRUE(Eventually([&] { return Job(job).value("state", "") == "DONE"; }, 30))
      << Job(job).dump() << agent->output();
  const int64_t sid = Job(job)["segments"][0]["id"];
  for (int rank = 0; rank < 2; rank++) {
    const std::string log = ReadWholeFile(dir_.Sub("agent-n10") + "/job-" + std::to_string(job) +
                                     "/segment-" + std::to_string(sid) + "/rank-" +
                                     std::to_string(rank) + ".log");
    EXPECT_NE(log.find("coord_worker: ok"), std::string::npos) << log;
    // "ok" means its KV put succeeded; the job is DONE, so its KV is gone.
    auto kv = admin_->Get("/v1/jobs/" + std::to_string(job) + "/kv/hello-" + std::to_string(rank));
    EXPECT_EQ(kv.status, 404) << kv.text;
  }
}

// A process that is gone or a zombie no one reaped yet.
bool ProcessGone(pid_t pid) {
  if (kill(pid, 0) != 0) return true;
  const std::string stat = ReadWholeFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  return close == std::string::npos || (close + 2 < stat.size() && stat[close + 2] == 'Z');
}

// SIGTERM to the agent drains: its window closes with the notice lead, the
// workers get the notice as their signal, checkpoint (exit 75), the job is
// queued again, and only then the agent exits.
TEST_F(AgentTest, SigtermDrainsTheNodeThroughTheNotice) {
  Start();
  auto agent = Agent("n12", "0", {"--spot", "--notice-lead", "14"});  // notice 12 s before the deadline
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n12 registered: window ")) << agent->output();
  const std::string out = dir_.Sub("drain-started");
  const int64_t job = SubmitLaunch(
      *admin_, 1,
      "trap 'echo checkpointed; exit 75' TERM; touch \"$OUT\"; while :; do sleep 0.05; done",
      {{"OUT", out}}, /*checkpoint_seconds=*/11);
  ASSERT_TRUE(Eventually([&] { return access(out.c_str(), F_OK) == 0; }, 30))
      << Job(job).dump() << agent->output();
  ASSERT_EQ(kill(agent->pid(), SIGTERM), 0);
  bool killed = false;
  const int status = agent->WaitAtMost(30, &killed);
  ASSERT_FALSE(killed) << agent->output();
  EXPECT_EQ(WEXITSTATUS(status), 0) << agent->output();
  EXPECT_NE(agent->output().find("workers done, exit 75"), std::string::npos) << agent->output();
  const json j = Job(job);
  EXPECT_EQ(j["state"], "PENDING") << j.dump();
  EXPECT_EQ(j["segments"][0]["state"], "ended") << j.dump();
}

// A worker that ignores the notice's signal is SIGKILLed at the deadline.
TEST_F(AgentTest, AWorkerIgnoringTheNoticeIsKilledAtTheDeadline) {
  Start();
  auto agent = Agent("n13", "0", {"--spot", "--notice-lead", "3"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n13 registered: window ")) << agent->output();
  const int64_t window = RegisteredWindow(agent->output());
  const std::string out = dir_.Sub("stubborn");
  const int64_t job = SubmitLaunch(
      *admin_, 1, "trap '' TERM; echo $$ > \"$OUT.tmp\"; mv \"$OUT.tmp\" \"$OUT\"; while :; do sleep 0.05; done",
      {{"OUT", out}}, /*checkpoint_seconds=*/1);
  pid_t pid = 0;
  ASSERT_TRUE(Eventually([&] {
    const std::string text = ReadWholeFile(out);
    if (text.empty()) return false;
    pid = static_cast<pid_t>(std::stol(text));
    return true;
  }, 30)) << Job(job).dump() << agent->output();
  ASSERT_EQ(admin_->Post("/v1/windows/" + std::to_string(window) + "/close", json::object()).status,
            200);
  const int64_t closed_ms = WallNowMs();
  ASSERT_TRUE(Eventually([&] { return ProcessGone(pid); }, 20)) << agent->output();
  // Not before the deadline (close + 3 s lead), which the signal alone did not reach.
  EXPECT_GE(WallNowMs() - closed_ms, 2500) << agent->output();
  ASSERT_TRUE(Eventually([&] { return Job(job)["segments"][0].value("state", "") == "lost"; }, 20))
      << Job(job).dump();
}

// An agent restarted after a kill -9 finds its window but does not start
// the segment a second time: it reports it lost (its workers died with the
// old agent), the job is queued again and runs anew on the node.
TEST_F(AgentTest, ARestartedAgentDoesNotLaunchASegmentTwice) {
  Start();
  const std::string out = dir_.Sub("starts");
  auto agent = Agent("n14", "0", {"--spot"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n14 registered: window ")) << agent->output();
  const int64_t job = SubmitLaunch(
      *admin_, 1, "echo \"$STINT_SEGMENT_ID\" >> \"$OUT\"; while :; do sleep 0.05; done",
      {{"OUT", out}});
  ASSERT_TRUE(Eventually([&] { return !ReadWholeFile(out).empty(); }, 30))
      << Job(job).dump() << agent->output();
  const int64_t first = Job(job)["segments"][0]["id"];
  ASSERT_EQ(kill(agent->pid(), SIGKILL), 0);
  agent->Wait();
  auto again = Agent("n14", "0", {"--spot"});
  ASSERT_TRUE(again->WaitForLine("stint-agent: node n14 registered: window ")) << again->output();
  ASSERT_TRUE(again->WaitForLine("stint-agent: segment " + std::to_string(first) +
                                 " ran under an earlier agent"))
      << again->output();
  // The old segment is lost; a new one starts, once.
  ASSERT_TRUE(Eventually([&] {
    const json j = Job(job);
    return j["segments"].size() == 2 && j["segments"][0]["state"] == "lost" &&
           ReadWholeFile(out).find(std::to_string(j["segments"][1]["id"].get<int64_t>())) !=
               std::string::npos;
  }, 30)) << Job(job).dump() << ReadWholeFile(out);
  EXPECT_EQ(ReadWholeFile(out), std::to_string(first) + "\n" +
                               std::to_string(Job(job)["segments"][1]["id"].get<int64_t>()) + "\n");
}

// A command that keeps crashing is started again (in its segment: the
// agent relaunches a crashed worker) until the crash-loop guard
// (--crash-limit 2) fails the job with its reason.
TEST_F(AgentTest, ACrashLoopEndsFailedWithItsReason) {
  std::vector<std::string> args = DaemonArgs();
  args.insert(args.end(), {"--crash-limit", "2", "--crash-window-seconds", "600"});
  Start(args);
  auto agent = Agent("n11", "0", {"--spot"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n11 registered: window ")) << agent->output();
  const int64_t job = SubmitLaunch(*admin_, 1, "echo 'segfault in step 3'; exit 3");
  ASSERT_TRUE(Eventually([&] { return Job(job).value("state", "") == "FAILED"; }, 30))
      << Job(job).dump() << agent->output();
  const json j = Job(job);
  EXPECT_EQ(j["segments"].size(), 1u) << j.dump();
  EXPECT_EQ(j["segments"][0]["state"], "lost") << j.dump();
  EXPECT_EQ(j["recent_crashes"], 2) << j.dump();
  const std::string message = j["message"];
  EXPECT_NE(message.find("crash loop: 2 crashes"), std::string::npos) << message;
  EXPECT_NE(message.find("segfault in step 3"), std::string::npos) << message;
  RunResult queue = RunProgram(STINTCTL_PATH, {"--url", daemon_->url(), "--token",
                                               StintdProcess::kAdminToken, "jobs", "list"});
  EXPECT_NE(queue.output.find("crash loop"), std::string::npos) << queue.output;
}


TEST_F(AgentTest, WorkersDieWithTheirAgentAndTheSegmentIsLost) {
  Start(DaemonArgs("5"));
  auto agent = Agent("n8", "0,1", {"--spot"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n8 registered: window ")) << agent->output();
  const std::string out = dir_.Sub("pids");
  ASSERT_EQ(mkdir(out.c_str(), 0755), 0);
  const int64_t job =
      SubmitLaunch(*admin_, 2, "echo $$ > \"$OUT/$RANK.tmp\"; mv \"$OUT/$RANK.tmp\" \"$OUT/$RANK\"; exec sleep 1000",
                   {{"OUT", out}});
  std::vector<pid_t> pids;
  ASSERT_TRUE(Eventually(
      [&] {
        pids.clear();
        for (int rank = 0; rank < 2; rank++) {
          const std::string text = ReadWholeFile(out + "/" + std::to_string(rank));
          if (text.empty()) return false;
          pids.push_back(static_cast<pid_t>(std::stol(text)));
        }
        return true;
      },
      30))
      << Job(job).dump() << agent->output();
  for (pid_t pid : pids) ASSERT_FALSE(ProcessGone(pid)) << pid;
  ASSERT_EQ(kill(agent->pid(), SIGKILL), 0);
  agent->Wait();
  for (pid_t pid : pids) {
    EXPECT_TRUE(Eventually([&] { return ProcessGone(pid); }, 10)) << "worker " << pid << " outlived its agent";
  }
  // The node falls silent: its window closes and the segment is lost.
  ASSERT_TRUE(Eventually([&] { return Job(job)["segments"][0].value("state", "") == "lost"; }, 20))
      << Job(job).dump();
  EXPECT_EQ(Job(job)["state"], "PENDING");
}

// --- output at exit ---

// The text of every chunk stintd holds for `job`, in order.
std::string HeldOutput(HttpJson& reader, int64_t job) {
  const HttpJson::Response r = reader.Get("/v1/jobs/" + std::to_string(job) + "/logs");
  EXPECT_EQ(r.status, 200) << r.text.substr(0, 200);
  std::string all;
  for (const json& c : r.body.value("chunks", json::array())) all += c.value("text", "");
  return all;
}

// What `seq 1 N` prints.
std::string Seq(int n) {
  std::string out;
  for (int i = 1; i <= n; i++) out += std::to_string(i) + "\n";
  return out;
}

// A worker that prints 3.4 MB and exits 0 at once: the agent holds the exit
// back until its output is up (256 KiB a worker and beat), so once the job
// is DONE stintd has every byte. A second beat 2 s after the first would
// have found only part of it without the hold.
TEST_F(AgentTest, AJobThatEndsHasAllItsOutputAtStintd) {
  Start();
  auto agent = Agent("n20", "0", {"--spot", "--heartbeat-seconds", "2"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n20 registered: window ")) << agent->output();
  const int64_t job = SubmitLaunch(*admin_, 1, "seq 1 500000");
  ASSERT_TRUE(Eventually([&] { return Job(job).value("state", "") == "DONE"; }, 60))
      << Job(job).dump() << agent->output();
  HttpJson reader(daemon_->port(), StintdProcess::kWorkerToken);
  const std::string held = HeldOutput(reader, job);
  const std::string expected = Seq(500000);
  ASSERT_GT(expected.size(), 3u << 20);
  EXPECT_EQ(held.size(), expected.size());
  EXPECT_TRUE(held == expected) << "held output differs; its last bytes: "
                                << held.substr(held.size() > 64 ? held.size() - 64 : 0);
  RunResult printed = RunProgram(STINTCTL_PATH, CtlArgs({"logs", std::to_string(job)}));
  ASSERT_EQ(printed.exit_code, 0) << printed.output.substr(0, 400);
  EXPECT_NE(printed.output.find("[rank 0] 500000\n"), std::string::npos)
      << printed.output.substr(printed.output.size() > 400 ? printed.output.size() - 400 : 0);
}

// 15 MB and exit: stintd keeps a job's newest 4 MiB, and has them, up to the
// last line, when the job is DONE; the agent skipped what stintd would drop
// (more than 8 MiB behind) instead of holding the exit for it.
TEST_F(AgentTest, AJobThatPrintsMoreThanTheCapEndsWithItsNewestOutputAtStintd) {
  Start();
  auto agent = Agent("n21", "0", {"--spot", "--heartbeat-seconds", "2"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n21 registered: window ")) << agent->output();
  const int64_t job = SubmitLaunch(*admin_, 1, "seq 1 2000000");
  ASSERT_TRUE(Eventually([&] { return Job(job).value("state", "") == "DONE"; }, 120))
      << Job(job).dump() << agent->output();
  HttpJson reader(daemon_->port(), StintdProcess::kWorkerToken);
  const std::string held = HeldOutput(reader, job);
  const std::string expected = Seq(2000000);
  EXPECT_LE(held.size(), 4u << 20);
  EXPECT_GT(held.size(), 3u << 20);
  ASSERT_LE(held.size(), expected.size());
  EXPECT_TRUE(expected.compare(expected.size() - held.size(), held.size(), held) == 0)
      << "not the newest output, whole; its last bytes: "
      << held.substr(held.size() > 64 ? held.size() - 64 : 0);
  EXPECT_TRUE(agent->WaitForLine(
      "stint-agent: " + dir_.Sub("agent-n21") + "/job-" + std::to_string(job) + "/segment-", 10))
      << agent->output();
}

// --- restart_crashed ---

// `stintctl jobs submit --no-restart-crashed`: a crash of one worker ends the
// whole segment (the other worker is killed; the segment is lost, the job
// queued again) instead of that worker being started again in it.
TEST_F(AgentTest, ACrashEndsTheSegmentWhenRestartCrashedIsFalse) {
  Start();
  auto agent = Agent("n22", "0,1", {"--spot"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n22 registered: window ")) << agent->output();
  const std::string out = dir_.Sub("fixed");
  ASSERT_EQ(mkdir(out.c_str(), 0755), 0);
  // Rank 0 crashes once (the first segment) after rank 1 is up; then all
  // wait for "go" and exit 0.
  const std::string script =
      "echo $$ > \"$OUT/pid-$STINT_SEGMENT_ID-$RANK\"; "
      "if [ \"$RANK\" = 0 ] && mkdir \"$OUT/crashed\" 2>/dev/null; then "
      "  while [ ! -e \"$OUT/pid-$STINT_SEGMENT_ID-1\" ]; do sleep 0.05; done; "
      "  echo boom in rank 0; exit 3; "
      "fi; "
      "while [ ! -e \"$OUT/go\" ]; do sleep 0.05; done";
  RunResult submitted = RunProgram(
      STINTCTL_PATH,
      CtlArgs({"jobs", "submit", "--name", "fixed", "--gpus", "2", "--pool", "gpu", "--env",
               "OUT=" + out, "--no-restart-crashed", "--", "/bin/sh", "-c", script}));
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  const int64_t job = std::stoll(submitted.output.substr(submitted.output.find("job ") + 4));
  EXPECT_EQ(Job(job)["launch"]["restart_crashed"], false) << Job(job).dump();
  // The first segment is lost for the crash, and the job runs again.
  ASSERT_TRUE(Eventually([&] { return Job(job)["segments"].size() >= 2; }, 60))
      << Job(job).dump() << agent->output();
  const json first = Job(job)["segments"][0];
  EXPECT_EQ(first["state"], "lost") << first.dump();
  EXPECT_EQ(Job(job)["recent_crashes"], 1) << Job(job).dump();
  // Rank 0's crash is the segment's exit, not the kill of rank 1 it caused.
  const std::string sid = std::to_string(first["id"].get<int64_t>());
  EXPECT_TRUE(agent->WaitForLine(
      "stint-agent: segment " + sid + " rank 0 exited 3 (a crash: the segment ends", 10))
      << agent->output();
  EXPECT_TRUE(agent->WaitForLine("stint-agent: segment " + sid + ": workers done, exit 3", 10))
      << agent->output();
  // Rank 1 of the first segment did not run on.
  const std::string pid1 =
      ReadWholeFile(out + "/pid-" + std::to_string(first["id"].get<int64_t>()) + "-1");
  ASSERT_FALSE(pid1.empty());
  EXPECT_TRUE(Eventually([&] { return ProcessGone(static_cast<pid_t>(std::stol(pid1))); }, 30))
      << "rank 1 outlived its segment";
  std::ofstream(out + "/go").put('\n');
  ASSERT_TRUE(Eventually([&] { return Job(job).value("state", "") == "DONE"; }, 60))
      << Job(job).dump() << agent->output();
  EXPECT_EQ(Job(job)["segments"].size(), 2u) << Job(job).dump();
  EXPECT_EQ(agent->output().find("started again"), std::string::npos) << agent->output();

  // Without the flag the launch says nothing (crashed workers start again),
  // and a value that is not a boolean is refused.
  json spec = {{"name", "bad"},
               {"pool", "gpu"},
               {"min_gpus", 1},
               {"launch", {{"command", {"/bin/true"}}, {"restart_crashed", "no"}}}};
  auto bad = admin_->Post("/v1/jobs", spec);
  EXPECT_EQ(bad.status, 400) << bad.text;
  EXPECT_NE(bad.text.find("launch.restart_crashed"), std::string::npos) << bad.text;
  RunResult without_command =
      RunProgram(STINTCTL_PATH,
                 CtlArgs({"jobs", "submit", "--name", "x", "--gpus", "1", "--no-restart-crashed"}));
  EXPECT_EQ(without_command.exit_code, 2) << without_command.output;
}

// --- the KV and agent tokens ---

// The shared agent token reaches no job's KV nor fencing check, not even of
// a job running on its node: the workers it launched use their own secret
// there (and they still can), and so may the job's own registration token.
TEST_F(AgentTest, AnAgentTokenCannotUseAJobsKv) {
  Start();
  auto agent = Agent("n23", "0", {"--spot"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n23 registered: window ")) << agent->output();
  const std::string out = dir_.Sub("kv");
  ASSERT_EQ(mkdir(out.c_str(), 0755), 0);
  // The launched worker writes the KV with its secret (coord_worker:
  // "hello-0"), then waits.
  const int64_t job =
      SubmitLaunch(*admin_, 1,
                   "\"$WORKER\" > \"$OUT/said.tmp\" 2>&1; mv \"$OUT/said.tmp\" \"$OUT/said\"; "
                   "while [ ! -e \"$OUT/go\" ]; do sleep 0.05; done",
                   {{"OUT", out}, {"WORKER", STINT_COORD_WORKER}});
  ASSERT_TRUE(Eventually([&] { return !ReadWholeFile(out + "/said").empty(); }, 30))
      << Job(job).dump() << agent->output();
  EXPECT_NE(ReadWholeFile(out + "/said").find("coord_worker: ok"), std::string::npos)
      << ReadWholeFile(out + "/said");
  ASSERT_EQ(Job(job)["state"], "RUNNING") << Job(job).dump();
  const std::string kv = "/v1/jobs/" + std::to_string(job) + "/kv/";
  HttpJson shared(daemon_->port(), StintdProcess::kAgentToken);
  auto put = shared.Put(kv + "k", {{"value", "v"}});
  EXPECT_EQ(put.status, 403) << put.text;
  EXPECT_NE(put.text.find("agent token"), std::string::npos) << put.text;
  EXPECT_EQ(shared.Get(kv + "hello-0").status, 403);
  EXPECT_EQ(shared.Delete(kv + "hello-0").status, 403);
  EXPECT_EQ(shared.Post("/v1/fencing/check", {{"job_id", job}, {"fencing_token", 1}}).status, 403);
  // Nothing changed: the worker's entry is there, the agent's is not.
  HttpJson worker(daemon_->port(), Job(job)["registration_token"].get<std::string>());
  auto mine = worker.Get(kv + "hello-0");
  EXPECT_EQ(mine.status, 200) << mine.text;
  EXPECT_EQ(mine.body.value("value", ""), "hi") << mine.text;
  EXPECT_EQ(worker.Get(kv + "k").status, 404);
  EXPECT_EQ(worker.Put(kv + "k", {{"value", "v"}}).status, 200);
  // The agent's own reads still work.
  EXPECT_EQ(shared.Get("/v1/jobs/" + std::to_string(job)).status, 200);
  std::ofstream(out + "/go").put('\n');
  ASSERT_TRUE(Eventually([&] { return Job(job).value("state", "") == "DONE"; }, 30))
      << Job(job).dump() << agent->output();
}

// --- long-polled heartbeats ---

// An agent beating every 60 s starts a segment granted while its heartbeat
// waits at stintd: the poll answers the new assignment at once. stintd's
// node TTL and lease (600 s) let a poll wait the whole 60 s, so without the
// early answer the worker could not start before the next beat, 60 s after
// the first; the deadline here is far below that.
TEST_F(AgentTest, ALongPollingAgentStartsAGrantedSegmentBeforeItsNextBeat) {
  Start({"--tick-seconds", "0.05", "--safety-seconds", "1", "--min-run-seconds", "0",
         "--lease-ttl-seconds", "600", "--start-grace-seconds", "20", "--node-ttl-seconds", "600"});
  auto agent = Agent("n24", "0", {"--spot", "--heartbeat-seconds", "60"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n24 registered: window ")) << agent->output();
  // Its first beat is in: from now on it waits at stintd.
  ASSERT_TRUE(Eventually(
      [&] { return NodeInfo("n24").value("last_heartbeat_ms", json()).is_number(); }, 30))
      << NodeInfo("n24").dump() << agent->output();
  const json first_beat = NodeInfo("n24")["last_heartbeat_ms"];
  const std::string out = dir_.Sub("prompt");
  ASSERT_EQ(mkdir(out.c_str(), 0755), 0);
  const int64_t job = SubmitLaunch(
      *admin_, 1, "touch \"$OUT/started\"; while [ ! -e \"$OUT/go\" ]; do sleep 0.05; done",
      {{"OUT", out}});
  struct stat st;
  EXPECT_TRUE(Eventually([&] { return stat((out + "/started").c_str(), &st) == 0; }, 20))
      << Job(job).dump() << agent->output();
  EXPECT_TRUE(agent->WaitForLine("stint-agent: segment ", 10)) << agent->output();
  EXPECT_NE(agent->output().find("started ranks 0..0 of 1"), std::string::npos) << agent->output();
  // The answer that started it came from the poll of that first beat: the
  // agent then beat again (a new poll) at once.
  EXPECT_TRUE(Eventually([&] { return NodeInfo("n24")["last_heartbeat_ms"] != first_beat; }, 10))
      << NodeInfo("n24").dump();
}

// A job's checkpoints are evaluated on what the node leaves over: the first
// on the GPU no segment holds (its metrics come back with the step), the
// second stopped the moment a training job is placed on that GPU, which
// starts at once; it waits for leftover capacity again.
TEST_F(AgentTest, EvaluationsRunOnLeftoverGpusAndYieldThemToTraining) {
  Start();
  auto agent = Agent("n1", "0,1", {"--spot", "--notice-lead", "0", "--eval-slots", "2"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n1 registered: window ")) << agent->output();
  // Step 1's evaluation prints its metrics and ends; later ones run on.
  const std::string script =
      "echo \"{\\\"step\\\": $STINT_EVAL_STEP, \\\"gpu\\\": \\\"$CUDA_VISIBLE_DEVICES\\\"}\"; "
      "[ \"$STINT_EVAL_STEP\" = 1 ] || exec sleep 600";
  auto submitted = admin_->Post(
      "/v1/jobs", {{"name", "train"},
                   {"pool", "gpu"},
                   {"min_gpus", 1},
                   {"eval", {{"command", {"sh", "-c", script}}, {"gpus", 1}, {"every", 1}}}});
  ASSERT_EQ(submitted.status, 201) << submitted.text;
  const int64_t job = submitted.body["id"];
  EXPECT_EQ(
      admin_->Post("/v1/jobs", {{"name", "bad"}, {"min_gpus", 1}, {"eval", {{"gpus", 1}}}}).status,
      400);
  ASSERT_TRUE(Eventually([&] { return Job(job).value("state", "") == "RUNNING"; }))
      << Job(job).dump();
  const json placed = Job(job)["segments"][0]["placement"][0]["gpus"];
  ASSERT_EQ(placed.size(), 1u) << Job(job).dump();
  const int free_gpu = placed[0] == 0 ? 1 : 0;
  HttpJson workers(daemon_->port(), StintdProcess::kWorkerToken);
  auto reg = workers.Post("/v1/jobs/" + std::to_string(job) + "/workers", {{"name", "w"}});
  ASSERT_EQ(reg.status, 201) << reg.text;
  HttpJson worker(daemon_->port(), reg.body["worker_secret"].get<std::string>());
  const std::string wid = std::to_string(reg.body["worker_id"].get<int64_t>());
  // Each look at the evaluations also renews the worker's lease.
  auto evals = [&] {
    worker.Post("/v1/workers/" + wid + "/heartbeat", {{"step", 2}});
    return admin_->Get("/v1/jobs/" + std::to_string(job) + "/losses").body["evals"];
  };

  ASSERT_EQ(
      worker.Post("/v1/workers/" + wid + "/checkpoint", {{"step", 1}, {"seconds", 0.1}}).status,
      200);
  ASSERT_TRUE(Eventually([&] { return !evals().empty() && evals()[0]["state"] == "done"; }))
      << evals().dump() << agent->output();
  EXPECT_EQ(evals()[0]["step"], 1);
  EXPECT_EQ(evals()[0]["result"], json({{"step", 1}, {"gpu", std::to_string(free_gpu)}}));

  ASSERT_EQ(
      worker.Post("/v1/workers/" + wid + "/checkpoint", {{"step", 2}, {"seconds", 0.1}}).status,
      200);
  ASSERT_TRUE(Eventually([&] { return evals().size() == 2 && evals()[1]["state"] == "running"; }))
      << evals().dump();
  EXPECT_EQ(evals()[1]["gpu"], free_gpu);
  ASSERT_TRUE(agent->WaitForLine("stint-agent: evaluation " +
                                 std::to_string(evals()[1]["id"].get<int64_t>()) + " of job " +
                                 std::to_string(job) + " step 2 started"))
      << agent->output();

  // Training comes first: a job that needs the evaluation's GPU starts on it.
  auto other = admin_->Post("/v1/jobs", {{"name", "other"}, {"pool", "gpu"}, {"min_gpus", 1}});
  ASSERT_EQ(other.status, 201) << other.text;
  const int64_t other_job = other.body["id"];
  ASSERT_TRUE(Eventually([&] { return Job(other_job).value("state", "") == "RUNNING"; }))
      << Job(other_job).dump() << admin_->Get("/v1/queue").text;
  EXPECT_EQ(Job(other_job)["segments"][0]["placement"][0]["gpus"], json::array({free_gpu}));
  ASSERT_TRUE(Eventually([&] { return evals()[1]["state"] == "pending"; })) << evals().dump();
  EXPECT_NE(evals()[1]["message"].get<std::string>().find("went to a training segment"),
            std::string::npos)
      << evals().dump();
  ASSERT_TRUE(agent->WaitForLine("stint-agent: evaluation " +
                                 std::to_string(evals()[1]["id"].get<int64_t>()) + " stopped"))
      << agent->output();
  // The training job the evaluations belong to ran on untouched.
  EXPECT_EQ(Job(job)["segments"].size(), 1u);
  EXPECT_EQ(Job(job)["segments"][0]["state"], "running");
}

// Whether process `pid` is gone: not there, or dead and not yet reaped.
bool Gone(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return true;
  const size_t close = line.rfind(')');
  return close != std::string::npos && line.compare(close + 2, 1, "Z") == 0;
}

// The pid in file `path` (written whole, then renamed into place); 0 while
// there is none.
pid_t PidIn(const std::string& path) {
  std::ifstream in(path);
  long long pid = 0;
  return in >> pid ? static_cast<pid_t>(pid) : 0;
}

// Evaluations whose command starts a grandchild in a session of its own
// (setsid); both write their pids, then sleep on.
class EvalTreeTest : public AgentTest {
 protected:
  json Command() const {
    const std::string at = dir_.path() + "/$STINT_EVAL_ID";
    return {"sh", "-c",
            "setsid sh -c 'echo $$ > " + at + ".gc.tmp && mv " + at + ".gc.tmp " + at +
                ".gc && exec sleep 600' & echo $$ > " + at + ".root.tmp && mv " + at +
                ".root.tmp " + at + ".root && exec sleep 600"};
  }
  // Registers a worker of `job` and reports its checkpoint of step 1: an
  // evaluation is queued. Its id once an agent runs it and both of its
  // processes wrote their pids (0 if that did not happen).
  int64_t Evaluate(int64_t job) {
    HttpJson workers(daemon_->port(), StintdProcess::kWorkerToken);
    auto reg = workers.Post("/v1/jobs/" + std::to_string(job) + "/workers", {{"name", "w"}});
    EXPECT_EQ(reg.status, 201) << reg.text;
    HttpJson worker(daemon_->port(), reg.body.value("worker_secret", ""));
    const std::string wid = std::to_string(reg.body.value("worker_id", int64_t{0}));
    EXPECT_EQ(
        worker.Post("/v1/workers/" + wid + "/checkpoint", {{"step", 1}, {"seconds", 0.1}}).status,
        200);
    json evals;
    if (!Eventually([&] {
          evals = Evals(job);
          return evals.size() == 1 && evals[0]["state"] == "running";
        })) {
      ADD_FAILURE() << evals.dump();
      return 0;
    }
    const int64_t id = evals[0].value("id", int64_t{0});
    if (!Eventually([&] { return Root(id) > 0 && Grandchild(id) > 0; })) {
      ADD_FAILURE() << "evaluation " << id << " did not start its processes";
      return 0;
    }
    return id;
  }
  json Evals(int64_t job) {
    return admin_->Get("/v1/jobs/" + std::to_string(job) + "/losses").body["evals"];
  }
  pid_t Root(int64_t eval) { return PidIn(dir_.path() + "/" + std::to_string(eval) + ".root"); }
  pid_t Grandchild(int64_t eval) { return PidIn(dir_.path() + "/" + std::to_string(eval) + ".gc"); }
};

// An evaluation has a deadline: past it the agent kills every process it
// started, a grandchild in a session of its own (setsid) too, waits until
// they are gone, and only then reports it failed with the reason, so its
// GPU goes to training after that. A stopping agent leaves no process of an
// evaluation behind either.
TEST_F(EvalTreeTest, AnEvaluationPastItsDeadlineIsKilledWithEveryProcessItStarted) {
  Start();
  auto agent = Agent("n1", "0,1", {"--spot", "--notice-lead", "0", "--eval-slots", "1"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n1 registered: window ")) << agent->output();
  auto submitted = admin_->Post(
      "/v1/jobs", {{"name", "train"},
                   {"pool", "gpu"},
                   {"min_gpus", 1},
                   {"eval", {{"command", Command()}, {"gpus", 1}, {"timeout_seconds", 5}}}});
  ASSERT_EQ(submitted.status, 201) << submitted.text;
  const int64_t job = submitted.body["id"];
  EXPECT_EQ(admin_
                ->Post("/v1/jobs", {{"name", "bad"},
                                    {"min_gpus", 1},
                                    {"eval", {{"command", Command()}, {"timeout_seconds", 0}}}})
                .status,
            400);
  ASSERT_TRUE(Eventually([&] { return Job(job).value("state", "") == "RUNNING"; }))
      << Job(job).dump();
  const int free_gpu = Job(job)["segments"][0]["placement"][0]["gpus"][0] == 0 ? 1 : 0;
  const int64_t first = Evaluate(job);
  ASSERT_GT(first, 0) << agent->output();

  json evals;
  ASSERT_TRUE(Eventually([&] {
    evals = Evals(job);
    return evals[0]["state"] == "failed";
  })) << evals.dump()
      << agent->output();
  EXPECT_TRUE(Gone(Root(first)));
  EXPECT_TRUE(Gone(Grandchild(first))) << "the grandchild outlived its evaluation";
  EXPECT_NE(evals[0]["message"].get<std::string>().find("deadline exceeded"), std::string::npos)
      << evals.dump();
  EXPECT_TRUE(agent->WaitForLine("stint-agent: evaluation " + std::to_string(first) +
                                 ": deadline exceeded"))
      << agent->output();

  // Its GPU is free for training again; the new job's CPU evaluation then
  // runs until the agent stops, which ends all of it.
  auto other = admin_->Post(
      "/v1/jobs", {{"name", "other"},
                   {"pool", "gpu"},
                   {"min_gpus", 1},
                   {"eval", {{"command", Command()}, {"gpus", 0}, {"timeout_seconds", 3600}}}});
  ASSERT_EQ(other.status, 201) << other.text;
  const int64_t other_job = other.body["id"];
  ASSERT_TRUE(Eventually([&] { return Job(other_job).value("state", "") == "RUNNING"; }))
      << Job(other_job).dump() << admin_->Get("/v1/queue").text;
  EXPECT_EQ(Job(other_job)["segments"][0]["placement"][0]["gpus"], json::array({free_gpu}));
  const int64_t second = Evaluate(other_job);
  ASSERT_GT(second, 0) << agent->output();
  ASSERT_EQ(kill(agent->pid(), SIGTERM), 0);
  bool killed = false;
  agent->WaitAtMost(30, &killed);
  ASSERT_FALSE(killed) << "stint-agent did not stop on SIGTERM: " << agent->output();
  EXPECT_TRUE(Gone(Root(second)));
  EXPECT_TRUE(Gone(Grandchild(second))) << "the grandchild outlived the agent";
}

// Training takes the GPU of a running evaluation, but its worker starts
// there only once every process of the evaluation, the setsid'd grandchild
// too, is gone.
TEST_F(EvalTreeTest, AWorkerStartsOnAStoppedEvaluationsGpuOnlyOnceAllOfItIsGone) {
  Start();
  auto agent = Agent("n1", "0,1", {"--spot", "--notice-lead", "0", "--eval-slots", "1"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n1 registered: window ")) << agent->output();
  auto submitted = admin_->Post(
      "/v1/jobs", {{"name", "train"},
                   {"pool", "gpu"},
                   {"min_gpus", 1},
                   {"eval", {{"command", Command()}, {"gpus", 1}, {"timeout_seconds", 3600}}}});
  ASSERT_EQ(submitted.status, 201) << submitted.text;
  const int64_t job = submitted.body["id"];
  ASSERT_TRUE(Eventually([&] { return Job(job).value("state", "") == "RUNNING"; }))
      << Job(job).dump();
  const int64_t eval = Evaluate(job);
  ASSERT_GT(eval, 0) << agent->output();

  // The worker looks for the evaluation's processes as it starts.
  const std::string verdict = dir_.Sub("verdict");
  const std::string script = "for p in " + std::to_string(Root(eval)) + " " +
                             std::to_string(Grandchild(eval)) +
                             "; do if [ -e /proc/$p ] && ! grep -q ') Z ' /proc/$p/stat; then "
                             "echo alive > " +
                             verdict + ".tmp; mv " + verdict + ".tmp " + verdict +
                             "; exec sleep 600; fi; done; echo gone > " + verdict + ".tmp; mv " +
                             verdict + ".tmp " + verdict + "; exec sleep 600";
  const int64_t training = SubmitLaunch(*admin_, 1, script);
  ASSERT_TRUE(Eventually([&] { return Job(training).value("state", "") == "RUNNING"; }))
      << Job(training).dump() << admin_->Get("/v1/queue").text;
  std::string seen;
  ASSERT_TRUE(Eventually([&] { return static_cast<bool>(std::ifstream(verdict) >> seen); }))
      << agent->output();
  EXPECT_EQ(seen, "gone") << agent->output();
  EXPECT_TRUE(Gone(Grandchild(eval)));
  EXPECT_EQ(Evals(job)[0]["state"], "pending") << Evals(job).dump();
}

}  // namespace
}  // namespace stint
