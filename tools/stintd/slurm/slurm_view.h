// SlurmView: what stintd --slurm reads of a Slurm cluster in one poll, parsed
// from the commands every Slurm 22.05+ controller answers without a REST
// daemon: `sinfo --json` (nodes), `squeue --json` (jobs, finished ones too
// for MinJobAge) and `scontrol show reservation -o` (reservations; scontrol
// has no --json in 22.05). Pure parsing, no I/O: the executor runs the
// commands (slurm_executor.h), tests feed recorded output.
//
// Both JSON dialects are read: 22.05's (job_state a string, exit_code the
// raw wait status) and 23.02+'s (arrays of states, exit_code an object).
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
  std::string address;  // NodeAddr ("" when sinfo gives none)
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

// `sinfo --json`: one entry per node (sinfo lists a node once per
// partition in text mode; the JSON lists it once with its partitions).
// kInvalidArgument naming what did not parse.
Result<std::vector<SlurmNode>> ParseSinfoJson(const std::string& text);
// `squeue --json`.
Result<std::vector<SlurmJob>> ParseSqueueJson(const std::string& text);
// `scontrol show reservation -o`: one line per reservation, KEY=VALUE
// fields; "No reservations in the system" is none. Times are the
// controller's local time, as scontrol prints them.
Result<std::vector<SlurmReservation>> ParseReservations(const std::string& text);

// A Slurm time limit for `seconds` (>= 60): "MINUTES:SECONDS", rounded down.
std::string SlurmTimeLimit(int64_t seconds);

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SLURM_SLURM_VIEW_H_
