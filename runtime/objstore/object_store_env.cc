#include "objstore/object_store_env.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "objstore/s3_client.h"
#include "objstore/s3_url.h"

namespace stint {

namespace internal {
struct ObjectLockTable {
  std::mutex mu;
  std::set<std::string> held;  // guarded by mu
};
}  // namespace internal

namespace {

constexpr char kScheme[] = "s3://";
// S3's limits: parts of one multipart upload, and one CopyObject.
constexpr int kMaxParts = 10000;
constexpr uint64_t kMaxCopyBytes = uint64_t{5} << 30;

// "s3://bucket/a/b" as a bucket and the key "a/b" ("" for the bucket itself).
struct ObjectPath {
  std::string bucket;
  std::string key;
};

Result<ObjectPath> ParseObjectPath(const std::string& path) {
  STINT_ASSIGN_OR_RETURN(S3Url url, S3Url::Parse(path));
  ObjectPath out{url.bucket, url.prefix};
  if (!out.key.empty()) out.key.pop_back();  // S3Url's prefix ends in '/'
  return out;
}

// An object written in whole parts of kObjectPartBytes and at most one
// shorter piece that ends it; see the header. PositionedWrite may run on
// several threads at once (disjoint parts); Sync, Close and Allocate not
// alongside them (the Env contract).
class ObjectWritableFile final : public WritableFile {
 public:
  ObjectWritableFile(S3Client* client, std::string key, std::string path, S3Metadata metadata)
      : client_(client),
        key_(std::move(key)),
        path_(std::move(path)),
        metadata_(std::move(metadata)) {}

  ~ObjectWritableFile() override {
    if (!closed_) Close().IgnoreError();  // aborts an unsynced upload
  }

  Status PositionedWrite(const void* data, size_t n, uint64_t offset) override {
    const char* bytes = static_cast<const char*>(data);
    const size_t whole = n / kObjectPartBytes;
    const size_t rest = n % kObjectPartBytes;
    const uint64_t first_index = offset / kObjectPartBytes;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_ || synced_) {
        return Status::FailedPrecondition(path_ + ": write at offset " + std::to_string(offset) +
                                          (closed_ ? " after Close()" : " after Sync()"));
      }
      if (!first_error_.ok()) return first_error_;
      if (offset % kObjectPartBytes != 0) {
        return Status::InvalidArgument(path_ + ": write at offset " + std::to_string(offset) +
                                       ": writes to an object store start at multiples of " +
                                       std::to_string(kObjectPartBytes) + " bytes (whole parts)");
      }
      if (n == 0) return Status::OK();
      if (first_index + whole + (rest > 0 ? 1 : 0) > static_cast<uint64_t>(kMaxParts)) {
        return Status::InvalidArgument(path_ + ": write of " + std::to_string(n) +
                                       " bytes at offset " + std::to_string(offset) +
                                       " goes past S3's " + std::to_string(kMaxParts) + " parts");
      }
      const int first_part = static_cast<int>(first_index) + 1;
      // Claim every part number first: a part written twice is the caller's
      // bug, and must not race its own upload.
      for (size_t i = 0; i < whole; ++i) {
        if (parts_.count(first_part + static_cast<int>(i)) > 0) {
          return Status::InvalidArgument(path_ + ": bytes at offset " +
                                         std::to_string(offset + i * kObjectPartBytes) +
                                         " written twice");
        }
      }
      if (rest > 0) {
        const uint64_t piece_offset = offset + whole * kObjectPartBytes;
        if (has_piece_) {
          return Status::InvalidArgument(
              path_ + ": a second piece shorter than a part, at offset " +
              std::to_string(piece_offset) + " (" + std::to_string(rest) +
              " bytes); only one may be written, and it ends the object (the first is at offset " +
              std::to_string(piece_offset_) + ")");
        }
        has_piece_ = true;
        piece_offset_ = piece_offset;
        piece_.assign(bytes + whole * kObjectPartBytes, rest);
      }
      for (size_t i = 0; i < whole; ++i) parts_[first_part + static_cast<int>(i)] = S3Part{};
    }
    const int first_part = static_cast<int>(first_index) + 1;
    for (size_t i = 0; i < whole; ++i) {
      const int number = first_part + static_cast<int>(i);
      Status s = UploadOnePart(number, bytes + i * kObjectPartBytes);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        if (first_error_.ok()) first_error_ = s;
        return s;
      }
    }
    return Status::OK();
  }

  Status Allocate(uint64_t size) override {
    // Size 0 is a no-op, as the Env contract says.
    if (size > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      allocated_ = size;
    }
    return Status::OK();
  }

  Status Sync() override {
    std::vector<S3Part> parts;
    std::string upload_id;
    bool has_piece = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      STINT_RETURN_IF_ERROR(CheckComplete());
      if (synced_) return Status::OK();
      for (const auto& [number, part] : parts_) parts.push_back(part);
      upload_id = upload_id_;
      has_piece = has_piece_;
    }
    // No lock across requests. piece_ is no longer written: a write now
    // would be a second piece (refused), and Close does not run alongside.
    const int k = static_cast<int>(parts.size());
    Status s;
    if (k == 0) {
      s = client_->PutObject(key_, piece_.data(), piece_.size(), metadata_);
    } else {
      if (has_piece) {
        Result<std::string> etag =
            client_->UploadPart(key_, upload_id, k + 1, piece_.data(), piece_.size());
        if (!etag.ok()) return etag.status();
        parts.push_back({k + 1, *etag, piece_.size()});
      }
      s = client_->CompleteMultipartUpload(key_, upload_id, parts);
    }
    if (!s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    synced_ = true;
    std::string().swap(piece_);
    return Status::OK();
  }

  Status Fsync() override { return Sync(); }

  Status Close() override {
    std::string upload_id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return Status::OK();
      closed_ = true;
      std::string().swap(piece_);
      if (!synced_) upload_id = upload_id_;
    }
    // Unsynced: nothing may appear, and the stored parts must not linger.
    if (upload_id.empty()) return Status::OK();
    return client_->AbortMultipartUpload(key_, upload_id);
  }

  bool direct_io() const override { return false; }
  const std::string& path() const override { return path_; }

 private:
  // OK when the object may be completed (or was already): no error so far,
  // parts 1..k with the piece (if any) right after them, and the allocated
  // size (if any) written.
  Status CheckComplete() const {
    if (closed_) return Status::FailedPrecondition(path_ + ": Sync() after Close()");
    if (synced_) return Status::OK();
    if (!first_error_.ok()) return first_error_;
    // Parts 1..k, with the piece (if any) right after them.
    const uint64_t whole_end =
        parts_.empty() ? 0 : uint64_t(parts_.rbegin()->first) * kObjectPartBytes;
    if (has_piece_ && piece_offset_ < whole_end) {
      return Status::InvalidArgument(
          path_ + ": the piece shorter than a part, at offset " + std::to_string(piece_offset_) +
          ", does not end the object (whole parts reach offset " + std::to_string(whole_end) + ")");
    }
    int k = 0;
    for (const auto& [number, part] : parts_) {
      if (number != k + 1) return Gap(uint64_t(k) * kObjectPartBytes, number);
      ++k;
    }
    const uint64_t whole_bytes = uint64_t(k) * kObjectPartBytes;
    if (has_piece_ && piece_offset_ > whole_bytes) {
      return Status::InvalidArgument(path_ + ": no data at offset " + std::to_string(whole_bytes) +
                                     " (a gap of " + std::to_string(piece_offset_ - whole_bytes) +
                                     " bytes before the last piece, at offset " +
                                     std::to_string(piece_offset_) + ")");
    }
    const uint64_t total = whole_bytes + piece_.size();
    if (allocated_ > 0 && total != allocated_) {
      return Status::DataLoss(path_ + ": " + std::to_string(total) + " bytes written, but " +
                              std::to_string(allocated_) + " were allocated");
    }
    return Status::OK();
  }

  Status Gap(uint64_t at, int next_part) const {
    return Status::InvalidArgument(path_ + ": no data at offset " + std::to_string(at) + " (part " +
                                   std::to_string(at / kObjectPartBytes + 1) + " missing; part " +
                                   std::to_string(next_part) + ", at offset " +
                                   std::to_string(uint64_t(next_part - 1) * kObjectPartBytes) +
                                   ", was written)");
  }

  // The upload's id, started by the first caller (the others wait for it:
  // none can send a part without it).
  Result<std::string> UploadId() {
    std::lock_guard<std::mutex> create(create_mu_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!upload_id_.empty()) return upload_id_;
    }
    STINT_ASSIGN_OR_RETURN(std::string id, client_->CreateMultipartUpload(key_, metadata_));
    std::lock_guard<std::mutex> lock(mu_);
    upload_id_ = id;
    return id;
  }

  Status UploadOnePart(int number, const char* data) {
    STINT_ASSIGN_OR_RETURN(std::string id, UploadId());
    STINT_ASSIGN_OR_RETURN(std::string etag,
                           client_->UploadPart(key_, id, number, data, kObjectPartBytes));
    std::lock_guard<std::mutex> lock(mu_);
    parts_[number] = S3Part{number, std::move(etag), kObjectPartBytes};
    return Status::OK();
  }

  // Immutable after construction.
  S3Client* const client_;  // the env's; outlives this
  const std::string key_;
  const std::string path_;
  const S3Metadata metadata_;  // the object's, sent when the upload starts

  // Held while the multipart upload is created, never during a part's upload.
  std::mutex create_mu_;
  std::mutex mu_;
  // Guarded by mu_.
  std::string upload_id_;
  std::map<int, S3Part> parts_;  // claimed by a write; etag set once uploaded
  bool has_piece_ = false;
  uint64_t piece_offset_ = 0;
  std::string piece_;
  uint64_t allocated_ = 0;  // 0: Allocate not called
  Status first_error_;
  bool synced_ = false;
  bool closed_ = false;
};

// An object's bytes through ranged GETs; its size from HEAD at open.
class ObjectRandomAccessFile final : public RandomAccessFile {
 public:
  ObjectRandomAccessFile(S3Client* client, std::string key, std::string path, uint64_t size)
      : client_(client), key_(std::move(key)), path_(std::move(path)), size_(size) {}

  Result<size_t> Read(uint64_t offset, size_t n, void* dst) const override {
    if (offset >= size_) return size_t{0};
    const size_t length = static_cast<size_t>(std::min<uint64_t>(n, size_ - offset));
    if (length == 0) return size_t{0};
    STINT_RETURN_IF_ERROR(client_->GetRange(key_, offset, length, static_cast<char*>(dst)));
    return length;
  }
  Result<uint64_t> Size() const override { return size_; }
  bool direct_io() const override { return false; }
  const std::string& path() const override { return path_; }

 private:
  S3Client* const client_;  // the env's; outlives this
  const std::string key_;
  const std::string path_;
  const uint64_t size_;
};

// Excludes other locks of this process on the same path until destroyed.
class ObjectFileLock final : public FileLock {
 public:
  ObjectFileLock(std::shared_ptr<internal::ObjectLockTable> table, std::string path)
      : table_(std::move(table)), path_(std::move(path)) {}
  ~ObjectFileLock() override {
    std::lock_guard<std::mutex> lock(table_->mu);
    table_->held.erase(path_);
  }
  const std::string& path() const override { return path_; }

 private:
  const std::shared_ptr<internal::ObjectLockTable> table_;
  const std::string path_;
};

// The client and key of an object path; kInvalidArgument for the bucket itself.
struct Object {
  S3Client* client;
  std::string key;
};

Result<Object> ResolveObject(ObjectStoreEnv* env, const std::string& path) {
  STINT_ASSIGN_OR_RETURN(ObjectPath p, ParseObjectPath(path));
  if (p.key.empty()) {
    return Status::InvalidArgument(path + ": names a bucket, not an object");
  }
  STINT_ASSIGN_OR_RETURN(S3Client * client, env->Client(p.bucket));
  return Object{client, std::move(p.key)};
}

// Whether any object lies under path's key + "/" (the bucket's root: any object).
Result<bool> AnyObjectUnder(ObjectStoreEnv* env, const std::string& path) {
  STINT_ASSIGN_OR_RETURN(ObjectPath p, ParseObjectPath(path));
  STINT_ASSIGN_OR_RETURN(S3Client * client, env->Client(p.bucket));
  const std::string prefix = p.key.empty() ? "" : p.key + "/";
  STINT_ASSIGN_OR_RETURN(auto listed, client->ListObjects(prefix, 1));
  return !listed.empty();
}

}  // namespace

bool IsObjectStorePath(const std::string& path) {
  return path.compare(0, sizeof(kScheme) - 1, kScheme) == 0;
}

ObjectStoreEnv::ObjectStoreEnv(S3Config config, Env* local)
    : EnvWrapper(local),
      config_(std::move(config)),
      locks_(std::make_shared<internal::ObjectLockTable>()) {}

ObjectStoreEnv::~ObjectStoreEnv() = default;

Result<std::unique_ptr<ObjectStoreEnv>> ObjectStoreEnv::FromEnvironment(Env* local) {
  STINT_ASSIGN_OR_RETURN(S3Config config, S3Config::FromEnvironment());
  return std::make_unique<ObjectStoreEnv>(std::move(config), local);
}

Result<S3Client*> ObjectStoreEnv::Client(const std::string& bucket) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = clients_.find(bucket);
  if (it == clients_.end()) {
    // Create sends nothing, so holding mu_ here costs no round trip.
    STINT_ASSIGN_OR_RETURN(std::unique_ptr<S3Client> client, S3Client::Create(config_, bucket));
    it = clients_.emplace(bucket, std::move(client)).first;
  }
  return it->second.get();
}

Status ObjectStoreEnv::AbortUploadsUnder(const std::string& path) {
  if (!IsObjectStorePath(path)) {
    return Status::InvalidArgument(path + ": not in an object store (s3://bucket/prefix)");
  }
  STINT_ASSIGN_OR_RETURN(ObjectPath p, ParseObjectPath(path));
  STINT_ASSIGN_OR_RETURN(S3Client * client, Client(p.bucket));
  const std::string prefix = p.key.empty() ? "" : p.key + "/";
  Result<std::vector<S3MultipartUpload>> uploads = client->ListMultipartUploads(prefix);
  // rclone answers 404 NoSuchUpload where no upload was ever started in the
  // bucket; a missing bucket holds no upload either.
  if (!uploads.ok() && uploads.status().code() == Code::kNotFound) return Status::OK();
  STINT_RETURN_IF_ERROR(uploads.status().WithContext("aborting uploads left under " + path));
  Status first;
  for (const S3MultipartUpload& u : *uploads) {
    Status s = client->AbortMultipartUpload(u.key, u.upload_id);
    // Completed or aborted since the listing: gone either way.
    if (!s.ok() && s.code() != Code::kNotFound && first.ok()) first = s;
  }
  return first;
}

Result<std::unique_ptr<WritableFile>> ObjectStoreEnv::NewWritableFile(const std::string& path,
                                                                      const FileOptions& options) {
  if (!IsObjectStorePath(path)) return EnvWrapper::NewWritableFile(path, options);
  return NewObjectWritableFile(path, {});
}

Result<std::unique_ptr<WritableFile>> ObjectStoreEnv::NewObjectWritableFile(
    const std::string& path, const S3Metadata& metadata) {
  // Nothing is sent: the object replaces any old one at Sync().
  STINT_ASSIGN_OR_RETURN(Object o, ResolveObject(this, path));
  return std::unique_ptr<WritableFile>(
      std::make_unique<ObjectWritableFile>(o.client, std::move(o.key), path, metadata));
}

Result<S3ObjectInfo> ObjectStoreEnv::StatObject(const std::string& path) {
  if (!IsObjectStorePath(path)) {
    return Status::InvalidArgument(path + ": not in an object store (s3://bucket/key)");
  }
  STINT_ASSIGN_OR_RETURN(Object o, ResolveObject(this, path));
  return o.client->HeadObject(o.key);
}

Result<std::unique_ptr<RandomAccessFile>> ObjectStoreEnv::NewRandomAccessFile(
    const std::string& path, const FileOptions& options) {
  if (!IsObjectStorePath(path)) return EnvWrapper::NewRandomAccessFile(path, options);
  STINT_ASSIGN_OR_RETURN(Object o, ResolveObject(this, path));
  STINT_ASSIGN_OR_RETURN(S3ObjectInfo info, o.client->HeadObject(o.key));
  return std::unique_ptr<RandomAccessFile>(
      std::make_unique<ObjectRandomAccessFile>(o.client, std::move(o.key), path, info.size));
}

Status ObjectStoreEnv::CreateDir(const std::string& path) {
  if (!IsObjectStorePath(path)) return EnvWrapper::CreateDir(path);
  return ParseObjectPath(path).status();  // a prefix needs no request
}

Status ObjectStoreEnv::RemoveDir(const std::string& path) {
  if (!IsObjectStorePath(path)) return EnvWrapper::RemoveDir(path);
  return ParseObjectPath(path).status();  // it goes with its last object
}

Status ObjectStoreEnv::SyncDir(const std::string& path) {
  if (!IsObjectStorePath(path)) return EnvWrapper::SyncDir(path);
  return ParseObjectPath(path).status();  // objects are durable when written
}

Status ObjectStoreEnv::RemoveFile(const std::string& path) {
  if (!IsObjectStorePath(path)) return EnvWrapper::RemoveFile(path);
  STINT_ASSIGN_OR_RETURN(Object o, ResolveObject(this, path));
  // S3's DELETE succeeds for a missing key; an Env's caller expects kNotFound.
  STINT_RETURN_IF_ERROR(o.client->HeadObject(o.key).status());
  return o.client->DeleteObject(o.key);
}

Status ObjectStoreEnv::RenameFile(const std::string& from, const std::string& to) {
  const bool from_store = IsObjectStorePath(from);
  const bool to_store = IsObjectStorePath(to);
  if (!from_store && !to_store) return EnvWrapper::RenameFile(from, to);
  if (from_store != to_store) {
    return Status::InvalidArgument("rename " + from + " -> " + to +
                                   ": between an object store and a local file system");
  }
  STINT_ASSIGN_OR_RETURN(Object src, ResolveObject(this, from));
  STINT_ASSIGN_OR_RETURN(Object dst, ResolveObject(this, to));
  if (src.client != dst.client) {
    return Status::Unimplemented("rename " + from + " -> " + to + ": across buckets");
  }
  Result<S3ObjectInfo> info = src.client->HeadObject(src.key);
  if (!info.ok()) {
    if (info.status().code() == Code::kNotFound) {
      STINT_ASSIGN_OR_RETURN(bool dir, AnyObjectUnder(this, from));
      if (dir) {
        return Status::Unimplemented("rename " + from + " -> " + to +
                                     ": directories are not renamed in an object store");
      }
    }
    return info.status();
  }
  if (info->size > kMaxCopyBytes) {
    return Status::Unimplemented("rename " + from + " -> " + to + ": the object has " +
                                 std::to_string(info->size) +
                                 " bytes, over the 5 GiB of one server-side copy");
  }
  // Copy first: a reader may see both for a moment, never neither.
  STINT_RETURN_IF_ERROR(src.client->CopyObject(src.key, dst.key));
  return src.client->DeleteObject(src.key);
}

Result<std::vector<std::string>> ObjectStoreEnv::GetChildren(const std::string& dir) {
  if (!IsObjectStorePath(dir)) return EnvWrapper::GetChildren(dir);
  STINT_ASSIGN_OR_RETURN(ObjectPath p, ParseObjectPath(dir));
  STINT_ASSIGN_OR_RETURN(S3Client * client, Client(p.bucket));
  const std::string prefix = p.key.empty() ? "" : p.key + "/";
  STINT_ASSIGN_OR_RETURN(auto listed, client->ListObjects(prefix));
  std::set<std::string> names;
  for (const S3ObjectInfo& o : listed) {
    const std::string rest = o.key.substr(prefix.size());
    const std::string name = rest.substr(0, rest.find('/'));
    if (!name.empty()) names.insert(name);  // "" : an object named like the prefix itself
  }
  return std::vector<std::string>(names.begin(), names.end());
}

bool ObjectStoreEnv::FileExists(const std::string& path) {
  if (!IsObjectStorePath(path)) return EnvWrapper::FileExists(path);
  Result<Object> o = ResolveObject(this, path);
  if (o.ok() && o->client->HeadObject(o->key).ok()) return true;
  return IsDirectory(path);
}

bool ObjectStoreEnv::IsDirectory(const std::string& path) {
  if (!IsObjectStorePath(path)) return EnvWrapper::IsDirectory(path);
  Result<bool> any = AnyObjectUnder(this, path);
  return any.ok() && *any;
}

Result<std::unique_ptr<FileLock>> ObjectStoreEnv::LockFile(const std::string& path,
                                                           const std::string& owner) {
  if (!IsObjectStorePath(path)) return EnvWrapper::LockFile(path, owner);
  STINT_ASSIGN_OR_RETURN(Object o, ResolveObject(this, path));
  // One name per object, however the path was spelled ("s3://b/a/" and "s3://b/a").
  const std::string canonical = "s3://" + o.client->bucket() + "/" + o.key;
  {
    std::lock_guard<std::mutex> lock(locks_->mu);
    if (!locks_->held.insert(canonical).second) {
      return Status::Unavailable(path + ": locked by another FileLock of this process");
    }
  }
  auto file_lock = std::make_unique<ObjectFileLock>(locks_, canonical);
  // On failure file_lock's destructor gives the path back.
  STINT_RETURN_IF_ERROR(o.client->PutObject(o.key, owner.data(), owner.size()));
  return std::unique_ptr<FileLock>(std::move(file_lock));
}

}  // namespace stint
