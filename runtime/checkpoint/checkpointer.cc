// Checkpointer: snapshot on the caller's thread (device tensors: copies
// enqueued on the copier's streams), persist and commit on one background
// thread that owns the write engine, tier-2 replication on the Replicator's.
#include "stint/checkpointer.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstdio>
#include <mutex>
#include <set>
#include <thread>

#include "base/clock.h"
#include "base/thread_pool.h"
#include "checkpoint/commit.h"
#include "checkpoint/compress_policy.h"
#include "checkpoint/device_load.h"
#include "checkpoint/in_memory_checkpoint.h"
#include "checkpoint/incremental_base.h"
#include "checkpoint/lazy_copy_thread.h"
#include "checkpoint/persist.h"
#include "checkpoint/rank_commit.h"
#include "checkpoint/replica.h"
#include "checkpoint/retention.h"
#include "checkpoint/root_lock.h"
#include "checkpoint/snapshot.h"
#include "checkpoint/snapshot_progress.h"
#include "checkpoint/staging_pool.h"
#include "format/manifest.h"
#include "format/shard_layout.h"
#include "io/io_engine.h"

namespace stint {
namespace {

using Clock = std::chrono::steady_clock;

std::shared_future<Status> ReadyFuture(Status s) {
  std::promise<Status> p;
  p.set_value(std::move(s));
  return p.get_future().share();
}

// Why a checkpoint did not load, which decides what Load does next.
enum class LoadFailure {
  kDamage,      // its bytes are wrong: try an older one; Quarantine may move it
  kUnreadable,  // an I/O error, or a format version this build does not know:
                // try an older one, and leave it where it is
  kCaller,      // the destinations do not match it: straight back to the caller
};

LoadFailure ClassifyLoadFailure(const Status& s) {
  switch (s.code()) {
    case Code::kDataLoss:
      return LoadFailure::kDamage;
    case Code::kUnimplemented:
    case Code::kIoError:
    case Code::kPermissionDenied:
      return LoadFailure::kUnreadable;
    default:
      return LoadFailure::kCaller;
  }
}

// Shards of one tensor must not overlap (nor, from a single rank, leave a
// gap): refused here, at Save(), rather than found by a reader later. With
// several ranks the committer checks the whole job's layout.
Status CheckSnapshotLayout(const SnapshotLayout& layout, bool require_cover) {
  std::map<std::string, TensorRecord> tensors;
  for (const SnapshotEntry& e : layout.entries) {
    if (e.is_blob) continue;
    TensorRecord& t = tensors[e.name];
    t.name = e.name;
    t.dtype = e.dtype;
    t.global_shape = e.global_shape;
    t.shards.push_back(ShardRecord{e.offsets, e.extents, "this state", {}});
  }
  for (const auto& [name, t] : tensors) {
    std::string problem = FindShardLayoutProblem(t, require_cover);
    if (!problem.empty()) return Status::InvalidArgument("save: " + problem);
  }
  return Status::OK();
}

struct PersistJob {
  Snapshot snapshot;
  uint64_t save_number = 0;  // this Checkpointer's count of Save() calls before this one
  std::promise<Status> durable;
  std::promise<Status> replicated;
  SaveStats stats;
  Clock::time_point saved_at;
  // Copies still running after Save() returned (lazy host, device); null if none.
  std::shared_ptr<SnapshotProgress> progress;
  PersistedFile file;                     // set by a successful persist
  // Incremental: what this save compares against (its files are pinned
  // against retention until the save is done); null for a full save.
  std::shared_ptr<const IncrementalBase> base;
};

class CheckpointerImpl final : public Checkpointer {
 public:
  CheckpointerImpl(const CheckpointOptions& options, Env* env, std::unique_ptr<IoEngine> engine,
                   std::unique_ptr<FileLock> root_lock)
      : root_lock_(std::move(root_lock)),
        options_(options),
        env_(env),
        replica_env_(options.replica_env != nullptr ? options.replica_env : env),
        copier_(options.device_copier),
        engine_(std::move(engine)),
        pool_(options.threads != 0 ? options.threads
                                   : std::max(1u, std::thread::hardware_concurrency()) - 1),
        staging_(
            options.staging_bytes,
            options.staging_max_bytes != 0 ? options.staging_max_bytes : DefaultStagingCap(),
            [this](char* base) {
              engine_->UnregisterBuffer(base);
              if (copier_ != nullptr) copier_->UnregisterHostMemory(base);
            },
            copier_ == nullptr
                ? std::function<Status(char*, size_t)>()
                : [this](char* base,
                         size_t size) { return copier_->RegisterHostMemory(base, size); },
            options.keep_in_memory ? 3 : 2) {
    options_.env = env;
    options_.replica_env = replica_env_;
    if (options_.commit_guard) {
      // kAborted from the guard: this writer incarnation is stale (fenced,
      // e.g. its segment was requeued elsewhere). It can never commit again,
      // so it lets go of the root at once: the writer that replaced it may
      // be waiting for the lock (lock_wait).
      options_.commit_guard = [this, guard = options_.commit_guard](uint64_t step) {
        Status s = guard(step);
        if (s.code() == Code::kAborted) StopWriting(s);
        return s;
      };
    }
    if (options_.token_guard) {
      // The same on the committer when its own token is the stale one (a
      // stale peer's token fails this commit only).
      options_.token_guard = [this, guard = options_.token_guard](uint64_t token) {
        Status s = guard(token);
        if (s.code() == Code::kAborted && token == options_.fencing_token) StopWriting(s);
        return s;
      };
    }
    if (!options_.replica_root.empty() && options_.rank == 0 && !options_.read_only) {
      replicator_ = std::make_unique<Replicator>(options_, &tier1_guard_);
    }
    if (options_.incremental && !options_.read_only) {
      // Unreadable root or no checkpoint yet: the first save is a full one.
      auto base = IncrementalBase::LoadNewest(env_, options_.root);
      if (base.ok()) base_ = std::move(*base);
    }
    persist_thread_ = std::thread([this] { PersistLoop(); });
  }

  ~CheckpointerImpl() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    work_cv_.notify_all();
    persist_thread_.join();  // finishes every queued save first: nothing is dropped
    in_flight_.clear();      // what the shards borrowed goes on this thread
    replicator_.reset();     // replicates the newest queued step first
    std::lock_guard<std::mutex> lock(mu_);
    tier0_.reset();  // its buffer goes back to staging_ before staging_ goes
  }

  Result<SaveHandle> Save(uint64_t step, const State& state) override {
    const uint64_t number = saves_started_++;
    auto handle = StartSave(step, state, number);
    if (options_.world_size > 1) {
      // Every rank counts saves alike, so a save this rank cannot take part
      // in must still be told to the others, or they wait out the deadline.
      Status why = !handle.ok()      ? handle.status()
                   : handle->skipped ? handle->durable.get()
                                     : Status::OK();
      if (!why.ok()) RankSave(options_, env_, number, step).Abandon(why);
    }
    return handle;
  }

  Result<SaveHandle> StartSave(uint64_t step, const State& state, uint64_t number) {
    if (options_.read_only) {
      return Status::FailedPrecondition(options_.root + ": opened read_only; not saving step " +
                                        std::to_string(step));
    }
    PendingCopies();  // releases what finished saves borrowed
    {
      // Refused now rather than failing at its rename behind the first one.
      std::lock_guard<std::mutex> lock(mu_);
      if (!fenced_.ok()) {
        return fenced_.WithContext(options_.root + ": this writer was fenced and let go of the "
                                   "root; not saving step " + std::to_string(step));
      }
      if (steps_in_flight_.count(step) != 0) {
        return Status::AlreadyExists("a save of step " + std::to_string(step) +
                                     " is still in flight; not saving it twice");
      }
    }
    if (env_->FileExists(options_.root + "/" + StepDirName(step))) {
      return Status::AlreadyExists(options_.root + "/" + StepDirName(step) +
                                   " is already committed; refusing to overwrite it");
    }
    for (const auto& t : state.tensors) {
      if (t.device != kHostDevice && copier_ == nullptr) {
        return Status::FailedPrecondition("tensor '" + t.name + "' is on device " +
                                          std::to_string(t.device) +
                                          ": CheckpointOptions.device_copier is not set");
      }
    }
    std::shared_ptr<const IncrementalBase> base;
    if (options_.incremental) {
      std::lock_guard<std::mutex> lock(mu_);
      base = base_;
    }
    STINT_ASSIGN_OR_RETURN(SnapshotLayout layout,
                           PlanSnapshot(state, options_.chunk_size, base.get()));
    STINT_RETURN_IF_ERROR(CheckSnapshotLayout(layout, options_.world_size == 1));
    auto t0 = Clock::now();
    auto wait = options_.busy_policy == BusyPolicy::kBlock ? options_.block_timeout
                                                           : std::chrono::milliseconds(0);
    auto buffer = staging_.Acquire(layout.image_bytes, std::chrono::milliseconds(0));
    if (!buffer.ok() && buffer.status().code() == Code::kUnavailable) {
      // Tier 0 is a convenience: when only it holds the room this save needs
      // (nothing is persisting that would free some), it gives way.
      std::shared_ptr<InMemoryCheckpoint> dropped;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (tier0_ != nullptr && queue_.empty() && !busy_) {
          dropped = std::move(tier0_);
          stats_.in_memory_step.reset();
        }
      }
      dropped.reset();
      buffer = staging_.Acquire(layout.image_bytes, wait);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.saves;
    }
    if (!buffer.ok()) {
      if (buffer.status().code() != Code::kUnavailable ||
          options_.busy_policy != BusyPolicy::kSkip) {
        return buffer.status().WithContext("save step " + std::to_string(step));
      }
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.skipped;
      Status why = buffer.status().WithContext("step " + std::to_string(step) + " skipped");
      return SaveHandle{step, true, ReadyFuture(why), ReadyFuture(why), ReadyFuture(why)};
    }
    char* image = (*buffer)->data();
    StagingCopies copies =
        PlanStagingCopies(state, layout, image, options_.snapshot == SnapshotMode::kLazy);
    RunStagingCopies(copies.now, image, &pool_);

    auto job = std::make_unique<PersistJob>();
    job->save_number = number;
    job->base = std::move(base);
    job->snapshot.step = step;
    job->snapshot.layout = std::move(layout);
    job->snapshot.buffer = std::move(*buffer);
    job->stats.step = step;
    job->stats.raw_bytes = job->snapshot.layout.raw_bytes;
    job->saved_at = t0;
    SaveHandle handle{
        step, false, ReadyFuture(Status::OK()), job->durable.get_future().share(),
        replicator_ == nullptr ? ReadyFuture(Status::OK()) : job->replicated.get_future().share()};
    bool image_still_written = false;
    auto progress = StartLaterCopies(step, t0, image, &copies, &image_still_written);
    if (!progress.ok()) {
      if (image_still_written) staging_.Abandon(std::move(job->snapshot.buffer));
      return progress.status();
    }
    job->progress = std::move(*progress);
    if (job->progress != nullptr) {
      // The persist thread waits for these copies before it reads the
      // buffer; the staged future and BeforeWrite() say when the tensors may
      // be written again.
      handle.staged = job->progress->staged();
      job->progress->set_owner(state.owner);
      std::lock_guard<std::mutex> lock(in_flight_mu_);
      in_flight_.push_back(job->progress);
    }
    job->stats.snapshot_seconds = SecondsSince(t0);
    if (job->progress == nullptr) job->stats.staged_seconds = job->stats.snapshot_seconds;
    {
      std::lock_guard<std::mutex> lock(mu_);
      steps_in_flight_.insert(step);
      queue_.push_back(std::move(job));
    }
    work_cv_.notify_all();
    return handle;
  }

  Status BeforeWrite(WriteBarrier barrier, std::chrono::milliseconds timeout,
                     const WriterStream& writer_stream) override {
    const auto deadline = Clock::now() + timeout;
    const bool forward = barrier == WriteBarrier::kForward;
    for (const auto& p : PendingCopies()) {
      if (!p->WaitHost(barrier, deadline)) {
        return Status::DeadlineExceeded("lazy barrier: host copies of step " +
                                        std::to_string(p->step()) + " still running after " +
                                        std::to_string(timeout.count()) + " ms");
      }
      // kForward: the forward pass writes the kForward shards on the streams
      // they were saved from. kOptimizerStep: every stream, every copy.
      std::vector<WriteBarrier> classes = {WriteBarrier::kForward};
      if (!forward) classes.push_back(WriteBarrier::kOptimizerStep);
      std::set<std::pair<int, void*>> streams;
      for (WriteBarrier w : classes) {
        for (const auto& [device, saved_from] : p->device_streams(w)) {
          void* stream = saved_from;
          if (writer_stream) {
            Result<void*> writer = writer_stream(device);
            if (!writer.ok()) {
              return writer.status().WithContext("lazy barrier: the writing stream of device " +
                                                 std::to_string(device));
            }
            stream = *writer;
          }
          streams.insert({device, stream});
        }
      }
      for (WriteBarrier w : classes) {
        auto ticket = p->device_ticket(w);
        if (!ticket) continue;
        for (const auto& [device, stream] : streams) {
          STINT_RETURN_IF_ERROR(copier_->OrderAfter(*ticket, device, stream)
                                    .WithContext("lazy barrier, step " + std::to_string(p->step())));
        }
      }
    }
    return Status::OK();
  }

  Status WaitStaged(std::chrono::milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    for (const auto& p : PendingCopies()) {
      if (p->staged().wait_until(deadline) != std::future_status::ready) {
        return Status::DeadlineExceeded("copies of step " + std::to_string(p->step()) +
                                        " still running after " + std::to_string(timeout.count()) +
                                        " ms");
      }
    }
    PendingCopies();  // releases what they borrowed
    return Status::OK();
  }

  Status Flush(std::chrono::milliseconds timeout) override {
    PendingCopies();
    std::unique_lock<std::mutex> lock(mu_);
    if (!idle_cv_.wait_for(lock, timeout, [this] { return queue_.empty() && !busy_; })) {
      std::string what;
      for (uint64_t step : steps_in_flight_) {
        what += (what.empty() ? "step " : ", ") + std::to_string(step);
      }
      if (what.empty()) what = "retention";  // runs after the last commit
      return Status::DeadlineExceeded("flush: " + what + " still persisting after " +
                                      std::to_string(timeout.count()) + " ms");
    }
    Status s = background_error_;
    background_error_ = Status::OK();
    return s;
  }

  Status FlushReplication(std::chrono::milliseconds timeout) override {
    if (replicator_ == nullptr) return Status::OK();
    auto deadline = Clock::now() + timeout;
    {
      // Saves still persisting are replicated after they commit.
      std::unique_lock<std::mutex> lock(mu_);
      if (!idle_cv_.wait_until(lock, deadline, [this] { return queue_.empty() && !busy_; })) {
        return Status::DeadlineExceeded("flush replication: checkpoints still persisting after " +
                                        std::to_string(timeout.count()) + " ms");
      }
    }
    if (!replicator_->WaitUntilIdle(deadline)) {
      return Status::DeadlineExceeded("flush replication: still replicating after " +
                                      std::to_string(timeout.count()) + " ms");
    }
    return replicator_->TakeError();
  }

  Result<LoadResult> Load(const DestPlanner& planner, const LoadOptions& options) override {
    if (options_.world_size == 1) return LoadNewest(planner, options);
    // Every rank must resume from the same step: a rank whose newest step
    // does not load (damage it alone read) or is missing takes the others
    // back to the newest step every rank loads (AgreeOnLoad).
    const uint64_t number = loads_started_++;
    return AgreeOnLoad(options_, number, [&](std::optional<uint64_t> at_most) {
      return at_most ? LoadAtMost(planner, options, *at_most) : LoadNewest(planner, options);
    });
  }

  // The newest step at most `at_most` (in any tier) that loads: the step
  // another rank took the job back to, or older.
  Result<LoadResult> LoadAtMost(const DestPlanner& planner, const LoadOptions& options,
                                uint64_t at_most) {
    STINT_ASSIGN_OR_RETURN(std::vector<uint64_t> steps, ListCommitted());
    if (auto replicated = ListReplicated(); replicated.ok()) {
      steps.insert(steps.end(), replicated->begin(), replicated->end());
    }
    if (options.step) steps = {*options.step};
    std::sort(steps.begin(), steps.end(), [](uint64_t a, uint64_t b) { return a > b; });
    steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
    std::vector<std::string> skipped;
    for (uint64_t step : steps) {
      if (step > at_most) continue;
      LoadOptions one = options;
      one.step = step;
      auto loaded = LoadNewest(planner, one);
      if (loaded.ok()) {
        loaded->skipped.insert(loaded->skipped.begin(), skipped.begin(), skipped.end());
        return loaded;
      }
      if (ClassifyLoadFailure(loaded.status()) == LoadFailure::kCaller) return loaded.status();
      skipped.push_back(StepDirName(step) + ": " + loaded.status().ToString());
    }
    std::string why;
    for (const auto& s : skipped) why += "\n  " + s;
    return Status::DataLoss(options_.root + ": no checkpoint at or before step " +
                            std::to_string(at_most) + " loads and verifies:" + why);
  }

  Result<LoadResult> LoadNewest(const DestPlanner& planner, const LoadOptions& options) {
    const bool tiered = options_.keep_in_memory || !options_.replica_root.empty();
    std::vector<Candidate> candidates;
    LoadResult result;
    auto wanted = [&](uint64_t step) { return !options.step || *options.step == step; };
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (tier0_ != nullptr && wanted(tier0_->step())) {
        candidates.push_back(Candidate{0, tier0_->step(), StepDirName(tier0_->step()), tier0_});
      }
    }
    if (options.step) {
      // A step that is not there is not found, not damaged.
      if (env_->FileExists(options_.root + "/" + StepDirName(*options.step))) {
        candidates.push_back(Candidate{1, *options.step, StepDirName(*options.step), nullptr});
      }
    } else {
      // The rename is the commit point; LATEST may lag it by one crash, so it
      // names a candidate but does not outrank a newer one.
      STINT_ASSIGN_OR_RETURN(auto steps, ListCheckpointSteps(env_, options_.root));
      for (uint64_t st : steps) candidates.push_back(Candidate{1, st, StepDirName(st), nullptr});
      auto latest = ReadLatest(env_, options_.root);
      if (latest.ok() && latest->has_value() &&
          std::find(steps.begin(), steps.end(), *ParseStepDirName(**latest)) == steps.end()) {
        // Vanished: tried first, and reported as skipped.
        candidates.push_back(Candidate{1, *ParseStepDirName(**latest), **latest, nullptr});
      }
    }
    if (!options_.replica_root.empty()) {
      auto steps = ListCheckpointSteps(replica_env_, options_.replica_root);
      if (steps.ok()) {
        for (uint64_t st : *steps) {
          if (wanted(st)) candidates.push_back(Candidate{2, st, StepDirName(st), nullptr});
        }
      } else {
        result.skipped.push_back("[tier 2] " + options_.replica_root + ": " +
                                 steps.status().ToString());
      }
    }
    // Newest first; for one step, memory before root before replica.
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Candidate& a, const Candidate& b) {
                       return a.step != b.step ? a.step > b.step : a.tier < b.tier;
                     });
    if (candidates.empty()) {
      if (options.step) {
        return Status::NotFound(options_.root + ": no checkpoint " + StepDirName(*options.step) +
                                " to load" + (tiered ? " on any tier" : ""));
      }
      return Status::NotFound(options_.root + ": no committed checkpoint to load");
    }
    Status last;
    for (const auto& c : candidates) {
      Status loaded = LoadOne(c, planner, options, &result);
      if (loaded.ok()) return result;
      last = loaded;
      const LoadFailure failure = ClassifyLoadFailure(loaded);
      // One asked-for step in one tier: its own error. Otherwise the list.
      if (failure == LoadFailure::kCaller || (options.step && candidates.size() == 1)) {
        return loaded;
      }
      // Reported, never silent; only damage is offered to Quarantine.
      std::string line = (tiered ? "[tier " + std::to_string(c.tier) + "] " : std::string()) +
                         c.name + ": " + loaded.ToString();
      if (loaded.code() == Code::kUnimplemented) {
        line += " (written by a newer stint? left in place, never quarantined or deleted)";
      } else if (failure == LoadFailure::kUnreadable) {
        line += " (left in place)";
      }
      result.skipped.push_back(std::move(line));
      if (failure == LoadFailure::kDamage) result.skipped_steps.push_back(c.step);
    }
    std::string why;
    for (const auto& s : result.skipped) why += "\n  " + s;
    // Damage anywhere is data loss; otherwise what stopped the last one
    // (e.g. only a newer format's checkpoints: kUnimplemented).
    return Status(result.skipped_steps.empty() ? last.code() : Code::kDataLoss,
                  options_.root + ": no checkpoint loads and verifies:" + why);
  }

  Result<std::vector<uint64_t>> ListCommitted() override {
    return ListCheckpointSteps(env_, options_.root);
  }

  Result<std::vector<uint64_t>> ListReplicated() override {
    if (options_.replica_root.empty()) return std::vector<uint64_t>();
    return ListCheckpointSteps(replica_env_, options_.replica_root);
  }

  Status Quarantine(uint64_t step) override {
    if (options_.rank != 0) return Status::OK();  // the committer moves it, once
    const std::string dir = options_.root + "/" + StepDirName(step);
    if (env_->FileExists(dir)) {
      STINT_RETURN_IF_ERROR(CheckQuarantinable(step));
      char suffix[24];
      std::snprintf(suffix, sizeof(suffix), "-%016llx",
                    static_cast<unsigned long long>(RandomNonce()));
      STINT_RETURN_IF_ERROR(
          env_->RenameFile(dir, options_.root + "/quarantine-" + StepDirName(step) + suffix));
      STINT_RETURN_IF_ERROR(env_->SyncDir(options_.root));
      if (options_.incremental) {
        // The next save must not reference what was moved away.
        auto base = IncrementalBase::LoadNewest(env_, options_.root);
        SetBase(base.ok() ? std::move(*base) : nullptr);
      }
    }
    // LATEST must not go on naming what is gone, or every later Load tries
    // (and every later Quarantine moves) it again.
    STINT_ASSIGN_OR_RETURN(auto latest, ReadLatest(env_, options_.root));
    if (!latest || *latest != StepDirName(step)) return Status::OK();
    STINT_ASSIGN_OR_RETURN(auto steps, ListCheckpointSteps(env_, options_.root));
    if (!steps.empty()) return WriteLatest(env_, options_.root, StepDirName(steps.back()));
    STINT_RETURN_IF_ERROR(env_->RemoveFile(options_.root + "/" + kLatestName));
    return env_->SyncDir(options_.root);
  }

  CheckpointerStats stats() const override {
    CheckpointerStats stats;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats = stats_;
    }
    if (replicator_ != nullptr) replicator_->FillStats(&stats);
    return stats;
  }
  const CheckpointOptions& options() const override { return options_; }

  Status AbandonSave(uint64_t step, const Status& why) override {
    Status s = (why.ok() ? Status::InvalidArgument("AbandonSave without an error") : why)
                   .WithContext("step " + std::to_string(step) + " not saved");
    const uint64_t number = saves_started_++;  // counted as Save() counts
    if (options_.world_size > 1) RankSave(options_, env_, number, step).Abandon(s);
    return s;
  }

 private:
  // Quarantine moves only what is damaged and what nothing left behind
  // needs: kFailedPrecondition, naming why, for a step of a format this build
  // does not know (a newer stint's checkpoint is not damage) and for one a
  // newer committed step references (moving it would break that one too),
  // or may reference (its manifest cannot be read).
  Status CheckQuarantinable(uint64_t step) {
    const std::string name = StepDirName(step);
    const std::string why = options_.root + ": not quarantining " + name + ": ";
    const std::string path = options_.root + "/" + name + "/" + kManifestName;
    auto bytes = ReadFileToString(env_, path);
    if (bytes.ok()) {
      Status decoded = DecodeManifest(*bytes, path).status();
      if (decoded.code() == Code::kUnimplemented) {
        return Status::FailedPrecondition(why + decoded.message() +
                                          "; a newer format is left in place");
      }
    }
    STINT_ASSIGN_OR_RETURN(auto steps, ListCheckpointSteps(env_, options_.root));
    for (uint64_t newer : steps) {
      if (newer <= step) continue;
      auto referenced = ReferencedSteps(env_, options_.root, {newer});
      if (!referenced.ok()) {
        return Status::FailedPrecondition(why + "cannot tell whether " + StepDirName(newer) +
                                          " references it: " + referenced.status().ToString());
      }
      if (referenced->count(step) != 0) {
        return Status::FailedPrecondition(why + StepDirName(newer) +
                                          " references its data (incremental); quarantine " +
                                          StepDirName(newer) + " first");
      }
    }
    return Status::OK();
  }

  struct Candidate {
    int tier;
    uint64_t step;
    std::string name;
    std::shared_ptr<InMemoryCheckpoint> memory;  // tier 0
  };

  Status LoadOne(const Candidate& c, const DestPlanner& planner, const LoadOptions& options,
                 LoadResult* result) {
    ReaderOptions ro;
    ro.env = c.tier == 2 ? replica_env_ : env_;
    ro.io_engine = options_.io_engine;
    ro.direct_io = options_.direct_io;
    ro.queue_depth = options_.io_queue_depth;
    const std::string dir = c.tier == 0   ? c.memory->dir()
                            : c.tier == 2 ? options_.replica_root + "/" + c.name
                                          : options_.root + "/" + c.name;
    auto opened = c.tier == 0 ? c.memory->OpenReader(ro) : CheckpointReader::Open(dir, ro);
    if (!opened.ok()) {
      // LATEST naming a vanished directory, or a step-* entry that is a
      // file, is damage too.
      if (opened.status().code() == Code::kNotFound || opened.status().sys_errno() == ENOTDIR)
        return Status::DataLoss(opened.status().message());
      return opened.status();
    }
    std::unique_ptr<CheckpointReader> reader = std::move(*opened);
    if (options.verify_all) STINT_RETURN_IF_ERROR(reader->Verify().status());
    STINT_ASSIGN_OR_RETURN(auto dests, planner(*reader));
    STINT_RETURN_IF_ERROR(ReadIntoDests(*reader, dests, copier_, options_.device_load_bytes,
                                        options_.block_timeout));
    std::map<std::string, std::string> blobs;
    for (const auto& name : reader->blob_names()) {
      STINT_ASSIGN_OR_RETURN(blobs[name], reader->ReadBlob(name));
    }
    result->blobs = BlobsForRank(std::move(blobs), options_.rank, reader->world_size());
    result->step = reader->step();
    result->tier = c.tier;
    result->dir = dir;
    return Status::OK();
  }

  void PersistLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      std::unique_ptr<PersistJob> job = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();

      Status s = WaitForCopies(job.get());
      if (s.ok()) s = PersistAndCommit(job.get());
      // The base may be what failed (a referenced file gone): the next save
      // writes everything rather than failing the same way forever.
      if (!s.ok() && job->base != nullptr) SetBase(nullptr);
      const uint64_t step = job->stats.step;
      std::promise<Status> durable = std::move(job->durable);
      SaveStats stats = job->stats;
      // Tier 0 keeps the committed image; anything else returns the staging
      // buffer before anyone learns the save is done.
      std::unique_ptr<PersistJob> keep;
      if (s.ok() && options_.keep_in_memory) keep = std::move(job);
      if (replicator_ != nullptr) {
        PersistJob* saved = keep ? keep.get() : job.get();
        if (s.ok()) {
          // Queued before the durable future is set, so FlushReplication()
          // after durable.get() covers this step.
          replicator_->Enqueue(step, saved->saved_at, std::move(saved->replicated));
        } else {
          saved->replicated.set_value(s.WithContext("not replicated: the tier-1 save failed"));
        }
      }
      job.reset();

      lock.lock();
      steps_in_flight_.erase(steps_in_flight_.find(step));
      if (s.ok()) {
        ++stats_.committed;
        stats_.last = stats;
      } else {
        ++stats_.failed;
        if (background_error_.ok()) {
          background_error_ = s.WithContext("background save of step " + std::to_string(step));
        }
      }
      lock.unlock();
      // Stats and the buffer are settled first, so a caller woken here sees both.
      durable.set_value(s);
      if (keep) KeepInMemory(std::move(keep));
      if (s.ok() && options_.rank == 0) {
        // Retention runs after the commit is reported: it is not part of time-to-durable.
        std::string held_back;
        Status r = ApplyRetention(env_, options_.root, options_.keep_last, options_.keep_every,
                                  &tier1_guard_, PinnedSteps(), &held_back);
        {
          std::lock_guard<std::mutex> stats_lock(mu_);
          stats_.retention_held_back = std::move(held_back);
        }
        if (!r.ok())
          RecordBackgroundError(r.WithContext("retention after step " + std::to_string(step)));
      }
      lock.lock();
      busy_ = false;
      idle_cv_.notify_all();
    }
  }

  Status PersistAndCommit(PersistJob* job) {
    const uint64_t step = job->snapshot.step;
    auto t0 = Clock::now();
    std::string tmp;
    Status s;
    std::optional<RankSave> ranks;  // with several ranks
    if (options_.world_size > 1) {
      ranks.emplace(options_, env_, job->save_number, step);
      auto started = ranks->Start(
          CommitTimeout(options_, last_persist_seconds_, job->snapshot.layout.image_bytes));
      if (!started.ok()) return started.status();
      tmp = *started;
    } else {
      {
        // Queued before this writer was fenced: the root is not its own any more.
        std::lock_guard<std::mutex> lock(mu_);
        if (!fenced_.ok()) return fenced_;
      }
      tmp = options_.root + "/" + TmpDirName(step, RandomNonce());
      s = env_->CreateDir(tmp);
    }
    PersistedFile file;
    if (s.ok()) {
      // Registered once for the buffer's life (the pool unregisters it before
      // unmapping): pinning 1 GiB on every save costs more than it saves.
      engine_->RegisterBuffer(job->snapshot.buffer->data(), job->snapshot.buffer->size());
      bool compress = options_.compress;
      if (options_.compress_auto) {
        CompressChoice choice = compress_policy_.Decide(job->snapshot, &pool_);
        compress = choice.compress;
        job->stats.compress_decision = std::move(choice.why);
      }
      job->stats.compressed = compress;
      PersistOptions po{compress,          options_.zstd_level, options_.direct_io,
                        options_.io_size,  options_.incremental, job->base.get()};
      auto persisted = PersistSnapshot(env_, engine_.get(), &pool_, job->snapshot,
                                       tmp + "/" + RankFileName(options_.rank), po);
      if (persisted.ok()) file = std::move(*persisted);
      s = persisted.status();
      if (s.ok() && options_.keep_in_memory) job->file = file;
    }
    job->stats.persist_seconds = SecondsSince(t0);
    last_persist_seconds_ = job->stats.persist_seconds;
    if (s.ok() && options_.compress_auto) {
      compress_policy_.Record(job->stats.compressed, file.stored_bytes,
                              job->stats.persist_seconds);
    }
    job->stats.stored_bytes = file.stored_bytes;
    job->stats.referenced_bytes = file.referenced_bytes;
    job->stats.engine = engine_->name();
    if (ranks) {
      auto t1 = Clock::now();
      Manifest part = s.ok() ? BuildManifest(options_, job->snapshot, file) : Manifest();
      s = ranks->Finish(s, part, job->stats.persist_seconds);
      last_persist_seconds_ = ranks->slowest_persist_seconds();
      job->stats.commit_seconds = SecondsSince(t1);
      if (s.ok() && options_.incremental) {
        // Every rank's chunks are in the committed manifest, which only the
        // committer holds in memory.
        auto base = IncrementalBase::Load(env_, options_.root, StepDirName(step));
        if (base.ok()) SetBase(std::move(*base));
      }
      return s;  // the committer removed the tmp directory unless committed
    }
    if (s.ok()) {
      auto t1 = Clock::now();
      Manifest m = BuildManifest(options_, job->snapshot, file);
      auto guard = [&](uint64_t at) -> Status {
        STINT_RETURN_IF_ERROR(CheckReferencedFiles(env_, options_.root, m));
        return options_.commit_guard ? options_.commit_guard(at) : Status::OK();
      };
      s = CommitCheckpoint(env_, options_.root, tmp, step, EncodeManifest(m), guard);
      job->stats.commit_seconds = SecondsSince(t1);
      if (s.ok() && options_.incremental)
        SetBase(std::make_shared<IncrementalBase>(m, StepDirName(step)));
    }
    if (!s.ok()) {
      // Best effort: a crash here leaves a .tmp- dir that the next Open removes.
      RemoveRecursively(env_, tmp).IgnoreError();
    }
    return s;
  }

  // Fenced: refuses every later save and releases the root's writer lock.
  void StopWriting(const Status& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (fenced_.ok()) fenced_ = why;
    root_lock_.reset();
  }

  void SetBase(std::shared_ptr<const IncrementalBase> base) {
    std::lock_guard<std::mutex> lock(mu_);
    base_ = std::move(base);
  }

  // Steps whose files the queued saves and the next save may reference.
  std::set<uint64_t> PinnedSteps() {
    std::set<std::string> dirs;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (base_ != nullptr) dirs = base_->Dirs();
      for (const auto& job : queue_) {
        if (job->base != nullptr) {
          auto more = job->base->Dirs();
          dirs.insert(more.begin(), more.end());
        }
      }
    }
    std::set<uint64_t> steps;
    for (const auto& d : dirs) {
      if (auto step = ParseStepDirName(d)) steps.insert(*step);
    }
    return steps;
  }

  void RecordBackgroundError(const Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (background_error_.ok()) background_error_ = s;
  }

  // Starts the copies that outlast Save(): device tensors on the copier's
  // streams (kForward shards first), lazy host tensors on lazy_. Null when
  // everything was copied already. On error nothing still writes `image`
  // unless *image_still_written (copies already started did not finish
  // within copy_timeout).
  Result<std::shared_ptr<SnapshotProgress>> StartLaterCopies(uint64_t step, Clock::time_point t0,
                                                             char* image, StagingCopies* copies,
                                                             bool* image_still_written) {
    const WriteBarrier order[2] = {WriteBarrier::kForward, WriteBarrier::kOptimizerStep};
    bool host[2];
    int device_tickets = 0;
    for (WriteBarrier w : order) {
      host[int(w)] = !copies->later[int(w)].empty();
      device_tickets += copies->device[int(w)].empty() ? 0 : 1;
    }
    if (!host[0] && !host[1] && device_tickets == 0) return std::shared_ptr<SnapshotProgress>();
    auto progress = std::make_shared<SnapshotProgress>(step, t0, host, device_tickets);
    std::vector<uint64_t> started;
    for (WriteBarrier w : order) {
      const auto& list = copies->device[int(w)];
      if (list.empty()) continue;
      auto ticket = copier_->CopyToHostAsync(list, [progress] { progress->DeviceTicketDone(); });
      if (!ticket.ok()) {
        for (uint64_t t : started) {  // they write `image`
          Status waited = WaitTicket(t, t0 + options_.copy_timeout);
          if (waited.code() == Code::kDeadlineExceeded) *image_still_written = true;
        }
        return ticket.status().WithContext("save step " + std::to_string(step));
      }
      started.push_back(*ticket);
      std::set<std::pair<int, void*>> streams;
      for (const DeviceCopy& c : list) streams.emplace(c.device, c.stream);
      progress->AddDeviceTicket(w, *ticket, {streams.begin(), streams.end()});
    }
    if (host[0] || host[1]) {
      LazyCopyThread::Task task{image, {}, progress};
      for (WriteBarrier w : order) task.pieces[int(w)] = std::move(copies->later[int(w)]);
      lazy_.Enqueue(std::move(task));
    }
    return progress;
  }

  // Waits for a device ticket until `deadline`. kDeadlineExceeded means the
  // copies may still write their buffer: it must never go back to the pool.
  Status WaitTicket(uint64_t ticket, Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    Status s = copier_->Wait(ticket, std::max(left, std::chrono::milliseconds(0)));
    if (s.code() != Code::kDeadlineExceeded) return s;
    return Status::DeadlineExceeded("device-to-host copies not done " +
                                    std::to_string(options_.copy_timeout.count()) +
                                    " ms after Save() (CheckpointOptions.copy_timeout): " +
                                    s.message());
  }

  // The persist thread's first step: the buffer is read only after every
  // copy wrote it. Copies that miss copy_timeout fail the save, and the
  // buffer they may still write is abandoned.
  Status WaitForCopies(PersistJob* job) {
    SnapshotProgress* p = job->progress.get();
    if (p == nullptr) return Status::OK();
    const Clock::time_point deadline = job->saved_at + options_.copy_timeout;
    Status first;
    bool still_written = false;
    if (!p->WaitHost(WriteBarrier::kOptimizerStep, deadline)) {
      first = Status::DeadlineExceeded("lazy host copies not done " +
                                       std::to_string(options_.copy_timeout.count()) +
                                       " ms after Save() (CheckpointOptions.copy_timeout)");
      still_written = true;
    }
    for (WriteBarrier w : {WriteBarrier::kForward, WriteBarrier::kOptimizerStep}) {
      if (auto ticket = p->device_ticket(w)) {
        Status s = WaitTicket(*ticket, deadline);
        if (first.ok() && !s.ok()) first = s;
        if (s.code() == Code::kDeadlineExceeded) still_written = true;
      }
    }
    if (still_written) staging_.Abandon(std::move(job->snapshot.buffer));
    if (!first.ok()) {
      first = first.WithContext("device-to-host copy of step " + std::to_string(job->stats.step));
      p->Fail(first);
    }
    job->stats.staged_seconds = p->staged_seconds();
    if (p->device_ticket(WriteBarrier::kForward) || p->device_ticket(WriteBarrier::kOptimizerStep)) {
      job->stats.device_copy_seconds = job->stats.staged_seconds;
    }
    return first;
  }

  // Drops the saves whose copies completed (and what their shards borrowed,
  // here on the calling thread); returns the others, oldest first.
  std::vector<std::shared_ptr<SnapshotProgress>> PendingCopies() {
    std::vector<std::shared_ptr<SnapshotProgress>> done, left;
    {
      std::lock_guard<std::mutex> lock(in_flight_mu_);
      for (auto& p : in_flight_) (p->staged_ready() ? done : left).push_back(p);
      in_flight_ = left;
    }
    for (auto& p : done) p->TakeOwner().reset();
    return left;
  }

  // Tier 0: the committed image replaces the one held so far.
  void KeepInMemory(std::unique_ptr<PersistJob> job) {
    PersistedFile raw = RawImageFile(job->snapshot, job->file, &pool_);
    std::string manifest = EncodeManifest(BuildManifest(options_, job->snapshot, raw));
    const uint64_t step = job->snapshot.step;
    const uint64_t image_bytes = job->snapshot.layout.image_bytes;
    auto image = std::make_shared<InMemoryCheckpoint>(
        step, std::move(job->snapshot.buffer), image_bytes, raw.file.name, std::move(manifest));
    job.reset();
    std::shared_ptr<InMemoryCheckpoint> old;
    {
      std::lock_guard<std::mutex> lock(mu_);
      old = std::move(tier0_);
      tier0_ = std::move(image);
      stats_.in_memory_step = step;
    }
    old.reset();  // outside the lock: a Load may still hold it, and the pool wakes a waiting Save
  }

  // Writers with rank 0: the root's writer lock, released last (see root_lock.h),
  // or when a commit guard fenced this writer (StopWriting).
  std::unique_ptr<FileLock> root_lock_;  // guarded by mu_ once the persist thread runs
  Status fenced_;                        // guarded by mu_; what fenced this writer
  CheckpointOptions options_;
  Env* const env_;
  Env* const replica_env_;
  DeviceCopier* const copier_;        // may be null; outlives this object
  std::unique_ptr<IoEngine> engine_;  // the persist thread's; the pool only unregisters buffers
  ThreadPool pool_;
  StagingPool staging_;
  LazyCopyThread lazy_{&pool_};  // lazy host copies

  std::mutex in_flight_mu_;
  // Saves whose copies may still run, oldest first. Guarded by in_flight_mu_.
  std::vector<std::shared_ptr<SnapshotProgress>> in_flight_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_, idle_cv_;
  // Guarded by mu_.
  std::deque<std::unique_ptr<PersistJob>> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  Status background_error_;  // first error since the last Flush
  std::multiset<uint64_t> steps_in_flight_;  // queued or persisting
  CheckpointerStats stats_;
  std::shared_ptr<InMemoryCheckpoint> tier0_;  // tier 0; a Load holds its own reference
  std::shared_ptr<const IncrementalBase> base_;  // incremental: the newest commit
  uint64_t saves_started_ = 0;                 // the training thread's
  uint64_t loads_started_ = 0;                 // the training thread's
  double last_persist_seconds_ = 0;            // the persist thread's
  CompressPolicy compress_policy_{options_.zstd_level};  // the persist thread's

  RetentionGuard tier1_guard_;              // tier-1 retention skips the step being replicated
  std::unique_ptr<Replicator> replicator_;  // tier 2; with a replica_root only
  std::thread persist_thread_;              // started in the constructor, joined in the destructor
};

// Creates the root with its parents. Rank 0 (the committer) takes the
// root's writer lock, returned, and removes leftovers; the other ranks write
// into its tmp directories and touch nothing else (null lock). Tier 2 is
// prepared by the Replicator.
Result<std::unique_ptr<FileLock>> PrepareRoots(Env* env, const CheckpointOptions& options) {
  if (!options.replica_root.empty()) {
    STINT_RETURN_IF_ERROR(CheckReplicaRoot(options.root, options.replica_root));
  }
  if (options.rank == 0) return OpenRootForWriting(env, options.root, options.lock_wait);
  STINT_RETURN_IF_ERROR(CreateDirWithParents(env, options.root));
  if (!env->IsDirectory(options.root)) {
    return Status::InvalidArgument(options.root + " exists and is not a directory");
  }
  return std::unique_ptr<FileLock>();
}

}  // namespace

Result<std::unique_ptr<Checkpointer>> Checkpointer::Open(const CheckpointOptions& options) {
  if (options.root.empty()) return Status::InvalidArgument("CheckpointOptions.root is empty");
  if (options.chunk_size == 0 || options.chunk_size % kChunkAlignment != 0) {
    return Status::InvalidArgument("chunk_size must be a positive multiple of 4096, got " +
                                   std::to_string(options.chunk_size));
  }
  if (options.rank < 0 || options.world_size < 1 || options.rank >= options.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(options.rank) + " is not in world of " +
                                   std::to_string(options.world_size));
  }
  if (options.world_size > 1 && options.commit_channel == nullptr) {
    return Status::InvalidArgument("world_size " + std::to_string(options.world_size) +
                                   " needs CheckpointOptions.commit_channel (the job's store) for "
                                   "the commit across ranks");
  }
  if (options.incremental && options.keep_in_memory) {
    // A tier-0 image holds only what was written, not the referenced chunks.
    return Status::InvalidArgument("incremental and keep_in_memory (tier 0) cannot be combined");
  }
  if (options.world_size > 1 && options.keep_in_memory) {
    // One rank's image is not a checkpoint of the job; tier 1/2 are.
    return Status::InvalidArgument(
        "keep_in_memory (tier 0) holds one process's image and is not "
        "available with world_size > 1");
  }
  Env* env = options.env != nullptr ? options.env : Env::Default();
  std::unique_ptr<FileLock> root_lock;
  if (options.read_only) {
    if (!env->IsDirectory(options.root)) {
      return Status::NotFound(options.root + ": no such checkpoint directory");
    }
  } else {
    STINT_ASSIGN_OR_RETURN(root_lock, PrepareRoots(env, options));
  }
  STINT_ASSIGN_OR_RETURN(IoEngineKind kind, ParseIoEngineKind(options.io_engine));
  IoEngineOptions io;
  io.kind = kind;
  io.queue_depth = options.io_queue_depth;
  STINT_ASSIGN_OR_RETURN(auto engine, NewIoEngine(io));
  return std::unique_ptr<Checkpointer>(
      new CheckpointerImpl(options, env, std::move(engine), std::move(root_lock)));
}

}  // namespace stint
