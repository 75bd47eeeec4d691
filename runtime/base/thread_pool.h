// ThreadPool: a fixed set of workers for data-parallel loops (snapshot
// memcpy, chunk hashing, zstd). ParallelFor blocks the caller, which also
// works, so a pool of N threads gives N+1-way parallelism.
//
// Thread-safe. Workers start in the constructor and are joined in the
// destructor; nothing is detached.
#ifndef STINT_RUNTIME_BASE_THREAD_POOL_H_
#define STINT_RUNTIME_BASE_THREAD_POOL_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace stint {

class ThreadPool {
 public:
  explicit ThreadPool(unsigned threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned size() const { return unsigned(workers_.size()); }
  // Runs fn(i) for i in [0, n) and returns when all have finished.
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn);
  // Runs `task` on a worker (on the caller when the pool has no threads).
  // The caller tracks completion; the destructor runs what is still queued.
  void Schedule(std::function<void()> task);

 private:
  void WorkerLoop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::vector<std::thread> workers_;
};

}  // namespace stint

#endif  // STINT_RUNTIME_BASE_THREAD_POOL_H_
