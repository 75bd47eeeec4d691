// SnapshotProgress: the copies of one save that outlast Save() (lazy host
// copies, device-to-host tickets) and the barrier waits on them.
//
// A save's staged future is ready once every part completed: each non-empty
// lazy host group (one per WriteBarrier class) and each device ticket. A
// failed part fails it at once.
//
// Thread-safe. PartDone() never blocks: the CUDA driver calls it from its
// callback thread.
#ifndef STINT_RUNTIME_CHECKPOINT_SNAPSHOT_PROGRESS_H_
#define STINT_RUNTIME_CHECKPOINT_SNAPSHOT_PROGRESS_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "stint/state.h"
#include "stint/status.h"

namespace stint {

class SnapshotProgress {
 public:
  using Clock = std::chrono::steady_clock;

  // `host_groups[w]`: lazy host copies of class w are still to run;
  // `device_tickets`: how many device tickets will report DeviceTicketDone().
  SnapshotProgress(uint64_t step, Clock::time_point saved_at, const bool host_groups[2],
                   int device_tickets);
  SnapshotProgress(const SnapshotProgress&) = delete;
  SnapshotProgress& operator=(const SnapshotProgress&) = delete;

  uint64_t step() const { return step_; }
  std::shared_future<Status> staged() const { return staged_; }
  bool staged_ready() const;
  // Seconds from Save() until the staged future became ready; 0 before.
  double staged_seconds() const;

  // A group of device copies in flight: its class, its ticket and where in
  // the staging image its copies begin.
  struct DeviceGroup {
    WriteBarrier when;
    uint64_t ticket;
    uint64_t begin;
    // The copier's answer once Wait() retired the ticket (the persist
    // thread's, the only one that waits).
    bool retired = false;
    Status result;
  };

  // Records a device ticket of class `when` whose copies write the image
  // from `begin` on; its shards were saved from `streams`.
  void AddDeviceTicket(WriteBarrier when, uint64_t ticket, uint64_t begin,
                       const std::vector<std::pair<int, void*>>& streams);
  // The (device, stream) pairs the shards of class `when` were saved from.
  const std::vector<std::pair<int, void*>>& device_streams(WriteBarrier when) const {
    return streams_[Index(when)];
  }
  // Every class's groups, by where they begin in the image.
  const std::vector<DeviceGroup>& device_groups() const { return groups_; }
  void RetireDeviceGroup(size_t i, Status result) {
    groups_[i].retired = true;
    groups_[i].result = std::move(result);
  }

  // A device ticket completed successfully. Never blocks.
  void DeviceTicketDone();
  // The lazy host copies of class `when` completed.
  void HostGroupDone(WriteBarrier when);
  // A part failed: the staged future holds `why`.
  void Fail(Status why);

  // Blocks until the lazy host copies that `barrier` covers completed
  // (kForward: that class; kOptimizerStep: both). false at `deadline`.
  bool WaitHost(WriteBarrier barrier, Clock::time_point deadline);

  // Kept until the staged future is set (whatever its outcome), then
  // released: e.g. a ForegroundGate::Hold, so background copies wait for
  // the copies into staging, not only for Save().
  void KeepUntilStaged(std::shared_ptr<const void> held);

  // What the shards borrow; released with this object, or by TakeOwner().
  void set_owner(std::shared_ptr<const void> owner) { owner_ = std::move(owner); }
  std::shared_ptr<const void> TakeOwner() { return std::move(owner_); }

 private:
  static int Index(WriteBarrier w) { return static_cast<int>(w); }
  // REQUIRES: mu_ held.
  void PartDoneLocked();
  void SetLocked(Status s);

  const uint64_t step_;
  const Clock::time_point saved_at_;
  mutable std::mutex mu_;
  std::condition_variable host_cv_;
  // Guarded by mu_.
  bool host_pending_[2];
  int parts_left_;
  bool set_ = false;
  Clock::time_point done_at_;
  std::promise<Status> promise_;
  std::shared_ptr<const void> until_staged_;

  std::shared_future<Status> staged_;
  // Written by the saving thread before the save is queued (a group's
  // result later by the persist thread alone).
  std::vector<std::pair<int, void*>> streams_[2];
  std::vector<DeviceGroup> groups_;
  std::shared_ptr<const void> owner_;
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_SNAPSHOT_PROGRESS_H_
