// LazyCopyThread: runs lazy snapshots' host copies after Save() returned,
// one save at a time in save order, each class's copies spread over the
// pool's threads; the copies of kForward shards first, since the next
// forward pass waits for them.
//
// Thread-safe. The destructor finishes every queued task.
#ifndef STINT_RUNTIME_CHECKPOINT_LAZY_COPY_THREAD_H_
#define STINT_RUNTIME_CHECKPOINT_LAZY_COPY_THREAD_H_

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/thread_pool.h"
#include "checkpoint/snapshot.h"
#include "checkpoint/snapshot_progress.h"

namespace stint {

class LazyCopyThread {
 public:
  struct Task {
    char* buffer;  // REQUIRES: valid until `progress` reports the host groups done
    std::vector<StagingPiece> pieces[2];  // by WriteBarrier
    // What the pieces' `unchanged` point into: kept until they ran, even
    // past an abandoned save.
    std::shared_ptr<std::vector<uint8_t>> unchanged;
    std::shared_ptr<SnapshotProgress> progress;
  };

  explicit LazyCopyThread(ThreadPool* pool);
  ~LazyCopyThread();
  LazyCopyThread(const LazyCopyThread&) = delete;
  LazyCopyThread& operator=(const LazyCopyThread&) = delete;

  void Enqueue(Task task);

 private:
  void Loop();

  ThreadPool* const pool_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> tasks_;  // guarded by mu_
  bool stopping_ = false;   // guarded by mu_
  std::thread thread_;
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_LAZY_COPY_THREAD_H_
