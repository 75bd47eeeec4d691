// NodeAgent: one machine's GPUs lent to stintd as a window (API.md,
// "Nodes"). Register() makes (or, after a restart of the agent, finds) the
// node's window; Run() heartbeats until a stop signal arrives, then closes
// the window, or until stintd closed it (an admin, or a silence longer than
// stintd's node TTL), or until the window's end passed.
//
// Launching (API.md, "Launching"): each heartbeat answers the segments with
// GPUs here; the agent starts their workers with torchrun's environment,
// one process group each, killed if the agent dies (PR_SET_PDEATHSIG), logs
// in the workdir; forwards a notice as the job's signal, SIGKILLs at the
// deadline or when the segment is no longer listed, and reports how the
// workers exited, once stintd has their output up to the exit. A worker
// that crashes while its segment runs (no notice) is reported and started
// again, so it rejoins the elastic group; the crash-loop guard at stintd
// ends a job that keeps crashing.
//
// Evaluations (API.md, "Evaluation") run until their deadline; the agent, a
// child subreaper, then kills and waits for every process of one
// (ProcessTree), before it reports it or starts a segment's workers on its
// GPU, and when it stops.
//
// Confined to the thread that calls Run(): the signals it waits for must be
// blocked in every thread (main() blocks them before anything starts).
#ifndef STINT_TOOLS_STINT_AGENT_NODE_AGENT_H_
#define STINT_TOOLS_STINT_AGENT_NODE_AGENT_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "stint-agent/job_users.h"
#include "stint-agent/process_tree.h"
#include "stint/status.h"

namespace stint {
namespace internal {
class HttpJsonClient;
}

namespace agent {

struct LaunchPlan;  // node_agent.cc: one assignment's launch, read once

struct NodeAgentOptions {
  std::string url = "http://127.0.0.1:7077";  // stintd
  std::string token;                           // an agent token (--agent-token-file of stintd)
  // https: PEM file of the CAs stintd's certificate must chain to; passed
  // to the workers as STINT_CA_FILE (made absolute). Default: "" (the
  // system's CAs).
  std::string ca_file;
  std::string node;                            // REQUIRES: [A-Za-z0-9._-]{1,128}
  std::string pool;                            // REQUIRES: exists in stintd; joining: may be empty
  std::vector<int> gpus;                       // GPU indices on this machine; REQUIRES: non-empty
  // The window's end (ms since the epoch); nullopt: open-ended, which
  // stintd accepts only for spot windows. Neither an end nor `spot`: the
  // agent joins the admin window that names the node (it lends none of
  // its own; the window's end, kind and lead are the admin's).
  std::optional<int64_t> end_ms;
  bool spot = false;
  double notice_lead_seconds = 0;  // spot: the notice its segments get when it closes
  // Per-segment logs go here (job-<id>/segment-<id>/rank-<r>.log); created
  // if missing. Default: "stint-agent" in the current directory.
  std::string workdir = "stint-agent";
  // Where this node's workers reach each other (MASTER_ADDR when one of
  // them is rank 0). Default: "" (stintd then uses the node name).
  std::string addr;
  // Between heartbeats. stintd closes the window of a node silent for its
  // --node-ttl-seconds (default 30), so this must be well below that.
  // Default: 5 s.
  std::chrono::milliseconds heartbeat_interval{std::chrono::seconds(5)};
  // Each heartbeat waits at stintd up to heartbeat_interval (stintd caps
  // it at a third of its node TTL and lease) for the node's assignments to
  // change, and the next follows at once: a granted segment starts (a
  // notice is forwarded) within a round trip, not at the next beat. A
  // stintd without it answers at once; the agent then beats every interval.
  // Default: true.
  bool long_poll = true;
  // How long one call may retry an unreachable stintd. Default: 10 s.
  std::chrono::milliseconds call_deadline{std::chrono::seconds(10)};
  // Evaluations of jobs' checkpoints (API.md, "Evaluation") this node runs
  // at once on what its segments leave over (a CPU slot at the lowest CPU
  // priority, or a GPU no segment holds); 0: none. Default: 1.
  int eval_slots = 1;
  // The user jobs' processes (workers, evaluations) run as (JobUsers): one
  // user for all (job_user, a name or uid), or a uid of its own per job
  // from the range "FIRST-LAST" (job_uids). Either needs an agent running
  // as root. Default: neither, the agent's own user.
  std::string job_user;
  std::string job_uids;
};

// Why Run() returned.
enum class AgentExit {
  kStopped,         // a stop signal: the window was closed by us
  kWindowClosed,    // stintd closed the window (410), or its end passed
  kCloseFailed,     // a stop signal, but stintd could not be told
};

class NodeAgent {
 public:
  // Checks the options (kInvalidArgument naming the flag); connects lazily.
  static Result<std::unique_ptr<NodeAgent>> Create(NodeAgentOptions options);
  ~NodeAgent();
  NodeAgent(const NodeAgent&) = delete;
  NodeAgent& operator=(const NodeAgent&) = delete;

  // Registers the node. On success window_id() is its window. kAlreadyExists
  // when the node is registered with another pool or other GPUs, or its
  // window is closing; kUnavailable when stintd cannot be reached.
  Status Register();
  int64_t window_id() const { return window_id_; }

  // Heartbeats every heartbeat_interval until one of `stop_signals` is
  // delivered (REQUIRES: blocked in every thread) or the window ends.
  // Progress lines go to stdout ("stint-agent: ..."), errors to stderr.
  // No process of an evaluation outlives it.
  AgentExit Run(const std::vector<int>& stop_signals);

 private:
  NodeAgent(NodeAgentOptions options, std::unique_ptr<internal::HttpJsonClient> http,
            JobUsers job_users);
  // Run()'s heartbeats, until it returns.
  AgentExit Serve(const std::vector<int>& stop_signals);
  Status CloseWindow();
  // One heartbeat: reports running and exited segments, then acts on the
  // assignments. kAborted: the window closed.
  // `may_wait`: a long poll (options_.long_poll) when stintd gave a tag;
  // polled_ says whether the next may follow at once.
  Status Beat(bool may_wait = false);
  // Starts the segment's workers; with `only_process` >= 0 that one of them
  // again (a crashed worker), in place of its earlier process.
  void Launch(const void* assignment, int only_process = -1);  // void: json stays out of here
  struct SegmentRun;
  // Launch's steps: what a call starts, in place of a crashed process
  // (kRestart), for a new segment, or on the GPUs a grow added.
  enum class LaunchKind { kNew, kGrow, kRestart };
  // Whether process `only_process` of the plan's segment runs again: only
  // on the GPUs it had.
  bool RestartsInPlace(const LaunchPlan& plan, int only_process);
  // The plan's processes to start: all, or for a run that grew (`grown`)
  // those on GPUs none of its processes holds.
  static std::vector<int> Unstarted(const LaunchPlan& plan, const SegmentRun* grown);
  // The registrations of plan.starts (plan.regs); false: start nothing.
  bool RegisterWorkers(LaunchPlan& plan);
  // Forks plan.starts into `run` (a new or grown run) or in place of the
  // crashed process (kRestart), and records them.
  void StartWorkers(const LaunchPlan& plan, LaunchKind kind, SegmentRun& run);
  void Reap();
  void KillRun(int64_t segment_id, int sig);
  // A shrink notice (`notice`, a json object, names the GPUs that leave):
  // the workers all of whose GPUs leave get the job's signal, and SIGKILL
  // once its deadline passed; the others run on.
  void ShrinkNotice(int64_t segment_id, SegmentRun& run, const void* notice, int64_t now);
  bool AnyRunning() const;
  // Evaluations: stops those stintd no longer lists (their GPU went to a
  // segment), then starts the new ones; `evals` is the answer's list.
  void RunEvaluations(const void* evals);
  // Ends evaluations whose deadline passed or whose command exited: their
  // whole process tree is killed and waited for, up to `wait`. An
  // evaluation counts as exited (reported, or dropped when stintd stopped
  // it) only once every process of it is gone. The GPUs of those still
  // dying.
  std::set<int> SettleEvaluations(std::chrono::milliseconds wait);
  struct EvalRun {
    int64_t job_id = 0;
    pid_t pid = 0;                      // also its process group
    std::unique_ptr<ProcessTree> tree;  // every process it started
    int gpu = -1;                       // -1: CPU only
    std::string log;
    double timeout_seconds = 0;  // eval.timeout_seconds
    int64_t deadline_ms = 0;     // wall clock: killed past it
    bool reaped = false;         // the command exited (`code`)
    bool killed = false;         // its processes are being killed
    bool stopped = false;        // by stintd: nothing to report
    std::string why;             // the reason of a kill, for the report
    bool exited = false;         // all of it gone
    int code = 0;
  };
  std::map<int64_t, EvalRun> evals_;  // by evaluation id

  struct WorkerProc {
    pid_t pid = 0;  // also its process group
    int rank = 0;
    std::vector<int> gpus;  // the GPU indices it was given
    bool leaving = false;   // a shrink notice named its GPUs: signalled, killed at the deadline
    std::string log;
    uint64_t log_sent = 0;  // bytes of `log` stintd took (the heartbeat's "logs")
    // The size of `log` when the process was reaped: its exit (or crash) is
    // reported only once stintd took the log up to here.
    uint64_t log_end = 0;
    bool exited = false;
    int code = 0;  // exit status, or 128 + signal
    int index = 0;  // among the processes this agent starts for the segment
    // Crashed while the segment runs: reported to stintd ("crashed"), then
    // started again unless the crash-loop guard ended the segment.
    bool relaunch = false;
    bool crash_sent = false;
  };
  struct SegmentRun {
    int64_t job_id = 0;
    std::vector<WorkerProc> procs;
    int signal = 0;            // forwarded on a notice
    // launch.restart_crashed: false (and any torchrun launch) makes a crash
    // end the segment (the others are killed; the crashed rank's exit is the
    // segment's).
    bool restart_crashed = true;
    int crash_rank = -1;  // that rank, once one crashed; -1: none
    bool signalled = false;
    int64_t deadline_ms = 0;   // from the notice; 0: none
    int64_t leave_deadline_ms = 0;  // from a shrink notice (its leaving ranks); 0: none
    bool done = false;         // every worker exited
    int exit_code = 0;
    std::string message;
  };

  // What a worker wrote since stintd last took it (the heartbeat's "logs").
  struct LogPiece {
    int64_t segment_id = 0;
    WorkerProc* proc = nullptr;  // its log_sent becomes offset + size once stintd took it
    uint64_t offset = 0;
    uint64_t size = 0;  // file bytes; `text` is them as valid UTF-8
    std::string text;
  };
  std::vector<LogPiece> CollectLogs();
  // Whether stintd has (or, with `pieces` taken, will have) the log of `p`
  // up to its exit.
  static bool LogCaughtUp(const WorkerProc& p, const std::vector<LogPiece>& pieces);

  // The jobs with a process here (running, or a crashed one to start again).
  std::set<int64_t> ActiveJobs() const;

  const NodeAgentOptions options_;
  const std::unique_ptr<internal::HttpJsonClient> http_;
  JobUsers job_users_;
  int64_t window_id_ = 0;
  int64_t window_end_ms_ = 0;  // 0: none known (open-ended)
  std::map<int64_t, SegmentRun> runs_;  // by segment id
  bool adopted_window_ = false;  // Register() found the window of an earlier agent
  bool beaten_ = false;          // a heartbeat was answered
  // Exited workers' output is still to go up: the next beat comes at once.
  bool draining_ = false;
  std::string assignments_tag_;  // of the last answer ("": none known)
  bool polled_ = false;          // the next beat may come at once, as a long poll
};

}  // namespace agent
}  // namespace stint

#endif  // STINT_TOOLS_STINT_AGENT_NODE_AGENT_H_
