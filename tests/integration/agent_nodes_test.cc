// The node side of stint-agent against a real stintd and real agent
// processes on loopback: nodes with credentials of their own, admin windows
// that name the nodes their agents join, MASTER_PORT chosen per segment and
// kept over a restart, torchrun launches submitted through stintctl, and a
// crashed worker relaunched inside its still-live segment.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "util/agent_stintd.h"
#include "util/subprocess.h"

namespace stint {
namespace {

using nlohmann::json;

void WriteFile(const std::string& path, const std::string& text, mode_t mode = 0644) {
  std::ofstream(path) << text;
  ASSERT_EQ(chmod(path.c_str(), mode), 0) << path;
}

class AgentNodesTest : public AgentStintdTest {
 protected:
  // Fast ticks; leases and start grace long enough that nothing expires
  // unless a test means it; `extra` appended.
  void Start(std::vector<std::string> extra = {}, const std::string& node_ttl_seconds = "5") {
    std::vector<std::string> args = {
        "--tick-seconds",        "0.05", "--safety-seconds",    "1",
        "--min-run-seconds",     "0",    "--lease-ttl-seconds", "60",
        "--start-grace-seconds", "60",   "--node-ttl-seconds",  node_ttl_seconds};
    args.insert(args.end(), extra.begin(), extra.end());
    StartStintd(args);
  }

  // An agent for `node` with `token_file`; `extra` e.g. {"--spot"}. Not
  // yet waited for.
  std::unique_ptr<ChildProcess> Agent(const std::string& node, const std::string& gpus,
                                      std::vector<std::string> extra, std::string token_file = "") {
    if (token_file.empty()) token_file = daemon_->agent_token_file();
    std::vector<std::string> args = {"--coord",  daemon_->url(), "--token-file",
                                     token_file, "--gpus",       gpus,
                                     "--node",   node,           "--heartbeat-seconds",
                                     "0.1",      "--workdir",    dir_.Sub("agent-" + node)};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<ChildProcess>(STINT_AGENT_PATH, args);
  }

  RunResult Ctl(std::vector<std::string> args) {
    std::vector<std::string> all = {"--url", daemon_->url(), "--token", StintdProcess::kAdminToken};
    all.insert(all.end(), args.begin(), args.end());
    return RunProgram(STINTCTL_PATH, all);
  }

  json Job(int64_t id) { return admin_->Get("/v1/jobs/" + std::to_string(id)).body; }
  json Windows() { return admin_->Get("/v1/windows").body.value("windows", json::array()); }
  json Window(int64_t id) {
    for (const json& w : Windows()) {
      if (w.value("id", int64_t{0}) == id) return w;
    }
    return json();
  }
  json Segment(int64_t id) {
    for (const json& s : admin_->Get("/v1/segments").body.value("segments", json::array())) {
      if (s.value("id", int64_t{0}) == id) return s;
    }
    return json();
  }

  // A job of `gpus` GPUs in pool gpu whose workers run `script` with sh.
  int64_t SubmitLaunch(int gpus, const std::string& script, json extra = json::object()) {
    json spec = {{"name", "launched"},
                 {"pool", "gpu"},
                 {"min_gpus", gpus},
                 {"checkpoint_seconds", 0},
                 {"restart_seconds", 0},
                 {"launch", {{"command", {"/bin/sh", "-c", script}}, {"gpus_per_worker", 1}}}};
    spec.update(extra);
    auto r = admin_->Post("/v1/jobs", spec);
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  }

  // A node's own token through stintctl, written to a file for --token-file.
  std::string NodeToken(const std::string& node, std::string* file = nullptr) {
    RunResult r = Ctl({"nodes", "add", node});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::istringstream lines(r.output);
    std::string line, token;
    while (std::getline(lines, line)) {
      if (line.rfind("stn1.", 0) == 0) token = line;
    }
    EXPECT_FALSE(token.empty()) << r.output;
    if (file != nullptr) {
      *file = dir_.Sub("node-" + node + ".token");
      WriteFile(*file, token + "\n", 0600);
    }
    return token;
  }
};

// --- node credentials ---

TEST_F(AgentNodesTest, ANodesOwnTokenActsOnlyAsThatNodeAndTheSharedTokenCannotTakeItsName) {
  Start({}, "60");  // no node goes silent here for long, but across a restart
  const std::string token_a = NodeToken("na");
  NodeToken("nb");
  HttpJson a(daemon_->port(), token_a);
  HttpJson shared(daemon_->port(), StintdProcess::kAgentToken);
  auto spec = [](const std::string& name) {
    return json{{"name", name}, {"pool", "gpu"}, {"gpus", {0, 1}}, {"kind", "spot"}};
  };
  // Node A's token registers, heartbeats and reports as A only.
  auto made = a.Post("/v1/nodes", spec("na"));
  ASSERT_EQ(made.status, 201) << made.text;
  EXPECT_EQ(a.Post("/v1/nodes/na/heartbeat", json::object()).status, 200);
  auto as_b = a.Post("/v1/nodes", spec("nb"));
  EXPECT_EQ(as_b.status, 403) << as_b.text;
  EXPECT_NE(as_b.text.find("cannot act for node"), std::string::npos) << as_b.text;
  auto nc = shared.Post("/v1/nodes", spec("nc"));  // no credential: as before
  ASSERT_EQ(nc.status, 201) << nc.text;
  EXPECT_EQ(a.Post("/v1/nodes/nc/heartbeat", json::object()).status, 403);
  EXPECT_EQ(a.Post("/v1/nodes/nc/heartbeat",
                   {{"exited", {{{"segment_id", 1}, {"exit_code", 0}, {"message", ""}}}}})
                .status,
            403);
  EXPECT_EQ(a.Post("/v1/nodes/nc/close", json::object()).status, 403);
  EXPECT_TRUE(Window(nc.body["window"]["id"].get<int64_t>())["open"].get<bool>());
  // The shared agent token cannot take a name bound to a credential.
  auto taken = shared.Post("/v1/nodes", spec("nb"));
  EXPECT_EQ(taken.status, 403) << taken.text;
  EXPECT_NE(taken.text.find("credential of its own"), std::string::npos) << taken.text;
  EXPECT_EQ(shared.Post("/v1/nodes/na/heartbeat", json::object()).status, 403);
  EXPECT_EQ(shared.Post("/v1/nodes/na/close", json::object()).status, 403);
  // stintctl nodes says which node has a token of its own.
  RunResult listed = Ctl({"nodes"});
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  const size_t row_a = listed.output.find("\nna "), row_c = listed.output.find("\nnc ");
  ASSERT_NE(row_a, std::string::npos) << listed.output;
  ASSERT_NE(row_c, std::string::npos) << listed.output;
  EXPECT_NE(listed.output.substr(row_a, listed.output.find('\n', row_a + 1) - row_a).find(" own "),
            std::string::npos)
      << listed.output;
  EXPECT_NE(
      listed.output.substr(row_c, listed.output.find('\n', row_c + 1) - row_c).find(" shared "),
      std::string::npos)
      << listed.output;

  // Nor does A's token act as a worker or an admin.
  auto job = admin_->Post("/v1/jobs", {{"name", "j"}, {"pool", "gpu"}, {"min_gpus", 4}});
  ASSERT_EQ(job.status, 201) << job.text;
  const std::string jid = std::to_string(job.body["id"].get<int64_t>());
  ASSERT_TRUE(Eventually([&] { return Job(job.body["id"])["state"] == "RUNNING"; }))
      << Job(job.body["id"]).dump();
  HttpJson worker(daemon_->port(), StintdProcess::kWorkerToken);
  auto w = worker.Post("/v1/jobs/" + jid + "/workers", {{"name", "w"}});
  ASSERT_EQ(w.status, 201) << w.text;
  const std::string wid = std::to_string(w.body["worker_id"].get<int64_t>());
  EXPECT_EQ(a.Post("/v1/workers/" + wid + "/heartbeat", json::object()).status, 403);
  EXPECT_EQ(a.Post("/v1/workers/" + wid + "/finished", json::object()).status, 403);
  EXPECT_EQ(a.Put("/v1/jobs/" + jid + "/kv/k", {{"value", "v"}}).status, 403);
  EXPECT_EQ(a.Post("/v1/fencing/check", {{"job_id", job.body["id"]}, {"fencing_token", 1}}).status,
            403);
  EXPECT_EQ(a.Post("/v1/jobs", {{"name", "x"}, {"min_gpus", 1}}).status, 403);
  EXPECT_EQ(a.Post("/v1/pools", {{"name", "x"}}).status, 403);
  EXPECT_EQ(a.Post("/v1/nodes/na/token", json::object()).status, 403);
  EXPECT_EQ(a.Post("/v1/jobs/" + jid + "/workers", {{"name", "w"}, {"node", "nc"}}).status, 403);
  EXPECT_EQ(a.Post("/v1/jobs/" + jid + "/workers", {{"name", "w"}}).status, 403);
  EXPECT_EQ(a.Get("/v1/jobs").status, 200);  // reads, as every agent

  // A real agent with A's token: as A it runs, as B it is refused.
  std::string file_a;
  const std::string rotated = NodeToken("na", &file_a);  // replaces the first token
  EXPECT_EQ(a.Post("/v1/nodes/na/heartbeat", json::object()).status, 401);
  auto as_b_agent = Agent("nb", "0", {"--pool", "gpu", "--spot"}, file_a);
  bool killed = false;
  int status = as_b_agent->WaitAtMost(30, &killed);
  ASSERT_FALSE(killed) << as_b_agent->output();
  EXPECT_EQ(WEXITSTATUS(status), 1) << as_b_agent->output();
  EXPECT_NE(as_b_agent->output().find("cannot act for node"), std::string::npos)
      << as_b_agent->output();

  // Credentials outlive a restart of stintd; a revoked one is dead.
  // kill -9: what was acknowledged is in the store.
  daemon_->Kill(SIGKILL);
  ASSERT_TRUE(daemon_->Start()) << daemon_->output();
  HttpJson a2(daemon_->port(), rotated);
  EXPECT_EQ(a2.Post("/v1/nodes/na/heartbeat", json::object()).status, 200);
  RunResult revoked = Ctl({"nodes", "revoke", "na"});
  EXPECT_EQ(revoked.exit_code, 0) << revoked.output;
  EXPECT_EQ(a2.Post("/v1/nodes/na/heartbeat", json::object()).status, 401);
  // With no credential left, the shared token may act for the name again.
  HttpJson shared2(daemon_->port(), StintdProcess::kAgentToken);
  EXPECT_EQ(shared2.Post("/v1/nodes/na/heartbeat", json::object()).status, 200);
}

// --- MASTER_PORT ---

TEST_F(AgentNodesTest, SegmentsOnOneNodeGetTheirOwnMasterPortKeptOverARestart) {
  Start({"--master-ports", "31000-31001"}, "60");
  HttpJson agent(daemon_->port(), StintdProcess::kAgentToken);
  ASSERT_EQ(
      agent.Post("/v1/nodes", {{"name", "np"}, {"pool", "gpu"}, {"gpus", {0, 1}}, {"kind", "spot"}})
          .status,
      201);
  const int64_t first = SubmitLaunch(1, "sleep 600");
  const int64_t second = SubmitLaunch(1, "sleep 600");
  ASSERT_TRUE(Eventually([&] {
    return Job(first).value("state", "") == "RUNNING" &&
           Job(second).value("state", "") == "RUNNING";
  })) << Job(first).dump()
      << Job(second).dump();
  const int64_t s1 = Job(first)["segment_id"], s2 = Job(second)["segment_id"];
  const int p1 = Segment(s1).value("master_port", 0), p2 = Segment(s2).value("master_port", 0);
  EXPECT_EQ((std::set<int>{p1, p2}), (std::set<int>{31000, 31001}))
      << Segment(s1).dump() << Segment(s2).dump();
  // What the node's agent is told is the segment's port.
  auto beat = agent.Post("/v1/nodes/np/heartbeat", {{"running", {s1, s2}}});
  ASSERT_EQ(beat.status, 200) << beat.text;
  ASSERT_EQ(beat.body["assignments"].size(), 2u) << beat.text;
  for (const json& a : beat.body["assignments"]) {
    EXPECT_EQ(a["master_port"], a["segment_id"] == s1 ? p1 : p2) << a.dump();
  }

  // kill -9: what was acknowledged is in the store.
  daemon_->Kill(SIGKILL);
  ASSERT_TRUE(daemon_->Start()) << daemon_->output();
  HttpJson again(daemon_->port(), StintdProcess::kAgentToken);
  beat = again.Post("/v1/nodes/np/heartbeat", {{"running", {s1, s2}}});
  ASSERT_EQ(beat.status, 200) << beat.text;
  EXPECT_EQ(Segment(s1).value("master_port", 0), p1) << Segment(s1).dump();
  EXPECT_EQ(Segment(s2).value("master_port", 0), p2) << Segment(s2).dump();
  for (const json& a : beat.body["assignments"]) {
    EXPECT_EQ(a["master_port"], a["segment_id"] == s1 ? p1 : p2) << a.dump();
  }
  // A bad range is a usage error.
  RunResult bad = RunProgram(STINTD_PATH, {"--master-ports", "30000-29000"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--master-ports"), std::string::npos) << bad.output;
}

// --- torchrun through stintctl ---

TEST_F(AgentNodesTest, StintctlSubmitsATorchrunLaunchThatTheAgentRunsThroughTheLauncher) {
  Start();
  auto agent = Agent("nt", "4,5", {"--pool", "gpu", "--spot"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node nt registered: window ")) << agent->output();
  // A stand-in for torchrun: it records how it was called and runs the
  // command it was given (after --no-python) once.
  const std::string launcher = dir_.Sub("fake-torchrun");
  const std::string args_file = dir_.Sub("torchrun-args");
  WriteFile(launcher,
            "#!/bin/sh\n"
            "for a in \"$@\"; do echo \"$a\"; done > " +
                args_file +
                "\n"
                "while [ \"$1\" != --no-python ]; do shift; done; shift\n"
                "exec \"$@\"\n",
            0755);
  RunResult submitted =
      Ctl({"jobs", "submit", "--name", "tr", "--gpus", "2", "--pool", "gpu",
           "--torchrun=" + launcher, "--", "/bin/sh", "-c", "echo ran on $CUDA_VISIBLE_DEVICES"});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  const int64_t job = std::stoll(submitted.output.substr(submitted.output.find("job ") + 4));
  EXPECT_EQ(Job(job)["launch"]["torchrun"], json::array({launcher})) << Job(job).dump();
  ASSERT_TRUE(Eventually([&] { return Job(job).value("state", "") == "DONE"; }, 60))
      << Job(job).dump() << agent->output();
  const std::string args = ReadWholeFile(args_file);
  for (const std::string& want :
       std::vector<std::string>{"--nnodes=1", "--nproc-per-node=2", "--rdzv-backend=stint",
                                "--rdzv-id=" + std::to_string(job), "--no-python", "/bin/sh"}) {
    EXPECT_NE(args.find(want + "\n"), std::string::npos) << want << " missing in:\n" << args;
  }
  // --torchrun without a value: the launcher on the PATH (in a pool with
  // no GPUs, so it stays queued).
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "idle"}}).status, 201);
  RunResult plain = Ctl({"--json", "jobs", "submit", "--name", "tr2", "--gpus", "1", "--pool",
                         "idle", "--torchrun", "--", "python", "train.py"});
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(json::parse(plain.output)["launch"]["torchrun"], json::array({"torchrun"}))
      << plain.output;
  RunResult without = Ctl({"jobs", "submit", "--name", "tr3", "--gpus", "1", "--torchrun"});
  EXPECT_EQ(without.exit_code, 2) << without.output;
}

// --- admin windows on named nodes ---

TEST_F(AgentNodesTest, AnAdminWindowNamesItsNodesWhoseAgentsJoinItAndLaunch) {
  Start();
  RunResult added = Ctl(
      {"windows", "add", "--pool", "gpu", "--nodes", "a1,a2", "--gpus", "1", "--duration", "1h"});
  ASSERT_EQ(added.exit_code, 0) << added.output;
  EXPECT_NE(added.output.find("on node a1"), std::string::npos) << added.output;
  EXPECT_NE(added.output.find("on node a2"), std::string::npos) << added.output;
  ASSERT_EQ(Windows().size(), 2u);
  for (const json& w : Windows()) {
    EXPECT_TRUE(w["declared"].get<bool>()) << w.dump();
    EXPECT_FALSE(w["joined"].get<bool>()) << w.dump();
  }
  RunResult listed = Ctl({"nodes"});
  EXPECT_NE(listed.output.find("open, no agent yet"), std::string::npos) << listed.output;
  EXPECT_NE(listed.output.find("hard (admin)"), std::string::npos) << listed.output;
  // A node that no admin window names cannot join; a covered node cannot
  // lend a window of its own.
  auto stray = Agent("a3", "0", {});
  bool killed = false;
  int status = stray->WaitAtMost(30, &killed);
  ASSERT_FALSE(killed) << stray->output();
  EXPECT_EQ(WEXITSTATUS(status), 1) << stray->output();
  EXPECT_NE(stray->output().find("no admin window names node a3"), std::string::npos)
      << stray->output();
  auto own = Agent("a1", "3", {"--pool", "gpu", "--for", "1h"});
  status = own->WaitAtMost(30, &killed);
  ASSERT_FALSE(killed) << own->output();
  EXPECT_EQ(WEXITSTATUS(status), 1) << own->output();
  EXPECT_NE(own->output().find("covered by admin window"), std::string::npos) << own->output();

  // Joined: the window takes the GPUs the agent reports.
  auto a1 = Agent("a1", "3,4", {});
  auto a2 = Agent("a2", "5", {"--pool", "gpu"});
  ASSERT_TRUE(a1->WaitForLine("stint-agent: node a1 registered: window ")) << a1->output();
  ASSERT_TRUE(a2->WaitForLine("stint-agent: node a2 registered: window ")) << a2->output();
  EXPECT_NE(a1->output().find("(new, an admin's window)"), std::string::npos) << a1->output();
  const int64_t w1 = RegisteredWindow(a1->output()), w2 = RegisteredWindow(a2->output());
  EXPECT_EQ(Window(w1)["node"], "a1");
  EXPECT_EQ(Window(w1)["node_gpus"], json::array({3}));
  EXPECT_TRUE(Window(w1)["joined"].get<bool>());
  EXPECT_EQ(Window(w2)["node_gpus"], json::array({5}));
  EXPECT_EQ(Windows().size(), 2u) << "an agent made a window of its own";

  // A job across both nodes runs with the agents' launches.
  const std::string out = dir_.Sub("out");
  ASSERT_EQ(mkdir(out.c_str(), 0755), 0);
  const int64_t job =
      SubmitLaunch(2, "echo $CUDA_VISIBLE_DEVICES > " + out + "/gpu-$RANK", {{"gang", false}});
  ASSERT_TRUE(Eventually([&] { return Job(job).value("state", "") == "DONE"; }, 60))
      << Job(job).dump() << a1->output() << a2->output();
  EXPECT_EQ(ReadWholeFile(out + "/gpu-0") + ReadWholeFile(out + "/gpu-1"), "3\n5\n");

  // A covered node whose agent goes silent loses its window, as an agent's own.
  ASSERT_EQ(kill(a2->pid(), SIGKILL), 0);
  a2->Wait();
  ASSERT_TRUE(Eventually([&] { return !Window(w2)["open"].get<bool>(); }, 30)) << Window(w2).dump();
  EXPECT_TRUE(Window(w1)["open"].get<bool>());
  // SIGTERM of a joined agent closes its node's part of the admin window.
  ASSERT_EQ(kill(a1->pid(), SIGTERM), 0);
  status = a1->WaitAtMost(30, &killed);
  ASSERT_FALSE(killed) << a1->output();
  EXPECT_EQ(WEXITSTATUS(status), 0) << a1->output();
  EXPECT_FALSE(Window(w1)["open"].get<bool>()) << Window(w1).dump();
}

// GPU indices named per node must be among the agent's; the window, joined,
// is in the store: a restarted stintd and a restarted agent find it again.
TEST_F(AgentNodesTest, AnAdminWindowsGpuIndicesBindTheAgentAndItOutlivesRestarts) {
  Start({}, "60");
  RunResult added = Ctl({"windows", "add", "--pool", "gpu", "--node", "b1:1,2", "--duration", "1h"});
  ASSERT_EQ(added.exit_code, 0) << added.output;
  ASSERT_EQ(Windows().size(), 1u);
  const int64_t window = Windows()[0]["id"];
  EXPECT_EQ(Windows()[0]["node_gpus"], json::array({1, 2}));
  EXPECT_EQ(Windows()[0]["gpus"], 2);
  // Declaring the node again while its window lasts is refused.
  RunResult again = Ctl({"windows", "add", "--pool", "gpu", "--nodes", "b1", "--gpus", "1",
                         "--duration", "1h"});
  EXPECT_EQ(again.exit_code, 1) << again.output;
  auto wrong = Agent("b1", "0,1", {});
  bool killed = false;
  int status = wrong->WaitAtMost(30, &killed);
  ASSERT_FALSE(killed) << wrong->output();
  EXPECT_EQ(WEXITSTATUS(status), 1) << wrong->output();
  EXPECT_NE(wrong->output().find("lends GPU 2 of node b1"), std::string::npos) << wrong->output();
  EXPECT_FALSE(Window(window)["joined"].get<bool>());

  auto first = Agent("b1", "0,1,2", {});
  ASSERT_TRUE(first->WaitForLine("stint-agent: node b1 registered: window ")) << first->output();
  EXPECT_EQ(RegisteredWindow(first->output()), window);
  EXPECT_NE(first->output().find("(new, an admin's window)"), std::string::npos)
      << first->output();
  ASSERT_EQ(kill(first->pid(), SIGKILL), 0);
  first->Wait();
  daemon_->Kill(SIGKILL);
  ASSERT_TRUE(daemon_->Start()) << daemon_->output();
  admin_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kAdminToken);
  EXPECT_TRUE(Window(window)["declared"].get<bool>()) << Window(window).dump();
  EXPECT_TRUE(Window(window)["joined"].get<bool>()) << Window(window).dump();
  auto second = Agent("b1", "0,1,2", {});
  ASSERT_TRUE(second->WaitForLine("stint-agent: node b1 registered: window ")) << second->output();
  EXPECT_EQ(RegisteredWindow(second->output()), window);
  EXPECT_NE(second->output().find("(found again, an admin's window)"), std::string::npos)
      << second->output();
  EXPECT_EQ(Windows().size(), 1u);
}

// --- a crashed worker is started again ---

TEST_F(AgentNodesTest, ACrashedWorkerIsStartedAgainInItsSegmentAndTheJobCompletes) {
  Start();
  auto agent = Agent("nr", "0,1", {"--pool", "gpu", "--spot"});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node nr registered: window ")) << agent->output();
  const std::string out = dir_.Sub("out");
  ASSERT_EQ(mkdir(out.c_str(), 0755), 0);
  // Rank 1 crashes on its first run; rank 0 runs on until rank 1's second
  // run has started, so the crash happens while the segment is live.
  const int64_t job = SubmitLaunch(
      2, "O=" + out +
             "; if [ $RANK = 1 ] && [ ! -e $O/crashed ]; then echo $STINT_WORKER_ID > $O/crashed;"
             " echo 'rank 1 falls over'; exit 9; fi;"
             " if [ $RANK = 1 ]; then echo $STINT_WORKER_ID > $O/again; fi;"
             " while [ ! -e $O/again ]; do sleep 0.05; done; echo rank $RANK done");
  ASSERT_TRUE(Eventually([&] { return Job(job).value("state", "") == "DONE"; }, 60))
      << Job(job).dump() << agent->output();
  const json j = Job(job);
  ASSERT_EQ(j["segments"].size(), 1u) << j.dump();
  EXPECT_EQ(j["segments"][0]["state"], "completed") << j.dump();
  EXPECT_EQ(j["recent_crashes"], 1) << j.dump();
  // A new registration (credential) for the second run.
  EXPECT_NE(ReadWholeFile(out + "/crashed"), ReadWholeFile(out + "/again"));
  const std::string log = ReadWholeFile(dir_.Sub("agent-nr") + "/job-" + std::to_string(job) +
                                   "/segment-" + j["segments"][0]["id"].dump() + "/rank-1.log");
  EXPECT_NE(log.find("rank 1 falls over\nrank 1 done"), std::string::npos) << log;
}

}  // namespace
}  // namespace stint
