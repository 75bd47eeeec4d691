#include "checkpoint/node_commit.h"

#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/commit.h"
#include "checkpoint/rank_commit.h"
#include "checkpoint/root_lock.h"

namespace stint {
namespace {

using json = nlohmann::json;

}  // namespace

std::string LocalNodeId() {
  const char* id = std::getenv("STINT_NODE_ID");
  if (id != nullptr && id[0] != '\0') return id;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

Status LeaveCommitterMarker(Env* env, const std::string& tmp_dir) {
  STINT_ASSIGN_OR_RETURN(auto file,
                         env->NewWritableFile(tmp_dir + "/" + kCommitterMarker, FileOptions{}));
  return file->Close();
}

Result<TmpPlace> EnterTmpDir(Env* env, const std::string& tmp_dir) {
  Status made = env->CreateDir(tmp_dir);
  if (made.ok()) return TmpPlace::kNodeLocal;
  if (made.code() != Code::kAlreadyExists) {
    return made.WithContext("creating this node's part of the save");
  }
  // The committer made its directory, marker inside, before publishing the
  // name; a directory without the marker was made by a rank of this node.
  return env->FileExists(tmp_dir + "/" + kCommitterMarker) ? TmpPlace::kCommitters
                                                           : TmpPlace::kNodeLocal;
}

Result<NodePlan> PlanNodeCommit(const std::vector<RankReport>& reports,
                                const std::string& committer_node, bool incremental) {
  NodePlan plan;
  for (const RankReport& r : reports) {
    if (r.rank == 0 || !r.node_local) continue;
    if (r.node == committer_node) {
      return Status::InvalidArgument(
          "rank " + std::to_string(r.rank) + " is on the committer's node '" + committer_node +
          "' but its root is not rank 0's directory: ranks of one node need one root (set "
          "STINT_NODE_ID to tell nodes apart)");
    }
    plan.node_local = true;
    auto it = plan.keepers.find(r.node);
    if (it == plan.keepers.end() || r.rank < it->second) plan.keepers[r.node] = r.rank;
  }
  if (plan.node_local && incremental) {
    return Status::InvalidArgument(
        "incremental saves need one root every rank shares; node-local roots (node '" +
        plan.keepers.begin()->first + "' has its own) are not supported with incremental");
  }
  return plan;
}

void RecordFileNodes(const std::vector<RankReport>& reports, const std::string& committer_node,
                     Manifest* merged) {
  std::map<std::string, std::string> node_of;
  for (const RankReport& r : reports) {
    const std::string& node = r.rank == 0 || !r.node_local ? committer_node : r.node;
    for (const FileRecord& f : r.part.files) node_of[f.name] = node;
  }
  for (FileRecord& f : merged->files) {
    auto it = node_of.find(f.name);
    if (it != node_of.end()) f.node = it->second;
  }
  merged->version_minor = std::max(merged->version_minor, kFormatMinorNodes);
}

std::string EncodePrepare(const std::string& manifest_bytes, const NodePlan& plan) {
  json keepers = json::array();
  for (const auto& [node, rank] : plan.keepers) keepers.push_back(rank);
  return json{{"manifest", manifest_bytes}, {"keepers", keepers}}.dump();
}

std::string EncodePrepareError(const Status& why) {
  return json{{"error", json::parse(EncodeDecision(why))}}.dump();
}

Result<Prepare> DecodePrepare(std::string_view bytes, std::string_view origin) {
  json top = json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  const std::string where(origin);
  if (top.is_discarded() || !top.is_object()) {
    return Status::DataLoss(where + ": prepare message is not a JSON object");
  }
  if (auto e = top.find("error"); e != top.end()) {
    Status why = DecodeDecision(e->dump(), where);
    return why.ok() ? Status::DataLoss(where + ": prepare message holds no error") : why;
  }
  auto m = top.find("manifest");
  auto k = top.find("keepers");
  if (m == top.end() || !m->is_string() || k == top.end() || !k->is_array()) {
    return Status::DataLoss(where + ": prepare message lacks manifest or keepers");
  }
  Prepare p;
  p.manifest_bytes = m->get<std::string>();
  for (const json& r : *k) {
    if (!r.is_number_integer()) return Status::DataLoss(where + ": keepers holds a non-rank");
    p.keepers.push_back(r.get<int>());
  }
  return p;
}

Status PrepareNodePart(Env* env, const std::string& tmp_dir, const std::string& node,
                       const Manifest& manifest, const std::string& manifest_bytes) {
  for (const FileRecord& f : manifest.files) {
    if (f.node != node) continue;
    const std::string path = tmp_dir + "/" + f.name;
    auto file = env->NewRandomAccessFile(path, FileOptions{});
    if (!file.ok()) {
      return file.status().WithContext("node '" + node + "' lacks its file " + f.name +
                                        " (do all its ranks share one root?)");
    }
    STINT_ASSIGN_OR_RETURN(uint64_t size, (*file)->Size());
    if (size != f.size) {
      return Status::DataLoss(path + ": " + std::to_string(size) + " bytes, the report said " +
                              std::to_string(f.size));
    }
  }
  return WriteTmpManifest(env, tmp_dir, manifest_bytes);
}

Status PublishNodePart(Env* env, const std::string& root, const std::string& tmp_dir,
                       uint64_t step) {
  return RenameToStep(env, root, tmp_dir, step)
      .WithContext("step " + std::to_string(step) + " is committed, but this node's part (" +
                   root + ") could not be made visible");
}

Status NodeRootLock::Acquire(Env* env, const std::string& root, std::chrono::milliseconds wait,
                             const std::string& keep) {
  if (lock_ != nullptr) return Status::OK();
  STINT_ASSIGN_OR_RETURN(lock_, OpenRootForWriting(env, root, wait, keep));
  return Status::OK();
}

}  // namespace stint
