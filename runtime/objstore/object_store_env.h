// ObjectStoreEnv: the Env seam over an S3-compatible object store. Paths
// "s3://bucket/key" go to the store; every other path goes to the wrapped
// Env (the local file system), so one Env serves a Checkpointer whose tier 1
// is a local disk and whose tier 2 (or read-only root) is a bucket.
//
// An object store is not a file system, and the mapping says so:
//   - A "directory" is a key prefix ending in '/'. CreateDir, RemoveDir and
//     SyncDir succeed without a request; a directory exists while an object
//     lies under it (IsDirectory, FileExists).
//   - A WritableFile is an object that appears whole, or not at all, at
//     Sync() (PutObject, or a multipart upload completed then). Writes
//     start at multiples of kObjectPartBytes: each such write is split into
//     whole parts, uploaded as they come (writes of disjoint parts may run
//     on several threads at once, as the Env contract allows), and at most
//     one shorter piece, which must end the object. Anything else is
//     kInvalidArgument naming the offset. Close() without Sync() aborts the
//     upload: nothing appears. Memory: the shorter piece only.
//   - RenameFile of one object is a server-side copy, then a delete of the
//     source (not atomic: a reader may see both for a moment, never
//     neither). Directories are not renamed (kUnimplemented): commits into
//     a store write in place and their manifest last (commit.h).
//   - LockFile cannot exclude another process (object stores have no
//     locks): it excludes other FileLocks of this process on the same path,
//     and writes `owner` as the object, for whoever reads it.
//   - Read errors and sizes come from ranged GETs and HEAD (S3Client);
//     missing keys are kNotFound.
//
// Thread-safe. Clients per bucket are made on first use, from one S3Config.
#ifndef STINT_RUNTIME_OBJSTORE_OBJECT_STORE_ENV_H_
#define STINT_RUNTIME_OBJSTORE_OBJECT_STORE_ENV_H_

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "objstore/s3_config.h"
#include "objstore/s3_types.h"
#include "stint/env.h"

namespace stint {

class S3Client;
namespace internal {
struct ObjectLockTable;  // object_store_env.cc
}  // namespace internal

// The size of each part of a multipart upload (S3's minimum is 5 MiB for
// every part but the last); also what a copy into the store should write at
// a time.
constexpr size_t kObjectPartBytes = size_t{8} << 20;

// Whether `path` names an object in a store ("s3://...").
bool IsObjectStorePath(const std::string& path);

class ObjectStoreEnv final : public EnvWrapper {
 public:
  // `local` (not null, outlives this) serves every path that is not s3://.
  ObjectStoreEnv(S3Config config, Env* local);
  // With S3Config::FromEnvironment() (AWS conventions); its error otherwise.
  static Result<std::unique_ptr<ObjectStoreEnv>> FromEnvironment(Env* local);
  ~ObjectStoreEnv() override;

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        const FileOptions& options) override;
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const FileOptions& options) override;
  Status CreateDir(const std::string& path) override;
  Status RemoveFile(const std::string& path) override;
  Status RemoveDir(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string& path) override;
  Result<std::vector<std::string>> GetChildren(const std::string& dir) override;
  bool FileExists(const std::string& path) override;
  bool IsDirectory(const std::string& path) override;
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path,
                                             const std::string& owner) override;

  // NewWritableFile of an object, stored with `metadata` (S3 user
  // metadata, sent when its upload starts). kInvalidArgument for a path
  // that is not s3://bucket/key.
  Result<std::unique_ptr<WritableFile>> NewObjectWritableFile(const std::string& path,
                                                              const S3Metadata& metadata);
  // The object's size, ETag and user metadata (HEAD); kNotFound when there
  // is none, kInvalidArgument for a path that is not s3://bucket/key.
  Result<S3ObjectInfo> StatObject(const std::string& path);

  // The client for `bucket` (made on first use); for what the Env does not
  // cover (listing uploads left behind, batch deletes).
  Result<S3Client*> Client(const std::string& bucket);

  // Aborts every multipart upload in progress under the directory `path`
  // ("s3://bucket/prefix": keys starting with "prefix/"; the bucket itself:
  // every key): what a process killed mid-upload leaves behind, invisible
  // to listings but stored (and billed) until aborted. OK when there is
  // none (also when the server answers 404, as rclone does for a bucket
  // where no upload was ever started). An upload completed or aborted
  // meanwhile by someone else is not an error. kInvalidArgument for a path
  // that is not s3://; kUnimplemented when the server cannot list uploads;
  // otherwise the first error, after trying every upload.
  // REQUIRES: no upload under `path` that must survive is in flight (in
  // this process or another): they are aborted too. Checkpoint roots call
  // this only as the holder of the root's writer lock (CleanLeftovers).
  Status AbortUploadsUnder(const std::string& path);

 private:
  const S3Config config_;
  // The paths this process holds FileLocks on. Thread-safe itself (its own
  // mutex), and shared with every FileLock, whose destructor removes its path.
  const std::shared_ptr<internal::ObjectLockTable> locks_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<S3Client>> clients_;  // guarded by mu_
};

}  // namespace stint

#endif  // STINT_RUNTIME_OBJSTORE_OBJECT_STORE_ENV_H_
