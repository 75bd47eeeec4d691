#include "checkpoint/lazy_copy_thread.h"

namespace stint {

LazyCopyThread::LazyCopyThread(ThreadPool* pool) : pool_(pool), thread_([this] { Loop(); }) {}

LazyCopyThread::~LazyCopyThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void LazyCopyThread::Enqueue(Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void LazyCopyThread::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;
    Task task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    for (WriteBarrier when : {WriteBarrier::kForward, WriteBarrier::kOptimizerStep}) {
      RunStagingCopies(task.pieces[static_cast<int>(when)], task.buffer, pool_);
      task.progress->HostGroupDone(when);
    }
    lock.lock();
  }
}

}  // namespace stint
