// Env helpers built only on the Env interface, so they work on any Env.
#include "stint/env.h"

namespace stint {

Result<std::string> ReadFileToString(Env* env, const std::string& path) {
  STINT_ASSIGN_OR_RETURN(auto file, env->NewRandomAccessFile(path, FileOptions{}));
  STINT_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  std::string data(size, '\0');
  STINT_ASSIGN_OR_RETURN(size_t n, file->Read(0, size, data.data()));
  data.resize(n);
  return data;
}

Status WriteStringToFileSync(Env* env, const std::string& path, const std::string& data) {
  STINT_ASSIGN_OR_RETURN(auto file, env->NewWritableFile(path, FileOptions{}));
  Status s = file->PositionedWrite(data.data(), data.size(), 0);
  if (s.ok()) s = file->Fsync();
  Status c = file->Close();
  return s.ok() ? c : s;
}

Status CreateDirWithParents(Env* env, const std::string& path) {
  std::string dir = path;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  Status made = env->CreateDir(dir);
  if (made.code() == Code::kAlreadyExists) return Status::OK();
  const size_t slash = dir.find_last_of('/');
  const std::string parent = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                                        : dir.substr(0, slash);
  if (made.code() == Code::kNotFound && parent != dir) {
    // A missing parent (ENOENT): made first, then this one.
    STINT_RETURN_IF_ERROR(CreateDirWithParents(env, parent));
    made = env->CreateDir(dir);
    if (made.code() == Code::kAlreadyExists) return Status::OK();  // made meanwhile by another
  }
  if (!made.ok()) return made;
  // The new entry must survive a power cut, or everything below it goes too.
  return env->SyncDir(parent);
}

Status RemoveRecursively(Env* env, const std::string& path) {
  if (!env->IsDirectory(path)) {
    Status s = env->RemoveFile(path);
    return s.code() == Code::kNotFound ? Status::OK() : s;
  }
  STINT_ASSIGN_OR_RETURN(auto children, env->GetChildren(path));
  for (const auto& c : children) STINT_RETURN_IF_ERROR(RemoveRecursively(env, path + "/" + c));
  return env->RemoveDir(path);
}

}  // namespace stint
