// A job's code cannot act as its node: a real stintd and a real stint-agent
// run as root with --job-uids, and two jobs' processes on one node try to
// read the agent's environment, its token file and the other job's
// worker's environment (its STINT_WORKER_SECRET); --job-user runs them as
// a named user; an agent of another user is not readable by its jobs
// either. Needs root (it switches users); skipped otherwise.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "util/agent_stintd.h"
#include "util/subprocess.h"

namespace stint {
namespace {

using nlohmann::json;

// The uids the agent hands to jobs: far above any distribution's users.
constexpr uid_t kFirstUid = 61000, kLastUid = 61009;

class AgentIsolationTest : public AgentStintdTest {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: stint-agent --job-uids switches users";
    StartStintd({"--tick-seconds", "0.05", "--safety-seconds", "1", "--min-run-seconds", "0",
                 "--lease-ttl-seconds", "60", "--start-grace-seconds", "60", "--node-ttl-seconds",
                 "60"});
    // The node's token, readable by root only, where every user may look.
    ASSERT_EQ(chmod(shared_.path().c_str(), 01777), 0);
    token_file_ = shared_.Sub("node.token");
    ASSERT_TRUE(WriteWholeFile(token_file_, std::string(StintdProcess::kAgentToken) + "\n"));
    ASSERT_EQ(chmod(token_file_.c_str(), 0600), 0);
  }

  std::unique_ptr<ChildProcess> Agent(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {
        "--coord", daemon_->url(), "--token-file",   token_file_, "--pool", "gpu",
        "--gpus",  "0,1",          "--node",         "n1",        "--spot", "--heartbeat-seconds",
        "0.1",     "--workdir",    dir_.Sub("agent")};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<ChildProcess>(STINT_AGENT_PATH, args);
  }

  int64_t Submit(const std::string& name, const std::string& script) {
    json spec = {{"name", name},
                 {"pool", "gpu"},
                 {"min_gpus", 1},
                 {"checkpoint_seconds", 0},
                 {"restart_seconds", 0},
                 {"launch",
                  {{"command", {"/bin/sh", "-c", script}},
                   {"env", {{"OUT", shared_.path()}, {"TOKEN_FILE", token_file_}}}}}};
    auto r = admin_->Post("/v1/jobs", spec);
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  }
  std::string Found(const std::string& name) {
    std::string text = ReadWholeFile(shared_.Sub(name));
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  }
  json Job(int64_t id) { return admin_->Get("/v1/jobs/" + std::to_string(id)).body; }

  // Where the jobs' processes write what they found: every user may write
  // there (dir_ is root's, 0700).
  TempDir shared_;
  std::string token_file_;
};

// "read" or "denied" into $OUT/<prefix>.<what> for each file tried; the
// worker's parent is the agent (it forks and executes the command).
constexpr const char* kProbe =
    "probe() { if cat \"$2\" > /dev/null 2>&1; then echo read; else echo denied; fi "
    "> \"$OUT/$1\"; }; ";

TEST_F(AgentIsolationTest, AJobsProcessesReadNeitherTheAgentsNorAnotherJobsCredentials) {
  auto agent = Agent({"--job-uids", std::to_string(kFirstUid) + "-" + std::to_string(kLastUid)});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n1 registered: window ")) << agent->output();
  // Job a waits with its secret in its environment until b looked.
  const int64_t a =
      Submit("a", std::string(kProbe) +
                      "id -u > \"$OUT/a.uid\"; cat /proc/$PPID/comm > \"$OUT/a.parent\"; "
                      "probe a.agent-environ /proc/$PPID/environ; probe a.token \"$TOKEN_FILE\"; "
                      "[ -n \"$STINT_WORKER_SECRET\" ] && echo yes > \"$OUT/a.secret\"; "
                      "echo $$ > \"$OUT/a.pid.tmp\" && mv \"$OUT/a.pid.tmp\" \"$OUT/a.pid\"; "
                      "while [ ! -e \"$OUT/b.done\" ]; do sleep 0.05; done");
  const int64_t b =
      Submit("b", std::string(kProbe) +
                      "id -u > \"$OUT/b.uid\"; probe b.agent-environ /proc/$PPID/environ; "
                      "probe b.token \"$TOKEN_FILE\"; probe b.self /proc/self/environ; "
                      "while [ ! -e \"$OUT/a.pid\" ]; do sleep 0.05; done; "
                      "probe b.other-environ /proc/$(cat \"$OUT/a.pid\")/environ; "
                      "touch \"$OUT/b.done\"");
  for (int64_t job : {a, b}) {
    ASSERT_TRUE(Eventually([&] { return Job(job).value("state", "") == "DONE"; }, 60))
        << Job(job).dump() << agent->output();
  }
  // Each ran as a uid of its own from the range, not root.
  const std::string uid_a = Found("a.uid"), uid_b = Found("b.uid");
  for (const std::string& uid : {uid_a, uid_b}) {
    ASSERT_FALSE(uid.empty()) << agent->output();
    EXPECT_GE(std::stoul(uid), kFirstUid) << uid;
    EXPECT_LE(std::stoul(uid), kLastUid) << uid;
  }
  EXPECT_NE(uid_a, uid_b);
  EXPECT_EQ(Found("a.parent"), "stint-agent");
  // What they tried was there (a read itself works: b read its own environ).
  EXPECT_EQ(Found("a.secret"), "yes");
  EXPECT_EQ(Found("b.self"), "read");
  EXPECT_EQ(Found("a.agent-environ"), "denied");
  EXPECT_EQ(Found("b.agent-environ"), "denied");
  EXPECT_EQ(Found("a.token"), "denied");
  EXPECT_EQ(Found("b.token"), "denied");
  EXPECT_EQ(Found("b.other-environ"), "denied");
}

// An agent that cannot switch users (not root) runs its jobs as itself: it
// is not dumpable, so they still cannot read its environment.
TEST_F(AgentIsolationTest, AnAgentIsNotReadableByJobsOfItsOwnUser) {
  if (access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/setpriv";
  const uid_t uid = kLastUid + 1;
  const std::string token = shared_.Sub("own.token");
  ASSERT_TRUE(WriteWholeFile(token, std::string(StintdProcess::kAgentToken) + "\n"));
  ASSERT_EQ(chown(token.c_str(), uid, uid), 0);
  ASSERT_EQ(chmod(token.c_str(), 0600), 0);
  const std::string id = std::to_string(uid);
  ChildProcess agent("/usr/bin/setpriv", {"--reuid",
                                          id,
                                          "--regid",
                                          id,
                                          "--clear-groups",
                                          STINT_AGENT_PATH,
                                          "--coord",
                                          daemon_->url(),
                                          "--token-file",
                                          token,
                                          "--pool",
                                          "gpu",
                                          "--gpus",
                                          "0",
                                          "--node",
                                          "n1",
                                          "--spot",
                                          "--heartbeat-seconds",
                                          "0.1",
                                          "--workdir",
                                          shared_.Sub("agent")});
  ASSERT_TRUE(agent.WaitForLine("stint-agent: node n1 registered: window ")) << agent.output();
  const int64_t job = Submit("same-user", std::string(kProbe) +
                                              "id -u > \"$OUT/uid\"; "
                                              "probe agent-environ /proc/$PPID/environ; "
                                              "probe self /proc/self/environ");
  ASSERT_TRUE(Eventually([&] { return Job(job).value("state", "") == "DONE"; }, 60))
      << Job(job).dump() << agent.output();
  EXPECT_EQ(Found("uid"), id);
  EXPECT_EQ(Found("self"), "read");
  EXPECT_EQ(Found("agent-environ"), "denied");
}

// --job-user: every job as that user from the passwd database, with its
// HOME, USER and LOGNAME; the agent's environment stays closed to it.
TEST_F(AgentIsolationTest, JobUserRunsJobsAsThatUserWithItsHome) {
  const std::string user = "stint-job-test";
  RunResult added = RunProgram("/usr/sbin/useradd", {"--system", "--no-create-home", "--home-dir",
                                                     "/nonexistent-stint", user});
  // 9: it exists already (an earlier run that did not get to remove it).
  if (added.exit_code != 0 && added.exit_code != 9)
    GTEST_SKIP() << "cannot add a user: " << added.output;
  struct Remove {
    std::string user;
    ~Remove() { RunProgram("/usr/sbin/userdel", {user}); }
  } remove{user};
  const std::string uid = RunProgram("/usr/bin/id", {"-u", user}).output;
  auto agent = Agent({"--job-user", user});
  ASSERT_TRUE(agent->WaitForLine("stint-agent: node n1 registered: window ")) << agent->output();
  const int64_t job =
      Submit("named", std::string(kProbe) +
                          "id -u > \"$OUT/uid\"; echo \"$HOME $USER $LOGNAME\" > \"$OUT/who\"; "
                          "probe agent-environ /proc/$PPID/environ");
  ASSERT_TRUE(Eventually([&] { return Job(job).value("state", "") == "DONE"; }, 60))
      << Job(job).dump() << agent->output();
  EXPECT_EQ(Found("uid") + "\n", uid);
  EXPECT_EQ(Found("who"), "/nonexistent-stint " + user + " " + user);
  EXPECT_EQ(Found("agent-environ"), "denied");
}

TEST_F(AgentIsolationTest, JobUsersNeedATokenFileOnlyItsOwnerReadsAndAValidRange) {
  ASSERT_EQ(chmod(token_file_.c_str(), 0644), 0);
  auto readable = Agent({"--job-uids", "61000-61009"});
  EXPECT_EQ(WEXITSTATUS(readable->Wait()), 2) << readable->output();
  EXPECT_NE(readable->output().find("is readable by others than its owner"), std::string::npos)
      << readable->output();
  ASSERT_EQ(chmod(token_file_.c_str(), 0600), 0);
  for (const std::string& bad : {"0-10", "61009-61000", "61000", "x-y"}) {
    auto agent = Agent({"--job-uids", bad});
    EXPECT_EQ(WEXITSTATUS(agent->Wait()), 2) << bad << ": " << agent->output();
    EXPECT_NE(agent->output().find("--job-uids must be FIRST-LAST"), std::string::npos)
        << agent->output();
  }
  auto root = Agent({"--job-user", "root"});
  EXPECT_EQ(WEXITSTATUS(root->Wait()), 2) << root->output();
  EXPECT_NE(root->output().find("--job-user root is root"), std::string::npos) << root->output();
  // Without either, an agent running as root says what that means.
  auto warned = Agent({});
  ASSERT_TRUE(warned->WaitForLine("stint-agent: node n1 registered: window ")) << warned->output();
  EXPECT_NE(warned->output().find("WARNING: running as root without --job-user or --job-uids"),
            std::string::npos)
      << warned->output();
}

}  // namespace
}  // namespace stint
