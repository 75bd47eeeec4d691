// A Slurm job's end and its requeue, for a job run with srun (one task per
// GPU) and no stint service (see stint/launch_env.h for the ranks).
//
//   auto end = stint::SlurmJobEndTime(env.job_id);   // plan the last checkpoint
//   ... the emergency checkpoint is durable ...
//   if (env.rank == 0) stint::SlurmRequeue(env.job_id);  // then exit kExitRequeue
//
// Slurm 22.05 facts these rely on (../shared/research/cluster_engines_2026.md):
// SLURM_JOB_END_TIME exists from 23.02 only, so older releases are asked
// once through squeue; a job that exits by itself during a preemption's
// GraceTime is not requeued, so the job requeues itself; `scontrol requeue`
// of a running job ends it at once, so only after the checkpoint is durable.
#ifndef STINT_INCLUDE_STINT_SLURM_H_
#define STINT_INCLUDE_STINT_SLURM_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "stint/env.h"
#include "stint/preemption.h"
#include "stint/status.h"

namespace stint {

// When job `job_id` will be killed for its time limit: SLURM_JOB_END_TIME
// (UNIX seconds; Slurm 23.02+) where set, else `squeue -h -j JOB -o %e`
// (local time, as squeue prints it). nullopt when the job has no limit.
// kNotFound when squeue is missing or does not know the job; kInvalidArgument
// naming the text for an end time that does not parse; kDeadlineExceeded
// when squeue takes longer than `timeout` (slurmctld unreachable).
Result<std::optional<std::chrono::system_clock::time_point>> SlurmJobEndTime(
    const std::string& job_id, std::chrono::milliseconds timeout = std::chrono::seconds(30));

// `scontrol requeue JOB`: the job goes back to the queue under the same id
// (SLURM_RESTART_COUNT + 1) and every task of this run is killed at once.
// Call it from one task, once its checkpoint is durable. kNotFound when
// scontrol is missing (inside a container: exit kExitRequeue and let the
// batch script requeue); kFailedPrecondition with scontrol's message when
// it refuses (a job without --requeue, JobRequeue=0).
Status SlurmRequeue(const std::string& job_id,
                    std::chrono::milliseconds timeout = std::chrono::seconds(60));

// ROOT/REQUEUE: the record each task of a run under Slurm writes once the
// run's stop is decided and its checkpoint settled, before it exits
// kExitRequeue. One line: "slurm_job=ID restart=N step=S durable=D|none".
// `stint slurm submit`'s batch script requeues a run whose tasks then exit
// otherwise (one died of a signal after the stop) when the record names its
// own job and restart; a crash before any stop leaves none (or a stale one)
// and fails the job. Every rank writes it: whichever task dies first, the
// record is there.
constexpr char kSlurmStopRecordName[] = "REQUEUE";

// Writes ROOT/REQUEUE durably: a temporary file of this rank, synced,
// renamed over it, ROOT synced. `durable_step`: the newest durable step,
// nullopt when none. kInvalidArgument for an empty root or job id.
Status RecordSlurmStop(Env* env, const std::string& root, int rank, const std::string& job_id,
                       int restart_count, uint64_t step, std::optional<uint64_t> durable_step);

// SlurmEndClock: the step boundary from which a job with a time limit must
// stop for its last checkpoint to fit before the end (SlurmJobEndTime),
// even when no --signal warning comes: the time left is at most the
// checkpoint's estimate (CheckpointCost: fixed seconds plus bytes over the
// measured throughput; 10 s while nothing was measured), two steps (the
// spacing of the calls, a decaying maximum) and `safety`.
class SlurmEndClock {
 public:
  using SystemTime = std::chrono::system_clock::time_point;
  SlurmEndClock(SystemTime end, std::chrono::milliseconds safety) : end_(end), safety_(safety) {}

  // Call at every step boundary: the seconds left to the end when the run
  // must stop now, else nullopt.
  std::optional<double> Due(const CheckpointCost& cost,
                            SystemTime now = std::chrono::system_clock::now());
  SystemTime end() const { return end_; }

 private:
  SystemTime end_;
  std::chrono::milliseconds safety_;
  std::optional<SystemTime> last_boundary_;
  double step_seconds_ = 0;
};

// A time as Slurm's CLIs print it: "2026-12-05T06:10:00", the controller's
// local time. nullopt for NONE, N/A, Unknown, INVALID and UNLIMITED;
// kInvalidArgument naming the text otherwise.
Result<std::optional<std::chrono::system_clock::time_point>> ParseSlurmTime(
    const std::string& text);

}  // namespace stint

#endif  // STINT_INCLUDE_STINT_SLURM_H_
