#include "cuda_copier.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <functional>
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

// A copy's completion event, shared by its ticket and the lazy barrier.
Result<std::shared_ptr<CudaEvent>> NewSharedEvent() {
  STINT_ASSIGN_OR_RETURN(CudaEvent e, CudaEvent::Create());
  return std::make_shared<CudaEvent>(std::move(e));
}

// Polls instead of cudaEventSynchronize, which has no deadline.
Status WaitEvents(const std::vector<std::shared_ptr<CudaEvent>>& events,
                  std::chrono::milliseconds timeout, const char* what) {
  auto deadline = Clock::now() + timeout;
  auto nap = std::chrono::microseconds(20);
  for (const auto& e : events) {
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
  CudaDeviceCopier(int home_device, int numa_node)
      : home_device_(home_device), numa_node_(numa_node) {}

  ~CudaDeviceCopier() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [device, ds] : devices_) {
      ScopedCudaDevice scope;
      if (!scope.Enter(device).ok()) continue;
      // Nothing may still DMA into memory about to be unregistered.
      if (cudaStreamSynchronize(ds.d2h.get()) != cudaSuccess) cudaGetLastError();
      if (cudaStreamSynchronize(ds.h2d.get()) != cudaSuccess) cudaGetLastError();
    }
    registrations_.clear();
  }

  const char* name() const override { return "cuda"; }

  Status RegisterHostMemory(void* data, size_t size) override {
    std::lock_guard<std::mutex> lock(mu_);
    ScopedCudaDevice scope;
    STINT_RETURN_IF_ERROR(scope.Enter(home_device_));
    // Before cudaHostRegister touches the pages, or placement is too late.
    PreferNumaNode(data, size, numa_node_).IgnoreError();  // a speed-up, not a requirement
    STINT_ASSIGN_OR_RETURN(auto reg, HostRegistration::Register(data, size));
    registrations_[data] = std::move(reg);
    return Status::OK();
  }

  void UnregisterHostMemory(void* data) override {
    std::unique_ptr<HostRegistration> reg;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = registrations_.find(data);
      if (it == registrations_.end()) return;
      reg = std::move(it->second);
      registrations_.erase(it);
    }
  }

  Result<uint64_t> CopyToHostAsync(const std::vector<DeviceCopy>& copies,
                                   std::function<void()> on_done) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<int, std::vector<const DeviceCopy*>> by_device;
    for (const auto& c : copies) by_device[c.device].push_back(&c);
    std::vector<std::shared_ptr<CudaEvent>> done;
    std::vector<cudaStream_t> used;
    Status s = EnqueueD2H(by_device, &done, &used);
    if (s.ok() && on_done && !done.empty()) {
      // One callback, on the last device's copy stream once every device's
      // copies are done.
      cudaStream_t last = used.back();
      for (size_t i = 0; s.ok() && i + 1 < done.size(); ++i) {
        s = StatusFromCuda(cudaStreamWaitEvent(last, done[i]->get(), 0), "cudaStreamWaitEvent");
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
      for (cudaStream_t st : used) {
        if (cudaStreamSynchronize(st) != cudaSuccess) cudaGetLastError();
      }
      return s.WithContext("device-to-host copy");
    }
    uint64_t ticket = ++next_ticket_;
    std::vector<int> devices;
    for (const auto& entry : by_device) devices.push_back(entry.first);  // the order of `done`
    tickets_[ticket] = Ticket{std::move(devices), std::move(done)};
    return ticket;
  }

  Status Wait(uint64_t ticket, std::chrono::milliseconds timeout) override {
    std::vector<std::shared_ptr<CudaEvent>> events;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = tickets_.find(ticket);
      if (it == tickets_.end()) return Status::NotFound("copy ticket " + std::to_string(ticket));
      events = it->second.events;
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
    cudaError_t q = cudaEventQuery(it->second.last_d2h->get());
    if (q == cudaSuccess) {
      it->second.last_d2h.reset();  // already done: nothing to wait for, now or later
      return Status::OK();
    }
    if (q != cudaErrorNotReady) return StatusFromCuda(q, "lazy barrier: copy failed");
    ScopedCudaDevice scope;
    STINT_RETURN_IF_ERROR(scope.Enter(device));
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
      for (size_t i = 0; i < it->second.devices.size(); ++i) {
        if (it->second.devices[i] == device) event = it->second.events[i];
      }
    }
    if (event == nullptr) return Status::OK();
    cudaError_t q = cudaEventQuery(event->get());
    if (q == cudaSuccess) return Status::OK();
    if (q != cudaErrorNotReady) return StatusFromCuda(q, "lazy barrier: copy failed");
    ScopedCudaDevice scope;
    STINT_RETURN_IF_ERROR(scope.Enter(device));
    STINT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(AsStream(stream), event->get(), 0));
    return Status::OK();
  }

  Status CopyToDevice(const std::vector<DeviceCopy>& copies,
                      std::chrono::milliseconds timeout) override {
    std::vector<std::shared_ptr<CudaEvent>> done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::map<int, std::vector<const DeviceCopy*>> by_device;
      for (const auto& c : copies) by_device[c.device].push_back(&c);
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
        STINT_ASSIGN_OR_RETURN(auto finished, NewSharedEvent());
        STINT_CUDA_RETURN_IF_ERROR(cudaEventRecord(finished->get(), h2d));
        for (void* consumer : consumers) {
          STINT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(AsStream(consumer), finished->get(), 0));
        }
        done.push_back(std::move(finished));
      }
    }
    return WaitEvents(done, timeout, "host-to-device copy");
  }

 private:
  struct DeviceStreams {
    CudaStream d2h, h2d;
    std::shared_ptr<CudaEvent> last_d2h;  // the newest device-to-host copy's completion
  };

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
                    std::vector<std::shared_ptr<CudaEvent>>* done,
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
      STINT_ASSIGN_OR_RETURN(auto finished, NewSharedEvent());
      STINT_CUDA_RETURN_IF_ERROR(cudaEventRecord(finished->get(), d2h));
      ds->last_d2h = finished;
      done->push_back(std::move(finished));
    }
    return Status::OK();
  }

  const int home_device_;
  const int numa_node_;
  std::mutex mu_;
  // Guarded by mu_.
  std::map<int, DeviceStreams> devices_;
  std::map<void*, std::unique_ptr<HostRegistration>> registrations_;
  struct Ticket {
    std::vector<int> devices;                         // devices[i] recorded events[i]
    std::vector<std::shared_ptr<CudaEvent>> events;  // each device's copies' completion
  };
  std::map<uint64_t, Ticket> tickets_;
  uint64_t next_ticket_ = 0;
};

}  // namespace

Result<std::unique_ptr<DeviceCopier>> NewCudaDeviceCopier(const CudaCopierOptions& options) {
  STINT_ASSIGN_OR_RETURN(int count, CudaDeviceCount());
  int home = options.home_device;
  if (home < 0) STINT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&home));
  if (home >= count) {
    return Status::InvalidArgument("home_device " + std::to_string(home) + ": only " +
                                   std::to_string(count) + " CUDA devices");
  }
  int node = options.numa_placement ? NumaNodeOfDevice(home) : -1;
  return std::unique_ptr<DeviceCopier>(new CudaDeviceCopier(home, node));
}

}  // namespace stint
