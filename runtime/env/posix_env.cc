// The POSIX Env: the only file in runtime/ that calls open/pwrite/fsync/rename.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "stint/env.h"

namespace stint {
namespace {

// Opens with O_DIRECT when asked, retrying without it where the file system
// refuses it (EINVAL on tmpfs). Sets *direct to what was obtained.
int OpenMaybeDirect(const std::string& path, int flags, bool want_direct, bool* direct) {
  int fd = -1;
  if (want_direct) {
    do {
      fd = ::open(path.c_str(), flags | O_DIRECT | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd >= 0) {
      *direct = true;
      return fd;
    }
    if (errno != EINVAL) return -1;
  }
  *direct = false;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd, bool direct)
      : path_(std::move(path)), fd_(fd), direct_(direct) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  PosixWritableFile(const PosixWritableFile&) = delete;
  PosixWritableFile& operator=(const PosixWritableFile&) = delete;

  Status PositionedWrite(const void* data, size_t n, uint64_t offset) override {
    if (fd_ < 0) return Status::FailedPrecondition(path_ + ": write after close");
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
      if (w < 0) {
        if (errno == EINTR) continue;
        return StatusFromErrno("pwrite " + path_ + " at " + std::to_string(offset), errno);
      }
      if (w == 0) return Status::IoError("pwrite " + path_ + ": wrote 0 bytes");
      p += w;
      n -= static_cast<size_t>(w);
      offset += static_cast<uint64_t>(w);
    }
    return Status::OK();
  }
  Status Allocate(uint64_t size) override {
    if (fd_ < 0) return Status::FailedPrecondition(path_ + ": allocate after close");
    if (size == 0) return Status::OK();  // fallocate(2) refuses len 0; an empty file is done
    int rc;
    do {
      rc = ::fallocate(fd_, 0, 0, static_cast<off_t>(size));
    } while (rc != 0 && errno == EINTR);
    if (rc != 0 && errno != EOPNOTSUPP && errno != ENOSYS) {
      return StatusFromErrno("fallocate " + path_ + " to " + std::to_string(size) + " bytes",
                             errno);
    }
    return Status::OK();
  }
  Status Sync() override {
    if (fd_ < 0) return Status::FailedPrecondition(path_ + ": sync after close");
    if (::fdatasync(fd_) != 0) return StatusFromErrno("fdatasync " + path_, errno);
    return Status::OK();
  }
  Status Fsync() override {
    if (fd_ < 0) return Status::FailedPrecondition(path_ + ": fsync after close");
    if (::fsync(fd_) != 0) return StatusFromErrno("fsync " + path_, errno);
    return Status::OK();
  }
  Status Close() override {
    if (fd_ < 0) return Status::OK();
    int rc = ::close(fd_);
    fd_ = -1;
    // close() errors are reported, never retried (the fd is gone on Linux).
    if (rc != 0) return StatusFromErrno("close " + path_, errno);
    return Status::OK();
  }
  bool direct_io() const override { return direct_; }
  const std::string& path() const override { return path_; }
  int NativeFd() const override { return fd_; }

 private:
  const std::string path_;
  int fd_;
  const bool direct_;
};

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd, bool direct)
      : path_(std::move(path)), fd_(fd), direct_(direct) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }
  PosixRandomAccessFile(const PosixRandomAccessFile&) = delete;
  PosixRandomAccessFile& operator=(const PosixRandomAccessFile&) = delete;

  Result<size_t> Read(uint64_t offset, size_t n, void* dst) const override {
    char* p = static_cast<char*>(dst);
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pread(fd_, p + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return StatusFromErrno("pread " + path_ + " at " + std::to_string(offset + done), errno);
      }
      if (r == 0) break;  // end of file
      done += static_cast<size_t>(r);
    }
    return done;
  }
  Result<uint64_t> Size() const override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return StatusFromErrno("fstat " + path_, errno);
    return static_cast<uint64_t>(st.st_size);
  }
  bool direct_io() const override { return direct_; }
  const std::string& path() const override { return path_; }
  int NativeFd() const override { return fd_; }

 private:
  const std::string path_;
  const int fd_;
  const bool direct_;
};

class PosixFileLock final : public FileLock {
 public:
  PosixFileLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixFileLock() override { ::close(fd_); }  // the lock goes with the descriptor
  PosixFileLock(const PosixFileLock&) = delete;
  PosixFileLock& operator=(const PosixFileLock&) = delete;
  const std::string& path() const override { return path_; }

 private:
  const std::string path_;
  const int fd_;
};

class PosixEnv final : public Env {
 public:
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        const FileOptions& options) override {
    bool direct = false;
    int fd = OpenMaybeDirect(path, O_WRONLY | O_CREAT | O_TRUNC, options.direct_io, &direct);
    if (fd < 0) return StatusFromErrno("open " + path + " for writing", errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd, direct));
  }

  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const FileOptions& options) override {
    bool direct = false;
    int fd = OpenMaybeDirect(path, O_RDONLY, options.direct_io, &direct);
    if (fd < 0) return StatusFromErrno("open " + path + " for reading", errno);
    return std::unique_ptr<RandomAccessFile>(new PosixRandomAccessFile(path, fd, direct));
  }

  Status CreateDir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) != 0) return StatusFromErrno("mkdir " + path, errno);
    return Status::OK();
  }
  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return StatusFromErrno("unlink " + path, errno);
    return Status::OK();
  }
  Status RemoveDir(const std::string& path) override {
    if (::rmdir(path.c_str()) != 0) return StatusFromErrno("rmdir " + path, errno);
    return Status::OK();
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return StatusFromErrno("rename " + from + " -> " + to, errno);
    }
    return Status::OK();
  }
  Status SyncDir(const std::string& path) override {
    int fd;
    do {
      fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return StatusFromErrno("open dir " + path, errno);
    Status s;
    if (::fsync(fd) != 0) s = StatusFromErrno("fsync dir " + path, errno);
    ::close(fd);
    return s;
  }
  Result<std::vector<std::string>> GetChildren(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return StatusFromErrno("opendir " + dir, errno);
    std::vector<std::string> names;
    errno = 0;
    while (struct dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(std::move(name));
    }
    int err = errno;
    ::closedir(d);
    if (err != 0) return StatusFromErrno("readdir " + dir, err);
    return names;
  }
  bool FileExists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }
  bool IsDirectory(const std::string& path) override {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  }
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path,
                                             const std::string& owner) override {
    int fd;
    do {
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return StatusFromErrno("open lock file " + path, errno);
    // Owns fd from here: closing it releases the lock on every error path.
    std::unique_ptr<FileLock> lock(new PosixFileLock(path, fd));
    int rc;
    do {
      rc = ::flock(fd, LOCK_EX | LOCK_NB);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      if (errno == EWOULDBLOCK) return Status::Unavailable(path + " is locked by another holder");
      return StatusFromErrno("flock " + path, errno);
    }
    if (::ftruncate(fd, 0) != 0) return StatusFromErrno("truncate lock file " + path, errno);
    size_t done = 0;
    while (done < owner.size()) {
      ssize_t w = ::pwrite(fd, owner.data() + done, owner.size() - done, static_cast<off_t>(done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return StatusFromErrno("write lock file " + path, w < 0 ? errno : EIO);
      done += static_cast<size_t>(w);
    }
    return lock;
  }
  uint64_t NowMicros() override {
    struct timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000u + static_cast<uint64_t>(ts.tv_nsec) / 1000u;
  }
};

}  // namespace

Env* Env::Default() {
  static Env* const env = new PosixEnv();  // never destroyed: outlives every user
  return env;
}

}  // namespace stint
