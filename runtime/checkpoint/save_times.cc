#include "checkpoint/save_times.h"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace stint {
namespace {

constexpr uint64_t kMaxFileBytes = 64 << 10;

std::string TimesPath(const std::string& root) { return root + "/" + kSaveTimesName; }

}  // namespace

Status RecordSaveTime(Env* env, const std::string& root, const SaveTime& t) {
  std::vector<SaveTime> times;
  Result<std::vector<SaveTime>> old = ReadSaveTimes(env, root);
  if (old.ok()) times = std::move(*old);  // a damaged file is started afresh
  times.push_back(t);
  if (times.size() > kSaveTimesKept) times.erase(times.begin(), times.end() - kSaveTimesKept);
  std::string text;
  for (const SaveTime& s : times) {
    char line[64];
    std::snprintf(line, sizeof(line), "%llu %.3f\n", static_cast<unsigned long long>(s.step),
                  s.durable_seconds);
    text += line;
  }
  // Not synced: it is advisory, and an fsync after every save would load
  // the disk the next save writes to. A power cut may leave it empty or
  // short; readers then name it or see fewer saves.
  const std::string tmp = TimesPath(root) + ".tmp";
  {
    STINT_ASSIGN_OR_RETURN(auto file, env->NewWritableFile(tmp, FileOptions{}));
    Status written = file->PositionedWrite(text.data(), text.size(), 0);
    Status closed = file->Close();
    STINT_RETURN_IF_ERROR(written);
    STINT_RETURN_IF_ERROR(closed);
  }
  return env->RenameFile(tmp, TimesPath(root));
}

Result<std::vector<SaveTime>> ReadSaveTimes(Env* env, const std::string& root) {
  const std::string path = TimesPath(root);
  if (!env->FileExists(path)) return std::vector<SaveTime>();
  STINT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(env, path));
  if (text.size() > kMaxFileBytes)
    return Status::DataLoss(path + ": " + std::to_string(text.size()) + " bytes, not save times");
  std::vector<SaveTime> times;
  std::istringstream lines(text);
  std::string line;
  for (int n = 1; std::getline(lines, line); n++) {
    std::istringstream words(line);
    SaveTime t;
    std::string rest;
    if (!(words >> t.step >> t.durable_seconds) || (words >> rest) ||
        !std::isfinite(t.durable_seconds) || t.durable_seconds < 0) {
      return Status::DataLoss(path + " line " + std::to_string(n) + ": '" + line.substr(0, 80) +
                              "' is not \"STEP SECONDS\"");
    }
    times.push_back(t);
  }
  return times;
}

}  // namespace stint
