// NCCL backend of Communicator (stint/communicator.h): collectives over CUDA
// device memory for one generation of an elastic group.
//
// Every NCCL communicator is non-blocking (ncclConfig_t::blocking = 0) and
// this backend drives each call to completion itself, polling
// ncclCommGetAsyncError (and a CUDA event for a collective's kernels)
// against CommunicatorOptions::timeout. So a dead or hung peer costs at most
// the timeout (kDeadlineExceeded), an error NCCL reports costs nothing more
// (kUnavailable), and Abort() from any thread makes a collective in flight
// return kAborted within a poll interval. A communicator that failed is
// released with ncclCommAbort, never ncclCommDestroy (whose intra-node
// barrier would wait for ranks that are gone).
//
//   stint::NcclCommunicatorOptions options;
//   options.comm.timeout = std::chrono::seconds(30);
//   stint::NcclCommunicatorFactory factory(options);
//   auto comm = factory.Form(membership, kv).value();   // kv: the generation's GroupKv
//   STINT_RETURN_IF_ERROR(comm->AllReduce(grads_dev, n, stint::DType::kFloat32,
//   stint::ReduceOp::kSum));
//
// Without a CUDA device Form() returns kUnavailable ("no CUDA device: ...").
// The factory is thread-compatible; its communicators are thread-compatible
// except Abort() (see stint/communicator.h).
#ifndef STINT_CUDA_NCCL_COMMUNICATOR_H_
#define STINT_CUDA_NCCL_COMMUNICATOR_H_

#include <memory>
#include <vector>

#include "stint/communicator.h"
#include "stint/status.h"

struct CUstream_st;  // what cudaStream_t points to; keeps CUDA headers out of this one

namespace stint {

struct NcclCommunicatorOptions {
  // timeout: the deadline of Form() and Shrink() (unique-id exchange and
  // NCCL init together) and of each collective. local_host is not used:
  // NCCL picks its own interface (NCCL_SOCKET_IFNAME).
  // Default: CommunicatorOptions defaults (60 s)
  CommunicatorOptions comm;
  // The CUDA stream (a cudaStream_t) every collective is enqueued on,
  // ordered after the work already on it; borrowed: it must outlive every
  // communicator formed with it. nullptr: each communicator creates its own
  // non-blocking stream and destroys it with itself. Default: nullptr
  CUstream_st* stream = nullptr;
  // The CUDA device ordinal the communicator binds to. -1: the calling
  // thread's current device at Form(). Default: -1
  int device = -1;
};

// Forms NCCL communicators. The data of every collective must be device
// memory on the communicator's device (managed memory is accepted);
// anything else is kInvalidArgument. A collective returns once its kernels
// have completed on the device, so `data` holds the result on return.
//
// Any failed call (an argument refused, a deadline, an NCCL or CUDA error)
// aborts the communicator: every later call returns kAborted naming the
// first error, as stint/communicator.h requires.
class NcclCommunicatorFactory final : public CommunicatorFactory {
 public:
  explicit NcclCommunicatorFactory(NcclCommunicatorOptions options = {});

  // Every member of the generation calls it. Rank 0 creates the
  // ncclUniqueId and puts its hex under kv key "nccl-id"; the others wait
  // for that key (within the timeout; kDataLoss naming the key when the
  // value is not an id). Closes membership.master_listen_fd (NCCL does not
  // use it), even on failure. kUnavailable without a CUDA device;
  // kInvalidArgument for a bad rank/world size or device;
  // kDeadlineExceeded when the group is not connected within the timeout.
  Result<std::unique_ptr<Communicator>> Form(const GroupMembership& membership,
                                             GroupKv& kv) override;

  // Only survivors call it, each with its `next` membership (rank =
  // old rank minus the excluded ranks below it). Uses
  // ncclCommShrink(NCCL_SHRINK_ABORT): in-flight work on `old` is
  // terminated and the child shares no resources with it, so a dead
  // excluded rank cannot hold it up. `old` is then aborted (never
  // destroyed), whether the shrink worked or not: its later calls return
  // kAborted. kUnimplemented when the NCCL library is older than 2.27 (the
  // caller then aborts `old` and calls Form()); kInvalidArgument when `old`
  // is not an NCCL communicator or the ranks do not add up;
  // kFailedPrecondition when this rank is among the excluded; kAborted when
  // `old` is already aborted. Closes next.master_listen_fd on success only
  // (on failure the caller's Form() owns it).
  Result<std::unique_ptr<Communicator>> Shrink(Communicator& old, const GroupMembership& next,
                                               const std::vector<int>& excluded_ranks) override;

  const char* Name() const override { return "nccl"; }

 private:
  const NcclCommunicatorOptions options_;
};

// The GroupKv key Form() exchanges the ncclUniqueId under.
inline constexpr char kNcclIdKey[] = "nccl-id";

}  // namespace stint

#endif  // STINT_CUDA_NCCL_COMMUNICATOR_H_
