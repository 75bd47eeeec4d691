// ResumableTraining: the few lines a LibTorch training loop adds to become
// preemption-safe and exactly resumable.
//
//   stint::ResumableSampler sampler = stint::ResumableSampler::Create(data_config).value();
//   auto run = stint::ResumableTraining::Create(options, model, optimizer, &sampler).value();
//   uint64_t step = run->Resume().value();             // 0 on a fresh start
//   while (step < total_steps) {
//     auto ids = sampler.RankIndices(rank, world).value();
//     ...forward, backward...
//     run->BeforeOptimizerStep();                      // the lazy barrier (SnapshotMode::kLazy)
//     optimizer.step();
//     auto action = run->StepBoundary(++step).value(); // commits the data cursor, saves,
//     preemption if (action.exit) return action.exit_code;        // kExitRequeue: run me again
//   }
//   run->Finish(step);                                 // final checkpoint, durable
//
// A checkpoint holds the module's parameters and buffers, the optimizer's
// state and hyper-parameters, the sampler's cursor and data fingerprint,
// every LibTorch generator (CPU and each CUDA device), the step, and named
// user state (an LR scheduler's JSON, counters). Resume() restores all of
// it from the newest checkpoint that verifies.
//
// Launched by Slurm (srun, one task per GPU) or torchrun with several ranks
// and given no group, Create() forms the job's group itself (LaunchedGroup:
// a TCPStore at the master, Gloo over it, the commit channel on the same
// store); group() hands it to the loop for its gradients. Under Slurm it
// also watches SIGUSR2 (besides SIGTERM and SIGUSR1: --signal's warning,
// preemption's GraceTime SIGTERM), stops in time for its last checkpoint
// before the job's end (SlurmEndClock) even without a warning, records
// every stop in ROOT/REQUEUE (RecordSlurmStop: `stint slurm submit`'s
// script requeues on it if a task dies after the stop), and once a
// stop's checkpoint is durable rank 0 requeues the job as this object is
// destroyed (`scontrol requeue`, which ends every task at once; with
// STINT_SLURM_REQUEUE=script the tasks only exit kExitRequeue and the
// batch script requeues). Finish() writes the root's COMPLETE marker;
// Resume() of a completed run says so (complete()), so a later start of the
// same run (a requeue racing the end, a resubmission) exits 0 at once.
//
// Several ranks (data parallel: options.checkpoint.world_size > 1 with a
// commit_channel, see stint/checkpointer.h): every rank calls the same
// methods at the same steps; each saves its own sampler cursor, generators
// and user state, rank 0 alone the module and optimizer (the same on every
// rank, so written once), and every rank loads them on Resume(). The stop
// is agreed over options.process_group (the job's c10d group, the one DDP
// uses): a preemption notice to any rank stops every rank at the same step,
// with one emergency checkpoint taken by all or by none.
//
// Snapshots: a model on a CUDA device is copied device-to-host into pinned
// staging on copy streams (a CUDA copier is made when
// options.checkpoint.device_copier is null). With SnapshotMode::kEager (the
// default) the save waits for those copies; with kLazy it returns at once,
// the next forward pass waits for the buffers' copies (StepBoundary orders
// it) and BeforeOptimizerStep() for the parameters' and optimizer state's.
// On a device only the compute stream waits; on the CPU the copy threads
// run while the forward and backward passes compute.
//
// On a preemption notice (signal or Notify()), StepBoundary() takes an
// emergency checkpoint when it fits in the remaining grace, otherwise reports
// how many steps will be lost, and asks the loop to exit with kExitRequeue.
// Once StepBoundary() asked to exit, or Finish() succeeded, the preemption
// signals stay caught until the process exits (PreemptionWatcher::
// KeepUntilExit): a signal arriving while the process winds down cannot turn
// its exit code (kExitRequeue, or 0 for a completed run) into a kill.
//
// Thread-compatible: the training thread owns it.
#ifndef STINT_TORCH_RESUMABLE_TRAINING_H_
#define STINT_TORCH_RESUMABLE_TRAINING_H_

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "launched_group.h"
#include "stint/checkpointer.h"
#include "stint/coordinator_client.h"
#include "stint/device_copier.h"
#include "stint/preemption.h"
#include "stint/progress_reporter.h"
#include "stint/resumable_sampler.h"
#include "stint/slurm.h"
#include "stint/status.h"

namespace stint {

struct ResumableTrainingOptions {
  CheckpointOptions checkpoint;  // REQUIRES: checkpoint.root set
  // Asynchronous checkpoint every N committed steps; 0 = only on preemption
  // and Finish(). Default: 100.
  uint64_t save_every = 100;
  // Install a PreemptionWatcher for signals (else only Notify() sources
  // through watcher(), if one is passed in). Default: true.
  bool watch_signals = true;
  PreemptionOptions preemption;
  // Under stint-agent (the worker registration in the environment, see
  // stint/coordinator_commit_channel.h), every commit first asks stintd
  // whether this worker incarnation is still current (and, with several
  // ranks, every rank's): a worker that lost its lease cannot commit.
  // Skipped where checkpoint.commit_guard or token_guard is set. Default: true
  bool fence_from_environment = true;
  // Several ranks (checkpoint.world_size > 1): the job's c10d backend
  // (a ProcessGroupGloo or ProcessGroupNCCL; from a c10d::ProcessGroup,
  // its getBackend(device)). StepBoundary
  // all-reduces two flags over it, a CPU tensor each step (a device tensor
  // with NCCL): whether any rank has a notice (so a SIGTERM to one rank stops
  // all at the same step) and whether every rank's plan has time for the
  // emergency checkpoint (so all take it or none does). Required with
  // watch_signals and several ranks: ranks deciding alone stop at different
  // steps, and the emergency save waits for ranks that never come.
  c10::intrusive_ptr<c10d::Backend> process_group;
  // The device of those flags with an NCCL group (CPU otherwise).
  torch::Device process_group_device = torch::kCPU;
  // With neither process_group nor checkpoint.commit_channel given, and a
  // launch of several ranks in the environment (stint/launch_env.h: Slurm's
  // or torchrun's variables): form the group (LaunchedGroup) and set
  // checkpoint.rank, world_size, commit_channel and process_group from it.
  // Set false where the process manages its group itself and checkpoints
  // as one process (an ElasticGroup's rank 0, say): the launcher's
  // WORLD_SIZE is then not this checkpointer's. Default: true.
  bool group_from_environment = true;
};

struct StepAction {
  bool saved = false;  // a checkpoint of this step was started (durable later) or taken
  bool exit = false;   // preempted: stop training and exit with exit_code
  int exit_code = 0;
  PreemptionPlan plan;  // when preempted
  // The emergency checkpoint: seconds from the notice (as this rank received
  // it; a rank that learned it from another, the step boundary that did) to
  // durable and on its replicas (tier 2; on node-local roots, this node's
  // part on its peers); unset when it did not get there within the grace.
  std::optional<double> notice_to_replicas_seconds;
};

class ResumableTraining {
 public:
  // `model`, `optimizer` and `sampler` (may be null) must outlive this object.
  static Result<std::unique_ptr<ResumableTraining>> Create(const ResumableTrainingOptions& options,
                                                           torch::nn::Module& model,
                                                           torch::optim::Optimizer& optimizer,
                                                           ResumableSampler* sampler);
  // Waits for queued saves; under Slurm, after a stop, rank 0 requeues the
  // job here (see above), so destroy it last, right before exiting.
  ~ResumableTraining();

  // Loads the newest checkpoint; returns its step, or 0 when there is none.
  // kFailedPrecondition when the data configuration changed. When the root
  // holds the COMPLETE marker, complete() is true afterwards: the run
  // finished before, exit 0.
  Result<uint64_t> Resume();
  bool complete() const { return complete_; }

  // Named user state, saved with every checkpoint and restored by Resume().
  void SetUserState(const std::string& name, std::string bytes);
  std::optional<std::string> UserState(const std::string& name) const;

  // Call once per step, after the optimizer step; `step` counts committed
  // steps. `loss`: the step's training loss; under stint-agent it goes to
  // stintd with the step (ProgressReporter) for the job's loss curve and
  // efficiency figures, and is not used otherwise.
  Result<StepAction> StepBoundary(uint64_t step, std::optional<double> loss = std::nullopt);
  // Call right before optimizer.step(): waits (lazy snapshots) until a save's
  // copies of the parameters and optimizer state are done; on a device
  // torch's current stream of that device at this call (the one the
  // optimizer writes on) waits, not the host. Cheap when nothing is in flight.
  Status BeforeOptimizerStep();
  // Checkpoints now; with wait_durable, returns once it is committed.
  Status SaveNow(uint64_t step, bool wait_durable);
  // Final checkpoint (unless this step is already durable), then waits for all.
  Status Finish(uint64_t step);

  Checkpointer& checkpointer() { return *checkpointer_; }
  // The group Create() formed from the environment (nullptr: none formed).
  LaunchedGroup* group() { return group_.get(); }
  // Who this process is in its job (stint/launch_env.h).
  const LaunchEnv& launch() const { return launch_; }
  PreemptionWatcher* watcher() { return watcher_.get(); }
  // Newest step known durable in this process (or resumed from).
  uint64_t last_durable_step() const { return last_durable_step_; }
  // Newer checkpoints Resume() could not load ("step-...: error"). The
  // damaged ones were quarantined so this run can write that step again
  // (a refusal, e.g. a newer checkpoint still references one, is listed
  // too); one of a newer format version or unreadable now is left in place.
  const std::vector<std::string>& resume_skipped() const { return resume_skipped_; }

 private:
  ResumableTraining(const ResumableTrainingOptions& options, torch::nn::Module& model,
                    torch::optim::Optimizer& optimizer, ResumableSampler* sampler);
  CheckpointCost Cost(uint64_t step) const;
  // `values` of this rank, element-wise MAX over options_.process_group
  // (`values` itself without a group).
  Result<std::vector<double>> AllReduceMax(std::vector<double> values, const char* what);
  // Whether this rank writes the module and optimizer (rank 0 of a data-parallel job).
  bool OwnsModelState() const { return options_.checkpoint.rank == 0; }
  // Reaps finished background saves into last_durable_step_.
  // Also tells stintd where each durable and each replicated step is.
  void ReapDurable();
  void ReportStored(const std::string& location, int tier, uint64_t step);

  ResumableTrainingOptions options_;
  // Under Slurm: what a stop's requeue needs, and the job's end.
  bool UnderSlurm() const { return launch_.launcher == "slurm" && !launch_.job_id.empty(); }
  Status LearnSlurmEnd();
  void RequeueIfStopped();

  LaunchEnv launch_;
  std::unique_ptr<LaunchedGroup> group_;  // outlives checkpointer_ (its commit channel)
  std::unique_ptr<DeviceCopier> device_copier_;  // made for a CUDA model; outlives checkpointer_
  std::unique_ptr<CoordinatorClient> fencing_client_;  // under stint-agent; outlives checkpointer_
  std::unique_ptr<ProgressReporter> progress_;         // under stint-agent: step and loss to stintd
  torch::nn::Module& model_;
  torch::optim::Optimizer& optimizer_;
  ResumableSampler* sampler_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<PreemptionWatcher> watcher_;
  std::map<std::string, std::string> user_state_;
  std::vector<std::string> resume_skipped_;
  struct Pending {
    uint64_t step;
    std::shared_future<Status> durable;
  };
  std::vector<Pending> pending_;
  std::vector<Pending> replicating_;  // `durable` holds the tier-2 future
  uint64_t last_durable_step_ = 0;
  uint64_t last_saved_step_ = 0;
  bool saved_any_ = false;
  bool complete_ = false;
  std::optional<SlurmEndClock> end_clock_;
  bool requeue_self_ = false;     // under Slurm, STINT_SLURM_REQUEUE=self (the default)
  bool requeue_at_exit_ = false;  // rank 0 under Slurm after a stop
};

}  // namespace stint

#endif  // STINT_TORCH_RESUMABLE_TRAINING_H_
