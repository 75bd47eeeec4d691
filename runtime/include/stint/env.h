// Env: the one seam between stint and the file system.
//
// No code in runtime/ opens, writes, syncs or renames a file except through an
// Env, so tests can wrap the real one (EnvWrapper) and inject crashes, ENOSPC,
// EIO, torn writes and fsync failures at any point of the commit protocol.
//
// Durability contract of WritableFile (RocksDB's three levels):
//   PositionedWrite: data is in the OS; it survives a process crash.
//   Sync():  data survives power loss (fdatasync); metadata may not.
//   Fsync(): data and metadata survive power loss.
// A new directory entry (create, rename) survives power loss only after
// SyncDir() of its parent.
//
// Env::Default() is thread-safe. File objects are thread-compatible, except
// that PositionedWrite/Read at disjoint ranges may run concurrently.
#ifndef STINT_INCLUDE_STINT_ENV_H_
#define STINT_INCLUDE_STINT_ENV_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stint/status.h"

namespace stint {

struct FileOptions {
  // Open with O_DIRECT: buffers, offsets and lengths must then be multiples of
  // kDirectIoAlignment. Falls back to buffered I/O where the file system
  // refuses O_DIRECT (tmpfs), which direct_io() then reports.
  // Default: false.
  bool direct_io = false;
};

// Alignment required for O_DIRECT buffers, offsets and lengths.
constexpr size_t kDirectIoAlignment = 4096;

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes all `n` bytes at `offset` (loops over short writes and EINTR).
  virtual Status PositionedWrite(const void* data, size_t n, uint64_t offset) = 0;
  // Reserves `size` bytes (the file's final size): O_DIRECT writes into a
  // preallocated file need no synchronous size updates, and a full disk
  // fails here, before any data is written. No-op where unsupported and
  // for size 0.
  virtual Status Allocate(uint64_t size) { return Status::OK(); }
  virtual Status Sync() = 0;   // fdatasync
  virtual Status Fsync() = 0;  // fsync
  // Closes whatever it returns; later calls fail.
  virtual Status Close() = 0;
  virtual bool direct_io() const = 0;
  virtual const std::string& path() const = 0;
  // Test seam: the OS descriptor for engines that submit I/O themselves
  // (io_uring). -1 means "write me through PositionedWrite", which is what a
  // fault-injecting wrapper returns so every byte passes through it.
  virtual int NativeFd() const { return -1; }
};

class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to `n` bytes at `offset` into `dst`; returns the count, which is
  // smaller than `n` only at end of file.
  virtual Result<size_t> Read(uint64_t offset, size_t n, void* dst) const = 0;
  virtual Result<uint64_t> Size() const = 0;
  virtual bool direct_io() const = 0;
  virtual const std::string& path() const = 0;
  virtual int NativeFd() const { return -1; }  // see WritableFile::NativeFd
};

// An advisory lock on a file (Env::LockFile), held until this object is
// destroyed or the process ends, however it ends.
class FileLock {
 public:
  virtual ~FileLock() = default;  // releases the lock
  virtual const std::string& path() const = 0;
};

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide POSIX Env. Never deleted.
  static Env* Default();

  // Creates or truncates `path`.
  virtual Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                                const FileOptions& options) = 0;
  virtual Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const FileOptions& options) = 0;

  virtual Status CreateDir(const std::string& path) = 0;  // kAlreadyExists if present
  virtual Status RemoveFile(const std::string& path) = 0;
  virtual Status RemoveDir(const std::string& path) = 0;  // must be empty
  // Atomically replaces `to` (a file, or an empty directory) with `from`.
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  virtual Status SyncDir(const std::string& path) = 0;
  // Names in `dir` without "." and "..".
  virtual Result<std::vector<std::string>> GetChildren(const std::string& dir) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  virtual bool IsDirectory(const std::string& path) = 0;
  virtual uint64_t NowMicros() = 0;  // monotonic
  // Takes an exclusive advisory lock on `path` (created if missing) without
  // waiting (POSIX: flock(2), so a killed holder's lock goes with it), then
  // replaces the file's contents with `owner`: who holds it, for the message
  // of whoever is refused next. kUnavailable while another lock on the file
  // is held, by another process or by another FileLock of this one. A
  // process forked while holding it shares it until the child exits or
  // execs.
  virtual Result<std::unique_ptr<FileLock>> LockFile(const std::string& path,
                                                     const std::string& owner) = 0;
};

// Forwards every call to another Env; a test Env overrides only what it needs.
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) {}  // target must outlive this
  Env* target() const { return target_; }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        const FileOptions& options) override {
    return target_->NewWritableFile(path, options);
  }
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const FileOptions& options) override {
    return target_->NewRandomAccessFile(path, options);
  }
  Status CreateDir(const std::string& p) override { return target_->CreateDir(p); }
  Status RemoveFile(const std::string& p) override { return target_->RemoveFile(p); }
  Status RemoveDir(const std::string& p) override { return target_->RemoveDir(p); }
  Status RenameFile(const std::string& f, const std::string& t) override {
    return target_->RenameFile(f, t);
  }
  Status SyncDir(const std::string& p) override { return target_->SyncDir(p); }
  Result<std::vector<std::string>> GetChildren(const std::string& d) override {
    return target_->GetChildren(d);
  }
  bool FileExists(const std::string& p) override { return target_->FileExists(p); }
  bool IsDirectory(const std::string& p) override { return target_->IsDirectory(p); }
  uint64_t NowMicros() override { return target_->NowMicros(); }
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& p,
                                             const std::string& owner) override {
    return target_->LockFile(p, owner);
  }

 private:
  Env* target_;
};

// Helpers built only on the Env interface.

// Reads a whole (small) file.
Result<std::string> ReadFileToString(Env* env, const std::string& path);
// Creates `path`, writes `data`, fsyncs and closes it. Not atomic by itself:
// callers write to a temporary name and rename.
Status WriteStringToFileSync(Env* env, const std::string& path, const std::string& data);
// Creates directory `path` and every missing parent (mkdir -p), each made
// durable (SyncDir of its parent) before anything is created inside it. OK
// when `path` exists already (whatever it is: callers check).
Status CreateDirWithParents(Env* env, const std::string& path);
// Removes `path` and everything below it (no symlink following).
Status RemoveRecursively(Env* env, const std::string& path);

}  // namespace stint

#endif  // STINT_INCLUDE_STINT_ENV_H_
