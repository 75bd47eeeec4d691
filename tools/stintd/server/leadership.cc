#include "stintd/server/leadership.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace stint::stintd {
namespace {

using Clock = std::chrono::steady_clock;

int64_t Ns(Clock::time_point t) { return t.time_since_epoch().count(); }

// The share of the lease a renewal is trusted for: the lease itself runs
// from when the database ran the renewal, which is after it was sent.
constexpr double kTrusted = 0.8;

}  // namespace

Result<std::unique_ptr<Leadership>> Leadership::Acquire(
    LeadershipOptions options, const std::function<bool(std::chrono::milliseconds)>& wait) {
  STINT_ASSIGN_OR_RETURN(std::unique_ptr<LeaderLease> lease,
                         LeaderLease::Open(options.store_url, options.holder,
                                           options.advertise_url, options.lease));
  // A standby asks ten times a lease: it takes over within a tenth of a
  // lease of the old one's end.
  const std::chrono::milliseconds poll =
      std::clamp(options.lease / 10, std::chrono::milliseconds(20), std::chrono::milliseconds(1000));
  int64_t shown_epoch = -1;
  for (;;) {
    const Clock::time_point sent = Clock::now();
    Result<int64_t> epoch = lease->TryAcquire();
    if (epoch.ok() && *epoch > 0) {
      return std::unique_ptr<Leadership>(
          new Leadership(std::move(options), std::move(lease), *epoch, sent));
    }
    if (!epoch.ok()) {
      // The database is away: keep waiting, it may come back.
      std::fprintf(stderr, "stintd: standby: %s\n", epoch.status().ToString().c_str());
    } else if (options.on_standby) {
      Result<LeaderView> view = lease->Read();
      if (view.ok() && view->epoch != shown_epoch) {
        shown_epoch = view->epoch;
        options.on_standby(*view);
      }
    }
    if (wait(poll)) return Status::Cancelled("stopped while standing by");
  }
}

Leadership::Leadership(LeadershipOptions options, std::unique_ptr<LeaderLease> lease, int64_t epoch,
                       Clock::time_point sent)
    : options_(std::move(options)),
      epoch_(epoch),
      lease_(std::move(lease)),
      valid_until_ns_(Ns(sent + std::chrono::duration_cast<Clock::duration>(options_.lease * kTrusted))) {
  renewer_ = std::thread([this] { RenewLoop(); });
  watchdog_ = std::thread([this] { Watchdog(); });
}

Leadership::~Leadership() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  renewer_.join();
  watchdog_.join();
  if (!lost_) {
    std::lock_guard<std::mutex> lock(lease_mu_);
    lease_->Release(epoch_).IgnoreError();
  }
}

bool Leadership::Valid() const { return !lost_ && Ns(Clock::now()) < valid_until_ns_.load(); }

StoreFence Leadership::Fence() {
  StoreFence f;
  f.holder = options_.holder;
  f.epoch = epoch_;
  f.on_fenced = [this](const Status& why) { Lost(why); };
  // Half a lease: a paused writer's share lock is gone before a standby
  // could take over.
  f.idle_limit = std::max(options_.lease / 2, std::chrono::milliseconds(50));
  return f;
}

Result<LeaderView> Leadership::View() {
  std::lock_guard<std::mutex> lock(lease_mu_);
  return lease_->Read();
}

void Leadership::RenewLoop() {
  const auto every = options_.lease / 5;
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, every, [this] { return stopping_; })) {
    lock.unlock();
    const Clock::time_point sent = Clock::now();
    Status renewed;
    {
      std::lock_guard<std::mutex> l(lease_mu_);
      renewed = lease_->Renew(epoch_);
    }
    const double took = std::chrono::duration<double>(Clock::now() - sent).count();
    if (took > std::chrono::duration<double>(every).count()) {  // a slow database, or a busy host
      std::fprintf(stderr, "stintd: renewing the leader lease took %.2f s\n", took);
    }
    if (renewed.ok()) {
      valid_until_ns_ = Ns(sent + std::chrono::duration_cast<Clock::duration>(options_.lease * kTrusted));
    } else if (renewed.code() == Code::kAborted) {
      Lost(renewed);
    } else {
      std::fprintf(stderr, "stintd: renewing the leader lease: %s\n", renewed.ToString().c_str());
    }
    lock.lock();
  }
}

void Leadership::Watchdog() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    const int64_t until = valid_until_ns_.load();
    if (Ns(Clock::now()) >= until) {
      lock.unlock();
      Lost(Status::Aborted("fenced: the leader lease of epoch " + std::to_string(epoch_) +
                           " was not renewed in time (the database did not answer)"));
      return;
    }
    cv_.wait_until(lock, Clock::time_point(Clock::duration(until)));
  }
}

void Leadership::Lost(const Status& why) {
  if (lost_.exchange(true)) return;
  if (options_.on_lost) options_.on_lost(why);
}

}  // namespace stint::stintd
