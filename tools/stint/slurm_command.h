// `stint slurm submit` and `stint slurm status`: a training job on a Slurm
// cluster with no stint service, through the batch script that does it right.
#ifndef STINT_TOOLS_STINT_SLURM_COMMAND_H_
#define STINT_TOOLS_STINT_SLURM_COMMAND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "stint/status.h"

namespace stint {

// stint slurm submit [--root DIR] [--gpus-per-node N] [--lead S | --checkpoint-seconds S]
//                    [--script PATH|DIR] [--dry-run] [SBATCH-OPTION ...] -- COMMAND [ARG ...]
//
// Writes a batch script (--requeue, --open-mode=append, --signal=USR1@lead
// to every task, one srun task per GPU with --kill-on-bad-exit, the tasks
// started with USR1/USR2 ignored until stint's watcher takes them,
// STINT_SLURM_REQUEUE=script and `scontrol requeue` when srun exits 75 or,
// with a root, when it exits otherwise after the tasks recorded this run's
// decision to stop in ROOT/REQUEUE (a task that dies after its stop's
// checkpoint must not fail the job); an exit 0 at once when ROOT holds
// COMPLETE) and submits it with sbatch, printing the job id and where the
// script is; --dry-run prints the script instead. The script goes to
// --script (a file, or a directory to put it in), else into ROOT, else to
// a temporary file removed once submitted. The lead is --lead, else
// 2 x --checkpoint-seconds + 60, else the same from the slowest of ROOT's
// recent saves (SAVE_TIMES, written by the checkpointer), else 120 s.
// Options it does not know go to sbatch as #SBATCH lines: any form sbatch
// takes (sbatch_options.h). Returns the exit code.
int RunSlurmSubmit(const std::vector<std::string>& args);

// stint slurm status JOB [--root DIR]: the job as squeue sees it, and the
// root's checkpoints, its recent saves' times and its completion marker.
int RunSlurmStatus(const std::vector<std::string>& args);

// The script `submit` writes (exposed for its test).
struct SlurmSubmitSpec {
  std::string root;                  // "" when not given
  int gpus_per_node = 0;             // 0: sbatch options decide the tasks
  int lead_seconds = 120;            // --signal=USR1@lead
  std::string lead_note;             // where a measured lead came from; "" if not measured
  std::vector<std::string> sbatch;   // #SBATCH directives (SbatchDirective)
  std::vector<std::string> command;  // what each task runs
};
std::string SlurmBatchScript(const SlurmSubmitSpec& spec);

// A Slurm duration (--time, --time-min) in seconds: "M", "M:S", "H:M:S",
// "D-H", "D-H:M", "D-H:M:S"; kInvalidArgument naming the text otherwise.
Result<int64_t> ParseSlurmDuration(const std::string& text);

}  // namespace stint

#endif  // STINT_TOOLS_STINT_SLURM_COMMAND_H_
