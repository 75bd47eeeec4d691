// Leadership: this stintd's hold on the leader lease (store/leader_lease.h)
// of a database several stintds share.
//
// Acquire() waits as a standby until the lease is free and takes it. From
// then on a thread renews it every fifth of a lease, and a watchdog calls
// on_lost when the lease can no longer be trusted: another stintd took it
// (fenced), or no renewal got through for 0.8 lease by this process's
// clock. The lease ends at the database's now() + lease after a renewal
// the database ran after it was sent, so the watchdog fires before any
// standby can take over. stintd exits in on_lost; Valid() says the same
// thing to the request handlers and the Slurm executor, so a stintd that
// was paused and wakes acts on nothing before the watchdog runs.
#ifndef STINT_TOOLS_STINTD_SERVER_LEADERSHIP_H_
#define STINT_TOOLS_STINTD_SERVER_LEADERSHIP_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "stint/status.h"
#include "stintd/store/leader_lease.h"
#include "stintd/store/store.h"

namespace stint::stintd {

struct LeadershipOptions {
  std::string store_url;      // postgresql://...
  std::string holder;         // unique among the stintds (host:pid:random)
  std::string advertise_url;  // where clients reach this stintd when it leads
  std::chrono::milliseconds lease{5000};
  // This stintd must stop acting (stintd exits). Called at most once, from
  // the watchdog or from a write the store refused.
  std::function<void(const Status&)> on_lost;
  // Printed while waiting: who leads now.
  std::function<void(const LeaderView&)> on_standby;
};

class Leadership {
 public:
  // Waits until this stintd takes the lease. `wait` sleeps up to the given
  // time between attempts and returns true to give up (kCancelled).
  static Result<std::unique_ptr<Leadership>> Acquire(
      LeadershipOptions options, const std::function<bool(std::chrono::milliseconds)>& wait);
  // Stops renewing and gives the lease up, so a standby takes over at once.
  ~Leadership();

  int64_t epoch() const { return epoch_; }
  // The lease surely still holds: its last renewal was sent under 0.8
  // lease ago.
  bool Valid() const;
  // The fence for the store: this holder and epoch; on_lost when refused.
  StoreFence Fence();
  // The lease row and the standbys (GET /v1/leader).
  Result<LeaderView> View();

 private:
  Leadership(LeadershipOptions options, std::unique_ptr<LeaderLease> lease, int64_t epoch,
             std::chrono::steady_clock::time_point sent);
  void RenewLoop();
  void Watchdog();
  void Lost(const Status& why);

  const LeadershipOptions options_;
  const int64_t epoch_;
  std::mutex lease_mu_;
  std::unique_ptr<LeaderLease> lease_;  // guarded by lease_mu_
  // steady_clock nanoseconds until which the lease surely holds.
  std::atomic<int64_t> valid_until_ns_;
  std::atomic<bool> lost_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread renewer_;
  std::thread watchdog_;
};

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SERVER_LEADERSHIP_H_
