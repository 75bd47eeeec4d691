#include "util/fault_env.h"

#include <cerrno>
#include <unistd.h>

namespace stint {
namespace {

std::string Parent(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool HasPrefixDir(const std::string& path, const std::string& dir) {
  return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
         path[dir.size()] == '/';
}

}  // namespace

class FaultWritableFile final : public WritableFile {
 public:
  FaultWritableFile(FaultEnv* env, std::unique_ptr<WritableFile> base)
      : env_(env), base_(std::move(base)) {}

  Status PositionedWrite(const void* data, size_t n, uint64_t offset) override {
    size_t allowed = n;
    Status fault = env_->WriteBudget(path(), n, &allowed);
    // O_DIRECT transfers whole blocks, so a partial one stops at a block edge.
    if (base_->direct_io()) allowed -= allowed % kDirectIoAlignment;
    if (allowed > 0) {
      STINT_RETURN_IF_ERROR(base_->PositionedWrite(data, allowed, offset));
      env_->OnWrite(path(), offset + allowed);
    }
    return fault;
  }
  Status Allocate(uint64_t size) override {
    STINT_RETURN_IF_ERROR(env_->Op("fallocate", path()));
    return base_->Allocate(size);
  }
  Status Sync() override {
    STINT_RETURN_IF_ERROR(env_->SyncBudget(path()));
    STINT_RETURN_IF_ERROR(base_->Sync());
    env_->OnSync(path());
    return Status::OK();
  }
  Status Fsync() override {
    STINT_RETURN_IF_ERROR(env_->SyncBudget(path()));
    STINT_RETURN_IF_ERROR(base_->Fsync());
    env_->OnSync(path());
    return Status::OK();
  }
  Status Close() override { return base_->Close(); }
  bool direct_io() const override { return base_->direct_io(); }
  const std::string& path() const override { return base_->path(); }

 private:
  FaultEnv* env_;
  std::unique_ptr<WritableFile> base_;
};

void FaultEnv::CrashAtOp(uint64_t n, bool torn) {
  std::lock_guard<std::mutex> l(mu_);
  crash_at_ = n;
  torn_ = torn;
}

void FaultEnv::FailWritesAfterBytes(uint64_t bytes, int err) {
  std::lock_guard<std::mutex> l(mu_);
  write_limit_ = written_ + bytes;
  write_err_ = err;
}

void FaultEnv::FailNthSync(uint64_t n) {
  std::lock_guard<std::mutex> l(mu_);
  fail_sync_ = syncs_ + n;
}

void FaultEnv::Reset() {
  std::lock_guard<std::mutex> l(mu_);
  crash_at_ = 0;
  crashed_ = false;
  write_limit_ = UINT64_MAX;
  fail_sync_ = 0;
  unreadable_suffix_.clear();
}

void FaultEnv::FailReadsOf(const std::string& suffix, int err) {
  std::lock_guard<std::mutex> l(mu_);
  unreadable_suffix_ = suffix;
  read_err_ = err;
}

Result<std::unique_ptr<RandomAccessFile>> FaultEnv::NewRandomAccessFile(
    const std::string& path, const FileOptions& options) {
  {
    std::lock_guard<std::mutex> l(mu_);
    const std::string& suffix = unreadable_suffix_;
    if (!suffix.empty() && path.size() >= suffix.size() &&
        path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return StatusFromErrno("open " + path + " for reading (injected)", read_err_);
    }
  }
  return target()->NewRandomAccessFile(path, options);
}

uint64_t FaultEnv::ops() const {
  std::lock_guard<std::mutex> l(mu_);
  return ops_;
}

bool FaultEnv::crashed() const {
  std::lock_guard<std::mutex> l(mu_);
  return crashed_;
}

Status FaultEnv::Op(const char* what, const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  ++ops_;
  if (crashed_ || (crash_at_ != 0 && ops_ >= crash_at_)) {
    crashed_ = true;
    return Status::IoError(std::string("simulated crash at ") + what + " " + path);
  }
  return Status::OK();
}

Status FaultEnv::WriteBudget(const std::string& path, size_t n, size_t* allowed) {
  std::lock_guard<std::mutex> l(mu_);
  ++ops_;
  if (crashed_) {
    *allowed = 0;
    return Status::IoError("simulated crash at write " + path);
  }
  if (crash_at_ != 0 && ops_ >= crash_at_) {
    crashed_ = true;
    *allowed = torn_ ? n / 2 : 0;
    return Status::IoError("simulated crash at write " + path);
  }
  if (written_ + n > write_limit_) {
    *allowed = write_limit_ > written_ ? size_t(write_limit_ - written_) : 0;
    written_ += *allowed;
    return StatusFromErrno("write " + path, write_err_);
  }
  written_ += n;
  *allowed = n;
  return Status::OK();
}

Status FaultEnv::SyncBudget(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  ++ops_;
  ++syncs_;
  if (crashed_ || (crash_at_ != 0 && ops_ >= crash_at_)) {
    crashed_ = true;
    return Status::IoError("simulated crash at sync " + path);
  }
  if (fail_sync_ != 0 && syncs_ == fail_sync_) return StatusFromErrno("fsync " + path, EIO);
  return Status::OK();
}

void FaultEnv::OnWrite(const std::string& path, uint64_t end) {
  std::lock_guard<std::mutex> l(mu_);
  FileState& f = files_[path];
  if (end > f.size) f.size = end;
}

void FaultEnv::OnSync(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  FileState& f = files_[path];
  f.synced = f.size;
}

Result<std::unique_ptr<WritableFile>> FaultEnv::NewWritableFile(const std::string& path,
                                                                const FileOptions& options) {
  STINT_RETURN_IF_ERROR(Op("create", path));
  bool existed = target()->FileExists(path);
  STINT_ASSIGN_OR_RETURN(auto file, target()->NewWritableFile(path, options));
  {
    std::lock_guard<std::mutex> l(mu_);
    files_[path] = FileState{};
    if (!existed) pending_[Parent(path)].push_back(DirOp{DirOp::kCreate, path, "", false, ""});
  }
  return std::unique_ptr<WritableFile>(new FaultWritableFile(this, std::move(file)));
}

Status FaultEnv::CreateDir(const std::string& path) {
  STINT_RETURN_IF_ERROR(Op("mkdir", path));
  STINT_RETURN_IF_ERROR(target()->CreateDir(path));
  std::lock_guard<std::mutex> l(mu_);
  pending_[Parent(path)].push_back(DirOp{DirOp::kCreate, path, "", false, ""});
  return Status::OK();
}

Status FaultEnv::RemoveFile(const std::string& path) {
  STINT_RETURN_IF_ERROR(Op("unlink", path));
  return target()->RemoveFile(path);
}

Status FaultEnv::RemoveDir(const std::string& path) {
  STINT_RETURN_IF_ERROR(Op("rmdir", path));
  return target()->RemoveDir(path);
}

Status FaultEnv::RenameFile(const std::string& from, const std::string& to) {
  STINT_RETURN_IF_ERROR(Op("rename", from));
  DirOp op{DirOp::kRename, from, to, false, ""};
  if (target()->FileExists(to) && !target()->IsDirectory(to)) {
    auto old = ReadFileToString(target(), to);
    if (old.ok()) {
      op.replaced = true;
      op.old_content = *old;
    }
  }
  STINT_RETURN_IF_ERROR(target()->RenameFile(from, to));
  std::lock_guard<std::mutex> l(mu_);
  // Tracking follows the files (a renamed directory moves its children).
  std::map<std::string, FileState> moved;
  for (auto it = files_.begin(); it != files_.end();) {
    if (it->first == from || HasPrefixDir(it->first, from)) {
      moved[to + it->first.substr(from.size())] = it->second;
      it = files_.erase(it);
    } else {
      ++it;
    }
  }
  files_.insert(moved.begin(), moved.end());
  pending_[Parent(to)].push_back(std::move(op));
  return Status::OK();
}

Status FaultEnv::SyncDir(const std::string& path) {
  STINT_RETURN_IF_ERROR(SyncBudget(path));
  STINT_RETURN_IF_ERROR(target()->SyncDir(path));
  std::lock_guard<std::mutex> l(mu_);
  pending_.erase(path);
  return Status::OK();
}

Status FaultEnv::DropUnsyncedData() {
  std::lock_guard<std::mutex> l(mu_);
  Env* real = target();
  // Unsynced tails first, while paths are as the files know them.
  for (const auto& [path, st] : files_) {
    if (st.synced < st.size && real->FileExists(path)) {
      if (::truncate(path.c_str(), off_t(st.synced)) != 0) {
        return StatusFromErrno("truncate " + path, errno);
      }
    }
  }
  // Then undo directory entries never made durable, newest first.
  // Deepest directories sort last; undo them first, each in reverse order.
  for (auto it = pending_.rbegin(); it != pending_.rend(); ++it) {
    for (auto op = it->second.rbegin(); op != it->second.rend(); ++op) {
      if (op->kind == DirOp::kCreate) {
        if (real->FileExists(op->a)) STINT_RETURN_IF_ERROR(RemoveRecursively(real, op->a));
      } else if (real->FileExists(op->b)) {
        STINT_RETURN_IF_ERROR(real->RenameFile(op->b, op->a));
        if (op->replaced)
          STINT_RETURN_IF_ERROR(WriteStringToFileSync(real, op->b, op->old_content));
      }
    }
  }
  pending_.clear();
  files_.clear();
  return Status::OK();
}

}  // namespace stint
