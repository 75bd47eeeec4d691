// Peer replicas: each node's part of a committed step (node_commit.h) is
// copied to peer_replicas - 1 other nodes of the job, so one lost node
// (or rack, zone, spot pool, where $STINT_FAILURE_DOMAIN says) never takes
// every copy. Each node's leader (rank 0, or its keeper) runs a Replicator
// whose target is its peer-replica directory: it copies the parts this node
// holds from their nodes over the job's file service (job_peers.h),
// verifies every chunk against the manifest, commits them there as a step
// directory of the manifest and those files, and records the step under
// "<prefix>/peer-replica/<source node>/<holder node>" on the channel. The
// peer's file service serves them to any load that lacks them.
//
// Placement is computed by every node from the step's manifest alone (its
// files' nodes) and the failure domains the ranks published: the holders
// of node X's part are the first copies nodes after X in name order,
// wrapping, those in another failure domain than X's first.
#ifndef STINT_RUNTIME_CHECKPOINT_PEER_REPLICAS_H_
#define STINT_RUNTIME_CHECKPOINT_PEER_REPLICAS_H_

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/job_peers.h"
#include "checkpoint/replica.h"
#include "format/manifest.h"
#include "stint/checkpointer.h"

namespace stint {

// The nodes whose files `m` lists, in name order.
std::vector<std::string> ManifestNodes(const Manifest& m);

// The holders of `source`'s part among `nodes` (sorted, `source` among
// them): `copies` others at most (see above). `domains` maps a node to its
// failure domain; a node missing there is in a domain of its own. Pure.
std::vector<std::string> ReplicaHolders(const std::string& source,
                                        const std::vector<std::string>& nodes,
                                        const std::map<std::string, std::string>& domains,
                                        int copies);

// How many other nodes hold each part: peer_replicas - 1, or 1 by default.
int PeerCopies(const CheckpointOptions& options);

// The directory this node keeps other nodes' parts in.
std::string PeerReplicaDir(const CheckpointOptions& options);

// The Replicator target of this node's peer replicas. `peers` outlives it.
Replicator::Target PeerReplicaTarget(const CheckpointOptions& options, Env* env,
                                     JobPeers* peers);

// Waits until every holder of this node's part of committed `step` (its
// manifest in options.root, read through `env`) recorded it, or a newer
// step; OK at once when the step has no other node or no copies are wanted.
// kDeadlineExceeded naming the holders still missing.
Status WaitForPeerReplicas(const CheckpointOptions& options, Env* env, JobPeers* peers,
                           uint64_t step, std::chrono::steady_clock::time_point deadline);

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_PEER_REPLICAS_H_
