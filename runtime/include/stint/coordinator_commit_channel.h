// CoordinatorCommitChannel: the commit channel of a multi-rank save (see
// stint/commit_channel.h) over the job's KV store in stintd, for jobs run
// under the coordinator; and CoordinatorTokenGuard, which refuses a commit
// when any rank's worker incarnation is no longer current.
//
//   stint::CoordinatorCommitChannel channel(session->client(),
//                                           "seg-" + std::to_string(segment_id));
//   options.commit_channel = &channel;
//   options.token_guard = stint::CoordinatorTokenGuard(session->client());
#ifndef STINT_INCLUDE_STINT_COORDINATOR_COMMIT_CHANNEL_H_
#define STINT_INCLUDE_STINT_COORDINATOR_COMMIT_CHANNEL_H_

#include <cstdint>
#include <functional>
#include <string>

#include "stint/commit_channel.h"
#include "stint/coordinator_client.h"

namespace stint {

class CoordinatorCommitChannel final : public CommitChannel {
 public:
  // Keys go to the job's KV as "<prefix>/<key>": the KV outlives segments, so
  // `prefix` must be unique to this incarnation of the job's group (the
  // segment id and rendezvous generation). REQUIRES: `client` outlives this.
  CoordinatorCommitChannel(CoordinatorClient* client, std::string prefix);

  Status Set(const std::string& key, const std::string& value) override;
  Result<std::optional<std::string>> Get(const std::string& key) override;
  Status Delete(const std::string& key) override;
  // A compare-and-set on the KV entry's version, again while another rank's
  // add comes first.
  Result<int64_t> Add(const std::string& key, int64_t delta) override;
  std::string Describe() const override;

 private:
  CoordinatorClient* const client_;
  const std::string prefix_;
};

// For CheckpointOptions::token_guard: OK while `fencing_token` is a current
// worker incarnation of the client's job, else kAborted "fenced: ..." (or the
// check's own error: a token that cannot be confirmed is refused).
// REQUIRES: `client` outlives every Checkpointer holding the function.
std::function<Status(uint64_t fencing_token)> CoordinatorTokenGuard(CoordinatorClient* client);

}  // namespace stint

#endif  // STINT_INCLUDE_STINT_COORDINATOR_COMMIT_CHANNEL_H_
