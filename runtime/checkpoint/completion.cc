#include "checkpoint/completion.h"

#include <nlohmann/json.hpp>

namespace stint {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxMarkerBytes = 64 << 10;

std::string MarkerPath(const std::string& root) { return root + "/" + kCompleteName; }

}  // namespace

Status WriteCompletion(Env* env, const std::string& root, uint64_t step, const std::string& info) {
  json parsed = json::parse(info.empty() ? "{}" : info, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) {
    return Status::InvalidArgument("completion info must be a JSON object, got '" +
                                   info.substr(0, 80) + "'");
  }
  const json marker = {{"step", step}, {"info", parsed}};
  const std::string tmp = MarkerPath(root) + ".tmp";
  STINT_RETURN_IF_ERROR(WriteStringToFileSync(env, tmp, marker.dump() + "\n"));
  STINT_RETURN_IF_ERROR(env->RenameFile(tmp, MarkerPath(root)));
  return env->SyncDir(root);
}

Result<std::optional<CompletionMarker>> ReadCompletion(Env* env, const std::string& root) {
  const std::string path = MarkerPath(root);
  auto file = env->NewRandomAccessFile(path, FileOptions{});
  if (!file.ok()) {
    if (file.status().code() == Code::kNotFound) return std::optional<CompletionMarker>();
    return file.status();
  }
  STINT_ASSIGN_OR_RETURN(uint64_t size, (*file)->Size());
  if (size > kMaxMarkerBytes) {
    return Status::DataLoss(path + ": " + std::to_string(size) + " bytes, not a completion marker");
  }
  std::string text(size, '\0');
  STINT_ASSIGN_OR_RETURN(size_t n, (*file)->Read(0, text.size(), text.data()));
  text.resize(n);
  const json marker = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!marker.is_object() || !marker.contains("step") || !marker["step"].is_number_unsigned() ||
      !marker.value("info", json()).is_object()) {
    return Status::DataLoss(path + " is not a completion marker ({\"step\": N, \"info\": {...}})");
  }
  CompletionMarker m;
  m.step = marker["step"].get<uint64_t>();
  m.info = marker["info"].dump();
  return std::optional<CompletionMarker>(m);
}

Status RemoveCompletion(Env* env, const std::string& root) {
  if (!env->FileExists(MarkerPath(root))) return Status::OK();
  STINT_RETURN_IF_ERROR(env->RemoveFile(MarkerPath(root)));
  return env->SyncDir(root);
}

}  // namespace stint
