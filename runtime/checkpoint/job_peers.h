// JobPeers: this rank's part of the job's node-to-node file service, for
// node-local roots (node_commit.h). Every rank of a multi-rank Checkpointer
// serves its root (and its peer-replica directory) read-only over HTTP
// (PeerFileServer) and publishes where, under "<prefix>/peer/<rank>" on the
// commit channel: its node, failure domain, URL and a bearer token drawn at
// random for this server. The token is only ever on the job's channel, so
// only the job's ranks can read a node's checkpoints.
//
// Why this transport and not the training's process group: a load on a
// replacement node must read before any process group exists, resharding
// needs ranged reads of any file, and a background copy must not queue
// behind (or collide with) the training's collectives.
//
// The advertised address: $STINT_NODE_ADDR when set (also bound), else the
// local address this host routes to $MASTER_ADDR from, else the host name's
// address, else 127.0.0.1.
#ifndef STINT_RUNTIME_CHECKPOINT_JOB_PEERS_H_
#define STINT_RUNTIME_CHECKPOINT_JOB_PEERS_H_

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/foreground_gate.h"
#include "stint/checkpointer.h"
#include "stint/env.h"
#include "stint/status.h"

namespace stint {

class PeerFileClient;
class PeerFileServer;

// Another node of the job, as one of its ranks published it.
struct Peer {
  std::string node;
  std::string domain;  // $STINT_FAILURE_DOMAIN of that rank; may be empty
  std::shared_ptr<PeerFileClient> client;
};

class JobPeers {
 public:
  // REQUIRES: options.world_size > 1, options.commit_channel and
  // options.node_id set. `replica_dir` may be empty.
  // `gate` (may be null; outlives it): the file service's answers give
  // way to this process's saves.
  static Result<std::unique_ptr<JobPeers>> Start(const CheckpointOptions& options, Env* env,
                                                 const std::string& replica_dir,
                                                 const ForegroundGate* gate = nullptr);
  ~JobPeers();

  // Reads every rank's record (waiting for those not yet published until
  // `deadline`) and keeps one client per other node: the lowest rank's.
  // kDeadlineExceeded naming the ranks that never published, unless
  // `partial`: then the nodes of the records found by the deadline. A rank
  // whose Checkpointer closed leaves a record saying so, kept rather than
  // deleted: it answers at once (that rank serves nothing), so no refresh
  // waits out its deadline for a rank that has left. A Checkpointer opened
  // again under the same prefix replaces it.
  Status Refresh(std::chrono::steady_clock::time_point deadline, bool partial = false);
  // The other nodes as last refreshed, by node name.
  std::vector<Peer> peers() const;
  // This rank's failure domain ($STINT_FAILURE_DOMAIN).
  const std::string& domain() const { return domain_; }

 private:
  JobPeers(const CheckpointOptions& options, std::unique_ptr<PeerFileServer> server);

  const CheckpointOptions& options_;
  std::unique_ptr<PeerFileServer> server_;
  std::string domain_;
  mutable std::mutex mu_;
  std::vector<Peer> peers_;  // guarded by mu_
};

// The address other nodes reach this one at (see above).
std::string AdvertisedNodeAddress();

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_JOB_PEERS_H_
