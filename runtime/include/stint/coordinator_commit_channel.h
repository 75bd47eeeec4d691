// CoordinatorCommitChannel: the commit channel of a multi-rank save (see
// stint/commit_channel.h) over the job's KV store in stintd, for jobs run
// under the coordinator; CoordinatorTokenGuard, which refuses a commit
// when any rank's worker incarnation is no longer current; and FenceCommits /
// FenceCommitsFromEnvironment, which put both guards on a Checkpointer so a
// worker that lost its lease (its node cut off while stintd requeued the job
// elsewhere) cannot commit a step or move LATEST.
//
//   stint::CoordinatorCommitChannel channel(session->client(),
//                                           "seg-" + std::to_string(segment_id));
//   options.commit_channel = &channel;
//   STINT_RETURN_IF_ERROR(stint::FenceCommits(session->client(), &options));
//
// A process stint-agent started (its environment carries the registration
// the agent made for it) needs no session:
//
//   auto fencing = stint::FenceCommitsFromEnvironment(&options);  // keep it alive
//   auto ckpt = stint::Checkpointer::Open(options);
//
// stint::ResumableTraining and the Python package (stint.Checkpointer,
// stint.Resumable, stint.dcp) do this by default.
#ifndef STINT_INCLUDE_STINT_COORDINATOR_COMMIT_CHANNEL_H_
#define STINT_INCLUDE_STINT_COORDINATOR_COMMIT_CHANNEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "stint/checkpointer.h"
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
  // One atomic add on stintd (CoordinatorClient::Add).
  Result<int64_t> Add(const std::string& key, int64_t delta) override;
  std::string Describe() const override;
  // WaitFor() and GetMany() are CommitChannel's polling defaults: a long-poll
  // holds one of stintd's HTTP threads for its whole wait, and a job's every
  // rank waiting on the decision at once would take them all.

 private:
  CoordinatorClient* const client_;
  const std::string prefix_;
};

// For CheckpointOptions::token_guard: OK while `fencing_token` is a current
// worker incarnation of the client's job, else kAborted "fenced: ..." (or the
// check's own error: a token that cannot be confirmed is refused).
// REQUIRES: `client` outlives every Checkpointer holding the function.
std::function<Status(uint64_t fencing_token)> CoordinatorTokenGuard(CoordinatorClient* client);

// Makes every commit of a Checkpointer opened with `options` check the
// worker incarnation of `client`'s registration with stintd: sets
// options->fencing_token to the registration's (when it is 0),
// options->commit_guard to client->CommitGuard() and options->token_guard to
// CoordinatorTokenGuard(client) (multi-rank: every rank's token), and
// options->retention_pins to client->RetentionPins() (retention keeps the
// steps the job's evaluations are queued or running on), each only where
// unset. A refused commit leaves the save's durable future with
// kAborted "fenced: ..." (IsFenced()) and touches no committed step or LATEST;
// stintd unreachable past the client's retry deadline refuses it too.
// kFailedPrecondition before client->Register().
// REQUIRES: `client` outlives the Checkpointer.
Status FenceCommits(CoordinatorClient* client, CheckpointOptions* options);

// The coordinator client of a process stint-agent started for a stintd job:
// its environment carries the registration the agent made for it
// (STINT_WORKER_ID, STINT_WORKER_SECRET, STINT_FENCING_TOKEN with
// STINT_JOB_ID, STINT_COORD_URL; see CoordinatorOptionsFromEnvironment), which
// the client adopts without calling stintd. nullptr when the environment
// carries no registration (neither STINT_WORKER_ID nor STINT_WORKER_SECRET
// set: not run by stint-agent); kInvalidArgument naming the variable when it
// is malformed.
Result<std::unique_ptr<CoordinatorClient>> WorkerClientFromEnvironment();

// WorkerClientFromEnvironment() then FenceCommits(): the client to keep alive
// as long as the Checkpointer, or nullptr (options untouched) outside
// stint-agent. Does nothing either (nullptr) for a read_only Checkpointer,
// which never commits.
Result<std::unique_ptr<CoordinatorClient>> FenceCommitsFromEnvironment(CheckpointOptions* options);

}  // namespace stint

#endif  // STINT_INCLUDE_STINT_COORDINATOR_COMMIT_CHANNEL_H_
