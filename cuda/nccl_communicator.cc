#include "nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "cuda_handles.h"
#include "cuda_status.h"
#include "device_probe.h"
#include "nccl_status.h"
#include "nccl_types.h"
#include "nccl_unique_id.h"

namespace stint {
namespace {

using Clock = std::chrono::steady_clock;

std::string Millis(std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

std::chrono::milliseconds Remaining(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

std::string VersionText(int code) {
  // NCCL_VERSION(): X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code / 100 % 100 : code / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

void CloseFd(int fd) {
  if (fd >= 0) ::close(fd);
}

// --- RAII for the NCCL handle (the CUDA ones: cuda_handles.h). ---

// Owns an ncclComm_t and releases it with ncclCommAbort only: a
// communicator lives for one generation and may be released after a peer
// died, where ncclCommDestroy's intra-node barrier could hang (and after an
// aborting shrink NCCL requires the parent to be aborted). Abort never
// waits for peers.
class NcclComm {
 public:
  NcclComm() = default;
  explicit NcclComm(ncclComm_t comm) : comm_(comm) {}
  ~NcclComm() { Abort(); }
  NcclComm(NcclComm&& other) noexcept : comm_(std::exchange(other.comm_, nullptr)) {}
  NcclComm& operator=(NcclComm&& other) noexcept {
    if (this != &other) {
      Abort();
      comm_ = std::exchange(other.comm_, nullptr);
    }
    return *this;
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  explicit operator bool() const { return comm_ != nullptr; }
  // At most once per handle: the handle is gone afterwards. ncclCommAbort
  // always reports success (it ignores the errors of the teardown).
  void Abort() {
    if (comm_ == nullptr) return;
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  ncclComm_t comm_ = nullptr;
};

// What one communicator owns besides its ncclComm_t.
struct StreamResources {
  CudaStream owned_stream;  // empty when the stream is the caller's
  cudaStream_t stream = nullptr;
  CudaEvent done;            // recorded after each collective; its completion is polled
  CudaDeviceBuffer scratch;  // Barrier()'s one float
};

// REQUIRES: the communicator's device is current.
Result<StreamResources> MakeStreamResources(cudaStream_t external) {
  StreamResources r;
  if (external != nullptr) {
    r.stream = external;
  } else {
    // Non-blocking: no implicit ordering with the legacy default stream.
    STINT_ASSIGN_OR_RETURN(r.owned_stream, CudaStream::Create());
    r.stream = r.owned_stream.get();
  }
  STINT_ASSIGN_OR_RETURN(r.done, CudaEvent::Create());
  Result<CudaDeviceBuffer> scratch = CudaDeviceBuffer::Allocate(sizeof(float));
  if (!scratch.ok()) return scratch.status().WithContext("barrier scratch");
  r.scratch = std::move(*scratch);
  STINT_RETURN_IF_ERROR(
      StatusFromCuda(cudaMemset(r.scratch.get(), 0, sizeof(float)), "cudaMemset(barrier scratch)"));
  return Result<StreamResources>(std::move(r));
}

// --- Polling. ---

// Yields for the first polls (a small collective completes in
// microseconds), then sleeps a little longer each time, up to 1 ms: the
// poll loop must stay cheap when a peer is slow, and notice Abort() fast.
class Backoff {
 public:
  void Wait() {
    if (polls_++ < 256) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, std::chrono::microseconds(1000));
  }

 private:
  int polls_ = 0;
  std::chrono::microseconds sleep_{20};
};

struct PollTarget {
  ncclComm_t comm = nullptr;
  cudaEvent_t event = nullptr;               // also wait for it; null: the comm's state only
  const std::atomic<bool>* abort = nullptr;  // kAborted once set; null: never
};

// Polls until `t.comm` has left ncclInProgress (and `t.event` completed).
// kAborted once *t.abort is set, StatusFromNccl's code for an asynchronous
// NCCL error (kUnavailable unless it is an invalid argument or usage),
// kDeadlineExceeded at `deadline`. The caller aborts the comm on any error.
Status PollUntilDone(const PollTarget& t, Clock::time_point deadline,
                     std::chrono::milliseconds timeout, const std::string& what) {
  Backoff backoff;
  for (;;) {
    if (t.abort != nullptr && t.abort->load(std::memory_order_acquire)) {
      return Status::Aborted(what + ": aborted while in flight (Abort() was called)");
    }
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(t.comm, &state);
    if (r != ncclSuccess) return StatusFromNccl(r, t.comm, what + ": ncclCommGetAsyncError");
    if (state != ncclSuccess && state != ncclInProgress) {
      // Whatever NCCL reports asynchronously, nothing can be assumed about
      // the operations on this comm any more.
      return StatusFromNccl(state, t.comm, what);
    }
    if (state == ncclSuccess) {
      if (t.event == nullptr) return Status::OK();
      const cudaError_t e = cudaEventQuery(t.event);
      if (e == cudaSuccess) return Status::OK();
      if (e != cudaErrorNotReady) return StatusFromCuda(e, what + ": cudaEventQuery");
    }
    if (Clock::now() >= deadline) {
      return Status::DeadlineExceeded(what + ": not complete after " + Millis(timeout));
    }
    backoff.Wait();
  }
}

// --- The communicator. ---

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const GroupMembership& membership, int device, std::chrono::milliseconds timeout,
                   StreamResources resources, NcclComm comm)
      : membership_(membership),
        device_(device),
        timeout_(timeout),
        res_(std::move(resources)),
        comm_(std::move(comm)) {
    membership_.master_listen_fd = -1;
  }

  // Releases the comm (ncclCommAbort) before the stream, event and buffer
  // its kernels may still use, with the communicator's device current.
  // REQUIRES: no call in flight on another thread.
  ~NcclCommunicator() override {
    ScopedCudaDevice device;
    device.Enter(device_).IgnoreError();  // teardown goes on regardless
    comm_.Abort();
    res_.scratch.Reset();
    res_.done.Reset();
    res_.owned_stream.Reset();
  }

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  const char* backend() const override { return "nccl"; }
  const GroupMembership& membership() const override { return membership_; }
  int device() const { return device_; }

  Status AllReduce(void* data, size_t count, DType dtype, ReduceOp op) override {
    const std::string what =
        "nccl allreduce (" + std::to_string(count) + " x " + DTypeName(dtype) + ")";
    Result<ncclDataType_t> type = NcclDataType(dtype);
    Result<ncclRedOp_t> red = NcclRedOp(op);
    Status check = !type.ok()  ? type.status()
                   : !red.ok() ? red.status()
                               : CheckDeviceData(data, count);
    return Run(what, check, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllReduce(data, data, count, *type, *red, comm, stream);
    });
  }

  Status Broadcast(void* data, size_t bytes, int root) override {
    const std::string what = "nccl broadcast (" + std::to_string(bytes) + " bytes from rank " +
                             std::to_string(root) + ")";
    Status check = root < 0 || root >= membership_.world_size
                       ? Status::InvalidArgument("root " + std::to_string(root) +
                                                 " is not a rank of a world of " +
                                                 std::to_string(membership_.world_size))
                       : CheckDeviceData(data, bytes);
    return Run(what, check, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclBroadcast(data, data, bytes, ncclUint8, root, comm, stream);
    });
  }

  Status Barrier() override {
    void* scratch = res_.scratch.get();
    return Run("nccl barrier", Status::OK(), [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllReduce(scratch, scratch, 1, ncclFloat32, ncclSum, comm, stream);
    });
  }

  // Sets the flag the poll loop checks, then takes mu_: a collective in
  // flight sees the flag within one poll, aborts the comm itself and
  // returns kAborted, so by the time mu_ is ours the comm is gone;
  // otherwise it is aborted here. Either way ncclCommAbort runs once and
  // never alongside another NCCL call on this comm.
  void Abort() override {
    abort_requested_.store(true, std::memory_order_release);
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_.load(std::memory_order_relaxed)) {
      FailLocked(Status::Aborted("Abort() was called")).IgnoreError();
    }
  }

  bool aborted() const override {
    return abort_requested_.load(std::memory_order_acquire) ||
           aborted_.load(std::memory_order_acquire);
  }

  // Shrinks this communicator's comm to the survivors (ncclCommShrink with
  // NCCL_SHRINK_ABORT) and then aborts this one, whatever the outcome.
  // `excluded` sorted. Returns the child comm.
  Result<NcclComm> ShrinkComm(std::vector<int> excluded, uint64_t next_generation,
                              Clock::time_point deadline, const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.load(std::memory_order_relaxed)) return AbortedLocked(what);
    if (abort_requested_.load(std::memory_order_acquire)) {
      FailLocked(Status::Aborted("Abort() was called")).IgnoreError();
      return AbortedLocked(what);
    }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
    ScopedCudaDevice device;
    Status s = device.Enter(device_);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    // Written by NCCL's init thread once the shrink has completed; it must
    // stay valid until the parent is no longer in progress or is aborted
    // (ncclCommAbort joins that thread), which both happen in this scope.
    ncclComm_t child = nullptr;
    if (s.ok()) {
      const ncclResult_t r =
          ncclCommShrink(comm_.get(), excluded.data(), static_cast<int>(excluded.size()), &child,
                         &config, NCCL_SHRINK_ABORT);
      if (r != ncclSuccess && r != ncclInProgress)
        s = StatusFromNccl(r, comm_.get(), what + ": ncclCommShrink");
    }
    // Non-blocking shrink: the parent is in progress until the child's
    // init job ran; only then is `child` set, and it is then polled itself.
    if (s.ok())
      s = PollUntilDone({comm_.get(), nullptr, &abort_requested_}, deadline, timeout_,
                        what + " (parent)");
    if (s.ok() && child == nullptr)
      s = Status::Internal(what + ": ncclCommShrink completed without a communicator");
    if (s.ok()) s = PollUntilDone({child, nullptr, &abort_requested_}, deadline, timeout_, what);
    // The parent is done for either way. After NCCL_SHRINK_ABORT it may
    // only be aborted; aborting it first on failure also stops (and joins)
    // a child init still running, so `child` is final afterwards.
    FailLocked(s.ok() ? Status::Aborted("shrunk into generation " + std::to_string(next_generation))
                      : s)
        .IgnoreError();
    NcclComm owned(child);  // aborted on return when the shrink failed
    if (!s.ok()) return s;
    return Result<NcclComm>(std::move(owned));
#else
    return Status::Unimplemented(what +
                                 ": built against NCCL headers without ncclCommShrink (< 2.27)");
#endif
  }

 private:
  // Rejects data that is not device memory of this communicator's device:
  // NCCL would not check it (NCCL_CHECK_POINTERS is off by default) and a
  // host pointer would fault the kernel and poison the CUDA context.
  Status CheckDeviceData(const void* data, size_t count) const {
    if (count == 0) return Status::OK();
    if (data == nullptr) return Status::InvalidArgument("data is null");
    cudaPointerAttributes attr;
    const cudaError_t err = cudaPointerGetAttributes(&attr, data);
    if (err == cudaErrorInvalidValue) {
      cudaGetLastError();
      return Status::InvalidArgument("data is not a pointer CUDA knows");
    }
    if (err != cudaSuccess) return StatusFromCuda(err, "cudaPointerGetAttributes");
    if (attr.type == cudaMemoryTypeManaged) return Status::OK();
    if (attr.type != cudaMemoryTypeDevice || attr.device != device_) {
      return Status::InvalidArgument("data is not device memory of CUDA device " +
                                     std::to_string(device_));
    }
    return Status::OK();
  }

  // Enqueues with `enqueue(comm, stream)` and polls to completion, all under
  // mu_. `check`: the arguments' verdict, taken before anything is enqueued.
  template <typename Enqueue>
  Status Run(const std::string& what, const Status& check, Enqueue&& enqueue) {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.load(std::memory_order_relaxed)) return AbortedLocked(what);
    if (abort_requested_.load(std::memory_order_acquire)) {
      FailLocked(Status::Aborted("Abort() was called")).IgnoreError();
      return AbortedLocked(what);
    }
    if (!check.ok()) return FailLocked(check.WithContext(what));
    ScopedCudaDevice device;
    Status s = device.Enter(device_);
    if (!s.ok()) return FailLocked(s.WithContext(what));
    const Clock::time_point deadline = Clock::now() + timeout_;
    const ncclResult_t r = enqueue(comm_.get(), res_.stream);
    if (r != ncclSuccess && r != ncclInProgress)
      return FailLocked(StatusFromNccl(r, comm_.get(), what));
    // Nothing else may go on the stream while the comm is still enqueueing
    // (ncclInProgress); the event goes after the collective's kernels once
    // it is done.
    s = PollUntilDone({comm_.get(), nullptr, &abort_requested_}, deadline, timeout_, what);
    if (!s.ok()) return FailLocked(s);
    const cudaError_t err = cudaEventRecord(res_.done.get(), res_.stream);
    if (err != cudaSuccess) return FailLocked(StatusFromCuda(err, what + ": cudaEventRecord"));
    s = PollUntilDone({comm_.get(), res_.done.get(), &abort_requested_}, deadline, timeout_, what);
    if (!s.ok()) return FailLocked(s);
    return Status::OK();
  }

  // REQUIRES: mu_ held. Records the first error, aborts the comm (once).
  Status FailLocked(Status s) {
    if (first_error_.ok()) first_error_ = s;
    comm_.Abort();
    aborted_.store(true, std::memory_order_release);
    return s;
  }

  // REQUIRES: mu_ held, aborted_.
  Status AbortedLocked(const std::string& what) const {
    return Status::Aborted(
        what + ": nccl communicator of generation " + std::to_string(membership_.generation) +
        " (rank " + std::to_string(membership_.rank) + " of " +
        std::to_string(membership_.world_size) + ") is aborted: " + first_error_.ToString());
  }

  // Immutable after construction.
  GroupMembership membership_;
  const int device_;
  const std::chrono::milliseconds timeout_;
  StreamResources res_;

  std::atomic<bool> abort_requested_{false};  // set by Abort(), from any thread
  std::atomic<bool> aborted_{false};          // written under mu_, read anywhere
  // Held across every NCCL call on comm_ (a collective's whole poll loop
  // included), so ncclCommAbort never runs alongside one.
  std::mutex mu_;
  Status first_error_;  // guarded by mu_
  NcclComm comm_;       // guarded by mu_
};

}  // namespace

NcclCommunicatorFactory::NcclCommunicatorFactory(NcclCommunicatorOptions options)
    : options_(std::move(options)) {}

Result<std::unique_ptr<Communicator>> NcclCommunicatorFactory::Form(
    const GroupMembership& membership, GroupKv& kv) {
  CloseFd(membership.master_listen_fd);  // NCCL bootstraps through its own sockets
  const std::string what = "nccl form of generation " + std::to_string(membership.generation) +
                           " (rank " + std::to_string(membership.rank) + " of " +
                           std::to_string(membership.world_size) + ")";
  STINT_ASSIGN_OR_RETURN(const int device_count, CudaDeviceCount());
  if (membership.world_size < 1 || membership.rank < 0 ||
      membership.rank >= membership.world_size) {
    return Status::InvalidArgument(what + ": not a rank of the world");
  }
  const Clock::time_point deadline = Clock::now() + options_.comm.timeout;

  int device = options_.device;
  if (device < 0) {
    const cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return StatusFromCuda(err, what + ": cudaGetDevice");
  }
  if (device >= device_count) {
    return Status::InvalidArgument(what + ": CUDA device " + std::to_string(device) +
                                   " does not exist (" + std::to_string(device_count) +
                                   " devices)");
  }
  ScopedCudaDevice current;
  STINT_RETURN_IF_ERROR(current.Enter(device).WithContext(what));
  Result<StreamResources> resources = MakeStreamResources(options_.stream);
  if (!resources.ok()) return resources.status().WithContext(what);

  ncclUniqueId id;
  if (membership.rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return StatusFromNccl(r, nullptr, what + ": ncclGetUniqueId");
    STINT_RETURN_IF_ERROR(kv.Put(kNcclIdKey, EncodeNcclUniqueId(id)).WithContext(what));
  } else {
    Result<std::string> hex = kv.Wait(kNcclIdKey, Remaining(deadline));
    if (!hex.ok()) return hex.status().WithContext(what);
    Result<ncclUniqueId> decoded = DecodeNcclUniqueId(*hex, kNcclIdKey);
    if (!decoded.ok()) return decoded.status().WithContext(what);
    id = *decoded;
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking =
      0;  // every call returns at once; this thread owns the progress loop and the deadline
  ncclComm_t raw = nullptr;
  const ncclResult_t r =
      ncclCommInitRankConfig(&raw, membership.world_size, id, membership.rank, &config);
  NcclComm comm(raw);  // aborted on every failure below
  if (r != ncclSuccess && r != ncclInProgress)
    return StatusFromNccl(r, raw, what + ": ncclCommInitRankConfig");
  if (!comm) return Status::Internal(what + ": ncclCommInitRankConfig returned no communicator");
  // An error init reports comes with StatusFromNccl's code (an invalid
  // usage such as two ranks on one GPU is not a transient failure).
  STINT_RETURN_IF_ERROR(
      PollUntilDone({comm.get(), nullptr, nullptr}, deadline, options_.comm.timeout, what));
  return std::unique_ptr<Communicator>(new NcclCommunicator(
      membership, device, options_.comm.timeout, std::move(*resources), std::move(comm)));
}

Result<std::unique_ptr<Communicator>> NcclCommunicatorFactory::Shrink(
    Communicator& old, const GroupMembership& next, const std::vector<int>& excluded_ranks) {
  const std::string what = "nccl shrink of generation " + std::to_string(old.generation()) +
                           " into " + std::to_string(next.generation) + " (rank " +
                           std::to_string(old.rank()) + " of " + std::to_string(old.world_size()) +
                           " -> " + std::to_string(next.rank) + " of " +
                           std::to_string(next.world_size) + ")";
  int version = 0;
  const ncclResult_t vr = ncclGetVersion(&version);
  if (vr != ncclSuccess) return StatusFromNccl(vr, nullptr, what + ": ncclGetVersion");
  if (version < NCCL_VERSION(2, 27, 0)) {
    return Status::Unimplemented(what + ": ncclCommShrink needs NCCL >= 2.27, the library is " +
                                 VersionText(version));
  }
  auto* parent = dynamic_cast<NcclCommunicator*>(&old);
  if (parent == nullptr) {
    return Status::InvalidArgument(what + ": the old communicator is " + old.backend() +
                                   ", not nccl");
  }

  std::vector<int> excluded = excluded_ranks;
  std::sort(excluded.begin(), excluded.end());
  excluded.erase(std::unique(excluded.begin(), excluded.end()), excluded.end());
  if (excluded.empty()) return Status::InvalidArgument(what + ": no rank is excluded");
  if (excluded.front() < 0 || excluded.back() >= old.world_size()) {
    return Status::InvalidArgument(
        what + ": excluded rank " +
        std::to_string(excluded.front() < 0 ? excluded.front() : excluded.back()) +
        " is not a rank of the old world");
  }
  if (std::binary_search(excluded.begin(), excluded.end(), old.rank())) {
    return Status::FailedPrecondition(what + ": this rank is excluded; only survivors shrink");
  }
  const int below = static_cast<int>(
      std::lower_bound(excluded.begin(), excluded.end(), old.rank()) - excluded.begin());
  if (next.world_size != old.world_size() - static_cast<int>(excluded.size()) ||
      next.rank != old.rank() - below) {
    return Status::InvalidArgument(
        what + ": the next membership is not the old one minus " + std::to_string(excluded.size()) +
        " excluded ranks (expected rank " + std::to_string(old.rank() - below) + " of " +
        std::to_string(old.world_size() - static_cast<int>(excluded.size())) + ")");
  }

  const Clock::time_point deadline = Clock::now() + options_.comm.timeout;
  // The child's resources first: failing here leaves `old` untouched.
  ScopedCudaDevice current;
  STINT_RETURN_IF_ERROR(current.Enter(parent->device()).WithContext(what));
  Result<StreamResources> resources = MakeStreamResources(options_.stream);
  if (!resources.ok()) return resources.status().WithContext(what);

  STINT_ASSIGN_OR_RETURN(NcclComm child,
                         parent->ShrinkComm(std::move(excluded), next.generation, deadline, what));
  CloseFd(next.master_listen_fd);  // Form() will not be called for this generation
  return std::unique_ptr<Communicator>(new NcclCommunicator(
      next, parent->device(), options_.comm.timeout, std::move(*resources), std::move(child)));
}

}  // namespace stint
