#include "base/background_thread.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace stint {
namespace {

// linux/ioprio.h's values: glibc has no wrapper and Debian's kernel headers
// may predate the header.
constexpr int kIoprioWhoProcess = 1;
constexpr int kIoprioClassBestEffort = 2;
constexpr int kIoprioClassShift = 13;
constexpr int kIoprioLowestBestEffort = 7;

Status Errno(const std::string& what) {
  return Status::IoError(what + ": " + std::strerror(errno));
}

}  // namespace

Status LowerCurrentThreadPriority() {
  const pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
  errno = 0;
  const int nice_now = getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
  if (nice_now == -1 && errno != 0) return Errno("getpriority of thread " + std::to_string(tid));
  if (nice_now < kBackgroundNice &&
      setpriority(PRIO_PROCESS, static_cast<id_t>(tid), kBackgroundNice) != 0) {
    return Errno("setpriority of thread " + std::to_string(tid));
  }
  const int ioprio = (kIoprioClassBestEffort << kIoprioClassShift) | kIoprioLowestBestEffort;
  // A sandbox that forbids it (EPERM, ENOSYS under seccomp) leaves only the
  // I/O priority as it was: not an error.
  if (syscall(SYS_ioprio_set, kIoprioWhoProcess, tid, ioprio) != 0 && errno != EPERM &&
      errno != ENOSYS) {
    return Errno("ioprio_set of thread " + std::to_string(tid));
  }
  return Status::OK();
}

}  // namespace stint
