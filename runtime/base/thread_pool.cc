#include "base/thread_pool.h"

#include <atomic>
#include <memory>

namespace stint {

ThreadPool::ThreadPool(unsigned threads) {
  for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

void ThreadPool::Schedule(std::function<void()> task) {
  if (workers_.empty()) {
    task();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  // Work is claimed from a shared counter, so uneven items balance out.
  struct Loop {
    std::atomic<size_t> next{0};
    std::mutex mu;
    std::condition_variable cv;
    size_t active = 0;
  };
  auto loop = std::make_shared<Loop>();
  auto drain = [loop, n, &fn] {
    for (size_t i; (i = loop->next.fetch_add(1)) < n;) fn(i);
  };
  size_t helpers = workers_.size() < n - 1 ? workers_.size() : n - 1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    loop->active = helpers;
    for (size_t h = 0; h < helpers; ++h) {
      tasks_.push_back([loop, drain] {
        drain();
        std::lock_guard<std::mutex> l(loop->mu);
        if (--loop->active == 0) loop->cv.notify_all();
      });
    }
  }
  cv_.notify_all();
  drain();
  std::unique_lock<std::mutex> l(loop->mu);
  loop->cv.wait(l, [&] { return loop->active == 0; });
}

}  // namespace stint
