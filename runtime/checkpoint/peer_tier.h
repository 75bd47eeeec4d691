// PeerTier: a multi-rank Checkpointer's side of the job's other nodes. It
// owns this rank's file service for them (job_peers.h), tier 1 as loads and
// replicas read it, this node first and then the peers (peer_read_env.h),
// and, on a node's leader, the copies of other nodes' parts this node holds
// (peer_replicas.h). CheckpointerImpl calls it at the points of its flow
// where a node-local job differs from a shared root: after a commit, in
// FlushReplication, before loads and listings, in stats.
//
// Threads: AfterCommit runs on the persist thread; the rest on any thread.
#ifndef STINT_RUNTIME_CHECKPOINT_PEER_TIER_H_
#define STINT_RUNTIME_CHECKPOINT_PEER_TIER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "checkpoint/foreground_gate.h"
#include "checkpoint/job_peers.h"
#include "checkpoint/peer_read_env.h"
#include "checkpoint/replica.h"
#include "checkpoint/retention.h"
#include "stint/checkpointer.h"

namespace stint {

class PeerTier {
 public:
  using Clock = std::chrono::steady_clock;

  // `options` (node_id set; world_size > 1), `env`, `guard` (tier-1
  // retention's) and `gate` (the copies give way to its saves) outlive it.
  // No I/O until Start.
  PeerTier(const CheckpointOptions& options, Env* env, RetentionGuard* guard,
           const ForegroundGate* gate);
  ~PeerTier();  // stops the copies first: they read through the file service

  // Starts this rank's file service for the job's other nodes. Once, by Open.
  Status Start();

  // Tier 1 through this node's root, then the job's other nodes.
  Env* read_env() { return read_env_.get(); }

  // Learns every rank's file service (waiting for those not yet published),
  // so a node that lacks a file (a replacement for a lost one) reads it from
  // the node that has it. Before loads and readers.
  Status Refresh();

  // A node leader's commit of `step`: queues the copies of the other nodes'
  // parts this node holds, in the background like tier 2. An error here is
  // the background's (no copy was queued), not the commit's.
  Status AfterCommit(uint64_t step, Clock::time_point saved_at);

  // Waits until this node's part of `last` (the newest step this rank
  // committed, if any) is held by its holders, and the copies this node
  // makes are done. The first error among them.
  Status WaitReplicated(std::optional<uint64_t> last, Clock::time_point deadline,
                        std::chrono::milliseconds timeout);

  // The committed steps: `here` (this node's root's listing) when the root
  // holds a shared job's steps, else what the job's nodes hold.
  Result<std::vector<uint64_t>> ListCommitted(Result<std::vector<uint64_t>> here);

  // The peer-replica counters of `stats`.
  void FillStats(CheckpointerStats* stats) const;

 private:
  const CheckpointOptions& options_;
  Env* const env_;
  RetentionGuard* const guard_;
  const ForegroundGate* const gate_;
  std::unique_ptr<JobPeers> peers_;      // set by Start
  std::unique_ptr<PeerReadEnv> read_env_;
  // Made at the first commit this node leads, on the persist thread.
  std::unique_ptr<Replicator> copies_;
  std::atomic<bool> copies_made_{false};
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_PEER_TIER_H_
