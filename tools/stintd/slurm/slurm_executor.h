// SlurmExecutor: stintd --slurm. stintd decides (its queue, guarantees,
// fragment fitting, preemption), Slurm runs: the executor takes the place
// of stint-agent for the nodes of the Slurm partitions it is given, with no
// stint process on them.
//
// Every poll it reads the cluster (slurm_view.h) and reconciles:
//   windows   each node of a partition with GPUs that Slurm would schedule
//             now (up, not draining, outside an active reservation) lends
//             one node window in the pool named like the partition, of the
//             GPUs no job but ours holds there: hard, ending where the next
//             reservation over the node starts, or open-ended (spot) with
//             the notice lead when none is known. A window closes when its
//             node stops being schedulable (with the lead; at once for a
//             node that is DOWN or not responding) or another job takes
//             GPUs it lends (a smaller one follows), and is cut short when
//             a reservation appears.
//   liveness  the nodes' windows are kept (heartbeaten) by a thread of
//             their own, from Slurm's node states of the last view read:
//             a slow or failing Slurm command (a slurmctld restart) keeps
//             the last view, and closes no window; a node Slurm reports
//             down or not responding closes at once.
//   segments  each segment placed on these windows becomes one Slurm job
//             ("stint.<tag>.<segment>") bound to its nodes, one component
//             per node (a heterogeneous job when there are several) asking
//             exactly the GPUs its placement has there (--nodelist,
//             --gres=gpu:N, --time = the window's remaining time less the
//             margin, --no-requeue: stintd requeues), one srun task per
//             worker in placement order, each registered as a worker of
//             the segment beforehand (its secret reaches the task through
//             the job's environment, never its command line or script).
//             Submits and cancels run after the view is reconciled and its
//             exits reported.
//   notices   a notified segment's job gets the launch spec's signal
//             (scancel --signal); so does a shrinking one (a step's tasks
//             cannot be signalled apart: the whole segment stops and the
//             job restarts at its new size); a segment that ended while
//             its job runs is cancelled.
//   exits     a job that ended maps back: 0 -> DONE (once the job
//             completed), 75 -> queued again, 76 -> FAILED, any other code
//             through the crash-loop guard; a job that Slurm ended itself
//             (preempted, timed out, node failure) or did not start within
//             the start timeout -> queued again.
// The map segment -> Slurm job is Slurm's own (the job names), so a
// restarted stintd finds its jobs again, and durable in stintd's store
// (the segment's external_id): a segment whose job squeue no longer lists
// (it ended while stintd was down past MinJobAge) is never submitted
// twice. How its job ended comes from Slurm's accounting (sacct), or where
// accounting storage is off, its job-completion log (sacct --completion),
// and maps as above; where neither knows the job, it is queued again.
#ifndef STINT_TOOLS_STINTD_SLURM_SLURM_EXECUTOR_H_
#define STINT_TOOLS_STINTD_SLURM_SLURM_EXECUTOR_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "stint/status.h"
#include "stintd/server/coordinator.h"
#include "stintd/slurm/slurm_view.h"

namespace stint::stintd {

struct SlurmExecutorOptions {
  // The partitions whose nodes lend windows, each in the pool of its name
  // (made if missing). A node in several goes to the first listed.
  std::vector<std::string> partitions;
  std::string coord_url;  // where the workers reach stintd (STINT_COORD_URL)
  std::string ca_file;    // https: passed to the workers as STINT_CA_FILE
  // Slurm job names are "stint.<tag>.<segment id>": two stintds on one
  // cluster need different tags.
  std::string tag = "stintd";
  // Batch scripts and the jobs' output: <workdir>/job-<J>/segment-<S>.{sh,log}.
  // It must be readable where the batch script starts (a shared file system
  // on a real cluster).
  std::string workdir;
  std::chrono::milliseconds poll_interval{std::chrono::seconds(2)};
  double notice_lead_seconds = 60;  // an open-ended node window's notice when it closes
  // A partition's own lead, where it has one (a spot or cloud partition that
  // warns its nodes' jobs that long before taking them).
  std::map<std::string, double> partition_notice_lead_seconds;
  // A segment's Slurm time limit ends this long before its window, so the
  // planner's notice, not Slurm's kill, ends it.
  double margin_seconds = 30;
  double start_timeout_seconds = 120;  // a job not started by then is cancelled and requeued
  double exit_grace_seconds = 60;      // srun --wait: how long the other tasks get after one exits
  std::chrono::milliseconds command_timeout{std::chrono::seconds(30)};
  // With a store several stintds share: the leader epoch this stintd acts
  // at (in each sbatch --comment), and whether it still holds the lease,
  // asked before every sbatch and scancel. Empty: always.
  int64_t epoch = 0;
  std::function<bool()> may_act;
};

class SlurmExecutor {
 public:
  // Checks the options and that sinfo answers and knows every partition
  // (kInvalidArgument / kNotFound naming it), makes the pools, and starts
  // the polling thread.
  static Result<std::unique_ptr<SlurmExecutor>> Start(Coordinator* coordinator,
                                                      SlurmExecutorOptions options);
  ~SlurmExecutor();  // stops and joins the thread; Slurm jobs run on
  SlurmExecutor(const SlurmExecutor&) = delete;
  SlurmExecutor& operator=(const SlurmExecutor&) = delete;

 private:
  SlurmExecutor(Coordinator* coordinator, SlurmExecutorOptions options);
  void Loop();
  // Heartbeats the nodes that the last view found up, with the segments
  // they run, every third of the node TTL.
  void HeartbeatLoop();
  // One reconciliation (above). Errors of one node or segment are logged
  // and the rest goes on; an unreadable cluster view skips the poll.
  Status Poll();

  struct Cluster {
    std::vector<SlurmNode> nodes;
    std::vector<SlurmJob> jobs;
    std::vector<SlurmReservation> reservations;
    // segment id -> its newest Slurm job (a heterogeneous job's first
    // component, which answers for the whole job)
    std::map<int64_t, const SlurmJob*> ours;
  };
  Result<Cluster> ReadCluster() const;
  // Per node: its exits and running segments, reported by its heartbeat.
  struct NodeReport {
    std::vector<int64_t> running;
    std::vector<Coordinator::NodeExit> exits;
  };
  // What a poll does to Slurm once its view is reconciled (slow commands).
  struct Action {
    int64_t segment_id = 0;
    int64_t slurm_job = 0;           // 0: submit the segment; else scancel this job
    std::string signal;              // scancel --signal ("" cancels)
    std::vector<std::string> nodes;  // a submit's: they report its failure
  };
  void Act(const Action& action, TimeMs now);
  void Beat(const std::string& node, const std::vector<int64_t>& running,
            const std::vector<Coordinator::NodeExit>& exits);
  // Fills *live with the managed nodes Slurm reports up.
  void ReconcileWindows(const Cluster& cluster, TimeMs now, std::set<std::string>* managed,
                        std::set<std::string>* live);
  void ReconcileSegments(const Cluster& cluster, TimeMs now, const std::set<std::string>& managed,
                         std::map<std::string, NodeReport>* reports, std::vector<Action>* actions);
  // Registers the segment's workers and submits its Slurm job. The error
  // ends the segment as a crash (the crash-loop guard stops a job whose
  // launch never works).
  Status Submit(int64_t segment_id, TimeMs now);
  Status Cancel(int64_t slurm_job, const std::string& signal = "");
  // kAborted ("fenced") once this stintd no longer holds the lease.
  Status MayAct(const std::string& what) const;
  // How the Slurm jobs `ids`, which squeue forgot, ended, by id, and the
  // command that said so: sacct, or where it fails (accounting storage
  // disabled) sacct --completion. Jobs it does not know are left out; the
  // error says why neither answered.
  struct Accounted {
    std::string source;
    std::map<int64_t, SlurmJob> jobs;
  };
  Result<Accounted> Accounting(const std::vector<int64_t>& ids) const;
  std::string JobPrefix() const;  // "stint.<tag>.": the names of this stintd's jobs
  std::string JobName(int64_t segment_id) const;

  Coordinator* const coordinator_;
  const SlurmExecutorOptions options_;
  // Soft state, rebuilt from Slurm after a restart: when each segment's job
  // was submitted (its start timeout counts from there) and the segments
  // whose notice was forwarded.
  std::map<int64_t, TimeMs> submitted_ms_;
  std::set<int64_t> signalled_;
  std::map<std::string, std::string> logged_;  // last error logged per subject, to log changes once

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  // The last view's up nodes and what each runs: the heartbeat thread's.
  std::map<std::string, std::vector<int64_t>> live_;  // guarded by mu_
  std::thread thread_;                                // last: started once the rest exists
  std::thread heartbeat_thread_;
};

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SLURM_SLURM_EXECUTOR_H_
