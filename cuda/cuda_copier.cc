#include "cuda_copier.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "cuda_handles.h"
#include "cuda_status.h"
#include "device_probe.h"
#include "pinned_host.h"

namespace stint {
namespace {

using Clock = std::chrono::steady_clock;

cudaStream_t AsStream(void* s) { return static_cast<cudaStream_t>(s); }

// A copy's completion event on `device`, shared by its ticket and the lazy
// barrier. Destroyed with `device` current, whatever thread drops it last: a
// runtime call with another device current could create a context there.
// REQUIRES: `device` current.
Result<std::shared_ptr<CudaEvent>> NewSharedEvent(int device) {
  STINT_ASSIGN_OR_RETURN(CudaEvent e, CudaEvent::Create());
  return std::shared_ptr<CudaEvent>(new CudaEvent(std::move(e)), [device](CudaEvent* event) {
    ScopedCudaDevice scope;
    scope.Enter(device).IgnoreError();  // destroyed regardless
    delete event;
  });
}

// An event and the device it was recorded on.
struct DeviceEvent {
  int device = 0;
  std::shared_ptr<CudaEvent> event;
};

// Polls instead of cudaEventSynchronize, which has no deadline; each event
// with its own device current (the caller may be any thread).
Status WaitEvents(const std::vector<DeviceEvent>& events, std::chrono::milliseconds timeout,
                  const char* what) {
  auto deadline = Clock::now() + timeout;
  auto nap = std::chrono::microseconds(20);
  for (const auto& [device, e] : events) {
    ScopedCudaDevice scope;
    STINT_RETURN_IF_ERROR(scope.Enter(device));
    for (;;) {
      cudaError_t r = cudaEventQuery(e->get());
      if (r == cudaSuccess) break;
      if (r != cudaErrorNotReady) return StatusFromCuda(r, what);
      if (Clock::now() >= deadline) {
        return Status::DeadlineExceeded(std::string(what) + ": not done after " +
                                        std::to_string(timeout.count()) + " ms");
      }
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
  }
  return Status::OK();
}

void CUDART_CB RunHostCallback(void* arg) {
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(arg));
  (*fn)();
}

class CudaDeviceCopier final : public DeviceCopier {
 public:
  CudaDeviceCopier(int home_device, bool numa_placement)
      : home_device_(home_device), numa_placement_(numa_placement) {}

  ~CudaDeviceCopier() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [device, ds] : devices_) {
      ScopedCudaDevice scope;
      if (!scope.Enter(device).ok()) continue;
      // Nothing may still DMA into memory about to be unregistered.
      if (cudaStreamSynchronize(ds.d2h.get()) != cudaSuccess) cudaGetLastError();
      if (cudaStreamSynchronize(ds.h2d.get()) != cudaSuccess) cudaGetLastError();
      ds.d2h.Reset();  // destroyed with their device current
      ds.h2d.Reset();
    }
    for (auto& [data, r] : registrations_) Unregister(&r);
  }

  const char* name() const override { return "cuda"; }

  // Without a home device the page-locking waits for the first copy that
  // uses the memory and runs on that copy's device: a process that made
  // the copier while device 0 was current (before set_device) creates no
  // context on device 0 for it.
  Status RegisterHostMemory(void* data, size_t size) override {
    std::lock_guard<std::mutex> lock(mu_);
    int hint = home_device_;
    if (hint < 0 && !devices_.empty()) hint = devices_.begin()->first;
    if (hint < 0 && cudaGetDevice(&hint) != cudaSuccess) hint = -1;  // no context is made
    // Before anything touches the pages, or placement is too late.
    if (numa_placement_ && hint >= 0) {
      PreferNumaNode(data, size, NumaNodeOfDevice(hint)).IgnoreError();  // a speed-up only
    }
    Registration r;
    r.size = size;
    if (home_device_ >= 0) STINT_RETURN_IF_ERROR(Pin(data, home_device_, &r));
    registrations_[data] = std::move(r);
    return Status::OK();
  }

  void UnregisterHostMemory(void* data) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = registrations_.find(data);
    if (it == registrations_.end()) return;
    Unregister(&it->second);
    registrations_.erase(it);
  }

  Result<uint64_t> CopyToHostAsync(const std::vector<DeviceCopy>& copies,
                                   std::function<void()> on_done) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& c : copies) {
      STINT_RETURN_IF_ERROR(PinFor(c.dst, c.device).WithContext("device-to-host copy"));
    }
    std::map<int, std::vector<const DeviceCopy*>> by_device;
    for (const auto& c : copies) by_device[c.device].push_back(&c);
    std::vector<DeviceEvent> done;
    std::vector<cudaStream_t> used;
    Status s = EnqueueD2H(by_device, &done, &used);
    if (s.ok() && on_done && !done.empty()) {
      // One callback, on the last device's copy stream once every device's
      // copies are done.
      cudaStream_t last = used.back();
      ScopedCudaDevice scope;
      s = scope.Enter(done.back().device);
      for (size_t i = 0; s.ok() && i + 1 < done.size(); ++i) {
        s = StatusFromCuda(cudaStreamWaitEvent(last, done[i].event->get(), 0),
                           "cudaStreamWaitEvent");
      }
      if (s.ok()) {
        auto* fn = new std::function<void()>(std::move(on_done));
        s = StatusFromCuda(cudaLaunchHostFunc(last, RunHostCallback, fn), "cudaLaunchHostFunc");
        if (!s.ok()) delete fn;
      }
    } else if (s.ok() && on_done) {
      on_done();  // nothing to copy
    }
    if (!s.ok()) {
      // Copies already enqueued must finish before the caller frees their buffers.
      for (size_t i = 0; i < used.size(); ++i) {
        ScopedCudaDevice scope;
        scope.Enter(std::next(by_device.begin(), long(i))->first).IgnoreError();
        if (cudaStreamSynchronize(used[i]) != cudaSuccess) cudaGetLastError();
      }
      return s.WithContext("device-to-host copy");
    }
    uint64_t ticket = ++next_ticket_;
    tickets_[ticket] = std::move(done);
    return ticket;
  }

  Status Wait(uint64_t ticket, std::chrono::milliseconds timeout) override {
    std::vector<DeviceEvent> events;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = tickets_.find(ticket);
      if (it == tickets_.end()) return Status::NotFound("copy ticket " + std::to_string(ticket));
      events = it->second;
    }
    Status s = WaitEvents(events, timeout, "device-to-host copy");
    if (s.code() != Code::kDeadlineExceeded) {
      std::lock_guard<std::mutex> lock(mu_);
      tickets_.erase(ticket);
    }
    return s;
  }

  Status OrderBeforeWrite(int device, void* stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = devices_.find(device);
    if (it == devices_.end() || it->second.last_d2h == nullptr) return Status::OK();
    ScopedCudaDevice scope;
    STINT_RETURN_IF_ERROR(scope.Enter(device));
    cudaError_t q = cudaEventQuery(it->second.last_d2h->get());
    if (q == cudaSuccess) {
      it->second.last_d2h.reset();  // already done: nothing to wait for, now or later
      return Status::OK();
    }
    if (q != cudaErrorNotReady) return StatusFromCuda(q, "lazy barrier: copy failed");
    STINT_CUDA_RETURN_IF_ERROR(
        cudaStreamWaitEvent(AsStream(stream), it->second.last_d2h->get(), 0));
    return Status::OK();
  }

  Status OrderAfter(uint64_t ticket, int device, void* stream) override {
    std::shared_ptr<CudaEvent> event;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = tickets_.find(ticket);
      if (it == tickets_.end()) return Status::OK();  // retired: completed or failed
      for (const DeviceEvent& e : it->second) {
        if (e.device == device) event = e.event;
      }
    }
    if (event == nullptr) return Status::OK();
    ScopedCudaDevice scope;
    STINT_RETURN_IF_ERROR(scope.Enter(device));
    cudaError_t q = cudaEventQuery(event->get());
    if (q == cudaSuccess) return Status::OK();
    if (q != cudaErrorNotReady) return StatusFromCuda(q, "lazy barrier: copy failed");
    STINT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(AsStream(stream), event->get(), 0));
    return Status::OK();
  }

  Status CopyToDevice(const std::vector<DeviceCopy>& copies,
                      std::chrono::milliseconds timeout) override {
    std::vector<DeviceEvent> done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::map<int, std::vector<const DeviceCopy*>> by_device;
      for (const auto& c : copies) {
        STINT_RETURN_IF_ERROR(PinFor(c.src, c.device).WithContext("host-to-device copy"));
        by_device[c.device].push_back(&c);
      }
      for (auto& [device, list] : by_device) {
        ScopedCudaDevice scope;
        STINT_RETURN_IF_ERROR(scope.Enter(device));
        STINT_ASSIGN_OR_RETURN(DeviceStreams * ds, StreamsFor(device));
        cudaStream_t h2d = ds->h2d.get();
        std::set<void*> consumers;
        for (const DeviceCopy* c : list) consumers.insert(c->stream);
        // The destinations may still be in use by work already on their streams.
        for (void* consumer : consumers) {
          STINT_ASSIGN_OR_RETURN(CudaEvent ev, CudaEvent::Create());
          STINT_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev.get(), AsStream(consumer)));
          STINT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(h2d, ev.get(), 0));
        }
        for (const DeviceCopy* c : list) {
          STINT_CUDA_RETURN_IF_ERROR(
              cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyHostToDevice, h2d));
        }
        STINT_ASSIGN_OR_RETURN(auto finished, NewSharedEvent(device));
        STINT_CUDA_RETURN_IF_ERROR(cudaEventRecord(finished->get(), h2d));
        for (void* consumer : consumers) {
          STINT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(AsStream(consumer), finished->get(), 0));
        }
        done.push_back(DeviceEvent{device, std::move(finished)});
      }
    }
    return WaitEvents(done, timeout, "host-to-device copy");
  }

 private:
  struct DeviceStreams {
    CudaStream d2h, h2d;
    std::shared_ptr<CudaEvent> last_d2h;  // the newest device-to-host copy's completion
  };

  // Host memory given to RegisterHostMemory; `pinned` once page-locked, on
  // `device` (it is unpinned with that device current).
  struct Registration {
    size_t size = 0;
    int device = -1;
    std::unique_ptr<HostRegistration> pinned;
  };

  // REQUIRES: mu_ held. Page-locks `data` (portable: every context may use
  // it) with `device` current.
  Status Pin(void* data, int device, Registration* r) {
    ScopedCudaDevice scope;
    STINT_RETURN_IF_ERROR(scope.Enter(device));
    STINT_ASSIGN_OR_RETURN(r->pinned, HostRegistration::Register(data, r->size));
    r->device = device;
    return Status::OK();
  }

  // REQUIRES: mu_ held. Pins the registered memory holding `p` (if any, and
  // not pinned yet) on `device`, the device of the copy that uses it first.
  Status PinFor(const void* p, int device) {
    auto it = registrations_.upper_bound(const_cast<void*>(p));
    if (it == registrations_.begin()) return Status::OK();
    --it;
    Registration& r = it->second;
    const char* base = static_cast<const char*>(it->first);
    if (static_cast<const char*>(p) >= base + r.size || r.pinned != nullptr) return Status::OK();
    return Pin(it->first, device, &r);
  }

  // REQUIRES: mu_ held. Unpins with the device that pinned it current, so
  // no other device gets a context for it.
  static void Unregister(Registration* r) {
    if (r->pinned == nullptr) return;
    ScopedCudaDevice scope;
    scope.Enter(r->device).IgnoreError();  // the unpin goes on regardless
    r->pinned.reset();
  }

  // REQUIRES: mu_ held, `device` current.
  Result<DeviceStreams*> StreamsFor(int device) {
    auto it = devices_.find(device);
    if (it != devices_.end()) return &it->second;
    DeviceStreams ds;
    STINT_ASSIGN_OR_RETURN(ds.d2h, CudaStream::Create());
    STINT_ASSIGN_OR_RETURN(ds.h2d, CudaStream::Create());
    return &(devices_[device] = std::move(ds));
  }

  // REQUIRES: mu_ held.
  Status EnqueueD2H(const std::map<int, std::vector<const DeviceCopy*>>& by_device,
                    std::vector<DeviceEvent>* done,
                    std::vector<cudaStream_t>* used) {
    for (const auto& [device, list] : by_device) {
      ScopedCudaDevice scope;
      STINT_RETURN_IF_ERROR(scope.Enter(device));
      STINT_ASSIGN_OR_RETURN(DeviceStreams * ds, StreamsFor(device));
      cudaStream_t d2h = ds->d2h.get();
      used->push_back(d2h);
      // Ordered after what the producers enqueued so far, and nothing later:
      // the producer streams run on (forward, backward) while this copies.
      std::set<void*> producers;
      for (const DeviceCopy* c : list) producers.insert(c->stream);
      for (void* producer : producers) {
        STINT_ASSIGN_OR_RETURN(CudaEvent ev, CudaEvent::Create());
        STINT_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev.get(), AsStream(producer)));
        STINT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(d2h, ev.get(), 0));
      }
      for (const DeviceCopy* c : list) {
        STINT_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToHost, d2h));
      }
      STINT_ASSIGN_OR_RETURN(auto finished, NewSharedEvent(device));
      STINT_CUDA_RETURN_IF_ERROR(cudaEventRecord(finished->get(), d2h));
      ds->last_d2h = finished;
      done->push_back(DeviceEvent{device, std::move(finished)});
    }
    return Status::OK();
  }

  const int home_device_;  // -1: pin on the device of the first copy
  const bool numa_placement_;
  std::mutex mu_;
  // Guarded by mu_.
  std::map<int, DeviceStreams> devices_;
  std::map<void*, Registration> registrations_;
  // Each device's copies' completion, per ticket.
  std::map<uint64_t, std::vector<DeviceEvent>> tickets_;
  uint64_t next_ticket_ = 0;
};

}  // namespace

Result<std::unique_ptr<DeviceCopier>> NewCudaDeviceCopier(const CudaCopierOptions& options) {
  // Counts devices without creating a context on any.
  STINT_ASSIGN_OR_RETURN(int count, CudaDeviceCount());
  const int home = options.home_device;
  if (home >= count) {
    return Status::InvalidArgument("home_device " + std::to_string(home) + ": only " +
                                   std::to_string(count) + " CUDA devices");
  }
  return std::unique_ptr<DeviceCopier>(
      new CudaDeviceCopier(home < 0 ? -1 : home, options.numa_placement));
}

}  // namespace stint
