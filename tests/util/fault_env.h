// FaultEnv: a real Env (real files) that injects the faults a checkpoint must
// survive, and can then throw away what a power cut would lose.
//
// Every mutating call (create, write, sync, rename, mkdir, remove, dir sync)
// is one numbered op, so a test can crash at op 1, 2, ... N and so cover every
// stage of the commit protocol. After a crash every later op fails, as if the
// process had died there. DropUnsyncedData() then models the power cut: file
// bytes past the last Sync are cut off, and directory entries (creates,
// renames) not followed by a SyncDir of their parent are undone.
//
// Files it returns have NativeFd() == -1, so the io_uring engine writes them
// through PositionedWrite and every byte passes through here.
#ifndef STINT_TESTS_UTIL_FAULT_ENV_H_
#define STINT_TESTS_UTIL_FAULT_ENV_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "stint/env.h"

namespace stint {

class FaultEnv : public EnvWrapper {
 public:
  explicit FaultEnv(Env* base) : EnvWrapper(base) {}

  // Op n (1-based) and every later op fail with IoError "simulated crash".
  // With torn = true a write at op n first writes half of its bytes.
  void CrashAtOp(uint64_t n, bool torn = false);
  // Writes succeed until `bytes` in total; the write crossing the limit is
  // partial and fails with `err` (ENOSPC, EIO), and so do all later writes.
  void FailWritesAfterBytes(uint64_t bytes, int err);
  // The n-th Sync/Fsync/SyncDir (1-based) fails with EIO; the data stays unsynced.
  void FailNthSync(uint64_t n);
  // Opening a file whose path ends with `suffix` for reading fails with `err`
  // (EIO: an unreadable sector, a flaky mount), until Reset().
  void FailReadsOf(const std::string& suffix, int err);
  void Reset();  // no more faults; tracking kept

  uint64_t ops() const;
  bool crashed() const;
  // Models a power cut after the crash (see above). Uses the real Env.
  Status DropUnsyncedData();

  // Env
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        const FileOptions& options) override;
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const FileOptions& options) override;
  Status CreateDir(const std::string& path) override;
  Status RemoveFile(const std::string& path) override;
  Status RemoveDir(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string& path) override;

 private:
  friend class FaultWritableFile;
  // Counts an op; returns the injected failure, if any.
  Status Op(const char* what, const std::string& path);
  // For writes: how many of `n` bytes may land, and the error to return after.
  Status WriteBudget(const std::string& path, size_t n, size_t* allowed);
  Status SyncBudget(const std::string& path);
  void OnWrite(const std::string& path, uint64_t end);
  void OnSync(const std::string& path);

  struct FileState {
    uint64_t size = 0;
    uint64_t synced = 0;
  };
  struct DirOp {
    enum Kind { kCreate, kRename } kind;
    std::string a, b;         // create: a; rename: a -> b
    bool replaced = false;    // rename over an existing file
    std::string old_content;  // of the replaced file
  };

  mutable std::mutex mu_;
  uint64_t ops_ = 0;
  uint64_t crash_at_ = 0;
  bool torn_ = false;
  bool crashed_ = false;
  uint64_t write_limit_ = UINT64_MAX;
  uint64_t written_ = 0;
  int write_err_ = 0;
  uint64_t fail_sync_ = 0;
  uint64_t syncs_ = 0;
  std::string unreadable_suffix_;  // empty: reads never fail
  int read_err_ = 0;
  std::map<std::string, FileState> files_;
  std::map<std::string, std::vector<DirOp>> pending_;  // parent dir -> unsynced entries
};

}  // namespace stint

#endif  // STINT_TESTS_UTIL_FAULT_ENV_H_
