// POSIX engine: a bounded queue served by `posix_threads` workers that call
// the files' own PositionedWrite/Read (pwrite/pread, or a test wrapper).
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "io/io_engine.h"

namespace stint {
namespace {

class PosixEngine final : public IoEngine {
 public:
  explicit PosixEngine(const IoEngineOptions& options)
      : depth_(options.queue_depth == 0 ? 1 : options.queue_depth) {
    unsigned n = options.posix_threads == 0 ? 1 : options.posix_threads;
    for (unsigned i = 0; i < n; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  }
  ~PosixEngine() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();  // workers finish the queue first
  }
  PosixEngine(const PosixEngine&) = delete;
  PosixEngine& operator=(const PosixEngine&) = delete;

  const char* name() const override { return "posix"; }

  Status SubmitWrite(WritableFile* file, const void* buf, size_t len, uint64_t offset,
                     IoDone on_done) override {
    return Queue(Task{file, nullptr, const_cast<void*>(buf), len, offset, std::move(on_done)});
  }
  Status SubmitRead(const RandomAccessFile* file, void* buf, size_t len, uint64_t offset,
                    IoDone on_done) override {
    return Queue(Task{nullptr, file, buf, len, offset, std::move(on_done)});
  }
  Status Drain() override {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [this] { return queue_.empty() && busy_ == 0; });
    Status first = first_error_;
    first_error_ = Status::OK();
    return first;
  }

 private:
  struct Task {
    WritableFile* wfile;
    const RandomAccessFile* rfile;
    void* buf;
    size_t len;
    uint64_t offset;
    IoDone on_done;
  };

  Status Queue(Task task) {
    std::unique_lock<std::mutex> lock(mu_);
    space_cv_.wait(lock, [this] { return queue_.size() + busy_ < depth_; });  // backpressure
    queue_.push_back(std::move(task));
    work_cv_.notify_one();
    return Status::OK();
  }

  void WorkerLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and nothing left
      Task t = std::move(queue_.front());
      queue_.pop_front();
      ++busy_;
      lock.unlock();

      Status s;
      size_t bytes = 0;
      if (t.wfile != nullptr) {
        s = t.wfile->PositionedWrite(t.buf, t.len, t.offset);
        if (s.ok()) bytes = t.len;
      } else {
        auto r = t.rfile->Read(t.offset, t.len, t.buf);
        s = r.status();
        if (r.ok()) bytes = *r;
      }
      if (t.on_done) t.on_done(s, bytes);  // outside the lock

      lock.lock();
      if (!s.ok() && first_error_.ok()) first_error_ = s;
      --busy_;
      space_cv_.notify_one();
      if (queue_.empty() && busy_ == 0) idle_cv_.notify_all();
    }
  }

  const size_t depth_;
  std::mutex mu_;
  std::condition_variable work_cv_, space_cv_, idle_cv_;
  // Guarded by mu_.
  std::deque<Task> queue_;
  size_t busy_ = 0;
  bool stopping_ = false;
  Status first_error_;
  // Started in the constructor, joined in the destructor.
  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<IoEngine> NewPosixEngine(const IoEngineOptions& options) {
  return std::make_unique<PosixEngine>(options);
}

}  // namespace stint
