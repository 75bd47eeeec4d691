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
