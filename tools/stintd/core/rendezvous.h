// Rendezvous: how the workers of a job's running segment agree on a
// generation of their elastic group, with ranks 0..world_size-1.
//
// Rounds (torchelastic's dynamic rendezvous, driven by stintd's clock):
//   * A round is open (kJoining) until it closes: at once when as many
//     workers joined as the segment has GPUs (max), or last_call after it
//     first reached the job's min_gpus (min). Below min it stays open; every
//     waiter's own timeout bounds how long it waits.
//   * Closing assigns ranks: workers of the previous generation first, in
//     their old rank order (so rank 0 is a survivor holding the state, and a
//     group that only lost ranks can be shrunk in place), then new workers
//     in join order.
//   * A formed generation ends, and the next round opens with generation+1,
//     when a worker that is not a member joins (the group grows) or a member
//     re-joins saying it saw this generation fail (a collective error), or a
//     member leaves: it is released, its segment ended, or its lease
//     expired. Members of the old generation learn it from the generation
//     number and re-join at their next step boundary.
//   * A worker joining a formed group that is already at max waits as a
//     standby until a member leaves.
//   * Fencing (RendezvousKeeps): once a worker of a segment took part in
//     the rendezvous, only the group's workers of that segment may commit:
//     the members of the formed generation, or, while a round is open, the
//     members of the previous generation that were not removed since it
//     opened. Anyone else (a standby, a newcomer waiting in an open round, a
//     worker removed for lease expiry or for leaving, one left out of a
//     generation that formed without it) has a stale token until it is a
//     member of a newer formed generation.
// Pure (no I/O; time passed in), like transitions.h.
#ifndef STINT_TOOLS_STINTD_CORE_RENDEZVOUS_H_
#define STINT_TOOLS_STINTD_CORE_RENDEZVOUS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "stintd/core/model.h"
#include "stintd/core/policy.h"
#include "stintd/core/transitions.h"

namespace stint::stintd {

// What one worker sees of its job's rendezvous.
struct RendezvousView {
  int64_t job_id = 0;
  uint64_t generation = 0;
  RendezvousPhase phase = RendezvousPhase::kJoining;
  bool member = false;   // this worker is in the round or the group
  bool standby = false;  // the formed group is full; wait for a member to leave
  int rank = -1;         // formed and member
  int world_size = 0;    // formed: the group's size; joining: workers joined so far
  int min_workers = 0;
  int max_workers = 0;
  std::string master_endpoint;  // formed: rank 0's endpoint
  std::vector<RendezvousMember> members;
  std::vector<int64_t> previous;  // the previous generation's worker ids, by rank
  TimeMs last_call_ms = 0;
  TimeMs formed_ms = 0;
  // True when this worker's join has its answer: it is a member of a formed
  // generation newer than the one it knew.
  bool ready(uint64_t known_generation) const {
    return phase == RendezvousPhase::kFormed && member && generation > known_generation;
  }
};

// `endpoint`: host:port, 1..256 characters. `known_generation`: the
// generation the worker was last a member of (0: none), so a member whose
// collective failed in generation G re-joins with G and opens the next
// round. kAborted when the worker is fenced (its segment ended or it was
// released); kNotFound for an unknown worker.
Result<RendezvousView> JoinRendezvous(ClusterState& s, int64_t worker_id,
                                      const std::string& endpoint, uint64_t known_generation,
                                      TimeMs now, const PolicyConfig& config, Changes* changes);

// The worker's view; kNotFound for an unknown worker.
Result<RendezvousView> ViewRendezvous(const ClusterState& s, int64_t worker_id);

// Removes members whose worker is released, fenced or silent for longer than
// the lease TTL (opening the next round when a formed generation loses
// one), marks such workers of the previous generation as dropped while a
// round is open, and closes open rounds whose last call has passed. The
// tick calls it, so a lease expiry fences a token within one tick.
void AdvanceRendezvous(ClusterState& s, TimeMs now, const PolicyConfig& config, Changes* changes);

// Whether the job's rendezvous lets worker `w` commit (the fencing rule in
// this file's comment). True when no worker of w's segment has taken part
// in the rendezvous (the job does not use it, or not in this segment).
// When false and `why` is not null, *why says why, for the worker's error.
bool RendezvousKeeps(const ClusterState& s, const Worker& w, std::string* why);

// The earliest last-call time of an open round (kNever when none): when
// AdvanceRendezvous next has something to close.
TimeMs NextRendezvousDeadline(const ClusterState& s);

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_CORE_RENDEZVOUS_H_
