#include "stint/progress_reporter.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "coord/progress_cell.h"
#include "stint/coordinator_commit_channel.h"

namespace stint {

class ProgressReporter::Impl {
 public:
  Impl(std::unique_ptr<CoordinatorClient> client, std::chrono::milliseconds interval)
      : client_(std::move(client)), interval_(interval), thread_([this] { Loop(); }) {}

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  internal::ProgressCell& cell() { return cell_; }

  struct CheckpointReport {
    uint64_t step;
    double seconds;
    std::optional<double> notice_to_replicas_seconds;
  };
  void QueueCheckpoint(CheckpointReport report) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      checkpoint_ = report;
    }
    cv_.notify_all();
  }
  struct StoredReport {
    int tier;
    uint64_t step;
    uint64_t bytes;
  };
  void QueueStored(const std::string& location, StoredReport report) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stored_[location] = report;
    }
    cv_.notify_all();
  }
  std::chrono::milliseconds interval() const { return interval_; }

  Status last_error() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_error_;
  }

 private:
  void Loop() {
    bool stop = false;
    while (!stop) {
      std::optional<CheckpointReport> checkpoint;
      std::map<std::string, StoredReport> stored;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, interval_, [this] {
          return stopping_ || checkpoint_.has_value() || !stored_.empty();
        });
        stop = stopping_;
        checkpoint.swap(checkpoint_);
        stored.swap(stored_);
      }
      for (const auto& [location, r] : stored) {
        Status sent = client_->ReportStored(location, r.tier, r.step, r.bytes);
        std::lock_guard<std::mutex> lock(mu_);
        last_error_ = sent;
      }
      if (checkpoint) {
        Status sent = client_->ReportCheckpoint(checkpoint->step, checkpoint->seconds,
                                                std::nullopt,
                                                checkpoint->notice_to_replicas_seconds);
        std::lock_guard<std::mutex> lock(mu_);
        last_error_ = sent;
      }
      // One more beat on the way out: the last steps' loss is not lost.
      const WorkerProgress p = cell_.Take();
      if (!p.step && !p.loss && !p.samples) continue;
      Result<WorkerView> view = client_->Heartbeat(p);
      std::lock_guard<std::mutex> lock(mu_);
      last_error_ = view.status();
    }
  }

  const std::unique_ptr<CoordinatorClient> client_;
  const std::chrono::milliseconds interval_;
  internal::ProgressCell cell_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::optional<CheckpointReport> checkpoint_;  // not sent yet
  std::map<std::string, StoredReport> stored_;  // by location, not sent yet
  Status last_error_;
  std::thread thread_;  // last: started once everything above exists
};

ProgressReporter::ProgressReporter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ProgressReporter::~ProgressReporter() = default;

Result<std::unique_ptr<ProgressReporter>> ProgressReporter::Start(
    std::unique_ptr<CoordinatorClient> client, std::chrono::milliseconds interval) {
  if (client == nullptr || !client->registration())
    return Status::FailedPrecondition("ProgressReporter needs a registered worker's client");
  if (interval.count() <= 0) return Status::InvalidArgument("the progress interval must be > 0");
  return std::unique_ptr<ProgressReporter>(
      new ProgressReporter(std::make_unique<Impl>(std::move(client), interval)));
}

Result<std::unique_ptr<ProgressReporter>> ProgressReporter::FromEnvironment() {
  STINT_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> client, WorkerClientFromEnvironment());
  if (client == nullptr) return std::unique_ptr<ProgressReporter>();
  std::chrono::milliseconds interval = client->registration()->heartbeat_interval;
  if (interval.count() <= 0) interval = std::chrono::seconds(5);
  return Start(std::move(client), interval);
}

void ProgressReporter::Report(uint64_t step, std::optional<double> loss,
                              std::optional<uint64_t> samples) {
  internal::ProgressCell& cell = impl_->cell();
  cell.SetStep(step);
  if (loss) cell.SetLoss(*loss, step);
  if (samples) cell.SetSamples(*samples);
}

void ProgressReporter::ReportCheckpoint(uint64_t step, double seconds,
                                        std::optional<double> notice_to_replicas_seconds) {
  impl_->QueueCheckpoint({step, seconds, notice_to_replicas_seconds});
}

void ProgressReporter::ReportStored(const std::string& location, int tier, uint64_t step,
                                    uint64_t bytes) {
  impl_->QueueStored(location, {tier, step, bytes});
}

Status ProgressReporter::last_error() const { return impl_->last_error(); }

std::chrono::milliseconds ProgressReporter::interval() const { return impl_->interval(); }

}  // namespace stint
