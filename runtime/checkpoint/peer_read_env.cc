#include "checkpoint/peer_read_env.h"

#include <algorithm>
#include <set>

#include "checkpoint/commit.h"
#include "peer/peer_file_client.h"

namespace stint {

bool PeerReadEnv::SplitStepPath(const std::string& path, std::string* step_dir,
                                std::string* file) const {
  if (path.size() <= root_.size() + 1 || path.compare(0, root_.size(), root_) != 0 ||
      path[root_.size()] != '/') {
    return false;
  }
  const std::string rest = path.substr(root_.size() + 1);
  const size_t slash = rest.find('/');
  *step_dir = rest.substr(0, slash);
  *file = slash == std::string::npos ? "" : rest.substr(slash + 1);
  return ParseStepDirName(*step_dir).has_value() && file->find('/') == std::string::npos;
}

bool PeerReadEnv::PeerHasStep(const std::string& step_dir) {
  for (const Peer& p : peers_()) {
    auto steps = p.client->ListSteps();
    if (steps.ok() && std::find(steps->begin(), steps->end(), step_dir) != steps->end()) {
      return true;
    }
  }
  return false;
}

Result<std::unique_ptr<RandomAccessFile>> PeerReadEnv::NewRandomAccessFile(
    const std::string& path, const FileOptions& options) {
  auto local = EnvWrapper::NewRandomAccessFile(path, options);
  std::string step_dir, file;
  if (local.ok() || local.status().code() != Code::kNotFound ||
      !SplitStepPath(path, &step_dir, &file) || file.empty()) {
    return local;
  }
  auto held = EnvWrapper::NewRandomAccessFile(replica_dir_ + "/" + step_dir + "/" + file, options);
  if (held.ok() || held.status().code() != Code::kNotFound) return held;
  std::string tried;
  for (const Peer& p : peers_()) {
    auto remote = OpenPeerFile(p.client, step_dir, file);
    if (remote.ok()) return remote;
    tried += "; node '" + p.node + "': " + remote.status().ToString();
  }
  return Status::NotFound(path + ": not on this node" +
                          (tried.empty() ? std::string(" and no other node is known") : tried));
}

Result<std::vector<std::string>> PeerReadEnv::GetChildren(const std::string& dir) {
  auto local = EnvWrapper::GetChildren(dir);
  if (dir != root_) return local;
  std::set<std::string> names;
  if (local.ok()) names.insert(local->begin(), local->end());
  if (auto held = EnvWrapper::GetChildren(replica_dir_); held.ok()) {
    for (const std::string& name : *held) {
      if (ParseStepDirName(name)) names.insert(name);
    }
  }
  for (const Peer& p : peers_()) {
    auto steps = p.client->ListSteps();
    if (steps.ok()) names.insert(steps->begin(), steps->end());
  }
  if (!local.ok() && names.empty()) return local;
  return std::vector<std::string>(names.begin(), names.end());
}

bool PeerReadEnv::FileExists(const std::string& path) {
  if (EnvWrapper::FileExists(path)) return true;
  std::string step_dir, file;
  if (!SplitStepPath(path, &step_dir, &file)) return false;
  if (EnvWrapper::FileExists(replica_dir_ + "/" + step_dir + (file.empty() ? "" : "/" + file))) {
    return true;
  }
  if (file.empty()) return PeerHasStep(step_dir);
  for (const Peer& p : peers_()) {
    if (p.client->FileSize(step_dir, file).ok()) return true;
  }
  return false;
}

bool PeerReadEnv::IsDirectory(const std::string& path) {
  if (EnvWrapper::IsDirectory(path)) return true;
  std::string step_dir, file;
  if (!SplitStepPath(path, &step_dir, &file) || !file.empty()) return false;
  return EnvWrapper::IsDirectory(replica_dir_ + "/" + step_dir) || PeerHasStep(step_dir);
}

}  // namespace stint
