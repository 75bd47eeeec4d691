// The Gloo backend of Communicator, through LibTorch's c10d
// (ProcessGroupGloo over a TCPStore that rank 0 serves on the port it
// advertised at the rendezvous). CPU tensors; the ranks of one generation
// connect in a full mesh on CommunicatorOptions::local_host.
//
// Failure behaviour: a peer that dies closes its sockets, so a collective in
// flight fails at once with kUnavailable ("connection closed by peer"); a
// peer that hangs makes it fail after CommunicatorOptions::timeout with
// kDeadlineExceeded. Gloo cannot interrupt a collective already running, so
// Abort() fails every later call and the one in flight ends by one of those
// two. Every c10d exception becomes a Status here; nothing throws out.
#ifndef STINT_TORCH_GLOO_COMMUNICATOR_H_
#define STINT_TORCH_GLOO_COMMUNICATOR_H_

#include <memory>

#include "stint/communicator.h"

namespace stint {

class GlooCommunicatorFactory final : public CommunicatorFactory {
 public:
  explicit GlooCommunicatorFactory(CommunicatorOptions options) : options_(std::move(options)) {}
  // Rank 0 serves the store on membership.master_listen_fd (taken over),
  // the others connect to master_host:master_port. `kv` is not needed.
  Result<std::unique_ptr<Communicator>> Form(const GroupMembership& membership,
                                             GroupKv& kv) override;
  const char* Name() const override { return "gloo"; }

 private:
  const CommunicatorOptions options_;
};

}  // namespace stint

#endif  // STINT_TORCH_GLOO_COMMUNICATOR_H_
