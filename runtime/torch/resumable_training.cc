#include "resumable_training.h"

#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <vector>

#include "stint/coordinator_commit_channel.h"
#include "stint_torch.h"
#include "torch_device.h"
#include "torch_guard.h"

namespace stint {
namespace {

constexpr char kModelPrefix[] = "model";
constexpr char kOptimizerPrefix[] = "optim";
constexpr char kStepBlob[] = "stint.step";
constexpr char kSamplerBlob[] = "stint.sampler";
constexpr char kRngPrefix[] = "stint.rng.";
constexpr char kUserPrefix[] = "user.";

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

bool OnCudaDevice(const torch::nn::Module& model) {
  for (const auto& p : model.parameters(/*recurse=*/true)) {
    if (p.defined() && p.is_cuda()) return true;
  }
  for (const auto& b : model.buffers(/*recurse=*/true)) {
    if (b.defined() && b.is_cuda()) return true;
  }
  return false;
}

}  // namespace

ResumableTraining::ResumableTraining(const ResumableTrainingOptions& options,
                                     torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                     ResumableSampler* sampler)
    : options_(options), model_(model), optimizer_(optimizer), sampler_(sampler) {}

ResumableTraining::~ResumableTraining() {
  // The Checkpointer's destructor finishes queued saves; nothing is dropped.
  // Only then may a requeue end the job.
  checkpointer_.reset();
  RequeueIfStopped();
}

void ResumableTraining::RequeueIfStopped() {
  if (!requeue_at_exit_) return;
  Status s = SlurmRequeue(launch_.job_id);
  if (s.ok()) {
    std::fprintf(stderr, "stint: requeued Slurm job %s (scontrol requeue)\n",
                 launch_.job_id.c_str());
  } else if (s.code() == Code::kNotFound) {
    std::fprintf(stderr, "stint: no scontrol here: exiting %d for the batch script to requeue "
                 "Slurm job %s\n", kExitRequeue, launch_.job_id.c_str());
  } else {
    std::fprintf(stderr, "stint: scontrol requeue %s failed: %s\n", launch_.job_id.c_str(),
                 s.ToString().c_str());
  }
}

Status ResumableTraining::LearnSlurmEnd() {
  // Rank 0 asks squeue once; the others get its answer (MAX over the
  // group: theirs is -inf). +inf: no limit.
  double end = -std::numeric_limits<double>::infinity();
  if (options_.checkpoint.rank == 0) {
    Result<std::optional<std::chrono::system_clock::time_point>> got =
        SlurmJobEndTime(launch_.job_id);
    if (!got.ok()) {
      std::fprintf(stderr, "stint: the end time of Slurm job %s is unknown (%s); only signals "
                   "will stop the run\n", launch_.job_id.c_str(), got.status().ToString().c_str());
    }
    end = got.ok() && got->has_value()
              ? std::chrono::duration<double>((*got)->time_since_epoch()).count()
              : std::numeric_limits<double>::infinity();
  }
  STINT_ASSIGN_OR_RETURN(std::vector<double> agreed, AllReduceMax({end}, "the Slurm job's end"));
  if (std::isfinite(agreed[0])) {
    end_clock_.emplace(std::chrono::system_clock::time_point(
                           std::chrono::duration_cast<std::chrono::system_clock::duration>(
                               std::chrono::duration<double>(agreed[0]))),
                       options_.preemption.safety);
  }
  return Status::OK();
}

Result<std::unique_ptr<ResumableTraining>> ResumableTraining::Create(
    const ResumableTrainingOptions& options, torch::nn::Module& model,
    torch::optim::Optimizer& optimizer, ResumableSampler* sampler) {
  std::unique_ptr<ResumableTraining> run(new ResumableTraining(options, model, optimizer, sampler));
  STINT_ASSIGN_OR_RETURN(run->launch_, LaunchEnvFromEnvironment());
  if (options.group_from_environment && !options.process_group &&
      options.checkpoint.commit_channel == nullptr && run->launch_.world_size > 1) {
    STINT_ASSIGN_OR_RETURN(run->group_, LaunchedGroup::FromEnvironment());
    run->options_.checkpoint.rank = run->launch_.rank;
    run->options_.checkpoint.world_size = run->launch_.world_size;
    run->options_.checkpoint.commit_channel = run->group_->commit_channel();
    run->options_.process_group = run->group_->backend();
  }
  if (run->UnderSlurm()) {
    const char* mode = std::getenv("STINT_SLURM_REQUEUE");
    const std::string requeue = mode != nullptr && mode[0] != '\0' ? mode : "self";
    if (requeue != "self" && requeue != "script") {
      return Status::InvalidArgument("STINT_SLURM_REQUEUE='" + requeue +
                                     "': must be 'self' or 'script'");
    }
    std::vector<int>& signals = run->options_.preemption.signals;
    if (signals == PreemptionOptions().signals) signals.push_back(SIGUSR2);  // --signal=USR2@N
    run->requeue_self_ = requeue == "self";
  }
  if (run->options_.checkpoint.device_copier == nullptr && OnCudaDevice(model)) {
    STINT_ASSIGN_OR_RETURN(run->device_copier_, NewTorchDeviceCopier());
    run->options_.checkpoint.device_copier = run->device_copier_.get();
  }
  CheckpointOptions& ckpt = run->options_.checkpoint;
  if (ckpt.world_size > 1 && options.watch_signals && !run->options_.process_group) {
    return Status::InvalidArgument(
        "ResumableTraining with world_size " + std::to_string(ckpt.world_size) +
        " and watch_signals needs options.process_group: the ranks agree on stopping over it");
  }
  const auto& group = run->options_.process_group;
  if (group && group->getSize() != ckpt.world_size) {
    return Status::InvalidArgument(
        "ResumableTraining: process_group has " + std::to_string(group->getSize()) +
        " ranks, checkpoint.world_size is " + std::to_string(ckpt.world_size));
  }
  if (options.fence_from_environment && !ckpt.commit_guard && !ckpt.token_guard) {
    STINT_ASSIGN_OR_RETURN(run->fencing_client_, FenceCommitsFromEnvironment(&ckpt));
  }
  STINT_ASSIGN_OR_RETURN(run->progress_, ProgressReporter::FromEnvironment());
  STINT_ASSIGN_OR_RETURN(run->checkpointer_, Checkpointer::Open(ckpt));
  if (options.watch_signals) {
    STINT_ASSIGN_OR_RETURN(run->watcher_, PreemptionWatcher::Install(run->options_.preemption));
    if (run->UnderSlurm()) STINT_RETURN_IF_ERROR(run->LearnSlurmEnd());
  }
  return run;
}

Result<uint64_t> ResumableTraining::Resume() {
  STINT_ASSIGN_OR_RETURN(std::optional<CompletionMarker> marker, checkpointer_->Completion());
  if (marker) {
    complete_ = true;
    if (options_.checkpoint.rank == 0) {
      std::fprintf(stderr, "stint: %s: this run completed at step %llu (%s): nothing to do\n",
                   options_.checkpoint.root.c_str(), static_cast<unsigned long long>(marker->step),
                   marker->info.c_str());
    }
  }
  // A fresh start only when no tier holds a checkpoint: a node with an empty
  // local directory resumes from the shared tier 2.
  STINT_ASSIGN_OR_RETURN(auto committed, checkpointer_->ListCommitted());
  if (committed.empty()) {
    auto replicated = checkpointer_->ListReplicated();
    if (!replicated.ok()) {
      return replicated.status().WithContext(
          "resume: tier 1 is empty and tier 2 cannot be listed; refusing to start from step 0");
    }
    if (replicated->empty()) return uint64_t{0};
  }
  TorchStateLoader loader;
  STINT_RETURN_IF_ERROR(loader.AddModule(kModelPrefix, model_));
  STINT_RETURN_IF_ERROR(loader.AddOptimizer(kOptimizerPrefix, optimizer_));
  STINT_ASSIGN_OR_RETURN(LoadResult loaded_value, loader.Load(*checkpointer_));
  const LoadResult* loaded = &loaded_value;
  resume_skipped_ = loaded->skipped;
  // Only damage is quarantined (rank 0 acts, see Quarantine): a checkpoint of
  // a newer format, or one that could not be read now, stays where it is.
  for (uint64_t damaged : loaded->skipped_steps) {
    Status moved = checkpointer_->Quarantine(damaged);
    // Refused because a newer checkpoint needs it (or may): left in place.
    if (moved.code() == Code::kFailedPrecondition) {
      resume_skipped_.push_back(moved.message());
    } else {
      STINT_RETURN_IF_ERROR(moved);
    }
  }
  const auto& blobs = loaded->blobs;
  auto step_blob = blobs.find(kStepBlob);
  if (step_blob == blobs.end()) {
    return Status::DataLoss(loaded->dir + ": no '" + kStepBlob +
                            "' blob: not written by ResumableTraining");
  }
  uint64_t step = std::strtoull(step_blob->second.c_str(), nullptr, 10);
  if (sampler_ != nullptr) {
    auto sampler_blob = blobs.find(kSamplerBlob);
    if (sampler_blob == blobs.end()) {
      return Status::FailedPrecondition(loaded->dir + ": checkpoint holds no sampler state");
    }
    STINT_RETURN_IF_ERROR(sampler_->LoadState(sampler_blob->second).WithContext(loaded->dir));
  }
  std::map<std::string, std::string> rng;
  user_state_.clear();
  for (const auto& [name, bytes] : blobs) {
    if (StartsWith(name, kRngPrefix)) rng[name.substr(sizeof(kRngPrefix) - 1)] = bytes;
    if (StartsWith(name, kUserPrefix)) user_state_[name.substr(sizeof(kUserPrefix) - 1)] = bytes;
  }
  STINT_RETURN_IF_ERROR(RestoreTorchRng(rng).WithContext(loaded->dir));
  last_durable_step_ = last_saved_step_ = step;
  saved_any_ = true;
  return step;
}

void ResumableTraining::SetUserState(const std::string& name, std::string bytes) {
  user_state_[name] = std::move(bytes);
}

std::optional<std::string> ResumableTraining::UserState(const std::string& name) const {
  auto it = user_state_.find(name);
  if (it == user_state_.end()) return std::nullopt;
  return it->second;
}

void ResumableTraining::ReapDurable() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->durable.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      ++it;
      continue;
    }
    if (it->durable.get().ok()) {
      if (it->step > last_durable_step_) last_durable_step_ = it->step;
      ReportStored(options_.checkpoint.root, 1, it->step);
    }
    it = pending_.erase(it);  // a failure also comes back from the next Flush()
  }
  for (auto it = replicating_.begin(); it != replicating_.end();) {
    if (it->durable.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      ++it;
      continue;
    }
    // A failure is in stats(); tier 1 still holds the step.
    if (it->durable.get().ok()) ReportStored(options_.checkpoint.replica_root, 2, it->step);
    it = replicating_.erase(it);
  }
}

void ResumableTraining::ReportStored(const std::string& location, int tier, uint64_t step) {
  if (progress_ == nullptr || options_.checkpoint.rank != 0) return;
  std::error_code ec;
  const std::string where = location.find("://") != std::string::npos
                                ? location
                                : std::filesystem::absolute(location, ec).lexically_normal().string();
  const auto stats = checkpointer_->stats();
  const uint64_t bytes =
      stats.last ? stats.last->raw_bytes * static_cast<uint64_t>(options_.checkpoint.world_size) : 0;
  progress_->ReportStored(ec ? location : where, tier, step, bytes);
}

CheckpointCost ResumableTraining::Cost(uint64_t step) const {
  CheckpointCost cost;
  cost.steps_since_durable = step - last_durable_step_;
  auto stats = checkpointer_->stats();
  if (stats.last) {
    const SaveStats& last = *stats.last;
    cost.state_bytes = last.raw_bytes;
    double seconds = last.persist_seconds + last.commit_seconds;
    // Raw bytes over time, like state_bytes: with zstd the rate already includes compression.
    if (seconds > 0) cost.bytes_per_second = double(last.raw_bytes) / seconds;
    cost.fixed_seconds = last.snapshot_seconds + last.commit_seconds;
  }
  return cost;
}

Status ResumableTraining::SaveNow(uint64_t step, bool wait_durable) {
  if (!(saved_any_ && step == last_saved_step_)) {
    TorchStateBuilder state;
    auto build = [&]() -> Status {
      if (OwnsModelState()) {
        STINT_RETURN_IF_ERROR(state.AddModule(kModelPrefix, model_));
        STINT_RETURN_IF_ERROR(state.AddOptimizer(kOptimizerPrefix, optimizer_));
      }
      STINT_RETURN_IF_ERROR(state.AddBlob(kStepBlob, std::to_string(step)));
      if (sampler_ != nullptr)
        STINT_RETURN_IF_ERROR(state.AddBlob(kSamplerBlob, sampler_->SaveState()));
      STINT_ASSIGN_OR_RETURN(auto rng, CaptureTorchRng());
      for (auto& [name, bytes] : rng)
        STINT_RETURN_IF_ERROR(state.AddBlob(kRngPrefix + name, std::move(bytes)));
      for (const auto& [name, bytes] : user_state_)
        STINT_RETURN_IF_ERROR(state.AddBlob(kUserPrefix + name, bytes));
      return Status::OK();
    };
    // With several ranks a state this rank cannot build is still a save the
    // others count: abandoned, not skipped.
    if (Status built = build(); !built.ok()) return checkpointer_->AbandonSave(step, built);
    // The State holds what it borrows until its copies completed: `state`
    // may go out of scope after Save().
    STINT_ASSIGN_OR_RETURN(SaveHandle handle, checkpointer_->Save(step, state.state()));
    if (handle.skipped) return handle.durable.get();
    if (options_.checkpoint.snapshot == SnapshotMode::kEager) {
      // Eager: the loop may write anything once this returns (device copies too).
      STINT_RETURN_IF_ERROR(checkpointer_->WaitStaged());
    } else {
      // Lazy: the next write after this boundary is the forward pass
      // (buffers); the parameters wait in BeforeOptimizerStep(). On a device
      // only the compute stream waits.
      STINT_RETURN_IF_ERROR(checkpointer_->BeforeWrite(WriteBarrier::kForward,
                                                       std::chrono::minutes(10), CurrentCudaStream));
    }
    pending_.push_back(Pending{step, handle.durable});
    if (!options_.checkpoint.replica_root.empty())
      replicating_.push_back(Pending{step, handle.replicated});
    last_saved_step_ = step;
    saved_any_ = true;
  }
  if (!wait_durable) return Status::OK();
  for (const auto& p : pending_) {
    if (p.step != step) continue;
    STINT_RETURN_IF_ERROR(p.durable.get());
    last_durable_step_ = step;
  }
  ReapDurable();
  return Status::OK();
}

Status ResumableTraining::BeforeOptimizerStep() {
  // The stream the optimizer writes on is torch's current one now, not
  // necessarily the one the parameters were saved from.
  return checkpointer_->BeforeWrite(WriteBarrier::kOptimizerStep, std::chrono::minutes(10),
                                    CurrentCudaStream);
}

Result<std::vector<double>> ResumableTraining::AllReduceMax(std::vector<double> values,
                                                             const char* what) {
  if (!options_.process_group || options_.process_group->getSize() == 1) return values;
  const std::string context = std::string("ResumableTraining: agreeing on ") + what;
  return Guard(context, [&]() -> Result<std::vector<double>> {
    std::vector<at::Tensor> tensors{
        torch::tensor(values, torch::TensorOptions().dtype(torch::kFloat64))
            .to(options_.process_group_device)};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::MAX;
    try {
      options_.process_group->allreduce(tensors, opts)->wait();
    } catch (const std::exception& e) {
      return StatusFromC10dError(e, context);
    }
    at::Tensor reduced = tensors[0].cpu();
    return std::vector<double>(reduced.data_ptr<double>(), reduced.data_ptr<double>() + values.size());
  });
}

Result<StepAction> ResumableTraining::StepBoundary(uint64_t step, std::optional<double> loss) {
  if (progress_ != nullptr) progress_->Report(step, loss);
  if (sampler_ != nullptr) sampler_->CommitStep();
  ReapDurable();
  StepAction action;
  // One all-reduce per step: MAX of [has a notice, -seconds to its deadline]
  // is any rank's notice and the earliest deadline.
  const auto now = std::chrono::steady_clock::now();
  if (end_clock_ && watcher_ != nullptr && !watcher_->requested()) {
    if (std::optional<double> left = end_clock_->Due(Cost(step))) {
      watcher_->Notify("Slurm time limit",
                       now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(std::max(*left, 0.0))));
    }
  }
  const std::optional<PreemptionNotice> own =
      watcher_ != nullptr && watcher_->requested() ? watcher_->notice() : std::nullopt;
  const double own_seconds =
      own ? std::chrono::duration<double>(own->deadline - now).count() : 0.0;
  STINT_ASSIGN_OR_RETURN(
      std::vector<double> agreed,
      AllReduceMax({own ? 1.0 : 0.0, own ? -own_seconds : -std::numeric_limits<double>::infinity()},
                   "stopping"));
  if (agreed[0] != 0) {
    action.exit = true;
    action.exit_code = kExitRequeue;
    // A rank without a notice of its own takes the earliest rank's deadline as one.
    PreemptionNotice notice{"preemption notice on another rank", now,
                            now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      std::chrono::duration<double>(-agreed[1]))};
    if (own) notice = *own;
    if (watcher_ != nullptr) {
      if (!own) watcher_->Notify(notice.source, notice.deadline);
      // The exit code is decided: a second signal while the process winds down must not kill it.
      watcher_->KeepUntilExit();
    }
    action.plan = PlanPreemption(notice, now, options_.preemption.safety, Cost(step));
    // All take the emergency checkpoint or none does (MAX of "does not fit").
    STINT_ASSIGN_OR_RETURN(std::vector<double> misfit,
                           AllReduceMax({action.plan.save ? 0.0 : 1.0}, "the emergency save"));
    if (action.plan.save && misfit[0] != 0) {
      action.plan.save = false;
      action.plan.reason += "; not saving: the checkpoint does not fit the grace on another rank";
    }
    if (action.plan.save) {
      const auto started = std::chrono::steady_clock::now();
      Status s = SaveNow(step, /*wait_durable=*/true);
      if (s.ok()) {
        const double durable_seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        // On node-local roots this node's disk may go with it: the
        // checkpoint counts once its peer replicas hold this node's part.
        auto budget = std::chrono::milliseconds(int64_t(action.plan.remaining_seconds * 1000)) -
                      std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - started);
        Status replicated =
            checkpointer_->FlushReplication(std::max(budget, std::chrono::milliseconds(0)));
        ReapDurable();  // stintd hears where it is before this process exits
        if (replicated.ok()) {
          // From the notice, not the save: what the grace had to cover.
          action.notice_to_replicas_seconds = std::chrono::duration<double>(
              std::chrono::steady_clock::now() - notice.received).count();
        } else {
          action.plan.reason += "; the emergency checkpoint is durable but not yet on its "
                                "replicas: " + replicated.ToString();
        }
        // stintd's figure of this segment (under stint-agent).
        if (progress_ != nullptr) {
          progress_->ReportCheckpoint(step, durable_seconds, action.notice_to_replicas_seconds);
          // Sent now, before this process exits: where the job resumes is
          // chosen from what stintd heard.
          progress_.reset();
        }
      }
      action.saved = s.ok();
      if (!s.ok()) action.plan.reason += "; emergency checkpoint failed: " + s.ToString();
    } else {
      // No time for a new one; let a save already in flight finish if it can.
      auto left = std::chrono::milliseconds(int64_t(action.plan.remaining_seconds * 1000));
      if (left.count() > 0) checkpointer_->Flush(left).IgnoreError();
      ReapDurable();
    }
    if (UnderSlurm()) {
      // For `stint slurm submit`'s script: a task dying after this point still requeues.
      Status recorded = RecordSlurmStop(
          Env::Default(), options_.checkpoint.root, options_.checkpoint.rank, launch_.job_id,
          launch_.restart_count, step,
          last_durable_step_ != 0 ? std::optional<uint64_t>(last_durable_step_) : std::nullopt);
      if (!recorded.ok()) {
        std::fprintf(stderr, "stint: %s: a task that dies before exiting %d fails the Slurm job\n",
                     recorded.ToString().c_str(), kExitRequeue);
      }
    }
    // Under Slurm rank 0 requeues as this object goes, after every save
    // (never earlier: a requeue ends every task at once).
    requeue_at_exit_ = requeue_self_ && options_.checkpoint.rank == 0;
    return action;
  }
  if (options_.save_every != 0 && step % options_.save_every == 0) {
    STINT_RETURN_IF_ERROR(SaveNow(step, /*wait_durable=*/false));
    action.saved = true;
  }
  return action;
}

Status ResumableTraining::Finish(uint64_t step) {
  STINT_RETURN_IF_ERROR(SaveNow(step, /*wait_durable=*/true));
  STINT_RETURN_IF_ERROR(checkpointer_->Flush());
  // The run is complete: a preemption signal from now until exit changes nothing.
  if (watcher_ != nullptr) watcher_->KeepUntilExit();
  // Who finished it (no time: two runs of one job write the same marker).
  std::string info = "{\"launcher\":\"" + launch_.launcher +
                     "\",\"world_size\":" + std::to_string(options_.checkpoint.world_size);
  if (UnderSlurm()) {
    info += ",\"slurm_job_id\":\"" + launch_.job_id +
            "\",\"slurm_restart_count\":" + std::to_string(launch_.restart_count);
  }
  return checkpointer_->MarkComplete(step, info + "}");
}

}  // namespace stint
