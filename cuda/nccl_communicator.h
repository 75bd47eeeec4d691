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
// barrier would wait for ranks that are gone); below NCCL 2.26.2, where the
// abort itself may hang, it is not released at all and the factory's
// RestartRequired() says the process must be restarted (nccl_recovery.h).
//
//   stint::NcclCommunicatorOptions options;
//   options.comm.timeout = std::chrono::seconds(30);
//   stint::NcclCommunicatorFactory factory(options);
//   auto comm = factory.Form(membership, kv).value();   // kv: the generation's GroupKv
//   STINT_RETURN_IF_ERROR(comm->AllReduce(grads_dev, n, stint::DType::kFloat32,
//   stint::ReduceOp::kSum));
//
//   options.current_stream = stint::CurrentCudaStream;   // LibTorch: order after torch
//
// Without a CUDA device Form() returns kUnavailable ("no CUDA device: ...").
// Built only where NCCL is found (STINT_HAVE_NCCL, cuda/CMakeLists.txt).
// The factory is thread-compatible; its communicators are thread-compatible
// except Abort() (see stint/communicator.h).
#ifndef STINT_CUDA_NCCL_COMMUNICATOR_H_
#define STINT_CUDA_NCCL_COMMUNICATOR_H_

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "nccl_recovery.h"
#include "stint/communicator.h"
#include "stint/status.h"

struct CUstream_st;  // what cudaStream_t points to; keeps CUDA headers out of this one

namespace stint {

struct NcclCommunicatorOptions {
  // timeout: the deadline of Form() and Shrink() (unique-id exchange and
  // NCCL init together) and of each collective (all its staged chunks
  // together). local_host is not used: NCCL picks its own interface
  // (NCCL_SOCKET_IFNAME).
  // Default: CommunicatorOptions defaults (60 s)
  CommunicatorOptions comm;
  // The CUDA stream (a cudaStream_t) every collective is enqueued on;
  // borrowed: it must outlive every communicator formed with it. nullptr:
  // each communicator creates its own non-blocking stream and destroys it
  // with itself. Default: nullptr
  CUstream_st* stream = nullptr;
  // The caller's current stream on `device` (a cudaStream_t as void*) at
  // the time of each call: every collective waits on the device (an event,
  // no host sync) for the work already enqueued there before it reads its
  // data. For LibTorch pass stint::CurrentCudaStream (runtime/torch/
  // torch_device.h), so a collective never reads a tensor before the
  // kernel that writes it. Unset: the legacy default stream (nullptr),
  // LibTorch's current stream unless the program changed it. An error it
  // returns fails (and aborts) the call. Default: unset
  std::function<Result<void*>(int device)> current_stream;
  // The CUDA device ordinal the communicator binds to. -1: the calling
  // thread's current device at Form(). Default: -1
  int device = -1;
};

// The stream rule. A collective is enqueued on the communicator's stream
// (options.stream, or its own) after that stream waited for the caller's
// current stream (options.current_stream); it returns once its kernels
// (and staging copies) completed on the device, so the result is visible
// to any later work on any stream. Where the two streams are the same
// stream no event is needed and none is used.

// Forms NCCL communicators. The data of a collective is device memory of
// the communicator's device or managed memory (used in place), or host
// memory, pageable or pinned (copied through bounded staging buffers in
// chunks, nccl_staging.h): the step-boundary agreement and the state sync
// of ElasticGroup pass small host buffers. Device memory of another
// device is kInvalidArgument. A collective returns once its kernels have
// completed on the device, so `data` holds the result on return.
//
// Any failed call (an argument refused, a deadline, an NCCL or CUDA error)
// aborts the communicator: every later call returns kAborted naming the
// first error, as stint/communicator.h requires.
//
// Recovery ladder (nccl_recovery.h), chosen from ncclGetVersion() at run
// time: Shrink() where the library can (>= 2.27.3, not 2.28.3-2.28.8),
// else kUnimplemented and the caller aborts and re-inits with Form();
// below 2.26.2 nothing is aborted and RestartRequired() tells the caller
// to restart the process instead.
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
  // kAborted. kUnimplemented, `old` untouched, when the loaded library's
  // ladder has no shrink (PlanNcclRecovery: older than 2.27.3, or 2.28.3 to
  // 2.28.8; the caller then aborts `old` and calls Form()); kInvalidArgument when `old`
  // is not an NCCL communicator or the ranks do not add up;
  // kFailedPrecondition when this rank is among the excluded; kAborted when
  // `old` is already aborted. Closes next.master_listen_fd on success only
  // (on failure the caller's Form() owns it).
  Result<std::unique_ptr<Communicator>> Shrink(Communicator& old, const GroupMembership& next,
                                               const std::vector<int>& excluded_ranks) override;

  const char* Name() const override { return "nccl"; }

  // True once a communicator of this factory was left unreleased: below
  // NCCL 2.26.2 (NcclRecoveryPlan::reinit false) ncclCommAbort may hang
  // when peers are gone, so Abort(), a failed call and the destructor never
  // call it; the handle, its NCCL threads, stream and buffers stay until
  // the process exits. Recovering then needs a process restart.
  bool RestartRequired() const override;

 private:
  const NcclCommunicatorOptions options_;
  // Shared with every communicator this factory formed.
  const std::shared_ptr<std::atomic<bool>> unreleased_;
};

// The recovery ladder of the NCCL library loaded in this process
// (ncclGetVersion), the one Shrink() follows; kUnavailable naming the error
// when the library does not answer.
Result<NcclRecoveryPlan> LoadedNcclRecoveryPlan();

// The GroupKv key Form() exchanges the ncclUniqueId under.
inline constexpr char kNcclIdKey[] = "nccl-id";

}  // namespace stint

#endif  // STINT_CUDA_NCCL_COMMUNICATOR_H_
