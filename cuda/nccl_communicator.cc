#include "nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "cuda_handles.h"
#include "cuda_status.h"
#include "device_probe.h"
#include "nccl_recovery.h"
#include "nccl_staging.h"
#include "nccl_status.h"
#include "nccl_types.h"
#include "nccl_unique_id.h"
#include "pinned_host.h"

namespace stint {
namespace {

using Clock = std::chrono::steady_clock;

std::string Millis(std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

std::chrono::milliseconds Remaining(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

void CloseFd(int fd) {
  if (fd >= 0) ::close(fd);
}

// --- RAII for the NCCL handle (the CUDA ones: cuda_handles.h). ---

// Set once a communicator was left unreleased (the ladder forbids aborting
// it): shared by a factory and every handle it made.
using UnreleasedFlag = std::shared_ptr<std::atomic<bool>>;

// Owns an ncclComm_t and releases it with ncclCommAbort only: a
// communicator lives for one generation and may be released after a peer
// died, where ncclCommDestroy's intra-node barrier could hang (and after an
// aborting shrink NCCL requires the parent to be aborted). Abort never
// waits for peers. Where the ladder says the abort itself may hang (NCCL
// before 2.26.2, `unreleased` set), the handle is not aborted but dropped:
// NCCL's threads, memory and kernels stay until the process exits, and
// `unreleased` says so (the process must be restarted to recover).
class NcclComm {
 public:
  NcclComm() = default;
  NcclComm(ncclComm_t comm, UnreleasedFlag unreleased)
      : comm_(comm), unreleased_(std::move(unreleased)) {}
  ~NcclComm() { Abort(); }
  NcclComm(NcclComm&& other) noexcept
      : comm_(std::exchange(other.comm_, nullptr)), unreleased_(std::move(other.unreleased_)) {}
  NcclComm& operator=(NcclComm&& other) noexcept {
    if (this != &other) {
      Abort();
      comm_ = std::exchange(other.comm_, nullptr);
      unreleased_ = std::move(other.unreleased_);
    }
    return *this;
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  explicit operator bool() const { return comm_ != nullptr; }
  // At most once per handle: the handle is gone afterwards. ncclCommAbort
  // always reports success (it ignores the errors of the teardown).
  // Returns false when the handle was left unreleased instead.
  bool Abort() {
    if (comm_ == nullptr) return true;
    ncclComm_t comm = std::exchange(comm_, nullptr);
    if (unreleased_ != nullptr) {
      unreleased_->store(true, std::memory_order_release);
      return false;
    }
    (void)ncclCommAbort(comm);
    return true;
  }

 private:
  ncclComm_t comm_ = nullptr;
  // Non-null: never abort (the ladder's abort_may_hang); set when dropped.
  UnreleasedFlag unreleased_;
};

// What one communicator owns besides its ncclComm_t.
struct StreamResources {
  CudaStream owned_stream;  // empty when the stream is the caller's
  cudaStream_t stream = nullptr;
  CudaEvent done;            // recorded after each collective; its completion is polled
  CudaEvent ready;           // recorded on the caller's stream; `stream` waits on it
  CudaDeviceBuffer scratch;  // Barrier()'s one float
};

// The staging pair for host data (nccl_staging.h), allocated at the first
// host collective and grown up to kNcclStagingCapacity.
struct Staging {
  CudaDeviceBuffer device;
  std::unique_ptr<PinnedHostBuffer> host;
  size_t size = 0;  // of each
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
  STINT_ASSIGN_OR_RETURN(r.ready, CudaEvent::Create());
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
                   std::function<Result<void*>(int)> current_stream, StreamResources resources,
                   NcclComm comm)
      : membership_(membership),
        device_(device),
        timeout_(timeout),
        current_stream_(std::move(current_stream)),
        res_(std::move(resources)),
        comm_(std::move(comm)) {
    membership_.master_listen_fd = -1;
  }

  // Releases the comm (ncclCommAbort) before the stream, event and buffer
  // its kernels may still use, with the communicator's device current. A
  // comm left unreleased (NcclComm) may still run kernels on them: they are
  // left unreleased too.
  // REQUIRES: no call in flight on another thread.
  ~NcclCommunicator() override {
    ScopedCudaDevice device;
    device.Enter(device_).IgnoreError();  // teardown goes on regardless
    if (!comm_.Abort()) comm_unreleased_ = true;
    if (comm_unreleased_) {
      new Staging(std::move(staging_));            // leaked on purpose
      new StreamResources(std::move(res_));        // leaked on purpose
      return;
    }
    ReleaseStaging();
    res_.scratch.Reset();
    res_.ready.Reset();
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
    Result<NcclRoute> route = RouteOf(data, count);
    Status check = !type.ok()    ? type.status()
                   : !red.ok()   ? red.status()
                   : !route.ok() ? route.status()
                                 : Status::OK();
    if (check.ok() && *route == NcclRoute::kStaged) {
      StagedCopy copy;
      copy.host = static_cast<char*>(data);
      copy.bytes = count * DTypeSize(dtype);
      copy.element_bytes = DTypeSize(dtype);
      return RunStaged(
          what, copy, [&](void* dev, size_t bytes, ncclComm_t comm, cudaStream_t stream) {
            return ncclAllReduce(dev, dev, bytes / copy.element_bytes, *type, *red, comm, stream);
          });
    }
    return Run(what, check, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllReduce(data, data, count, *type, *red, comm, stream);
    });
  }

  Status Broadcast(void* data, size_t bytes, int root) override {
    const std::string what = "nccl broadcast (" + std::to_string(bytes) + " bytes from rank " +
                             std::to_string(root) + ")";
    Result<NcclRoute> route = RouteOf(data, bytes);
    Status check = root < 0 || root >= membership_.world_size
                       ? Status::InvalidArgument("root " + std::to_string(root) +
                                                 " is not a rank of a world of " +
                                                 std::to_string(membership_.world_size))
                       : route.status();
    if (check.ok() && *route == NcclRoute::kStaged) {
      StagedCopy copy;
      copy.host = static_cast<char*>(data);
      copy.bytes = bytes;
      copy.element_bytes = 1;
      // Only the root's data goes in, and the root's own stays as it is.
      copy.copy_in = membership_.rank == root;
      copy.copy_out = membership_.rank != root;
      return RunStaged(what, copy, [&](void* dev, size_t n, ncclComm_t comm, cudaStream_t stream) {
        return ncclBroadcast(dev, dev, n, ncclUint8, root, comm, stream);
      });
    }
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
    // Shrink is on the ladder only where an abort cannot hang.
    NcclComm owned(child, nullptr);  // aborted on return when the shrink failed
    if (!s.ok()) return s;
    return Result<NcclComm>(std::move(owned));
#else
    return Status::Unimplemented(what +
                                 ": built against NCCL headers without ncclCommShrink (< 2.27)");
#endif
  }

 private:
  // A staged call that failed may have left its copies queued behind the
  // collective's kernels; ncclCommAbort (before this) stops those, so the
  // stream drains. Polled within the timeout; buffers a copy may still
  // touch after it are leaked, never freed under the copy.
  void ReleaseStaging() {
    if (staging_in_flight_) {
      const Clock::time_point deadline = Clock::now() + timeout_;
      Backoff backoff;
      for (;;) {
        const cudaError_t err = cudaStreamQuery(res_.stream);
        if (err == cudaSuccess) break;
        if (err != cudaErrorNotReady) cudaGetLastError();  // a broken stream runs nothing more
        if (err != cudaErrorNotReady || Clock::now() >= deadline) {
          new Staging(std::move(staging_));  // leaked on purpose
          break;
        }
        backoff.Wait();
      }
      staging_in_flight_ = false;
    }
    staging_ = Staging();
  }

  // Where `data` may be used from (nccl_staging.h): device memory of this
  // communicator's device and managed memory in place, host memory staged.
  // Anything else is refused before NCCL sees it: NCCL would not check it
  // (NCCL_CHECK_POINTERS is off by default) and a foreign pointer would
  // fault the kernel and poison the CUDA context.
  Result<NcclRoute> RouteOf(const void* data, size_t count) const {
    if (count == 0) return NcclRoute::kDirect;
    if (data == nullptr) return Status::InvalidArgument("data is null");
    cudaPointerAttributes attr;
    const cudaError_t err = cudaPointerGetAttributes(&attr, data);
    NcclMemoryKind kind = NcclMemoryKind::kUnregistered;
    if (err == cudaErrorInvalidValue) {
      cudaGetLastError();  // an old runtime's answer for pageable host memory
    } else if (err != cudaSuccess) {
      return StatusFromCuda(err, "cudaPointerGetAttributes");
    } else if (attr.type == cudaMemoryTypeDevice) {
      kind = NcclMemoryKind::kDevice;
    } else if (attr.type == cudaMemoryTypeManaged) {
      kind = NcclMemoryKind::kManaged;
    } else if (attr.type == cudaMemoryTypeHost) {
      kind = NcclMemoryKind::kHost;
    }
    const NcclRoute route = RouteNcclBuffer(kind, attr.device, device_);
    if (route == NcclRoute::kRefused) {
      return Status::InvalidArgument("data is device memory of CUDA device " +
                                     std::to_string(attr.device) + ", not of the communicator's " +
                                     std::to_string(device_));
    }
    return route;
  }

  // The first steps of every call, under mu_: refuses once aborted, takes
  // the arguments' verdict, makes the device current.
  Status BeginLocked(const std::string& what, const Status& check, ScopedCudaDevice& device) {
    if (aborted_.load(std::memory_order_relaxed)) return AbortedLocked(what);
    if (abort_requested_.load(std::memory_order_acquire)) {
      FailLocked(Status::Aborted("Abort() was called")).IgnoreError();
      return AbortedLocked(what);
    }
    if (!check.ok()) return FailLocked(check.WithContext(what));
    Status s = device.Enter(device_);
    if (!s.ok()) return FailLocked(s.WithContext(what));
    return Status::OK();
  }

  // REQUIRES: mu_ held, the device current. The stream rule
  // (nccl_communicator.h): res_.stream waits for the caller's current
  // stream, unless it is that stream.
  Status OrderAfterCallerLocked(const std::string& what) {
    void* caller = nullptr;  // the legacy default stream
    if (current_stream_) {
      Result<void*> current = current_stream_(device_);
      if (!current.ok()) return current.status().WithContext(what + ": the caller's stream");
      caller = *current;
    }
    cudaStream_t theirs = static_cast<cudaStream_t>(caller);
    if (theirs == res_.stream) return Status::OK();
    cudaError_t err = cudaEventRecord(res_.ready.get(), theirs);
    if (err != cudaSuccess) return StatusFromCuda(err, what + ": cudaEventRecord(caller's stream)");
    err = cudaStreamWaitEvent(res_.stream, res_.ready.get(), 0);
    if (err != cudaSuccess) return StatusFromCuda(err, what + ": cudaStreamWaitEvent");
    return Status::OK();
  }

  // REQUIRES: mu_ held, the device current. Enqueues with `enqueue(comm,
  // stream)`, then `after(stream)` (more work on the stream once NCCL has
  // enqueued; may be null), and polls to completion by `deadline`. The
  // caller fails the communicator on an error.
  template <typename Enqueue>
  Status CollectiveLocked(const std::string& what, Clock::time_point deadline, Enqueue&& enqueue,
                          const std::function<cudaError_t(cudaStream_t)>& after) {
    const ncclResult_t r = enqueue(comm_.get(), res_.stream);
    if (r != ncclSuccess && r != ncclInProgress) return StatusFromNccl(r, comm_.get(), what);
    // Nothing else may go on the stream while the comm is still enqueueing
    // (ncclInProgress); the copies and the event go after the collective's
    // kernels once it is done.
    Status s = PollUntilDone({comm_.get(), nullptr, &abort_requested_}, deadline, timeout_, what);
    if (!s.ok()) return s;
    if (after) {
      const cudaError_t err = after(res_.stream);
      if (err != cudaSuccess) return StatusFromCuda(err, what + ": staging copy out");
    }
    const cudaError_t err = cudaEventRecord(res_.done.get(), res_.stream);
    if (err != cudaSuccess) return StatusFromCuda(err, what + ": cudaEventRecord");
    return PollUntilDone({comm_.get(), res_.done.get(), &abort_requested_}, deadline, timeout_,
                         what);
  }

  // REQUIRES: mu_ held, the device current. Staging buffers of at least
  // NcclStagingAllocation(bytes) each.
  Status EnsureStagingLocked(size_t bytes, const std::string& what) {
    const size_t want = NcclStagingAllocation(bytes, kNcclStagingCapacity);
    if (staging_.size >= want) return Status::OK();
    // The old pair may still be read by nothing: every staged call waited
    // for its copies before returning.
    staging_ = Staging();
    Result<CudaDeviceBuffer> device = CudaDeviceBuffer::Allocate(want);
    if (!device.ok()) return device.status().WithContext(what + ": device staging");
    Result<std::unique_ptr<PinnedHostBuffer>> host = PinnedHostBuffer::Allocate(want);
    if (!host.ok()) return host.status().WithContext(what + ": pinned staging");
    staging_.device = std::move(*device);
    staging_.host = std::move(*host);
    staging_.size = want;
    return Status::OK();
  }

  struct StagedCopy {
    char* host = nullptr;
    size_t bytes = 0;
    size_t element_bytes = 1;  // chunks never split an element
    bool copy_in = true;       // the host data is an input
    bool copy_out = true;      // the result goes back to the host
  };

  // A collective over host memory through the staging pair, chunk by
  // chunk (every rank cuts the same chunks: same sizes on every rank),
  // within one deadline. `enqueue(device_chunk, chunk_bytes, comm, stream)`.
  template <typename Enqueue>
  Status RunStaged(const std::string& what, const StagedCopy& copy, Enqueue&& enqueue) {
    std::lock_guard<std::mutex> lock(mu_);
    ScopedCudaDevice device;
    STINT_RETURN_IF_ERROR(BeginLocked(what, Status::OK(), device));
    const Clock::time_point deadline = Clock::now() + timeout_;
    Status s = EnsureStagingLocked(copy.bytes, what);
    if (s.ok()) s = OrderAfterCallerLocked(what);
    if (!s.ok()) return FailLocked(s);
    // A function of the call alone, never of this rank's staging history:
    // every rank must cut the same chunks.
    const size_t chunk = NcclStagingChunkBytes(copy.element_bytes, kNcclStagingCapacity);
    void* dev = staging_.device.get();
    char* pinned = staging_.host->data();
    for (size_t at = 0; at < copy.bytes; at += chunk) {
      const size_t n = std::min(chunk, copy.bytes - at);
      const std::string part = copy.bytes > chunk ? what + " [staged bytes " + std::to_string(at) +
                                                        "+" + std::to_string(n) + "]"
                                                  : what + " [staged]";
      staging_in_flight_ = true;  // until the chunk's event completed
      if (copy.copy_in) {
        std::memcpy(pinned, copy.host + at, n);
        const cudaError_t err =
            cudaMemcpyAsync(dev, pinned, n, cudaMemcpyHostToDevice, res_.stream);
        if (err != cudaSuccess) return FailLocked(StatusFromCuda(err, part + ": staging copy in"));
      }
      std::function<cudaError_t(cudaStream_t)> out;
      if (copy.copy_out) {
        out = [&](cudaStream_t stream) {
          return cudaMemcpyAsync(pinned, dev, n, cudaMemcpyDeviceToHost, stream);
        };
      }
      s = CollectiveLocked(
          part, deadline,
          [&](ncclComm_t comm, cudaStream_t stream) { return enqueue(dev, n, comm, stream); }, out);
      if (!s.ok()) return FailLocked(s);
      staging_in_flight_ = false;
      // The event after the copy out completed: the pinned bytes are final.
      if (copy.copy_out) std::memcpy(copy.host + at, pinned, n);
    }
    return Status::OK();
  }

  // Enqueues with `enqueue(comm, stream)` and polls to completion, all under
  // mu_. `check`: the arguments' verdict, taken before anything is enqueued.
  template <typename Enqueue>
  Status Run(const std::string& what, const Status& check, Enqueue&& enqueue) {
    std::lock_guard<std::mutex> lock(mu_);
    ScopedCudaDevice device;
    STINT_RETURN_IF_ERROR(BeginLocked(what, check, device));
    const Clock::time_point deadline = Clock::now() + timeout_;
    Status s = OrderAfterCallerLocked(what);
    if (s.ok()) s = CollectiveLocked(what, deadline, std::forward<Enqueue>(enqueue), nullptr);
    if (!s.ok()) return FailLocked(s);
    return Status::OK();
  }

  // REQUIRES: mu_ held. Records the first error, aborts the comm (once).
  Status FailLocked(Status s) {
    if (first_error_.ok()) first_error_ = s;
    if (!comm_.Abort()) comm_unreleased_ = true;
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
  const std::function<Result<void*>(int)> current_stream_;
  StreamResources res_;

  std::atomic<bool> abort_requested_{false};  // set by Abort(), from any thread
  std::atomic<bool> aborted_{false};          // written under mu_, read anywhere
  // Held across every NCCL call on comm_ (a collective's whole poll loop
  // included), so ncclCommAbort never runs alongside one.
  std::mutex mu_;
  Status first_error_;              // guarded by mu_
  NcclComm comm_;                   // guarded by mu_
  bool comm_unreleased_ = false;    // guarded by mu_: comm_ was dropped, not aborted
  Staging staging_;                 // guarded by mu_
  bool staging_in_flight_ = false;  // guarded by mu_: copies may be queued
};

}  // namespace

Result<NcclRecoveryPlan> LoadedNcclRecoveryPlan() {
  int version = 0;
  const ncclResult_t r = ncclGetVersion(&version);
  if (r != ncclSuccess) return StatusFromNccl(r, nullptr, "ncclGetVersion");
  return PlanNcclRecovery(version);
}

NcclCommunicatorFactory::NcclCommunicatorFactory(NcclCommunicatorOptions options)
    : options_(std::move(options)), unreleased_(std::make_shared<std::atomic<bool>>(false)) {}

bool NcclCommunicatorFactory::RestartRequired() const {
  return unreleased_->load(std::memory_order_acquire);
}

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
  Result<NcclRecoveryPlan> loaded = LoadedNcclRecoveryPlan();
  if (!loaded.ok()) return loaded.status().WithContext(what);
  const NcclRecoveryPlan& plan = *loaded;

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
  // Aborted on every failure below, or left unreleased where the ladder
  // says an abort may hang (a peer may be gone by then).
  NcclComm comm(raw, plan.reinit ? nullptr : unreleased_);
  if (r != ncclSuccess && r != ncclInProgress)
    return StatusFromNccl(r, raw, what + ": ncclCommInitRankConfig");
  if (!comm) return Status::Internal(what + ": ncclCommInitRankConfig returned no communicator");
  // An error init reports comes with StatusFromNccl's code (an invalid
  // usage such as two ranks on one GPU is not a transient failure).
  STINT_RETURN_IF_ERROR(
      PollUntilDone({comm.get(), nullptr, nullptr}, deadline, options_.comm.timeout, what));
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(membership, device, options_.comm.timeout, options_.current_stream,
                           std::move(*resources), std::move(comm)));
}

Result<std::unique_ptr<Communicator>> NcclCommunicatorFactory::Shrink(
    Communicator& old, const GroupMembership& next, const std::vector<int>& excluded_ranks) {
  const std::string what = "nccl shrink of generation " + std::to_string(old.generation()) +
                           " into " + std::to_string(next.generation) + " (rank " +
                           std::to_string(old.rank()) + " of " + std::to_string(old.world_size()) +
                           " -> " + std::to_string(next.rank) + " of " +
                           std::to_string(next.world_size) + ")";
  // The ladder of the library loaded now, not of the headers.
  Result<NcclRecoveryPlan> loaded = LoadedNcclRecoveryPlan();
  if (!loaded.ok()) return loaded.status().WithContext(what);
  const NcclRecoveryPlan& plan = *loaded;
  if (!plan.shrink)
    return Status::Unimplemented(what + ": no shrink on this library: " + plan.summary);
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
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(next, parent->device(), options_.comm.timeout, options_.current_stream,
                           std::move(*resources), std::move(child)));
}

}  // namespace stint
