// Node-local roots: the parts of a multi-rank save (rank_commit.h) that let
// each node keep its ranks' files on its own disk.
//
// Every rank writes into "<its root>/<tmp>" under the tmp name the committer
// published, creating the directory when its root lacks it. The committer
// leaves a marker (kCommitterMarker) in its own tmp directory before it
// publishes the name, so a rank tells a root it shares with the committer
// (the marker is there: today's one shared root, a local disk or a shared
// file system) from its node's own disk (no marker). Its report says which,
// with its node's name (CheckpointOptions::node_id).
//
// When every rank shares the committer's directory the commit is today's.
// Otherwise it is a two-phase commit over the channel:
//
//   committer  merges the reports; each file records its node; for every
//              other node picks a keeper (its lowest rank) and publishes the
//              manifest                                       -> prepare/<tmp>
//   keeper     takes its root's writer lock (the first time), checks its
//              node's files are in its tmp directory, writes and syncs the
//              MANIFEST there, answers                        -> prepared/<r>
//   committer  once every keeper prepared: its own commit (guards, rename:
//              the commit point), then the decision as today -> decision/<tmp>
//   keeper     on "committed": renames its tmp directory to the step's and
//              points LATEST at it; else removes it.
//
// So a step is committed only when every node's part is durable with the
// manifest beside it, and the same manifest reaches every node. A keeper
// that dies between its answer and its rename leaves its node without the
// step: the load treats that node's files as lost (peers' replicas, or an
// older step). Ranks of one node share one root; a rank on the committer's
// node whose root is not the committer's is refused with why.
#ifndef STINT_RUNTIME_CHECKPOINT_NODE_COMMIT_H_
#define STINT_RUNTIME_CHECKPOINT_NODE_COMMIT_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "format/manifest.h"
#include "stint/env.h"
#include "stint/status.h"

namespace stint {

struct RankReport;

// Left by the committer in its tmp directory; removed before the commit.
constexpr char kCommitterMarker[] = ".committer";

// The committer's marker in its tmp directory (not synced: it only has to
// be seen by the other ranks, and goes before the commit).
Status LeaveCommitterMarker(Env* env, const std::string& tmp_dir);

// This process's node: $STINT_NODE_ID when set and non-empty, else the host name.
std::string LocalNodeId();

// How a rank came to its tmp directory.
enum class TmpPlace {
  kCommitters,  // the committer's own directory (the marker is there)
  kNodeLocal,   // its node's root, which the committer does not see
};

// The tmp directory `tmp_dir` of a non-committer: created when missing
// (by this rank or a rank of its node first), then told apart by the marker.
Result<TmpPlace> EnterTmpDir(Env* env, const std::string& tmp_dir);

// Who commits what where, from every rank's report.
struct NodePlan {
  bool node_local = false;            // some rank wrote outside the committer's directory
  std::map<std::string, int> keepers;  // node -> the rank that commits its root (not the committer's node)
};

// kInvalidArgument when a rank of the committer's node wrote into another
// directory, or when the save is incremental (references across node roots
// are not followed yet).
Result<NodePlan> PlanNodeCommit(const std::vector<RankReport>& reports,
                                const std::string& committer_node, bool incremental);

// Records in `merged` which node holds each file (the writer's node; the
// committer's for files in its directory) and marks it format 1.2.
void RecordFileNodes(const std::vector<RankReport>& reports, const std::string& committer_node,
                     Manifest* merged);

// The prepare message: the merged manifest's bytes and the keepers, or the
// error that ended the save before.
std::string EncodePrepare(const std::string& manifest_bytes, const NodePlan& plan);
std::string EncodePrepareError(const Status& why);
struct Prepare {
  std::string manifest_bytes;
  std::vector<int> keepers;
};
Result<Prepare> DecodePrepare(std::string_view bytes, std::string_view origin);

// A keeper's first phase: every file `manifest` places on `node` is in
// `tmp_dir` with its recorded size; then the manifest is written and synced
// there. Nothing is visible yet.
Status PrepareNodePart(Env* env, const std::string& tmp_dir, const std::string& node,
                       const Manifest& manifest, const std::string& manifest_bytes);

// A keeper's second phase, after the committer committed: tmp_dir becomes
// the step's directory in `root`, and LATEST names it.
Status PublishNodePart(Env* env, const std::string& root, const std::string& tmp_dir,
                       uint64_t step);

// The writer lock of a node-local root, taken by its keeper the first time
// it prepares and kept for the Checkpointer's life, so that one writer (and
// only it) cleans and retains there. Thread-compatible: the persist thread.
class NodeRootLock {
 public:
  // Locks `root` (waiting up to `wait` for another writer), removing
  // leftovers except the save in flight, `keep`. OK when already held.
  Status Acquire(Env* env, const std::string& root, std::chrono::milliseconds wait,
                 const std::string& keep);
  bool held() const { return lock_ != nullptr; }

 private:
  std::unique_ptr<FileLock> lock_;
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_NODE_COMMIT_H_
