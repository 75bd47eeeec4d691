#include "checkpoint/upload_resume.h"

#include <cinttypes>
#include <cstdio>
#include <set>

#include "checkpoint/replica.h"
#include "objstore/object_store_env.h"

namespace stint {
namespace {

// The metadata name (x-amz-meta-stint-digest) and its value: the digest in hex.
constexpr char kDigestName[] = "stint-digest";

std::string DigestText(uint64_t digest) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, digest);
  return buf;
}

}  // namespace

Result<std::unique_ptr<WritableFile>> NewUploadFile(Env* env, const std::string& path,
                                                    const FileRecord& f) {
  auto* store = dynamic_cast<ObjectStoreEnv*>(env);
  if (store == nullptr || !IsObjectStorePath(path)) return env->NewWritableFile(path, FileOptions{});
  return store->NewObjectWritableFile(path, {{kDigestName, DigestText(f.digest)}});
}

Result<bool> AlreadyUploaded(Env* env, const std::string& dir, const Manifest& m,
                             const FileRecord& f) {
  const std::string path = dir + "/" + f.name;
  if (auto* store = dynamic_cast<ObjectStoreEnv*>(env)) {
    Result<S3ObjectInfo> info = store->StatObject(path);
    if (!info.ok() && info.status().code() == Code::kNotFound) return false;
    STINT_RETURN_IF_ERROR(info.status().WithContext("resuming the upload of " + path));
    if (info->size != f.size) return false;
    for (const auto& [name, value] : info->metadata) {
      if (name == kDigestName) return value == DigestText(f.digest);
    }
  } else {
    if (!env->FileExists(path)) return false;
  }
  // No digest kept with it: its stored chunks, read back, decide.
  Status s = VerifyStoredChunks(env, dir, m, std::set<std::string>{f.name});
  if (s.ok()) return true;
  if (s.code() == Code::kDataLoss || s.code() == Code::kNotFound) return false;
  return s.WithContext("resuming the upload of " + path);
}

}  // namespace stint
