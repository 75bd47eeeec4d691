// CommitChannel: how the ranks of one job agree on a checkpoint commit.
//
// A save with CheckpointOptions::world_size > 1 is collective: every rank
// writes its own data file into the step's tmp directory on the shared path,
// fdatasyncs it and publishes a report (its files, digests, shard boxes and
// fencing token, or its error) on the channel; the committer (rank 0) writes
// the manifest only once every rank reported success, renames, syncs and
// moves LATEST, then publishes its decision, which becomes every rank's
// durable outcome. Nobody waits without a deadline (commit_timeout).
//
// The channel is a small key-value store the job already has. Implementations:
//   stint::C10dCommitChannel  (stint_torch.h)  the c10d Store of the job's
//                              process group: TCPStore, FileStore, PrefixStore
//   stint::CoordinatorCommitChannel (coordinator_commit_channel.h)  the job's
//                              KV store in stintd
// and, in Python, any torch.distributed Store.
//
// One channel per Checkpointer: two Checkpointers of one job (two roots) need
// two channels with different prefixes (a c10d PrefixStore;
// CoordinatorCommitChannel's prefix), since each counts its saves and loads
// from 0. Keys are unique per save of one job incarnation. A channel whose keys
// outlive the job (a FileStore reused across launches, the coordinator's KV
// across segments) must be given a prefix unique to the incarnation, e.g. the
// segment id or the rendezvous generation.
//
// Thread-safe: the Checkpointer calls it from its persist thread and from the
// thread that calls Load().
#ifndef STINT_INCLUDE_STINT_COMMIT_CHANNEL_H_
#define STINT_INCLUDE_STINT_COMMIT_CHANNEL_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "stint/status.h"

namespace stint {

class CommitChannel {
 public:
  virtual ~CommitChannel() = default;

  // Publishes `value` under `key`, replacing any value there.
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // The value under `key`; nullopt when there is none (yet). Never blocks
  // for long: the caller polls, with its own deadline. (A c10d store checks,
  // then gets: a key deleted in between would block the get for the store's
  // timeout, so the protocol never deletes a key another rank may poll.)
  virtual Result<std::optional<std::string>> Get(const std::string& key) = 0;
  // Get(), answering by `deadline` even when the store would block longer
  // (kDeadlineExceeded then): what the commit and load protocols call, so
  // no store wait outlasts their deadline. Default: Get(key).
  virtual Result<std::optional<std::string>> GetBy(const std::string& key,
                                                   std::chrono::steady_clock::time_point deadline) {
    (void)deadline;
    return Get(key);
  }
  // The value under `key` once it exists; nullopt when it does not by
  // `deadline`. Where the store can block on a key (c10d wait()), this is
  // one blocking read, so a thousand ranks waiting for one key cost the
  // store a thousand waiters rather than a thousand pollers, and each
  // learns of the key as it is set. Default: GetBy() polled, 2 ms doubling
  // to 100 ms.
  virtual Result<std::optional<std::string>> WaitFor(
      const std::string& key, std::chrono::steady_clock::time_point deadline);
  // The values under `keys`, nullopt where there is none, answering by
  // `deadline`; in one round trip where the store has one and every key
  // exists (c10d multiGet()). Default: GetBy() each.
  virtual Result<std::vector<std::optional<std::string>>> GetMany(
      const std::vector<std::string>& keys, std::chrono::steady_clock::time_point deadline);
  // Removes `key`; OK when it does not exist.
  virtual Status Delete(const std::string& key) = 0;
  // Adds `delta` to the integer counter under `key` (0 when absent) and
  // returns the sum, atomically among all ranks. A save counts on it the
  // ranks done with its keys; the last one deletes them, so a finished save
  // leaves no keys on the channel (a rank that died never counts, and its
  // save's keys stay until the store goes with the job).
  virtual Result<int64_t> Add(const std::string& key, int64_t delta) = 0;
  // For error messages, e.g. "c10d TCPStore" or "stintd KV of job 7".
  virtual std::string Describe() const = 0;
};

}  // namespace stint

#endif  // STINT_INCLUDE_STINT_COMMIT_CHANNEL_H_
