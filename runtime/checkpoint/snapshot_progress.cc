#include "checkpoint/snapshot_progress.h"

#include <algorithm>

namespace stint {

SnapshotProgress::SnapshotProgress(uint64_t step, Clock::time_point saved_at,
                                   const bool host_groups[2], int device_tickets)
    : step_(step), saved_at_(saved_at), host_pending_{host_groups[0], host_groups[1]} {
  parts_left_ = int(host_groups[0]) + int(host_groups[1]) + device_tickets;
  staged_ = promise_.get_future().share();
  if (parts_left_ == 0) SetLocked(Status::OK());
}

bool SnapshotProgress::staged_ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  return set_;
}

double SnapshotProgress::staged_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return set_ ? std::chrono::duration<double>(done_at_ - saved_at_).count() : 0.0;
}

void SnapshotProgress::AddDeviceTicket(WriteBarrier when, uint64_t ticket, uint64_t begin,
                                       const std::vector<std::pair<int, void*>>& streams) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& known = streams_[Index(when)];
  for (const auto& s : streams) {
    if (std::find(known.begin(), known.end(), s) == known.end()) known.push_back(s);
  }
  DeviceGroup group{when, ticket, begin, false, Status::OK()};
  groups_.insert(std::upper_bound(
                     groups_.begin(), groups_.end(), group,
                     [](const DeviceGroup& a, const DeviceGroup& b) { return a.begin < b.begin; }),
                 group);
}

void SnapshotProgress::DeviceTicketDone() {
  std::lock_guard<std::mutex> lock(mu_);
  PartDoneLocked();
}

void SnapshotProgress::HostGroupDone(WriteBarrier when) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!host_pending_[Index(when)]) return;
    host_pending_[Index(when)] = false;
    PartDoneLocked();
  }
  host_cv_.notify_all();
}

void SnapshotProgress::Fail(Status why) {
  std::lock_guard<std::mutex> lock(mu_);
  SetLocked(std::move(why));
}

bool SnapshotProgress::WaitHost(WriteBarrier barrier, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return host_cv_.wait_until(lock, deadline, [&] {
    const bool forward_done = !host_pending_[Index(WriteBarrier::kForward)];
    if (barrier == WriteBarrier::kForward) return forward_done;
    return forward_done && !host_pending_[Index(WriteBarrier::kOptimizerStep)];
  });
}

void SnapshotProgress::PartDoneLocked() {
  if (parts_left_ > 0 && --parts_left_ == 0) SetLocked(Status::OK());
}

void SnapshotProgress::SetLocked(Status s) {
  if (set_) return;
  set_ = true;
  done_at_ = Clock::now();
  promise_.set_value(std::move(s));
  until_staged_.reset();
}

void SnapshotProgress::KeepUntilStaged(std::shared_ptr<const void> held) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!set_) until_staged_ = std::move(held);
}

}  // namespace stint
