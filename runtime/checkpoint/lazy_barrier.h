// LazyBarrier: the copies of a save that outlast Save() and the waits on
// them. Save() starts them: device tensors as device-to-host tickets on the
// copier's streams (kForward shards first), lazy host tensors on a
// LazyCopyThread. The training thread's BeforeWrite() and WaitStaged() wait
// for them; the persist thread waits for them (up to copy_timeout) before
// it reads the staging buffer.
//
// Thread-safe: the training thread starts, tracks and waits at the barrier
// while the persist thread waits for one save's copies (Wait touches only
// the SnapshotProgress it is given). The destructor finishes the queued lazy
// copies.
#ifndef STINT_RUNTIME_CHECKPOINT_LAZY_BARRIER_H_
#define STINT_RUNTIME_CHECKPOINT_LAZY_BARRIER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "base/thread_pool.h"
#include "checkpoint/lazy_copy_thread.h"
#include "checkpoint/snapshot.h"
#include "checkpoint/snapshot_progress.h"
#include "stint/checkpointer.h"
#include "stint/device_copier.h"

namespace stint {

class LazyBarrier {
 public:
  using Clock = std::chrono::steady_clock;

  // `copier` may be null (host tensors only); it outlives this object.
  LazyBarrier(ThreadPool* pool, DeviceCopier* copier, std::chrono::milliseconds copy_timeout);
  LazyBarrier(const LazyBarrier&) = delete;
  LazyBarrier& operator=(const LazyBarrier&) = delete;

  // Starts the copies of `copies` that outlast Save() (the device ones and
  // `later`) into `image`. Null when everything was copied already. On
  // error nothing still writes `image` unless *image_still_written (copies
  // already started did not finish within copy_timeout of `saved_at`).
  Result<std::shared_ptr<SnapshotProgress>> Start(uint64_t step, Clock::time_point saved_at,
                                                  char* image, StagingCopies* copies,
                                                  bool* image_still_written);
  // Puts a started save under the barrier; `owner` (what its shards borrow)
  // is released once its copies completed.
  void Track(const std::shared_ptr<SnapshotProgress>& progress, std::shared_ptr<const void> owner);

  // Waits for every copy of `progress` until copy_timeout after `saved_at`:
  // the first failure, raw. *still_written: some copy may still write the
  // buffer, which must never go back to the pool.
  Status Wait(SnapshotProgress* progress, Clock::time_point saved_at, bool* still_written);

  // The persist thread's wait before it writes image bytes [0, to): the
  // lazy host copies, then the device groups beginning below `to`, from
  // *next_group on (advanced past those waited for; 0 at first). The first
  // failure, or kDeadlineExceeded at copy_timeout after `saved_at`; Wait()
  // then settles the save.
  Status WaitStagedUpTo(SnapshotProgress* progress, uint64_t to, Clock::time_point saved_at,
                        size_t* next_group);

  // Drops the saves whose copies completed (and what their shards borrowed,
  // here on the calling thread); returns the others, oldest first.
  std::vector<std::shared_ptr<SnapshotProgress>> Pending();
  // Checkpointer::BeforeWrite and Checkpointer::WaitStaged.
  Status BeforeWrite(WriteBarrier barrier, std::chrono::milliseconds timeout,
                     const Checkpointer::WriterStream& writer_stream);
  Status WaitStaged(std::chrono::milliseconds timeout);
  // Forgets every tracked save (what their shards borrowed goes here).
  void Clear();

 private:
  // Waits for device group i of `progress` until `deadline`; a group whose
  // ticket answered already gives that answer again.
  Status WaitGroup(SnapshotProgress* progress, size_t i, Clock::time_point deadline);
  // Waits for a device ticket until `deadline`. kDeadlineExceeded means the
  // copies may still write their buffer.
  Status WaitTicket(uint64_t ticket, Clock::time_point deadline);

  DeviceCopier* const copier_;
  const std::chrono::milliseconds copy_timeout_;
  LazyCopyThread lazy_;  // lazy host copies

  std::mutex in_flight_mu_;
  // Saves whose copies may still run, oldest first. Guarded by in_flight_mu_.
  std::vector<std::shared_ptr<SnapshotProgress>> in_flight_;
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_LAZY_BARRIER_H_
