// HostCopier: a DeviceCopier test double that treats "device" memory as host
// memory and copies with memcpy on its own thread, so the whole device path
// of the Checkpointer (staged future, copy tickets, pinned registration,
// load bounce buffers, the lazy barrier) runs in CPU-only CI. Knobs inject a
// failed copy, a slow one, and a gate that holds every copy until opened.
// A host thread stands for a stream here: OrderAfter() blocks it until the
// ticket's copies are done, as the device would hold the stream.
//
// Thread-safe. Header-only.
#ifndef STINT_TESTS_UTIL_HOST_COPIER_H_
#define STINT_TESTS_UTIL_HOST_COPIER_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "stint/device_copier.h"

namespace stint {

class HostCopier final : public DeviceCopier {
 public:
  ~HostCopier() override {
    Release();
    std::map<uint64_t, std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads.swap(threads_);
    }
    for (auto& [t, th] : threads) th.join();
  }
  const char* name() const override { return "host"; }

  Status RegisterHostMemory(void* data, size_t size) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (fail_register) return Status::Internal("simulated cudaHostRegister failure");
    registered_.insert(data);
    ++registrations;
    largest_registration_ = std::max(largest_registration_, size);
    return Status::OK();
  }
  void UnregisterHostMemory(void* data) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (registered_.erase(data)) ++unregistrations;
  }

  Result<uint64_t> CopyToHostAsync(const std::vector<DeviceCopy>& copies,
                                   std::function<void()> on_done) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& c : copies) {
      if (!IsRegistered(c.dst)) {
        return Status::FailedPrecondition("copy into unregistered host memory");
      }
    }
    uint64_t t = ++next_;
    bool fail = fail_next_copy.exchange(false);
    auto delay = copy_delay;
    threads_[t] = std::thread([this, t, copies, on_done, fail, delay] {
      std::this_thread::sleep_for(delay);
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [this, t] { return held_from_ == 0 || t < held_from_; });
      }
      for (const auto& c : copies) std::memcpy(c.dst, c.src, c.bytes);
      std::lock_guard<std::mutex> l(mu_);
      done_[t] = fail ? Status::Internal("simulated copy failure") : Status::OK();
      if (!fail && on_done) on_done();
      cv_.notify_all();
    });
    ++d2h_calls;
    return t;
  }

  Status Wait(uint64_t ticket, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (threads_.count(ticket) == 0) return Status::NotFound("ticket");
    if (!cv_.wait_for(lock, timeout, [&] { return done_.count(ticket) != 0; })) {
      return Status::DeadlineExceeded("copy still running");
    }
    Status s = done_[ticket];
    done_.erase(ticket);
    threads_[ticket].join();
    threads_.erase(ticket);
    cv_.notify_all();
    return s;
  }

  Status OrderBeforeWrite(int, void*) override {
    ++barriers;
    return Status::OK();
  }

  Status OrderAfter(uint64_t ticket, int device, void* stream) override {
    ++barriers;
    std::unique_lock<std::mutex> lock(mu_);
    barrier_streams_.insert({device, stream});
    // Done, or retired by Wait() meanwhile.
    cv_.wait(lock, [&] { return done_.count(ticket) != 0 || threads_.count(ticket) == 0; });
    return Status::OK();
  }

  // Until Release(), the copies of tickets numbered `from_ticket` and later
  // (tickets count from 1) do not run: a copy engine still busy.
  void Hold(uint64_t from_ticket = 1) {
    std::lock_guard<std::mutex> lock(mu_);
    held_from_ = from_ticket;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_from_ = 0;
    }
    cv_.notify_all();
  }
  // Every (device, stream) a barrier ordered so far.
  std::set<std::pair<int, void*>> barrier_streams() {
    std::lock_guard<std::mutex> lock(mu_);
    return barrier_streams_;
  }
  // The biggest host memory registered so far, in bytes.
  size_t largest_registration() {
    std::lock_guard<std::mutex> lock(mu_);
    return largest_registration_;
  }
  // Tickets whose copies have not completed yet.
  int copies_pending() {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const auto& [t, th] : threads_) n += done_.count(t) == 0 ? 1 : 0;
    return n;
  }

  Status CopyToDevice(const std::vector<DeviceCopy>& copies, std::chrono::milliseconds) override {
    for (const auto& c : copies) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!IsRegistered(c.src))
          return Status::FailedPrecondition("copy from unregistered host memory");
      }
      std::memcpy(c.dst, c.src, c.bytes);
    }
    ++h2d_calls;
    return Status::OK();
  }

  // Knobs and counters.
  std::atomic<bool> fail_next_copy{false};
  std::atomic<bool> fail_register{false};
  std::chrono::milliseconds copy_delay{0};  // set before use
  std::atomic<int> registrations{0}, unregistrations{0}, d2h_calls{0}, h2d_calls{0}, barriers{0};

 private:
  // REQUIRES: mu_. Registrations are whole buffers; a pointer inside one counts.
  bool IsRegistered(const void* p) const {
    auto it = registered_.upper_bound(const_cast<void*>(p));
    return it != registered_.begin();  // some registered base at or below p
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::set<void*> registered_;
  std::map<uint64_t, std::thread> threads_;
  std::map<uint64_t, Status> done_;
  uint64_t next_ = 0;
  uint64_t held_from_ = 0;  // 0: nothing held
  std::set<std::pair<int, void*>> barrier_streams_;
  size_t largest_registration_ = 0;
};

}  // namespace stint

#endif  // STINT_TESTS_UTIL_HOST_COPIER_H_
