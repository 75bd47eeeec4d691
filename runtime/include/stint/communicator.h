// Communicator: the collectives an elastic data-parallel group needs, over
// one generation of its membership.
//
// Two backends: Gloo through LibTorch c10d (CPU memory; runtime/torch/
// gloo_communicator.h) and NCCL (CUDA memory; cuda/nccl_communicator.h).
// A communicator is formed for exactly one rendezvous generation and never
// re-used after a membership change: the ElasticGroup aborts it and forms a
// new one.
//
// Every call has a deadline (CommunicatorOptions::timeout). A peer that dies
// mid-collective makes the call fail with kUnavailable (connection lost) or
// kDeadlineExceeded (nothing heard before the timeout); it never blocks
// longer than the timeout. After a failed call or Abort() the communicator
// is unusable: every later call returns kAborted.
//
// Thread-compatible, except Abort(), which any thread may call at any time.
#ifndef STINT_INCLUDE_STINT_COMMUNICATOR_H_
#define STINT_INCLUDE_STINT_COMMUNICATOR_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stint/state.h"
#include "stint/status.h"

namespace stint {

enum class ReduceOp : uint8_t { kSum, kMax, kMin };
const char* ReduceOpName(ReduceOp op);  // "sum", "max", "min"

// Who this process is in one generation of a group, and where its peers
// meet: rank 0's store (c10d TCPStore for Gloo) listens at master_host:port.
struct GroupMembership {
  uint64_t generation = 0;  // > 0 for a formed group
  int rank = -1;
  int world_size = 0;
  std::string master_host;
  int master_port = 0;
  // The fd of a listening socket bound to master_port when this process is
  // rank 0 (its store takes it over, so no other process can take the port
  // between the rendezvous and the store's start); -1 otherwise.
  // CommunicatorFactory::Form owns it: it closes it, or hands it to the
  // communicator, even when it fails.
  int master_listen_fd = -1;
};

struct CommunicatorOptions {
  // Deadline of forming the group and of each collective.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // Address this process's transport binds to and advertises to peers.
  std::string local_host = "127.0.0.1";
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual const char* backend() const = 0;  // "gloo", "nccl"
  virtual const GroupMembership& membership() const = 0;
  int rank() const { return membership().rank; }
  int world_size() const { return membership().world_size; }
  uint64_t generation() const { return membership().generation; }

  // In place over `count` elements of `dtype` at `data`, identical on every
  // rank. kInvalidArgument for a dtype or op the backend does not reduce.
  virtual Status AllReduce(void* data, size_t count, DType dtype, ReduceOp op) = 0;
  // `bytes` at `data` from `root` to every rank.
  virtual Status Broadcast(void* data, size_t bytes, int root) = 0;
  virtual Status Barrier() = 0;

  // Fails the collective in flight (where the backend can interrupt it) and
  // every later one with kAborted. Idempotent, callable from any thread.
  virtual void Abort() = 0;
  virtual bool aborted() const = 0;
};

// A key-value space shared by the members of one generation (at stintd:
// the job's KV; keys are scoped to the generation by the caller). The NCCL
// factory exchanges its ncclUniqueId through it.
class GroupKv {
 public:
  virtual ~GroupKv() = default;
  virtual Status Put(const std::string& key, const std::string& value) = 0;
  // The value once some member has put it; kDeadlineExceeded naming the key
  // after `timeout`.
  virtual Result<std::string> Wait(const std::string& key, std::chrono::milliseconds timeout) = 0;
};

// Forms a backend's communicator for one generation. Every member of the
// generation calls Form() with its own membership; it returns once the
// group is connected, or fails by the options' timeout.
class CommunicatorFactory {
 public:
  virtual ~CommunicatorFactory() = default;
  virtual Result<std::unique_ptr<Communicator>> Form(const GroupMembership& membership,
                                                     GroupKv& kv) = 0;
  // The next generation when only ranks left: `old` minus `excluded_ranks`
  // (ranks of `old`), survivors keeping their relative order (the
  // rendezvous assigns ranks that way). A backend that cannot shrink (or
  // not at this library version) returns kUnimplemented; the caller then
  // aborts `old` and calls Form().
  virtual Result<std::unique_ptr<Communicator>> Shrink(Communicator& old,
                                                       const GroupMembership& next,
                                                       const std::vector<int>& excluded_ranks) {
    return Status(Code::kUnimplemented, std::string(Name()) + " cannot shrink a communicator");
  }
  virtual const char* Name() const = 0;  // "gloo", "nccl"
  // True once releasing one of this factory's communicators in-process was
  // unsafe, so it was left unreleased (NCCL before 2.26.2, whose
  // ncclCommAbort may hang when peers are gone): forming another generation
  // in this process is not attempted; the process must be restarted (it
  // rejoins the job as a fresh worker). ElasticGroup returns
  // kFailedPrecondition saying so.
  virtual bool RestartRequired() const { return false; }
};

}  // namespace stint

#endif  // STINT_INCLUDE_STINT_COMMUNICATOR_H_
