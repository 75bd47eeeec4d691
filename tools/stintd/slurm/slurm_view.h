// SlurmView: what stintd --slurm reads of a Slurm cluster in one poll, parsed
// from the commands every Slurm 22.05+ controller answers without a REST
// daemon: `scontrol show node -o` (nodes), `squeue --json` (jobs, finished
// ones too for MinJobAge), `scontrol show reservation -o` (reservations)
// and, for jobs squeue forgot, `sacct` (how they ended). Pure parsing, no
// I/O: the executor runs the commands (slurm_executor.h), tests feed
// recorded output.
//
// Nodes come from scontrol's one-line KEY=VALUE records, whose keys have
// not changed from 22.05 to 25.05, not from `sinfo --json`, whose layout
// did (22.05 lists "nodes"; 23.02+ answer {"sinfo": [...]} of per-partition
// groups). Both squeue JSON dialects are read: 22.05's (job_state a string,
// exit_code the raw wait status) and 23.02+'s (arrays of states, exit_code
// an object); the "jobs" array and the fields read are in both.
#ifndef STINT_TOOLS_STINTD_SLURM_SLURM_VIEW_H_
#define STINT_TOOLS_STINTD_SLURM_SLURM_VIEW_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "stint/status.h"

namespace stint::stintd {

struct SlurmNode {
  std::string name;
  std::string address;  // NodeAddr ("" when scontrol gives none)
  // Base state and flags, upper case: "IDLE", "MIXED", "ALLOCATED", "DOWN",
  // ...; flags "DRAIN", "NOT_RESPONDING", "MAINTENANCE", ...
  std::string state;
  std::vector<std::string> flags;
  int gpus = 0;  // from gres "gpu:N" / "gpu:TYPE:N(S:..)"; 0 without GPUs
  std::vector<std::string> partitions;
  std::string reason;
  // Whether Slurm would start a job here now: up (IDLE, MIXED or ALLOCATED,
  // COMPLETING included) and neither draining, failing, rebooting nor
  // powered down.
  bool Schedulable() const;
  bool InPartition(const std::string& partition) const;
};

struct SlurmJob {
  int64_t id = 0;
  std::string name;
  std::string state;               // upper case: PENDING, RUNNING, COMPLETED, FAILED, ...
  std::vector<std::string> nodes;  // expanded; empty while pending
  std::string partition;
  std::string reason;  // state_reason ("None", "Resources", "NonZeroExitCode", ...)
  // How its batch script ended: the exit status, or 128 + N for a signal.
  int exit_code = 0;
  int64_t start_time = 0;  // seconds since the epoch; 0 when unknown
  int64_t end_time = 0;
  // The GPUs it holds on each of `nodes` (gres_detail "gpu:2(IDX:0-1)";
  // empty once it ended). GpusOn() of a node it does not hold is 0.
  std::vector<int> node_gpus;
  int GpusOn(const std::string& node) const;
  // A heterogeneous job's components are listed apart, each with its own id
  // and nodes: het_job_id is the first component's id (0 for a job of one
  // component), which runs the batch script and answers for the whole job.
  int64_t het_job_id = 0;
  int64_t het_job_offset = 0;
  // Whether the job still holds (or will hold) its nodes: PENDING,
  // CONFIGURING, RUNNING, COMPLETING, SUSPENDED, REQUEUED, RESIZING.
  bool Live() const;
  // Whether Slurm gave it nodes but could not start its batch script there:
  // FAILED for JobLaunchFailure (slurmstepd could not set it up), or
  // CANCELLED within a second of its start with nodes (a launch RPC the node
  // refused; Slurm cancels a job it may not requeue). Not a job that was
  // cancelled while pending: that one has no nodes.
  bool LaunchFailed() const;
};

struct SlurmReservation {
  std::string name;
  int64_t start_ms = 0;  // ms since the epoch
  int64_t end_ms = 0;
  std::vector<std::string> nodes;  // expanded
  std::vector<std::string> flags;  // MAINT, IGNORE_JOBS, ...
};

// `scontrol show node -o`: one line per node, KEY=VALUE fields (a value with
// spaces, like OS= or Reason=, runs to the next KEY=). State is
// BASE[+FLAG...], the base possibly marked as sinfo marks it ("IDLE*": not
// responding, "~": powered down). kInvalidArgument naming what did not parse.
Result<std::vector<SlurmNode>> ParseNodes(const std::string& text);
// `squeue --json`.
Result<std::vector<SlurmJob>> ParseSqueueJson(const std::string& text);
// `sacct --noheader --parsable2 --format=JobIDRaw,State,ExitCode,JobName`,
// with or without --completion (the job-completion log): how jobs ended,
// one line per job (the last line of an id wins: the completion log keeps
// every end of a job that was requeued).
// Each gives id, name, state (the first word: "CANCELLED by 0" is
// CANCELLED) and exit_code (ExitCode "CODE:SIGNAL": CODE, or 128 + SIGNAL);
// step lines ("7201.batch") are skipped. kInvalidArgument naming a line
// that does not parse.
Result<std::vector<SlurmJob>> ParseSacct(const std::string& text);
// `scontrol show reservation -o`: one line per reservation, KEY=VALUE
// fields; "No reservations in the system" is none. Times are the
// controller's local time, as scontrol prints them.
Result<std::vector<SlurmReservation>> ParseReservations(const std::string& text);

// A Slurm time limit for `seconds` (>= 60): "MINUTES:SECONDS", rounded down.
std::string SlurmTimeLimit(int64_t seconds);

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SLURM_SLURM_VIEW_H_
