#include "checkpoint/peer_replicas.h"

#include <algorithm>
#include <set>

#include "base/channel_poll.h"
#include "checkpoint/commit.h"
#include "checkpoint/rank_commit.h"

namespace stint {
namespace {

std::string RecordKey(const CheckpointOptions& options, const std::string& source,
                      const std::string& holder) {
  return ChannelPrefix(options) + "/peer-replica/" + source + "/" + holder;
}

std::map<std::string, std::string> Domains(const CheckpointOptions& options,
                                           const JobPeers& peers) {
  std::map<std::string, std::string> domains;
  for (const Peer& p : peers.peers()) {
    if (!p.domain.empty()) domains[p.node] = p.domain;
  }
  if (!peers.domain().empty()) domains[options.node_id] = peers.domain();
  return domains;
}

}  // namespace

std::vector<std::string> ManifestNodes(const Manifest& m) {
  std::set<std::string> nodes;
  for (const FileRecord& f : m.files) {
    if (!f.node.empty()) nodes.insert(f.node);
  }
  return std::vector<std::string>(nodes.begin(), nodes.end());
}

std::vector<std::string> ReplicaHolders(const std::string& source,
                                        const std::vector<std::string>& nodes,
                                        const std::map<std::string, std::string>& domains,
                                        int copies) {
  auto at = std::find(nodes.begin(), nodes.end(), source);
  if (at == nodes.end() || copies <= 0) return {};
  const size_t n = nodes.size(), start = size_t(at - nodes.begin());
  auto domain = [&](const std::string& node) {
    auto it = domains.find(node);
    return it != domains.end() ? it->second : "node:" + node;
  };
  std::vector<std::string> ring;  // after `source`, wrapping
  for (size_t i = 1; i < n; ++i) ring.push_back(nodes[(start + i) % n]);
  std::stable_partition(ring.begin(), ring.end(), [&](const std::string& node) {
    return domain(node) != domain(source);
  });
  if (ring.size() > size_t(copies)) ring.resize(size_t(copies));
  return ring;
}

int PeerCopies(const CheckpointOptions& options) {
  return options.peer_replicas == 0 ? 1 : std::max(0, options.peer_replicas - 1);
}

std::string PeerReplicaDir(const CheckpointOptions& options) {
  return options.peer_replica_dir.empty() ? options.root + "/.peer-replicas"
                                          : options.peer_replica_dir;
}

Replicator::Target PeerReplicaTarget(const CheckpointOptions& options, Env* env,
                                     JobPeers* peers) {
  Replicator::Target t;
  t.env = env;
  t.root = PeerReplicaDir(options);
  t.keep_last = options.keep_last;
  t.keep_every = options.keep_every;
  t.verify = true;
  t.what = "peer replica on node '" + options.node_id + "'";
  // A node publishes its part once it learns of the commit, well within it.
  t.source_patience = CommitTimeout(options, 0);
  const std::string me = options.node_id;
  const int copies = PeerCopies(options);
  t.select = [&options, peers, me, copies](const Manifest& m) {
    std::set<std::string> files;
    const std::vector<std::string> nodes = ManifestNodes(m);
    const auto domains = Domains(options, *peers);
    for (const std::string& source : nodes) {
      if (source == me) continue;
      auto holders = ReplicaHolders(source, nodes, domains, copies);
      if (std::find(holders.begin(), holders.end(), me) == holders.end()) continue;
      for (const FileRecord& f : m.files) {
        if (f.node == source) files.insert(f.name);
      }
    }
    return std::optional<std::set<std::string>>(std::move(files));
  };
  t.committed = [&options, me](uint64_t step) {
    // Which parts this step's copy holds is in its manifest; the record is
    // per source so each source waits on its own holders only.
    const std::string dir = PeerReplicaDir(options) + "/" + StepDirName(step);
    auto bytes = ReadFileToString(options.env, dir + "/" + kManifestName);
    if (!bytes.ok()) return;
    auto m = DecodeManifest(*bytes, dir);
    if (!m.ok()) return;
    std::set<std::string> sources;
    for (const FileRecord& f : m->files) {
      if (f.node != me && options.env->FileExists(dir + "/" + f.name)) sources.insert(f.node);
    }
    for (const std::string& source : sources) {
      // Best effort: a source that cannot read it waits out its deadline.
      options.commit_channel->Set(RecordKey(options, source, me), std::to_string(step))
          .IgnoreError();
    }
  };
  return t;
}

Status WaitForPeerReplicas(const CheckpointOptions& options, Env* env, JobPeers* peers,
                           uint64_t step, std::chrono::steady_clock::time_point deadline) {
  const int copies = PeerCopies(options);
  if (copies == 0) return Status::OK();
  const std::string dir = options.root + "/" + StepDirName(step);
  STINT_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(env, dir + "/" + kManifestName));
  STINT_ASSIGN_OR_RETURN(Manifest m, DecodeManifest(bytes, dir));
  const std::vector<std::string> nodes = ManifestNodes(m);
  if (nodes.size() < 2) return Status::OK();
  // The failure domains are in the ranks' records.
  if (peers->peers().empty()) STINT_RETURN_IF_ERROR(peers->Refresh(deadline));
  std::vector<std::string> waiting =
      ReplicaHolders(options.node_id, nodes, Domains(options, *peers), copies);
  auto pause = std::chrono::milliseconds(2);
  for (;;) {
    std::vector<std::string> keys;
    for (const std::string& h : waiting) keys.push_back(RecordKey(options, options.node_id, h));
    STINT_ASSIGN_OR_RETURN(auto values, options.commit_channel->GetMany(keys, deadline));
    std::vector<std::string> still;
    for (size_t i = 0; i < waiting.size(); ++i) {
      uint64_t held = 0;
      bool parsed = values[i].has_value() && !values[i]->empty() && values[i]->size() <= 19 &&
                    std::all_of(values[i]->begin(), values[i]->end(),
                                [](char c) { return c >= '0' && c <= '9'; });
      if (parsed) held = std::stoull(*values[i]);
      if (!parsed || held < step) still.push_back(waiting[i]);
    }
    waiting = std::move(still);
    if (waiting.empty()) return Status::OK();
    if (!PauseBeforeNextPoll(deadline, &pause)) break;
  }
  std::string named;
  for (const std::string& h : waiting) named += (named.empty() ? "'" : ", '") + h + "'";
  return Status::DeadlineExceeded("node '" + options.node_id + "''s part of step " +
                                  std::to_string(step) + " is not yet held by node " + named);
}

}  // namespace stint
