#include "checkpoint/peer_tier.h"

#include <string>
#include <utility>

#include "checkpoint/commit.h"
#include "checkpoint/peer_replicas.h"
#include "checkpoint/rank_commit.h"
#include "format/manifest.h"

namespace stint {

PeerTier::PeerTier(const CheckpointOptions& options, Env* env, RetentionGuard* guard,
                   const ForegroundGate* gate)
    : options_(options),
      env_(env),
      guard_(guard),
      gate_(gate),
      read_env_(std::make_unique<PeerReadEnv>(env, options.root, PeerReplicaDir(options), [this] {
        return peers_ != nullptr ? peers_->peers() : std::vector<Peer>();
      })) {}

PeerTier::~PeerTier() { copies_.reset(); }

Status PeerTier::Start() {
  STINT_ASSIGN_OR_RETURN(peers_, JobPeers::Start(options_, env_, PeerReplicaDir(options_), gate_));
  return Status::OK();
}

Status PeerTier::Refresh() { return peers_->Refresh(Clock::now() + LoadTimeout(options_)); }

Status PeerTier::AfterCommit(uint64_t step, Clock::time_point saved_at) {
  if (PeerCopies(options_) == 0) return Status::OK();
  if (copies_ == nullptr) {
    // The ranks published their services at Open; a save is collective, so
    // every one did before this commit.
    STINT_RETURN_IF_ERROR(Refresh().WithContext("peer replicas"));
    Replicator::Target target = PeerReplicaTarget(options_, env_, peers_.get());
    target.gate = gate_;
    copies_ = std::make_unique<Replicator>(options_, guard_, read_env_.get(), std::move(target));
    copies_made_.store(true, std::memory_order_release);
  }
  copies_->Enqueue(step, saved_at, std::promise<Status>());
  return Status::OK();
}

Status PeerTier::WaitReplicated(std::optional<uint64_t> last, Clock::time_point deadline,
                                std::chrono::milliseconds timeout) {
  Status first = Status::OK();
  // This node's part is safe from its loss once its holders have it.
  if (last) first = WaitForPeerReplicas(options_, read_env_.get(), peers_.get(), *last, deadline);
  if (copies_made_.load(std::memory_order_acquire)) {
    if (!copies_->WaitUntilIdle(deadline) && first.ok()) {
      first = Status::DeadlineExceeded("flush replication: still copying other nodes' parts "
                                       "after " + std::to_string(timeout.count()) + " ms");
    }
    Status own = copies_->TakeError();
    if (first.ok()) first = own;
  }
  return first;
}

Result<std::vector<uint64_t>> PeerTier::ListCommitted(Result<std::vector<uint64_t>> here) {
  // A read-only rank on a replacement node may have no root at all yet.
  if (!here.ok() && here.status().code() != Code::kNotFound) return here;
  if (!here.ok()) here = std::vector<uint64_t>();
  // A root every rank shares (its newest step's files are all its own)
  // lists what the job has; asking the job's nodes is for node-local roots
  // and for a node that starts empty (a replacement for a lost one).
  if (!here->empty()) {
    const std::string dir = options_.root + "/" + StepDirName(here->back());
    auto bytes = ReadFileToString(env_, dir + "/" + kManifestName);
    auto m = bytes.ok() ? DecodeManifest(*bytes, dir) : Result<Manifest>(bytes.status());
    if (m.ok() && ManifestNodes(*m).empty()) return here;
  }
  // Not every rank is required: one may have closed already.
  STINT_RETURN_IF_ERROR(peers_->Refresh(Clock::now() + std::chrono::seconds(60), true));
  return ListCheckpointSteps(read_env_.get(), options_.root);
}

void PeerTier::FillStats(CheckpointerStats* stats) const {
  if (!copies_made_.load(std::memory_order_acquire)) return;
  Replicator::Counts c = copies_->counts();
  stats->peer_replicated = c.replicated;
  stats->peer_replica_failed = c.failed;
  stats->last_peer_replica = std::move(c.last);
  stats->last_peer_replica_error = std::move(c.last_error);
}

}  // namespace stint
