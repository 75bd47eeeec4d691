// Checkpointer: Save() snapshots on the caller's thread (the copies that
// outlast it run under the lazy barrier) and queues the save; the persist
// thread persists and commits each save in turn, keeps it as tier 0 and
// applies retention; Load() falls back through the tiers. Read top to
// bottom: Save -> snapshot -> persist -> commit, then Flush, Load and the
// rest. Loading, listing and the markers of a root (quarantine, COMPLETE)
// are in checkpointer_reads.cc; the class and its parts: checkpointer_impl.h.
#include "checkpoint/checkpointer_impl.h"

#include <algorithm>
#include <utility>

#include "base/clock.h"
#include "checkpoint/local_commit.h"
#include "checkpoint/node_commit.h"
#include "checkpoint/peer_tier.h"
#include "checkpoint/open_checks.h"
#include "checkpoint/rank_commit.h"
#include "checkpoint/root_lock.h"
#include "checkpoint/save_times.h"
#include "format/manifest.h"

namespace stint {
namespace {

using Clock = std::chrono::steady_clock;

std::shared_future<Status> ReadyFuture(Status s) {
  std::promise<Status> p;
  p.set_value(std::move(s));
  return p.get_future().share();
}

}  // namespace

CheckpointerImpl::CheckpointerImpl(const CheckpointOptions& options, Env* env,
                                   std::unique_ptr<Env> store, std::unique_ptr<IoEngine> engine,
                                   std::unique_ptr<FileLock> root_lock)
    : store_(std::move(store)),
      fence_(std::move(root_lock)),
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
              : [this](char* base, size_t size) { return copier_->RegisterHostMemory(base, size); },
          options.keep_in_memory ? 3 : 2) {
  options_.env = env;
  options_.replica_env = replica_env_;
  if (options_.node_id.empty()) options_.node_id = LocalNodeId();
  fence_.GuardCommits(&options_);
  if (options_.world_size > 1) {
    peers_ = std::make_unique<PeerTier>(options_, env_, &tier1_guard_, &gate_);
    loader_.set_tier1_env(peers_->read_env());
  }
  if (!options_.replica_root.empty() && options_.rank == 0 && !options_.read_only) {
    replicator_ = std::make_unique<Replicator>(
        options_, &tier1_guard_, peers_ != nullptr ? peers_->read_env() : nullptr, &gate_);
  }
  if (options_.incremental && !options_.read_only) {
    // Unreadable root or no checkpoint yet: the first save is a full one.
    auto base = IncrementalBase::LoadNewest(env_, options_.root);
    if (base.ok()) base_ = std::move(*base);
  }
  persist_thread_ = std::thread([this] { PersistLoop(); });
}

CheckpointerImpl::~CheckpointerImpl() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  persist_thread_.join();  // finishes every queued save first: nothing is dropped
  copies_.Clear();         // what the shards borrowed goes on this thread
  replicator_.reset();     // replicates the newest queued step first
  peers_.reset();
  memory_.Clear();         // its buffer goes back to staging_ before staging_ goes
}

Result<SaveHandle> CheckpointerImpl::Save(uint64_t step, const State& state) {
  ForegroundGate::Hold saving(&gate_);  // background copies wait meanwhile
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

// Save(): checks, plans the snapshot, takes a staging buffer (tier 0
// gives way when only it holds the room), then snapshots into it.
Result<SaveHandle> CheckpointerImpl::StartSave(uint64_t step, const State& state, uint64_t number) {
  STINT_RETURN_IF_ERROR(CheckCanSave(step, state));
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
  auto buffer = memory_.AcquireStaging(&staging_, layout.image_bytes, wait, [this] {
    std::lock_guard<std::mutex> lock(mu_);
    return queue_.empty() && !busy_;
  });
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
    return SaveHandle{step, true, ReadyFuture(why), ReadyFuture(why), ReadyFuture(why)};
  }
  auto job = std::make_unique<PersistJob>();
  job->save_number = number;
  job->base = std::move(base);
  job->snapshot.step = step;
  job->snapshot.layout = std::move(layout);
  job->snapshot.buffer = std::move(*buffer);
  job->stats.step = step;
  job->stats.raw_bytes = job->snapshot.layout.raw_bytes;
  job->saved_at = t0;
  return TakeSnapshot(state, std::move(job));
}

// What refuses a save before anything is copied.
Status CheckpointerImpl::CheckCanSave(uint64_t step, const State& state) {
  if (options_.read_only) {
    return Status::FailedPrecondition(options_.root + ": opened read_only; not saving step " +
                                      std::to_string(step));
  }
  copies_.Pending();  // releases what finished saves borrowed
  // Refused now rather than failing at its rename behind the first one.
  if (Status fenced = fence_.status(); !fenced.ok()) {
    return fenced.WithContext(options_.root +
                              ": this writer was fenced and let go of the "
                              "root; not saving step " +
                              std::to_string(step));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
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
  return Status::OK();
}

// Copies `state` into the job's staging buffer: what must be copied now,
// here; the rest starts under the lazy barrier. The job is queued before
// the copies here run, so the persist thread writes each window of the
// buffer as soon as it is filled.
Result<SaveHandle> CheckpointerImpl::TakeSnapshot(const State& state,
                                                  std::unique_ptr<PersistJob> job) {
  const uint64_t step = job->snapshot.step;
  const Clock::time_point t0 = job->saved_at;
  char* image = job->snapshot.buffer->data();
  std::shared_ptr<const std::unordered_set<std::string>> unchanged;
  if (job->base != nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    unchanged = unchanged_shards_;
  }
  SourceHashing hashing{job->base.get(), unchanged.get()};
  StagingCopies copies = PlanStagingCopies(
      state, job->snapshot.layout, image, options_.snapshot == SnapshotMode::kLazy,
      unchanged != nullptr && !unchanged->empty() ? &hashing : nullptr);
  job->snapshot.unchanged = copies.unchanged;
  SaveHandle handle{
      step, false, ReadyFuture(Status::OK()), job->durable.get_future().share(),
      replicator_ == nullptr ? ReadyFuture(Status::OK()) : job->replicated.get_future().share()};
  bool image_still_written = false;
  auto progress = copies_.Start(step, t0, image, &copies, &image_still_written);
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
    job->progress->KeepUntilStaged(std::make_shared<ForegroundGate::Hold>(&gate_));
    copies_.Track(job->progress, state.owner);
  }
  auto filled = std::make_shared<StagingWatermark>(job->snapshot.layout.image_bytes);
  job->snapshot.filled = filled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    steps_in_flight_.insert(step);
    queue_.push_back(std::move(job));
  }
  work_cv_.notify_all();
  RunStagingCopies(copies.now, image, &pool_, filled.get());
  filled->Finish();
  return handle;
}

// Waits until Save() finished copying into the job's buffer (the buffer
// must not be read whole, reused or freed before) and records how long
// that took: the training thread's stall.
void CheckpointerImpl::WaitForSnapshot(PersistJob* job) {
  if (job->snapshot.filled == nullptr) return;
  Clock::time_point done = job->snapshot.filled->WaitFinished();
  job->stats.snapshot_seconds = std::chrono::duration<double>(done - job->saved_at).count();
  if (job->progress == nullptr) job->stats.staged_seconds = job->stats.snapshot_seconds;
  job->snapshot.filled.reset();
}

Status CheckpointerImpl::AbandonSave(uint64_t step, const Status& why) {
  Status s = (why.ok() ? Status::InvalidArgument("AbandonSave without an error") : why)
                 .WithContext("step " + std::to_string(step) + " not saved");
  const uint64_t number = saves_started_++;  // counted as Save() counts
  if (options_.world_size > 1) RankSave(options_, env_, number, step).Abandon(s);
  return s;
}

// The persist thread: each queued save in turn.
void CheckpointerImpl::PersistLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    std::unique_ptr<PersistJob> job = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();

    // Kept until the outcome is reported: its end cleans the save's keys off
    // the commit channel (one rank deletes them all), not part of
    // time-to-durable.
    std::unique_ptr<SaveCommit> commit;
    // Copies may still run: each window of the image is written once they
    // filled it.
    Status s = PersistAndCommit(job.get(), &commit);
    // A copy that failed is the cause, whatever persisting made of it.
    Status copied = WaitForCopies(job.get());
    if (!copied.ok()) s = copied;
    // The base may be what failed (a referenced file gone): the next save
    // writes everything rather than failing the same way forever.
    if (!s.ok() && job->base != nullptr) SetBase(nullptr);
    WaitForSnapshot(job.get());
    const uint64_t step = job->stats.step;
    const double durable_seconds = SecondsSince(job->saved_at);
    const bool leads_node_part = s.ok() && commit->leads_node_part();
    const Clock::time_point saved_at = job->saved_at;
    ReportOutcome(std::move(job), s);
    commit.reset();
    if (leads_node_part) {
      Status copying = peers_->AfterCommit(step, saved_at);
      if (!copying.ok()) {
        std::lock_guard<std::mutex> guard(mu_);
        if (background_error_.ok()) background_error_ = copying;
      }
    }
    if (s.ok() && (options_.rank == 0 || node_lock_.held())) {
      ApplyRetentionAfter(step);
      // For launchers sizing their warning (stint slurm submit --root); a
      // save stays committed whether or not its time could be written.
      RecordSaveTime(env_, options_.root, {step, durable_seconds}).IgnoreError();
    }
    lock.lock();
    busy_ = false;
    idle_cv_.notify_all();
  }
}

// The persist thread's step after persisting: every copy into the buffer
// settled (persisting waited for each window's). Copies that missed
// copy_timeout fail the save, and the buffer they may still write is
// abandoned.
Status CheckpointerImpl::WaitForCopies(PersistJob* job) {
  SnapshotProgress* p = job->progress.get();
  if (p == nullptr) return Status::OK();
  bool still_written = false;
  Status first = copies_.Wait(p, job->saved_at, &still_written);
  if (still_written) staging_.Abandon(std::move(job->snapshot.buffer));
  if (!first.ok()) {
    first = first.WithContext("device-to-host copy of step " + std::to_string(job->stats.step));
    p->Fail(first);
  }
  job->stats.staged_seconds = p->staged_seconds();
  if (!p->device_groups().empty()) {
    job->stats.device_copy_seconds = job->stats.staged_seconds;
  }
  return first;
}

// Persists this rank's data file into the tmp directory its commit path
// names (made into *commit), then commits through it.
Status CheckpointerImpl::PersistAndCommit(PersistJob* job,
                                          std::unique_ptr<SaveCommit>* commit_out) {
  auto t0 = Clock::now();
  *commit_out = NewCommit(*job);
  SaveCommit* commit = commit_out->get();
  STINT_ASSIGN_OR_RETURN(std::string tmp, commit->Start());
  PersistedFile file;
  Status s = Persist(job, tmp, &file);
  job->stats.persist_seconds = SecondsSince(t0);
  if (s.ok() && options_.compress_auto) {
    compress_policy_.Record(job->stats.compressed, file.stored_bytes, job->stats.persist_seconds);
  }
  if (s.ok() && options_.incremental) RecordUnchanged(job->snapshot.layout, file);
  job->stats.stored_bytes = file.stored_bytes;
  job->stats.referenced_bytes = file.referenced_bytes;
  job->stats.matched_in_place_bytes = file.matched_in_place_bytes;
  job->stats.engine = engine_->name();

  auto t1 = Clock::now();
  Manifest part = s.ok() ? BuildManifest(options_, job->snapshot, file) : Manifest();
  s = commit->Finish(s, part, job->stats.persist_seconds);
  last_persist_seconds_ = commit->slowest_persist_seconds();
  job->stats.commit_seconds = SecondsSince(t1);
  if (s.ok() && options_.incremental) {
    if (auto base = commit->CommittedBase(part)) SetBase(std::move(base));
  }
  return s;
}

// A shard is whole in the base when every one of its chunks was referenced,
// none written.
void CheckpointerImpl::RecordUnchanged(const SnapshotLayout& layout, const PersistedFile& file) {
  auto keys = std::make_shared<std::unordered_set<std::string>>();
  for (size_t e = 0; e < layout.entries.size(); ++e) {
    const SnapshotEntry& se = layout.entries[e];
    if (se.is_blob) continue;
    const auto& chunks = file.entry_chunks[e];
    bool whole = std::all_of(chunks.begin(), chunks.end(),
                             [](const ChunkRecord& c) { return !c.ref.empty(); });
    if (whole) keys->insert(ShardKey(se.name, se.offsets, se.extents));
  }
  std::lock_guard<std::mutex> lock(mu_);
  unchanged_shards_ = std::move(keys);
}

// The commit path of one save: this process alone, or every rank.
std::unique_ptr<SaveCommit> CheckpointerImpl::NewCommit(const PersistJob& job) {
  const uint64_t step = job.snapshot.step;
  if (options_.world_size == 1) {
    return std::make_unique<LocalCommit>(options_, env_, &fence_, step);
  }
  return std::make_unique<RankSaveCommit>(
      options_, env_, job.save_number, step,
      CommitTimeout(options_, last_persist_seconds_, job.snapshot.layout.image_bytes),
      &node_lock_);
}

// Writes the job's snapshot as this rank's data file in `tmp`, compressed
// or not as the options (or the compress policy) say.
Status CheckpointerImpl::Persist(PersistJob* job, const std::string& tmp, PersistedFile* file) {
  // Registered once for the buffer's life (the pool unregisters it before
  // unmapping): pinning 1 GiB on every save costs more than it saves.
  engine_->RegisterBuffer(job->snapshot.buffer->data(), job->snapshot.buffer->size());
  PersistOptions po;
  po.compress = options_.compress;
  po.zstd_level = options_.zstd_level;
  po.direct_io = options_.direct_io;
  po.io_size = options_.io_size;
  po.incremental = options_.incremental;
  po.base = job->base.get();
  if (SnapshotProgress* p = job->progress.get()) {
    po.wait_staged = [this, job, p](uint64_t to) {
      return copies_.WaitStagedUpTo(p, to, job->saved_at, &job->device_groups_waited);
    };
  }
  if (options_.compress_auto) {
    // The policy samples chunks anywhere in the image.
    const uint64_t all = job->snapshot.layout.image_bytes;
    if (job->snapshot.filled != nullptr) job->snapshot.filled->WaitFor(all);
    if (po.wait_staged) STINT_RETURN_IF_ERROR(po.wait_staged(all));
    CompressChoice choice = compress_policy_.Decide(job->snapshot, &pool_);
    po.compress = choice.compress;
    job->stats.compress_decision = std::move(choice.why);
  }
  job->stats.compressed = po.compress;
  STINT_ASSIGN_OR_RETURN(*file, PersistSnapshot(env_, engine_.get(), &pool_, job->snapshot,
                                                tmp + "/" + RankFileName(options_.rank), po));
  if (options_.keep_in_memory) job->file = *file;
  return Status::OK();
}

// Settles a save whose outcome is `s`: replication queued (or refused),
// stats, then the durable future; a committed save is then kept as tier 0.
void CheckpointerImpl::ReportOutcome(std::unique_ptr<PersistJob> job, const Status& s) {
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
  {
    std::lock_guard<std::mutex> lock(mu_);
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
  }
  // Stats and the buffer are settled first, so a caller woken here sees both.
  durable.set_value(s);
  if (keep) memory_.Keep(options_, &keep->snapshot, keep->file, &pool_);
}

// Retention runs after the commit is reported: it is not part of
// time-to-durable.
void CheckpointerImpl::ApplyRetentionAfter(uint64_t step) {
  std::string held_back;
  Status r = ApplyRetention(env_, options_.root, options_.keep_last, options_.keep_every,
                            &tier1_guard_, PinnedSteps(), &held_back, options_.retention_pins);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.retention_held_back = std::move(held_back);
  if (!r.ok() && background_error_.ok()) {
    background_error_ = r.WithContext("retention after step " + std::to_string(step));
  }
}

std::set<uint64_t> CheckpointerImpl::PinnedSteps() {
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

Status CheckpointerImpl::Flush(std::chrono::milliseconds timeout) {
  copies_.Pending();
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

Status CheckpointerImpl::FlushReplication(std::chrono::milliseconds timeout) {
  if (replicator_ == nullptr && peers_ == nullptr) return Status::OK();
  auto deadline = Clock::now() + timeout;
  {
    // Saves still persisting are replicated after they commit.
    std::unique_lock<std::mutex> lock(mu_);
    if (!idle_cv_.wait_until(lock, deadline, [this] { return queue_.empty() && !busy_; })) {
      return Status::DeadlineExceeded("flush replication: checkpoints still persisting after " +
                                      std::to_string(timeout.count()) + " ms");
    }
  }
  Status first = Status::OK();
  if (replicator_ != nullptr) {
    if (!replicator_->WaitUntilIdle(deadline)) {
      return Status::DeadlineExceeded("flush replication: still replicating after " +
                                      std::to_string(timeout.count()) + " ms");
    }
    first = replicator_->TakeError();
  }
  if (peers_ != nullptr) {
    std::optional<uint64_t> last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stats_.last) last = stats_.last->step;
    }
    // With tier 2 failing, this node's own copies are still waited for.
    Status peer = peers_->WaitReplicated(first.ok() ? last : std::nullopt, deadline, timeout);
    if (first.ok()) first = peer;
  }
  return first;
}

Status CheckpointerImpl::StartPeers() { return peers_->Start(); }

Result<std::unique_ptr<Checkpointer>> Checkpointer::Open(const CheckpointOptions& given) {
  STINT_RETURN_IF_ERROR(CheckOpenOptions(given));
  CheckpointOptions options = given;
  STINT_ASSIGN_OR_RETURN(std::unique_ptr<Env> store, OpenObjectStoreEnv(&options));
  Env* env = options.env != nullptr ? options.env : Env::Default();
  std::unique_ptr<FileLock> root_lock;
  if (options.read_only) {
    // Several ranks: a replacement node's root may not exist yet; the job's
    // other nodes hold its steps.
    if (options.world_size == 1 && !env->IsDirectory(options.root)) {
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
  auto impl = std::make_unique<CheckpointerImpl>(options, env, std::move(store), std::move(engine),
                                                 std::move(root_lock));
  if (options.world_size > 1) STINT_RETURN_IF_ERROR(impl->StartPeers());
  return std::unique_ptr<Checkpointer>(std::move(impl));
}

}  // namespace stint
