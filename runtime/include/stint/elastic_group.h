// ElasticGroup: a data-parallel group whose membership comes from stintd's
// rendezvous and changes without restarting the job.
//
//   auto group = stint::ElasticGroup::Create(client, &gloo_factory, options).value();
//   group->Join(&state);                       // first generation; state from rank 0
//   while (...) {
//     ids = sampler.RankIndices(group->rank(), group->world_size());
//     ...forward, backward...
//     if (group->comm().AllReduce(grads...).ok()) { optimizer step; commit }
//     auto b = group->StepBoundary(watcher->requested(), &state).value();
//     if (b.stop) { checkpoint; exit }
//   }
//
// StepBoundary is where membership changes: all ranks agree (one small
// allreduce) whether a new generation is due (stintd's generation moved, or
// a collective failed) and whether to stop (a preemption on any rank). On a
// change every rank aborts its communicator, re-joins the rendezvous, forms
// the next generation's communicator (NCCL: shrunk in place where only ranks
// left and the library can; else a fresh one) and calls
// state->Synchronize(), which makes every rank's state rank 0's (rank 0 is
// always a survivor when there is one). A collective that failed mid-step
// is not an error for the loop: it skips the optimizer step, and the next
// StepBoundary re-forms and re-synchronizes.
//
// Every wait is bounded: the communicator's per-call timeout, and
// ElasticOptions::join_timeout for finding a group (kDeadlineExceeded
// naming what was missing). A fenced worker (its segment ended) gets the
// client's "fenced:" kAborted; stop and exit.
//
// The training thread owns the group (thread-compatible, except Cancel());
// a background thread long-polls stintd for generation changes.
#ifndef STINT_INCLUDE_STINT_ELASTIC_GROUP_H_
#define STINT_INCLUDE_STINT_ELASTIC_GROUP_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "stint/communicator.h"
#include "stint/coordinator_client.h"
#include "stint/status.h"

namespace stint {

// What the group keeps consistent across generations.
class ElasticState {
 public:
  virtual ~ElasticState() = default;
  // Called on every rank of a newly formed generation: make this rank's
  // state equal to rank 0's (e.g. Broadcast from root 0). An error (a peer
  // died) makes the group re-form and call it again.
  virtual Status Synchronize(Communicator& comm) = 0;
};

struct ElasticOptions {
  // The address peers reach this worker at (its store listener when it is
  // rank 0, its transport). Default: $STINT_ADVERTISE_HOST, else 127.0.0.1.
  std::string advertise_host;
  // Longest time Join() and a re-form may spend without a formed group
  // (e.g. fewer than min workers alive). Default: 5 minutes.
  std::chrono::milliseconds join_timeout{std::chrono::minutes(5)};
  CommunicatorOptions comm;  // comm.local_host defaults to advertise_host
};

struct ElasticStep {
  bool stop = false;      // some rank wants to stop (preemption): checkpoint, exit
  bool reformed = false;  // a new generation formed at this boundary; state synchronized
  uint64_t generation = 0;
  int rank = -1;
  int world_size = 0;
  // From the start of the re-form (the boundary that noticed the change) to
  // the synchronized state: the stall the change cost this rank.
  double reform_seconds = 0;
};

class ElasticGroup {
 public:
  // `client` must be registered (CoordinatorClient::Register) and outlive
  // the group. `factory` null: no communicator is formed (the caller forms
  // its own group from membership(), e.g. torch.distributed); StepBoundary
  // then only reports changes and the caller calls Reform().
  static Result<std::unique_ptr<ElasticGroup>> Create(CoordinatorClient* client,
                                                      CommunicatorFactory* factory,
                                                      ElasticOptions options);
  ~ElasticGroup();  // aborts the communicator, stops the watcher thread
  ElasticGroup(const ElasticGroup&) = delete;
  ElasticGroup& operator=(const ElasticGroup&) = delete;

  // Joins the first generation (or the current one after a restart) and
  // synchronizes `state` (may be null).
  Result<ElasticStep> Join(ElasticState* state);

  // Once per step, after the optimizer step (or after a failed collective
  // that skipped it). `stop_requested`: this rank wants to stop.
  Result<ElasticStep> StepBoundary(bool stop_requested, ElasticState* state);

  // Leaves the current generation and joins the next now; `failed`: this
  // generation is broken (a collective failed), so stintd opens a new round
  // even if nobody else noticed yet. kFailedPrecondition ("restart it to
  // rejoin the job") once the factory left a communicator unreleased
  // (CommunicatorFactory::RestartRequired: NCCL before 2.26.2): the process
  // must exit and be started again; StepBoundary() returns the same.
  Result<ElasticStep> Reform(bool failed, ElasticState* state);

  // True once stintd's generation differs from ours (set by the watcher).
  bool generation_changed() const { return changed_.load(); }

  // Ends a Join(), Reform() or StepBoundary() in progress on another thread
  // where it waits for a group in stintd's rendezvous: that call returns
  // kCancelled promptly. Forming a communicator and a collective in progress
  // are not interrupted (the communicator's timeout bounds them). Stops the
  // watcher.
  // Irreversible: every later Join/Reform fails with kCancelled; destroy the
  // group. The session's own client (heartbeats) is not affected.
  // Thread-safe, idempotent; for interrupting a blocked join (Ctrl-C in Python).
  void Cancel();

  const GroupMembership& membership() const { return membership_; }
  int rank() const { return membership_.rank; }
  int world_size() const { return membership_.world_size; }
  uint64_t generation() const { return membership_.generation; }
  // REQUIRES: a factory was given and the last Join/StepBoundary/Reform
  // succeeded (after an error there is no communicator).
  Communicator& comm() { return *comm_; }

 private:
  ElasticGroup(CoordinatorClient* client, CommunicatorFactory* factory, ElasticOptions options,
               std::unique_ptr<CoordinatorClient> own_client);
  // Joins until this worker is in a formed generation newer than `known`.
  Result<RendezvousInfo> JoinNext(uint64_t known, int* listen_fd,
                                  std::chrono::steady_clock::time_point deadline);
  Status FormCommunicator(const RendezvousInfo& next, int listen_fd);
  void DropCommunicator();  // aborts and destroys the communicator
  void WatchLoop();

  CoordinatorClient* const client_;
  CommunicatorFactory* const factory_;
  const ElasticOptions options_;
  // The group's own client for the rendezvous joins and the watcher's
  // long-poll, so that Cancel() and the destructor end them without shutting
  // down `client_` (the session's: heartbeats, the generation's KV).
  std::unique_ptr<CoordinatorClient> own_client_;
  GroupMembership membership_;
  std::vector<uint64_t> member_ids_;  // worker ids of the current generation, by rank
  std::unique_ptr<Communicator> comm_;
  std::atomic<uint64_t> generation_{0};  // ours, for the watcher
  std::atomic<bool> changed_{false};
  std::atomic<bool> stop_{false};
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;  // the watcher waits here while changed_ is set
  std::thread watcher_;
};

}  // namespace stint

#endif  // STINT_INCLUDE_STINT_ELASTIC_GROUP_H_
