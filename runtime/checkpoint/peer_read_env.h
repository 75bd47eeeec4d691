// PeerReadEnv: a node-local root as the load sees it, with the job's other
// nodes behind it. Under `root`, what this node lacks is read from the first
// peer that has it (its own root, then its peer-replica directory):
//
//   GetChildren(root)              this node's entries and every peer's committed step dirs
//   IsDirectory/FileExists(root/step-N[/file])   here, or on a peer
//   NewRandomAccessFile(root/step-N/file)        here, or a ranged reader over a peer's copy
//
// Everything else (writes, other paths) is the base Env's. A peer that
// cannot be reached is passed over; the reader verifies every chunk it
// reads wherever it came from, so a damaged copy fails the step's load
// (which then falls back, naming why) and is never loaded.
#ifndef STINT_RUNTIME_CHECKPOINT_PEER_READ_ENV_H_
#define STINT_RUNTIME_CHECKPOINT_PEER_READ_ENV_H_

#include <functional>
#include <string>
#include <vector>

#include "checkpoint/job_peers.h"
#include "stint/env.h"

namespace stint {

class PeerReadEnv final : public EnvWrapper {
 public:
  // `peers` is asked on every lookup (it may change between loads).
  PeerReadEnv(Env* base, std::string root, std::string replica_dir,
              std::function<std::vector<Peer>()> peers)
      : EnvWrapper(base),
        root_(std::move(root)),
        replica_dir_(std::move(replica_dir)),
        peers_(std::move(peers)) {}

  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const FileOptions& options) override;
  Result<std::vector<std::string>> GetChildren(const std::string& dir) override;
  bool FileExists(const std::string& path) override;
  bool IsDirectory(const std::string& path) override;

 private:
  // "step-N" and the file name (empty for the directory itself) when `path`
  // is root/step-N[/file]; false otherwise.
  bool SplitStepPath(const std::string& path, std::string* step_dir, std::string* file) const;
  bool PeerHasStep(const std::string& step_dir);

  const std::string root_;
  const std::string replica_dir_;
  const std::function<std::vector<Peer>()> peers_;
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_PEER_READ_ENV_H_
