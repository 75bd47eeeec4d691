// Checkpointer: snapshot on the caller's thread, persist and commit on one
// background thread that owns the write engine.
#include "stint/checkpointer.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <cstdio>
#include <random>
#include <thread>

#include "base/thread_pool.h"
#include "checkpoint/commit.h"
#include "checkpoint/persist.h"
#include "checkpoint/retention.h"
#include "checkpoint/snapshot.h"
#include "checkpoint/staging_pool.h"
#include "format/manifest.h"
#include "io/io_engine.h"

namespace stint {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::shared_future<Status> ReadyFuture(Status s) {
  std::promise<Status> p;
  p.set_value(std::move(s));
  return p.get_future().share();
}

uint64_t RandomNonce() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd() ^
         uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
}

// Damage means "try an older checkpoint"; anything else (a destination that
// does not match, an I/O error) goes straight back to the caller.
bool IsCheckpointDamage(const Status& s) {
  return s.code() == Code::kDataLoss || s.code() == Code::kUnimplemented;
}

struct PersistJob {
  Snapshot snapshot;
  std::promise<Status> durable;
  SaveStats stats;
};

class CheckpointerImpl final : public Checkpointer {
 public:
  CheckpointerImpl(const CheckpointOptions& options, Env* env, std::unique_ptr<IoEngine> engine)
      : options_(options),
        env_(env),
        engine_(std::move(engine)),
        pool_(options.threads != 0 ? options.threads
                                   : std::max(1u, std::thread::hardware_concurrency()) - 1),
        staging_(options.staging_bytes, [this](char* base) { engine_->UnregisterBuffer(base); }) {
    options_.env = env;
    persist_thread_ = std::thread([this] { PersistLoop(); });
  }

  ~CheckpointerImpl() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    work_cv_.notify_all();
    persist_thread_.join();  // finishes every queued save first: nothing is dropped
  }

  Result<SaveHandle> Save(uint64_t step, const State& state) override {
    STINT_RETURN_IF_ERROR(TakeBackgroundError());
    if (env_->FileExists(options_.root + "/" + StepDirName(step))) {
      return Status::AlreadyExists(options_.root + "/" + StepDirName(step) +
                                   " is already committed; refusing to overwrite it");
    }
    STINT_ASSIGN_OR_RETURN(SnapshotLayout layout, PlanSnapshot(state, options_.chunk_size));
    auto t0 = Clock::now();
    auto wait = options_.busy_policy == BusyPolicy::kBlock ? options_.block_timeout
                                                            : std::chrono::milliseconds(0);
    auto buffer = staging_.Acquire(layout.image_bytes, wait);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.saves;
    }
    if (!buffer.ok()) {
      if (buffer.status().code() != Code::kUnavailable || options_.busy_policy != BusyPolicy::kSkip) {
        return buffer.status().WithContext("save step " + std::to_string(step));
      }
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.skipped;
      Status why = buffer.status().WithContext("step " + std::to_string(step) + " skipped");
      return SaveHandle{step, true, ReadyFuture(why), ReadyFuture(why)};
    }
    CopyIntoStaging(state, layout, (*buffer)->data(), &pool_);

    auto job = std::make_unique<PersistJob>();
    job->snapshot.step = step;
    job->snapshot.layout = std::move(layout);
    job->snapshot.buffer = std::move(*buffer);
    job->stats.step = step;
    job->stats.raw_bytes = job->snapshot.layout.raw_bytes;
    job->stats.snapshot_seconds = SecondsSince(t0);
    SaveHandle handle{step, false, ReadyFuture(Status::OK()), job->durable.get_future().share()};
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(job));
    }
    work_cv_.notify_all();
    return handle;
  }

  Status Flush(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!idle_cv_.wait_for(lock, timeout, [this] { return queue_.empty() && !busy_; })) {
      return Status::DeadlineExceeded("flush: checkpoints still persisting after " +
                                      std::to_string(timeout.count()) + " ms");
    }
    Status s = background_error_;
    background_error_ = Status::OK();
    return s;
  }

  Result<LoadResult> Load(const DestPlanner& planner, const LoadOptions& options) override {
    std::vector<std::string> candidates;
    if (options.step) {
      candidates.push_back(StepDirName(*options.step));
    } else {
      // Newest committed first. The rename is the commit point; LATEST may lag
      // it by one crash, so it names a candidate but does not outrank a newer one.
      STINT_ASSIGN_OR_RETURN(auto steps, ListCheckpointSteps(env_, options_.root));
      for (auto it = steps.rbegin(); it != steps.rend(); ++it) candidates.push_back(StepDirName(*it));
      auto latest = ReadLatest(env_, options_.root);
      if (latest.ok() && latest->has_value() &&
          std::find(candidates.begin(), candidates.end(), **latest) == candidates.end()) {
        candidates.insert(candidates.begin(), **latest);  // vanished: reported as skipped
      }
      if (candidates.empty()) {
        return Status::NotFound(options_.root + ": no committed checkpoint to load");
      }
    }
    LoadResult result;
    for (const auto& name : candidates) {
      auto loaded = LoadOne(options_.root + "/" + name, planner, options, &result);
      if (loaded.ok()) return result;
      if (options.step || !IsCheckpointDamage(loaded)) return loaded;
      result.skipped.push_back(name + ": " + loaded.ToString());  // reported, never silent
      if (auto step = ParseStepDirName(name)) result.skipped_steps.push_back(*step);
    }
    std::string why;
    for (const auto& s : result.skipped) why += "\n  " + s;
    return Status::DataLoss(options_.root + ": no checkpoint loads and verifies:" + why);
  }

  Result<std::vector<uint64_t>> ListCommitted() override {
    return ListCheckpointSteps(env_, options_.root);
  }

  Status Quarantine(uint64_t step) override {
    char suffix[24];
    std::snprintf(suffix, sizeof(suffix), "-%016llx", static_cast<unsigned long long>(RandomNonce()));
    STINT_RETURN_IF_ERROR(env_->RenameFile(options_.root + "/" + StepDirName(step),
                                           options_.root + "/quarantine-" + StepDirName(step) + suffix));
    return env_->SyncDir(options_.root);
  }

  CheckpointerStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  const CheckpointOptions& options() const override { return options_; }

 private:
  Status TakeBackgroundError() {
    std::lock_guard<std::mutex> lock(mu_);
    Status s = background_error_;
    background_error_ = Status::OK();
    return s;
  }

  Status LoadOne(const std::string& dir, const DestPlanner& planner, const LoadOptions& options,
                 LoadResult* result) {
    ReaderOptions ro;
    ro.env = env_;
    ro.io_engine = options_.io_engine;
    ro.direct_io = options_.direct_io;
    ro.queue_depth = options_.io_queue_depth;
    auto opened = CheckpointReader::Open(dir, ro);
    if (!opened.ok()) {
      // LATEST naming a vanished directory is damage too.
      if (opened.status().code() == Code::kNotFound) return Status::DataLoss(opened.status().message());
      return opened.status();
    }
    std::unique_ptr<CheckpointReader> reader = std::move(*opened);
    if (options.verify_all) STINT_RETURN_IF_ERROR(reader->Verify().status());
    STINT_ASSIGN_OR_RETURN(auto dests, planner(*reader));
    STINT_RETURN_IF_ERROR(reader->Read(dests));
    result->blobs.clear();
    for (const auto& name : reader->blob_names()) {
      STINT_ASSIGN_OR_RETURN(result->blobs[name], reader->ReadBlob(name));
    }
    result->step = reader->step();
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

      Status s = PersistAndCommit(job.get());
      const uint64_t step = job->stats.step;
      std::promise<Status> durable = std::move(job->durable);
      SaveStats stats = job->stats;
      job.reset();  // returns the staging buffer before anyone learns the save is done

      lock.lock();
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
      if (s.ok()) {
        // Retention runs after the commit is reported: it is not part of time-to-durable.
        Status r = ApplyRetention();
        if (!r.ok()) RecordBackgroundError(r.WithContext("retention after step " + std::to_string(step)));
      }
      lock.lock();
      busy_ = false;
      idle_cv_.notify_all();
    }
  }

  Status PersistAndCommit(PersistJob* job) {
    const uint64_t step = job->snapshot.step;
    const std::string tmp = options_.root + "/" + TmpDirName(step, RandomNonce());
    auto t0 = Clock::now();
    Status s = env_->CreateDir(tmp);
    PersistedFile file;
    if (s.ok()) {
      // Registered once for the buffer's life (the pool unregisters it before
      // unmapping): pinning 1 GiB on every save costs more than it saves.
      engine_->RegisterBuffer(job->snapshot.buffer->data(), job->snapshot.buffer->size());
      PersistOptions po{options_.compress, options_.zstd_level, options_.direct_io, options_.io_size};
      auto persisted = PersistSnapshot(env_, engine_.get(), &pool_, job->snapshot,
                                       tmp + "/" + RankFileName(options_.rank), po);
      if (persisted.ok()) file = std::move(*persisted);
      s = persisted.status();
    }
    job->stats.persist_seconds = SecondsSince(t0);
    if (s.ok()) {
      auto t1 = Clock::now();
      s = CommitCheckpoint(env_, options_.root, tmp, step, EncodeManifest(BuildManifest(*job, file)),
                           options_.commit_guard);
      job->stats.commit_seconds = SecondsSince(t1);
      job->stats.stored_bytes = file.stored_bytes;
      job->stats.engine = engine_->name();
    }
    if (!s.ok()) {
      // Best effort: a crash here leaves a .tmp- dir that the next Open removes.
      RemoveRecursively(env_, tmp).IgnoreError();
    }
    return s;
  }

  void RecordBackgroundError(const Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (background_error_.ok()) background_error_ = s;
  }

  Manifest BuildManifest(const PersistJob& job, const PersistedFile& file) const {
    Manifest m;
    m.job_id = options_.job_id;
    m.step = job.snapshot.step;
    m.fencing_token = options_.fencing_token;
    m.world_size = options_.world_size;
    m.chunk_size = options_.chunk_size;
    m.created_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    m.files.push_back(file.file);
    const auto& entries = job.snapshot.layout.entries;
    for (size_t e = 0; e < entries.size(); ++e) {
      const SnapshotEntry& se = entries[e];
      if (se.is_blob) {
        m.blobs.push_back(BlobRecord{se.name, file.file.name, file.entry_chunks[e]});
        continue;
      }
      ShardRecord shard{se.offsets, se.extents, file.file.name, file.entry_chunks[e]};
      auto it = std::find_if(m.tensors.begin(), m.tensors.end(),
                             [&](const TensorRecord& t) { return t.name == se.name; });
      if (it == m.tensors.end()) {
        m.tensors.push_back(TensorRecord{se.name, se.dtype, se.global_shape, {}});
        it = m.tensors.end() - 1;
      }
      it->shards.push_back(std::move(shard));
    }
    return m;
  }

  Status ApplyRetention() {
    STINT_ASSIGN_OR_RETURN(auto steps, ListCheckpointSteps(env_, options_.root));
    std::optional<uint64_t> protect;
    auto latest = ReadLatest(env_, options_.root);
    if (latest.ok() && latest->has_value()) protect = ParseStepDirName(**latest);
    for (uint64_t s : StepsToDelete(steps, options_.keep_last, options_.keep_every, protect)) {
      STINT_RETURN_IF_ERROR(DeleteCheckpoint(env_, options_.root, s).WithContext("retention"));
    }
    return Status::OK();
  }

  CheckpointOptions options_;
  Env* const env_;
  std::unique_ptr<IoEngine> engine_;  // the persist thread's; the pool only unregisters buffers
  ThreadPool pool_;
  StagingPool staging_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_, idle_cv_;
  // Guarded by mu_.
  std::deque<std::unique_ptr<PersistJob>> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  Status background_error_;  // first error not yet returned by Save/Flush
  CheckpointerStats stats_;

  std::thread persist_thread_;  // started in the constructor, joined in the destructor
};

}  // namespace

Result<std::unique_ptr<Checkpointer>> Checkpointer::Open(const CheckpointOptions& options) {
  if (options.root.empty()) return Status::InvalidArgument("CheckpointOptions.root is empty");
  if (options.chunk_size == 0 || options.chunk_size % kChunkAlignment != 0) {
    return Status::InvalidArgument("chunk_size must be a positive multiple of 4096, got " +
                                   std::to_string(options.chunk_size));
  }
  if (options.world_size > 1) {
    // Each rank would commit its own step directory; the cross-rank commit
    // (rank 0 commits after every rank reported its file digest) needs the
    // job's store, which comes with the coordinator and elastic groups.
    return Status::Unimplemented("world_size " + std::to_string(options.world_size) +
                                 ": multi-process commit is not available yet; save every shard "
                                 "from one process (State may hold several shards of a tensor)");
  }
  if (options.rank < 0 || options.world_size < 1 || options.rank >= options.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(options.rank) + " is not in world of " +
                                   std::to_string(options.world_size));
  }
  Env* env = options.env != nullptr ? options.env : Env::Default();
  Status made = env->CreateDir(options.root);
  if (made.ok()) {
    // The root's own entry must survive a power cut, or every checkpoint in it goes too.
    size_t slash = options.root.find_last_of('/');
    std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : options.root.substr(0, slash);
    STINT_RETURN_IF_ERROR(env->SyncDir(parent));
  } else if (made.code() != Code::kAlreadyExists) {
    return made;
  }
  if (!env->IsDirectory(options.root)) {
    return Status::InvalidArgument(options.root + " exists and is not a directory");
  }
  STINT_RETURN_IF_ERROR(CleanLeftovers(env, options.root));
  STINT_ASSIGN_OR_RETURN(IoEngineKind kind, ParseIoEngineKind(options.io_engine));
  IoEngineOptions io;
  io.kind = kind;
  io.queue_depth = options.io_queue_depth;
  STINT_ASSIGN_OR_RETURN(auto engine, NewIoEngine(io));
  return std::unique_ptr<Checkpointer>(new CheckpointerImpl(options, env, std::move(engine)));
}

}  // namespace stint
