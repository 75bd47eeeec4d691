// Elastic jobs on stint-agent nodes, end to end: a real stintd, real agents
// and the sh workers they launch. A shrink before preempt reaches only the
// workers of the node it releases (the job's signal, then SIGKILL at the
// deadline; their exit is a leave, not the job's end) while the others run
// on; a grow launches the added ranks on the GPUs that freed up.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "util/agent_stintd.h"
#include "util/subprocess.h"

namespace stint {
namespace {

using nlohmann::json;

// A process that is gone or a zombie no one reaped yet.
bool ProcessGone(pid_t pid) {
  if (kill(pid, 0) != 0) return true;
  const std::string stat = ReadWholeFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  return close == std::string::npos || (close + 2 < stat.size() && stat[close + 2] == 'Z');
}

// A worker that records its pid and environment (written whole: tmp, then
// mv), says so on a TERM and exits 75 (or ignores it where its name starts
// with $STUBBORN), and otherwise runs until the file $OUT/finish-<job id>
// appears: then it exits 0.
constexpr const char* kWorker =
    "case \"$STINT_WORKER_NAME\" in \"${STUBBORN:-none}\"*) trap '' TERM ;; "
    "*) trap 'echo got TERM; exit 75' TERM ;; esac; "
    "env > \"$OUT/env-$STINT_WORKER_ID.tmp\"; "
    "mv \"$OUT/env-$STINT_WORKER_ID.tmp\" \"$OUT/env-$STINT_WORKER_ID\"; "
    "echo $$ > \"$OUT/pid-$STINT_WORKER_ID.tmp\"; "
    "mv \"$OUT/pid-$STINT_WORKER_ID.tmp\" \"$OUT/pid-$STINT_WORKER_ID\"; "
    "while [ ! -e \"$OUT/finish-$STINT_JOB_ID\" ]; do sleep 0.05; done; exit 0";

class AgentElasticTest : public AgentStintdTest {
 protected:
  void Start() {
    ASSERT_NO_FATAL_FAILURE(StartStintd(
        {"--tick-seconds", "0.05", "--safety-seconds", "1", "--min-run-seconds", "0",
         "--lease-ttl-seconds", "60", "--start-grace-seconds", "60", "--node-ttl-seconds", "30"}));
    out_ = dir_.Sub("out");
    ASSERT_EQ(mkdir(out_.c_str(), 0755), 0);
  }

  // An agent for `node` lending `gpus`, registered (its window made) on return.
  std::unique_ptr<ChildProcess> Agent(const std::string& node, const std::string& gpus) {
    auto agent = std::make_unique<ChildProcess>(
        STINT_AGENT_PATH,
        std::vector<std::string>{"--coord", daemon_->url(), "--token-file",
                                 daemon_->agent_token_file(), "--pool", "gpu", "--gpus", gpus,
                                 "--node", node, "--spot", "--heartbeat-seconds", "0.1", "--addr",
                                 "127.0.0.1", "--workdir", dir_.Sub("agent-" + node)});
    EXPECT_TRUE(agent->WaitForLine("stint-agent: node " + node + " registered: window "))
        << agent->output();
    return agent;
  }

  int64_t Submit(json spec, json env = json::object()) {
    spec["pool"] = "gpu";
    spec["restart_seconds"] = 0;
    env["OUT"] = out_;
    spec["launch"] = {
        {"command", {"/bin/sh", "-c", kWorker}}, {"env", env}, {"gpus_per_worker", 1}};
    auto r = admin_->Post("/v1/jobs", spec);
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  }

  // The elastic LOW job of the shrink tests: 2 to 4 GPUs, not a gang;
  // `extra` joins its spec.
  int64_t SubmitElastic(const json& extra, json env = json::object()) {
    json spec = {{"name", "elastic"},
                 {"min_gpus", 2},
                 {"max_gpus", 4},
                 {"gang", false},
                 {"priority", "LOW"}};
    spec.update(extra);
    return Submit(spec, env);
  }

  // The job; {} when stintd did not answer it.
  json Job(int64_t id) {
    json j = admin_->Get("/v1/jobs/" + std::to_string(id)).body;
    return j.is_object() ? j : json::object();
  }
  // The job's running segment; {} while it has none.
  json Segment(int64_t job) {
    const json j = Job(job);
    const json id = j.value("segment_id", json());
    for (const json& s : j.value("segments", json::array())) {
      if (s.is_object() && s.value("id", json()) == id) return s;
    }
    return json::object();
  }
  // The node window ids of the job's running segment, in placement order.
  std::vector<int64_t> PlacedWindows(int64_t job) {
    std::vector<int64_t> out;
    const json segment = Segment(job);  // null while the job waits for one
    if (!segment.is_object()) return out;
    for (const json& p : segment.value("placement", json::array()))
      out.push_back(p.value("window_id", int64_t{0}));
    return out;
  }

  // The workers the agents launched for `segment`: worker id -> pid, once
  // `n` of them wrote their pid file. Their env files name the segment.
  bool WaitForWorkers(int64_t segment, size_t n, std::map<int64_t, pid_t>* pids) {
    return Eventually(
        [&] {
          pids->clear();
          DIR* d = opendir(out_.c_str());
          if (d == nullptr) return false;
          std::vector<std::string> names;
          while (dirent* e = readdir(d)) names.push_back(e->d_name);
          closedir(d);
          for (const std::string& name : names) {
            if (name.rfind("pid-", 0) != 0 || name.find(".tmp") != std::string::npos) continue;
            const int64_t worker = std::stoll(name.substr(4));
            if (Env(worker, "STINT_SEGMENT_ID") != std::to_string(segment)) continue;
            (*pids)[worker] = static_cast<pid_t>(std::stol(ReadWholeFile(out_ + "/" + name)));
          }
          return pids->size() >= n;
        },
        60);
  }
  // A variable of a launched worker's environment ("" if unset).
  std::string Env(int64_t worker, const std::string& var) {
    const std::string env = "\n" + ReadWholeFile(out_ + "/env-" + std::to_string(worker));
    const size_t at = env.find("\n" + var + "=");
    if (at == std::string::npos) return "";
    const size_t from = at + var.size() + 2;
    return env.substr(from, env.find('\n', from) - from);
  }

  std::string out_;
};

// An elastic LOW job on two nodes (2 + 2 GPUs, min 2) shrinks for a HIGH job
// of 2: the node of its last allocation is released whole. Only the
// workers there get SIGTERM (and exit 75); the job stays RUNNING on the
// other node, whose workers run on untouched, and the HIGH job starts on
// the released node. When it is done, the elastic job grows back there.
TEST_F(AgentElasticTest, AShrinkSignalsOnlyTheLeavingNodesWorkers) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto a = Agent("na", "0,1");
  auto b = Agent("nb", "0,1");
  const int64_t elastic = SubmitElastic({{"checkpoint_seconds", 4}, {"remaining_seconds", 7200}});
  ASSERT_TRUE(Eventually([&] { return PlacedWindows(elastic).size() == 2; }, 30))
      << Job(elastic).dump();
  const int64_t segment = Job(elastic)["segment_id"];
  const std::vector<int64_t> windows = PlacedWindows(elastic);
  std::map<int64_t, pid_t> pids;
  ASSERT_TRUE(WaitForWorkers(segment, 4, &pids)) << a->output() << b->output();
  // The allocation's last window gives up its GPUs: its node's ranks leave.
  std::vector<int64_t> staying, leaving;
  for (const auto& [worker, pid] : pids) {
    const int rank = std::stoi(Env(worker, "RANK"));
    (rank >= 2 ? leaving : staying).push_back(worker);
    EXPECT_EQ(Env(worker, "STINT_WORKER_NAME"), (rank >= 2 ? "nb:" : "na:") + std::to_string(rank));
    // Node-local checkpoint roots: each worker knows its agent's node.
    EXPECT_EQ(Env(worker, "STINT_NODE_ID"), rank >= 2 ? "nb" : "na");
  }
  ASSERT_EQ(leaving.size(), 2u);

  const int64_t high = Submit({{"name", "high"}, {"min_gpus", 2}, {"priority", "HIGH"}});
  ASSERT_TRUE(Eventually([&] { return Job(high).value("state", "") == "RUNNING"; }, 60))
      << Job(high).dump() << Job(elastic).dump();
  EXPECT_EQ(PlacedWindows(high), std::vector<int64_t>{windows[1]}) << Job(high).dump();
  std::map<int64_t, pid_t> high_pids;
  ASSERT_TRUE(WaitForWorkers(Job(high)["segment_id"], 2, &high_pids)) << b->output();

  EXPECT_TRUE(b->WaitForLine("stint-agent: segment " + std::to_string(segment) +
                             ": shrink notice, ranks 2,3 leave"))
      << b->output();
  for (int64_t w : leaving) {
    SCOPED_TRACE("leaving worker " + std::to_string(w));
    EXPECT_TRUE(ProcessGone(pids[w]));
    const std::string log =
        ReadWholeFile(dir_.Sub("agent-nb") + "/job-" + std::to_string(elastic) + "/segment-" +
                 std::to_string(segment) + "/rank-" + Env(w, "RANK") + ".log");
    EXPECT_NE(log.find("got TERM"), std::string::npos) << log;
  }
  for (int64_t w : staying) {
    SCOPED_TRACE("staying worker " + std::to_string(w));
    EXPECT_FALSE(ProcessGone(pids[w])) << a->output();
    const std::string log =
        ReadWholeFile(dir_.Sub("agent-na") + "/job-" + std::to_string(elastic) + "/segment-" +
                 std::to_string(segment) + "/rank-" + Env(w, "RANK") + ".log");
    EXPECT_EQ(log.find("got TERM"), std::string::npos) << log;
  }
  EXPECT_EQ(a->output().find("notice"), std::string::npos) << a->output();
  // Shrunk, not preempted: the same segment runs on, on node na only; the
  // leavers' exit 75 did not end it.
  const json e = Job(elastic);
  EXPECT_EQ(e.value("state", ""), "RUNNING") << e.dump();
  EXPECT_EQ(e.value("segment_id", int64_t{0}), segment) << e.dump();
  EXPECT_EQ(e.value("preemptions", -1), 0) << e.dump();
  EXPECT_EQ(PlacedWindows(elastic), std::vector<int64_t>{windows[0]}) << e.dump();
  EXPECT_EQ(Segment(elastic)["allocs"].size(), 1u) << e.dump();
  // stintd released the registrations of node nb's workers and no others:
  // a leaver's credential is dead (410), a stayer's active.
  for (const auto& [w, pid] : pids) {
    HttpJson worker(daemon_->port(), Env(w, "STINT_WORKER_SECRET"));
    const auto r = worker.Post("/v1/workers/" + std::to_string(w) + "/heartbeat", json::object());
    const bool leaves = std::find(leaving.begin(), leaving.end(), w) != leaving.end();
    EXPECT_EQ(r.status, leaves ? 410 : 200) << "worker " << w << ": " << r.text;
    if (!leaves) {
      EXPECT_TRUE(r.body.value("active", false)) << r.text;
    }
  }

  // The HIGH job finishes: the elastic job grows back onto node nb, whose
  // agent starts ranks 2 and 3 of the same segment again.
  std::ofstream(out_ + "/finish-" + std::to_string(high)).put('\n');
  ASSERT_TRUE(Eventually([&] { return PlacedWindows(elastic) == windows; }, 60))
      << Job(elastic).dump() << Job(high).dump();
  EXPECT_EQ(Job(high).value("state", ""), "DONE") << Job(high).dump();
  EXPECT_EQ(Segment(elastic).value("gpus", 0), 4) << Job(elastic).dump();
  EXPECT_EQ(Job(elastic).value("segment_id", int64_t{0}), segment);
  EXPECT_TRUE(b->WaitForLine("stint-agent: segment " + std::to_string(segment) + " of job " +
                             std::to_string(elastic) + ": started ranks 2..3 of 4"))
      << b->output();
  std::map<int64_t, pid_t> again;
  ASSERT_TRUE(WaitForWorkers(segment, 6, &again)) << b->output();
  for (int64_t w : staying) EXPECT_EQ(again.at(w), pids.at(w)) << "a staying worker was restarted";
}

// A leaving worker that ignores the signal is SIGKILLed at the shrink's
// deadline; being killed is its leave too, not a crash of the job, whose
// segment runs on with the other node's workers.
TEST_F(AgentElasticTest, ALeaverIgnoringTheSignalIsKilledAtTheDeadlineAndTheJobRunsOn) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto a = Agent("na", "0,1");
  auto b = Agent("nb", "0,1");
  const int64_t elastic = SubmitElastic({{"checkpoint_seconds", 2}}, {{"STUBBORN", "nb:"}});
  ASSERT_TRUE(Eventually([&] { return PlacedWindows(elastic).size() == 2; }, 30))
      << Job(elastic).dump();
  const int64_t segment = Job(elastic)["segment_id"];
  std::map<int64_t, pid_t> pids;
  ASSERT_TRUE(WaitForWorkers(segment, 4, &pids)) << a->output() << b->output();
  const int64_t high = Submit({{"name", "high"}, {"min_gpus", 2}, {"priority", "HIGH"}});
  ASSERT_TRUE(b->WaitForLine("stint-agent: segment " + std::to_string(segment) +
                             ": shrink notice, ranks 2,3 leave"))
      << b->output();
  for (const auto& [w, pid] : pids) {
    if (Env(w, "STINT_WORKER_NAME").rfind("nb:", 0) != 0) continue;
    ASSERT_TRUE(Eventually([&, pid = pid] { return ProcessGone(pid); }, 60)) << b->output();
  }
  ASSERT_TRUE(Eventually([&] { return Job(high).value("state", "") == "RUNNING"; }, 60))
      << Job(high).dump() << Job(elastic).dump();
  EXPECT_TRUE(b->WaitForLine("stint-agent: segment " + std::to_string(segment) +
                             " rank 2 exited 137"))
      << b->output();
  for (const auto& [w, pid] : pids) {
    if (Env(w, "STINT_WORKER_NAME").rfind("na:", 0) == 0) {
      EXPECT_FALSE(ProcessGone(pid)) << w;
    }
  }
  const json e = Job(elastic);
  EXPECT_EQ(e.value("state", ""), "RUNNING") << e.dump();
  EXPECT_EQ(e.value("segment_id", int64_t{0}), segment) << e.dump();
  EXPECT_EQ(e.value("recent_crashes", -1), 0) << e.dump();
  EXPECT_EQ(Segment(elastic)["allocs"].size(), 1u) << e.dump();
}

// An elastic job at 2 of its max 4 GPUs on a node grows to 4 when the job
// beside it finishes: stintd adds the freed GPUs to its segment (allocs and
// placement, what stintctl shows), and the agent starts the two added
// ranks on them beside the running two, with the grown layout in their
// environment (they join the job's group as new members).
TEST_F(AgentElasticTest, AnElasticJobGrowsOntoFreedGpusAndTheAgentStartsTheAddedRanks) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto agent = Agent("ng", "0,1,2,3");
  const int64_t other = Submit({{"name", "other"}, {"min_gpus", 2}});
  ASSERT_TRUE(Eventually([&] { return PlacedWindows(other).size() == 1; }, 30))
      << Job(other).dump();
  const int64_t window = PlacedWindows(other)[0];
  const json other_gpus = Segment(other)["placement"][0]["gpus"];
  // Work left beyond stintd's grow threshold (--grow-min-seconds, 1800 s).
  const int64_t elastic =
      Submit({{"name", "elastic"}, {"min_gpus", 2}, {"max_gpus", 4}, {"remaining_seconds", 7200}});
  ASSERT_TRUE(Eventually([&] { return PlacedWindows(elastic).size() == 1; }, 30))
      << Job(elastic).dump();
  ASSERT_EQ(Segment(elastic)["gpus"], 2) << Job(elastic).dump();
  const int64_t segment = Job(elastic)["segment_id"];
  std::map<int64_t, pid_t> first;
  ASSERT_TRUE(WaitForWorkers(segment, 2, &first)) << agent->output();

  // The other job finishes; its GPUs go to the elastic job's segment.
  std::ofstream(out_ + "/finish-" + std::to_string(other)).put('\n');
  ASSERT_TRUE(Eventually([&] { return Job(other).value("state", "") == "DONE"; }, 30))
      << Job(other).dump() << agent->output();
  ASSERT_TRUE(Eventually([&] { return Segment(elastic).value("gpus", 0) == 4; }, 30))
      << Job(elastic).dump();
  const json seg = Segment(elastic);
  EXPECT_EQ(seg.value("id", int64_t{0}), segment) << "grown in place, not restarted";
  ASSERT_EQ(seg["placement"].size(), 1u) << seg.dump();
  const json placed = seg["placement"][0]["gpus"];
  ASSERT_EQ(placed.size(), 4u) << seg.dump();
  EXPECT_EQ(json::array({placed[2], placed[3]}), other_gpus) << seg.dump();

  std::map<int64_t, pid_t> all;
  ASSERT_TRUE(WaitForWorkers(segment, 4, &all)) << agent->output();
  EXPECT_TRUE(agent->WaitForLine("stint-agent: segment " + std::to_string(segment) + " of job " +
                                 std::to_string(elastic) + " grew: started ranks 2,3 of 4"))
      << agent->output();
  for (const auto& [w, pid] : all) {
    SCOPED_TRACE("worker " + std::to_string(w));
    EXPECT_FALSE(ProcessGone(pid));
    EXPECT_EQ(Env(w, "STINT_JOB_ID"), std::to_string(elastic));
    if (first.count(w)) continue;  // one of the two it started with
    const int rank = std::stoi(Env(w, "RANK"));
    ASSERT_TRUE(rank == 2 || rank == 3) << rank;
    EXPECT_EQ(Env(w, "LOCAL_RANK"), std::to_string(rank));
    EXPECT_EQ(Env(w, "WORLD_SIZE"), "4");
    EXPECT_EQ(Env(w, "LOCAL_WORLD_SIZE"), "4");
    EXPECT_EQ(Env(w, "CUDA_VISIBLE_DEVICES"), std::to_string(placed[rank].get<int>()));
    EXPECT_EQ(Env(w, "MASTER_ADDR"), "127.0.0.1");
    // The port the segment was given when it started, kept by the grow.
    EXPECT_EQ(Env(w, "MASTER_PORT"), std::to_string(seg.value("master_port", 0)));
    EXPECT_EQ(Env(w, "STINT_WORKER_NAME"), "ng:" + std::to_string(rank));
    EXPECT_FALSE(Env(w, "STINT_WORKER_SECRET").empty());
  }
  for (const auto& [w, pid] : first) EXPECT_EQ(all.at(w), pid) << "a first worker was restarted";
  // stintctl shows the grown segment: 4 GPUs, all in the node's window.
  RunResult ctl =
      RunProgram(STINTCTL_PATH, {"--url", daemon_->url(), "--token", StintdProcess::kAdminToken,
                                 "segments", "--job", std::to_string(elastic)});
  ASSERT_EQ(ctl.exit_code, 0) << ctl.output;
  EXPECT_NE(ctl.output.find(" w" + std::to_string(window) + ":4"), std::string::npos) << ctl.output;
  EXPECT_EQ(Job(elastic).value("state", ""), "RUNNING");
}

}  // namespace
}  // namespace stint
