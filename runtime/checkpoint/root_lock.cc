#include "checkpoint/root_lock.h"

#include <unistd.h>

#include <algorithm>
#include <thread>

#include "checkpoint/commit.h"
#include "checkpoint/store_leftovers.h"
#include "objstore/object_store_env.h"

namespace stint {
namespace {

using Clock = std::chrono::steady_clock;

std::string ThisProcess() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') host[0] = '?';
  return "pid " + std::to_string(getpid()) + " on host " + host;
}

// Takes the lock, polling while another writer holds it: a lock held by
// another process sends no wake-up, and flock(2) cannot wait with a deadline.
Result<std::unique_ptr<FileLock>> LockRoot(Env* env, const std::string& root,
                                           std::chrono::milliseconds wait) {
  const std::string path = root + "/" + kWriterLockName;
  const std::string me = ThisProcess();
  const auto deadline = Clock::now() + wait;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    auto lock = env->LockFile(path, me);
    if (lock.ok() || lock.status().code() != Code::kUnavailable) return lock;
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(
        std::min<Clock::duration>(pause, deadline - Clock::now()));
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
  auto holder = ReadFileToString(env, path);
  std::string who = holder.ok() && !holder->empty()
                        ? *holder
                        : "its pid and host not written yet";
  return Status::FailedPrecondition(
      root + " is open for writing by another Checkpointer (" + who + ", in " + path +
      (wait.count() > 0 ? "; waited " + std::to_string(wait.count()) + " ms" : std::string()) +
      "): one writer per root. Close that one first, or open this one read_only to load");
}

}  // namespace

Result<std::unique_ptr<FileLock>> OpenRootForWriting(Env* env, const std::string& root,
                                                     std::chrono::milliseconds wait,
                                                     const std::string& keep) {
  STINT_RETURN_IF_ERROR(CreateDirWithParents(env, root));
  // In an object store a directory exists only once it holds an object: an
  // empty prefix is not a file.
  if (env->FileExists(root) && !env->IsDirectory(root)) {
    return Status::InvalidArgument(root + " exists and is not a directory");
  }
  STINT_ASSIGN_OR_RETURN(auto lock, LockRoot(env, root, wait));
  if (IsObjectStorePath(root)) STINT_RETURN_IF_ERROR(CleanStoreLeftovers(env, root, keep));
  STINT_RETURN_IF_ERROR(CleanLeftovers(env, root, keep));
  return lock;
}

}  // namespace stint
