#include "checkpoint/replica.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "base/background_thread.h"
#include "base/channel_poll.h"
#include "base/clock.h"
#include "checkpoint/commit.h"
#include "checkpoint/retention.h"
#include "checkpoint/root_lock.h"
#include "checkpoint/store_leftovers.h"
#include "checkpoint/upload_resume.h"
#include "format/manifest.h"
#include "objstore/object_store_env.h"
#include "stint/checkpoint_reader.h"

namespace stint {
namespace {

// A file on another node (a ranged reader over the job's file service,
// OpenPeerFile, whose path is its URL) or one going into an object store
// (whole parts, each uploaded as it is written) is copied by this many
// threads at once, each with its own buffer, so several requests are in
// flight; a local file by one.
constexpr int kRemoteCopyThreads = 4;

// Copies the file `f` of a step (its digest goes with an upload, see
// upload_resume.h).
Status CopyFile(Env* src_env, const std::string& from, Env* dst_env, const std::string& to,
                const FileRecord& f, size_t piece, const ForegroundGate* gate,
                uint64_t* copied) {
  STINT_ASSIGN_OR_RETURN(auto in, src_env->NewRandomAccessFile(from, FileOptions{}));
  STINT_ASSIGN_OR_RETURN(uint64_t size, in->Size());
  STINT_ASSIGN_OR_RETURN(auto out, NewUploadFile(dst_env, to, f));
  Status s = out->Allocate(size);  // a full replica disk fails here, before any data
  const int threads = in->path().rfind("http://", 0) == 0 || IsObjectStorePath(to)
                          ? kRemoteCopyThreads
                          : 1;
  std::mutex mu;
  std::atomic<uint64_t> next{0}, done{0};
  auto copy = [&] {
    std::vector<char> buf(piece);
    for (;;) {
      const uint64_t off = next.fetch_add(piece);
      {
        std::lock_guard<std::mutex> lock(mu);
        if (off >= size || !s.ok()) return;
      }
      const size_t want = static_cast<size_t>(std::min<uint64_t>(piece, size - off));
      if (gate != nullptr) gate->Yield();
      Status one;
      auto n = in->Read(off, want, buf.data());
      if (!n.ok()) {
        one = n.status();
      } else if (*n != want) {
        one = Status::DataLoss(from + ": shrank while being replicated");
      } else {
        one = out->PositionedWrite(buf.data(), want, off);
      }
      std::lock_guard<std::mutex> lock(mu);
      if (!one.ok()) {
        if (s.ok()) s = one;
        return;
      }
      done += want;
    }
  };
  if (s.ok()) {
    std::vector<std::thread> helpers;
    for (int i = 1; i < threads; ++i) helpers.emplace_back(copy);
    copy();
    for (auto& t : helpers) t.join();
  }
  if (copied) *copied += done;
  if (s.ok()) s = out->Sync();
  Status closed = out->Close();  // closed whatever it returns
  if (s.ok()) s = closed;
  return s;
}

// Of what an earlier upload left in `dir` (a step prefix in a store without
// its manifest), the files of `m` it holds whole; every other object there
// is removed, so that what is committed holds only the manifest's files.
Result<std::set<std::string>> ReusableUploads(Env* env, const std::string& dir,
                                              const Manifest& m) {
  STINT_ASSIGN_OR_RETURN(auto children, env->GetChildren(dir));
  std::set<std::string> reusable;
  for (const std::string& child : children) {
    const FileRecord* f = m.FindFile(child);
    bool keep = false;
    if (f != nullptr) {
      STINT_ASSIGN_OR_RETURN(keep, AlreadyUploaded(env, dir, m, *f));
    }
    if (keep) {
      reusable.insert(child);
    } else {
      STINT_RETURN_IF_ERROR(
          RemoveRecursively(env, dir + "/" + child).WithContext("an upload left behind"));
    }
  }
  return reusable;
}

}  // namespace

Status VerifyStoredChunks(Env* env, const std::string& dir, const Manifest& m,
                          const std::set<std::string>& files, const ForegroundGate* gate) {
  std::map<std::string, std::vector<ChunkRecord>> chunks;
  for (const TensorRecord& t : m.tensors) {
    for (const ShardRecord& sh : t.shards) {
      if (files.count(sh.file) == 0) continue;
      for (const ChunkRecord& c : sh.chunks) {
        if (c.ref.empty()) chunks[sh.file].push_back(c);
      }
    }
  }
  for (const BlobRecord& b : m.blobs) {
    if (files.count(b.file) == 0) continue;
    for (const ChunkRecord& c : b.chunks) {
      if (c.ref.empty()) chunks[b.file].push_back(c);
    }
  }
  std::vector<char> buf;
  for (const std::string& name : files) {
    const FileRecord* record = m.FindFile(name);
    if (record == nullptr) return Status::InvalidArgument(dir + ": the manifest has no file " + name);
    const std::string path = dir + "/" + name;
    STINT_ASSIGN_OR_RETURN(auto in, env->NewRandomAccessFile(path, FileOptions{}));
    STINT_ASSIGN_OR_RETURN(uint64_t size, in->Size());
    if (size != record->size) {
      return Status::DataLoss(path + ": " + std::to_string(size) + " bytes, the manifest says " +
                              std::to_string(record->size));
    }
    auto& list = chunks[name];
    std::sort(list.begin(), list.end(), [](const ChunkRecord& a, const ChunkRecord& b) {
      return a.file_offset < b.file_offset;
    });
    if (FileDigest(list, size) != record->digest) {
      return Status::DataLoss(path + ": file digest does not match the manifest's chunk list");
    }
    for (size_t i = 0; i < list.size(); ++i) {
      buf.resize(list[i].stored_len);
      if (gate != nullptr) gate->Yield();
      STINT_ASSIGN_OR_RETURN(size_t n, in->Read(list[i].file_offset, buf.size(), buf.data()));
      if (n != buf.size() || Xxh3(buf.data(), buf.size()) != list[i].xxh3) {
        return Status::DataLoss(path + ": chunk at offset " + std::to_string(list[i].file_offset) +
                                " does not match its checksum");
      }
    }
  }
  return Status::OK();
}

Status ReplicateCheckpoint(Env* src_env, const std::string& src_root, Env* dst_env,
                           const std::string& dst_root, uint64_t step,
                           const ReplicateOptions& options, uint64_t* copied) {
  const std::string name = StepDirName(step);
  const std::string src = src_root + "/" + name;
  if (!src_env->FileExists(src + "/" + kManifestName)) {
    return Status::NotFound(src + ": not committed (deleted by retention before replication?)");
  }
  Status made = dst_env->CreateDir(dst_root);
  if (!made.ok() && made.code() != Code::kAlreadyExists) return made.WithContext("replica root");
  if (dst_env->FileExists(dst_root + "/" + name + "/" + kManifestName)) return Status::OK();

  STINT_ASSIGN_OR_RETURN(std::string manifest,
                         ReadFileToString(src_env, src + "/" + kManifestName));
  // An incremental checkpoint's referenced chunks live in older checkpoints:
  // the replica gets those first (each committed there on its own), so what
  // it commits here always loads.
  STINT_ASSIGN_OR_RETURN(Manifest decoded, DecodeManifest(manifest, src + "/" + kManifestName));
  for (const std::string& dir : decoded.ReferencedDirs()) {
    std::optional<uint64_t> ref_step = ParseStepDirName(dir);
    if (!ref_step || *ref_step == step) {
      return Status::DataLoss(src + ": references its own or an unnamed step " + dir);
    }
    STINT_RETURN_IF_ERROR(ReplicateCheckpoint(src_env, src_root, dst_env, dst_root, *ref_step,
                                              options, copied)
                              .WithContext(src + " references " + dir));
  }
  // An object store cannot rename a directory: the files go straight into
  // step-<step> there, committed by their manifest, written last
  // (CommitInPlace). What an earlier upload of this step left there (a
  // process killed mid-upload) is reused where it holds a file whole, and
  // removed otherwise (upload_resume.h).
  const bool in_place = IsObjectStorePath(dst_root);
  const std::string tmp =
      in_place ? dst_root + "/" + name : dst_root + "/" + TmpDirName(step, RandomNonce());
  std::set<std::string> uploaded;
  if (in_place && dst_env->IsDirectory(tmp)) {
    STINT_ASSIGN_OR_RETURN(uploaded, ReusableUploads(dst_env, tmp, decoded));
  }
  STINT_RETURN_IF_ERROR(dst_env->CreateDir(tmp));
  const size_t piece = in_place ? kObjectPartBytes
                                : options.copy_bytes == 0 ? (1u << 20) : options.copy_bytes;
  Status s;
  // The manifest's files, not the directory's listing: on node-local roots
  // they are on several nodes (src_env is then a PeerReadEnv).
  for (const FileRecord& f : decoded.files) {
    if (options.only_files && options.only_files->count(f.name) == 0) continue;
    if (uploaded.count(f.name) > 0) continue;  // there whole from an earlier upload
    s = CopyFile(src_env, src + "/" + f.name, dst_env, tmp + "/" + f.name, f, piece, options.gate,
                 copied);
    if (!s.ok()) break;
  }
  if (s.ok() && in_place) {
    // Reading a whole upload back would halve its rate: each object's size
    // is checked here, and every chunk by every load, as from any tier.
    for (const FileRecord& f : decoded.files) {
      if (options.only_files && options.only_files->count(f.name) == 0) continue;
      auto in = dst_env->NewRandomAccessFile(tmp + "/" + f.name, FileOptions{});
      auto size = in.ok() ? (*in)->Size() : Result<uint64_t>(in.status());
      if (!size.ok()) {
        s = size.status().WithContext("checking the upload");
      } else if (*size != f.size) {
        s = Status::DataLoss(tmp + "/" + f.name + ": " + std::to_string(*size) +
                             " bytes uploaded, the manifest says " + std::to_string(f.size));
      }
      if (!s.ok()) break;
    }
    if (s.ok()) {
      s = CommitInPlace(dst_env, dst_root, step, manifest);
      if (s.ok() && copied) *copied += manifest.size();
    }
  } else if (s.ok()) {
    // The guard runs after the manifest is written and synced, before the rename:
    // the copy is checked exactly as a load would check it.
    auto verify = [&](uint64_t) -> Status {
      if (!options.verify) return Status::OK();
      if (options.only_files) {
        return VerifyStoredChunks(dst_env, tmp, decoded, *options.only_files, options.gate)
            .WithContext("verifying the replica");
      }
      ReaderOptions ro;
      ro.env = dst_env;
      ro.io_engine = "posix";
      ro.direct_io = false;
      STINT_ASSIGN_OR_RETURN(auto reader, CheckpointReader::Open(tmp, ro));
      return reader->Verify().status().WithContext("verifying the replica");
    };
    s = CommitCheckpoint(dst_env, dst_root, tmp, step, manifest, verify);
    if (s.ok() && copied) *copied += manifest.size();
  }
  // In place, a committed step is never removed: only an upload its manifest never committed.
  if (!s.ok() && dst_env->FileExists(tmp) &&
      !(in_place && dst_env->FileExists(tmp + "/" + kManifestName))) {
    RemoveRecursively(dst_env, tmp).IgnoreError();
  }
  return s.WithContext("replicate " + src + " to " + dst_root);
}

Status CheckReplicaRoot(const std::string& root, const std::string& replica_root) {
  auto strip = [](std::string p) {
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    return p;
  };
  const std::string tier1 = strip(root), tier2 = strip(replica_root);
  if (tier2 == tier1 || tier2.compare(0, tier1.size() + 1, tier1 + "/") == 0) {
    return Status::InvalidArgument("replica_root " + replica_root + " must not be root " + root +
                                   " or inside it");
  }
  return Status::OK();
}

namespace {

Replicator::Target Tier2Target(const CheckpointOptions& options, const ForegroundGate* gate) {
  Replicator::Target t;
  t.gate = gate;
  t.env = options.replica_env;
  t.root = options.replica_root;
  t.keep_last = options.replica_keep_last;
  t.keep_every = options.replica_keep_every;
  t.verify = options.replica_verify;
  t.catch_up = true;
  return t;
}

}  // namespace

Replicator::Replicator(const CheckpointOptions& options, RetentionGuard* source_guard,
                       Env* source_env, const ForegroundGate* gate)
    : Replicator(options, source_guard, source_env, Tier2Target(options, gate)) {}

Replicator::Replicator(const CheckpointOptions& options, RetentionGuard* source_guard,
                       Env* source_env, Target target)
    : src_env_(source_env != nullptr ? source_env : options.env),
      src_root_(options.root),
      target_(std::move(target)),
      pins_(options.retention_pins),
      source_guard_(source_guard) {
  const std::optional<uint64_t> missing =
      target_.catch_up ? NewestMissingAtTarget() : std::nullopt;
  if (missing) resume_dir_ = StepDirName(*missing);
  // A replica never stops tier 1: a replica path that is down now is reported
  // (stats, FlushReplication) and tried again at every replication.
  Status locked = LockReplicaRoot();
  if (!locked.ok()) RecordError(locked.WithContext(target_.what + " at open"));
  // Nobody waits on a catch-up's promise; FlushReplication waits for it.
  if (missing) queue_.push_back(Job{*missing, Clock::now(), std::promise<Status>()});
  thread_ = std::thread([this] { Loop(); });
}

Replicator::~Replicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  thread_.join();  // replicates the newest queued step first
}

void Replicator::Enqueue(uint64_t step, Clock::time_point saved_at, std::promise<Status> done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Job{step, saved_at, std::move(done)});
  }
  work_cv_.notify_all();
}

bool Replicator::WaitUntilIdle(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_until(lock, deadline, [this] { return queue_.empty() && !busy_; });
}

Status Replicator::TakeError() {
  std::lock_guard<std::mutex> lock(mu_);
  Status s = error_;
  error_ = Status::OK();
  return s;
}

Replicator::Counts Replicator::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Counts{replicated_, failed_, superseded_, last_, last_error_};
}

void Replicator::Loop() {
  // Best effort; its copy threads inherit it.
  LowerCurrentThreadPriority().IgnoreError();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    std::deque<Job> jobs;
    jobs.swap(queue_);
    Job job = std::move(jobs.back());
    jobs.pop_back();
    superseded_ += jobs.size();
    busy_ = true;
    lock.unlock();

    for (auto& old : jobs) {
      old.done.set_value(Status::Cancelled("step " + std::to_string(old.step) +
                                           " not replicated: step " + std::to_string(job.step) +
                                           " was newer"));
    }
    jobs.clear();
    job.done.set_value(Replicate(job));

    lock.lock();
    busy_ = false;
    idle_cv_.notify_all();
  }
}

Status Replicator::LockReplicaRoot() {
  if (replica_lock_ != nullptr) return Status::OK();
  STINT_ASSIGN_OR_RETURN(replica_lock_, OpenRootForWriting(target_.env, target_.root,
                                                          std::chrono::milliseconds(0),
                                                          resume_dir_));
  return Status::OK();
}

std::optional<uint64_t> Replicator::NewestMissingAtTarget() {
  Result<std::vector<uint64_t>> steps = ListCheckpointSteps(src_env_, src_root_);
  if (!steps.ok() || steps->empty()) return std::nullopt;
  const uint64_t newest = steps->back();
  const std::string manifest = target_.root + "/" + StepDirName(newest) + "/" + kManifestName;
  if (target_.env->FileExists(manifest)) return std::nullopt;
  return newest;
}

Status Replicator::Replicate(const Job& job) {
  Status locked = LockReplicaRoot();
  if (!locked.ok()) {
    RecordError(locked.WithContext(target_.what));
    return locked;
  }
  if (IsObjectStorePath(target_.root)) {
    // An upload that failed with the server unreachable could not be
    // aborted then: nothing of this Replicator is in flight between steps.
    // Best effort: this step's upload says whether the store answers.
    AbortUploadsLeftBehind(target_.env, target_.root).IgnoreError();
  }
  source_guard_->Hold(job.step);  // tier-1 retention leaves it alone from here on
  auto t0 = Clock::now();
  uint64_t bytes = 0;
  ReplicateOptions ro;
  ro.verify = target_.verify;
  ro.gate = target_.gate;
  Status s = Status::OK();
  if (target_.select) {
    const std::string path = src_root_ + "/" + StepDirName(job.step) + "/" + kManifestName;
    auto bytes_read = ReadFileToString(src_env_, path);
    auto manifest = bytes_read.ok() ? DecodeManifest(*bytes_read, path)
                                    : Result<Manifest>(bytes_read.status());
    if (manifest.ok()) {
      ro.only_files = target_.select(*manifest);
    } else {
      s = manifest.status();
    }
  }
  const bool nothing = ro.only_files && ro.only_files->empty();
  const Clock::time_point patience_end = Clock::now() + target_.source_patience;
  auto pause = std::chrono::milliseconds(2);
  while (s.ok() && !nothing) {
    s = ReplicateCheckpoint(src_env_, src_root_, target_.env, target_.root, job.step, ro, &bytes);
    if (s.code() != Code::kNotFound || NewerQueuedOrStopping() ||
        !PauseBeforeNextPoll(patience_end, &pause)) {
      break;
    }
    s = Status::OK();  // not published yet: again
  }
  source_guard_->Release();
  if (s.code() == Code::kNotFound) {
    // Tier-1 retention removed it before its turn: a newer commit exists.
    std::lock_guard<std::mutex> lock(mu_);
    ++superseded_;
    return Status::Cancelled("step " + std::to_string(job.step) +
                             " not replicated: " + s.message());
  }
  if (!s.ok()) {
    RecordError(s.WithContext(target_.what));
    return s;
  }
  if (nothing) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++replicated_;
    last_ = ReplicaStats{job.step, bytes, SecondsSince(t0), SecondsSince(job.saved_at)};
  }
  if (target_.committed) target_.committed(job.step);
  Status r = ApplyRetention(target_.env, target_.root, target_.keep_last, target_.keep_every,
                            nullptr, {}, nullptr, pins_);
  if (!r.ok()) {
    RecordError(r.WithContext(target_.what + " retention after step " +
                              std::to_string(job.step)));
  }
  return s;
}

bool Replicator::NewerQueuedOrStopping() {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_ || !queue_.empty();
}

void Replicator::RecordError(const Status& s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_.ok()) error_ = s;
  ++failed_;
  last_error_ = s.ToString();
}

}  // namespace stint
