// CoordinatorSession: a heartbeat thread and a notice long-poll thread over
// one CoordinatorClient, feeding the PreemptionWatcher.
//
// Two threads rather than one so that a heartbeat is never late behind a
// 30 s long-poll, and a notice is never late behind the heartbeat interval.
#include <atomic>
#include <cstring>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "coord/progress_cell.h"
#include "coord/wall_clock.h"
#include "stint/coordinator_client.h"

namespace stint {
namespace {

// When the server gives no advice.
constexpr std::chrono::milliseconds kDefaultHeartbeat{std::chrono::seconds(5)};
constexpr std::chrono::seconds kNoticeWait{30};

}  // namespace

class CoordinatorSession::Impl {
 public:
  Impl(CoordinatorClient* client, const WorkerRegistration& reg, PreemptionWatcher* watcher)
      : client_(client),
        reg_(reg),
        watcher_(watcher),
        interval_(reg.heartbeat_interval.count() > 0 ? reg.heartbeat_interval : kDefaultHeartbeat),
        heartbeat_thread_([this] { HeartbeatLoop(); }),
        notice_thread_([this] { NoticeLoop(); }) {}

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    // Ends a long-poll (or a retry pause) in progress at once.
    client_->Shutdown();
    heartbeat_thread_.join();
    notice_thread_.join();
  }

  internal::ProgressCell& progress() { return progress_; }
  // The worker gives its segment back (Ack, Finished, Leave): `give_back`
  // is that request. From before it is sent, an answer that the segment
  // ended is its effect, not a fence: a heartbeat answered after stintd
  // processed it but before it returned here must not fence the session.
  // A request that fails lets the loops judge the answers again.
  Status GiveBack(const std::function<Status()>& give_back) {
    releasing_.store(true);
    Status s = give_back();
    if (s.ok()) {
      released_.store(true);
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
    } else {
      releasing_.store(false);
    }
    return s;
  }
  bool fenced() const { return fenced_.load(); }
  std::optional<CoordinatorNotice> notice() const {
    std::lock_guard<std::mutex> lock(mu_);
    return notice_;
  }
  Status last_error() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_error_;
  }

 private:
  // Sleeps `d` unless stopped or released first; true when the loops should end.
  bool SleepFor(std::chrono::milliseconds d) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, d, [this] { return stopping_ || released_.load(); });
  }
  bool done() const {
    if (fenced_.load() || released_.load()) return true;
    std::lock_guard<std::mutex> lock(mu_);
    return stopping_;
  }

  void HeartbeatLoop() {
    // Register() just renewed the lease: the first beat is one interval on.
    while (!SleepFor(interval_) && !done()) {
      Handle(client_->Heartbeat(progress_.Take()));
    }
  }

  void NoticeLoop() {
    while (!done()) {
      auto view = client_->WaitNotice(kNoticeWait);
      const bool failed = !view.ok();
      Handle(std::move(view));
      // Once a notice is pending the server answers every poll at once, so
      // polling on would spin; the heartbeat keeps watching for a changed
      // deadline and for the end of the segment.
      if (notice().has_value()) return;
      // An error the client did not retry away (e.g. 404 from an old stintd):
      // do not turn it into a busy loop.
      if (failed && SleepFor(interval_)) return;
    }
  }

  void Handle(Result<WorkerView> view) {
    // After (or during) our own Ack/Finished/Leave the segment's end is no news.
    if (released_.load() || releasing_.load()) return;
    if (!view.ok()) {
      const Status& s = view.status();
      if (s.code() == Code::kCancelled) return;  // shutting down
      if (IsFenced(s)) {
        MarkFenced(s.message());
        return;
      }
      std::lock_guard<std::mutex> lock(mu_);
      last_error_ = s;
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!fenced_.load()) last_error_ = Status::OK();  // the fenced error stays
    }
    if (view->notice) {
      const CoordinatorNotice& n = *view->notice;
      bool is_new = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        is_new = !notice_ || notice_->reason != n.reason || notice_->deadline_ms != n.deadline_ms;
        if (is_new) notice_ = n;
      }
      // The watcher keeps the earliest deadline, so a repeat would be
      // harmless; skipping it keeps the watcher's "received" time honest.
      if (is_new && watcher_ != nullptr) {
        watcher_->Notify("coordinator " + n.reason, internal::SteadyFromWallMs(n.deadline_ms));
      }
    }
    if (!view->active) {
      MarkFenced("stintd reports the worker inactive (segment " + std::to_string(view->segment_id) +
                 " " + view->segment_state + ")");
    } else if (view->fencing_token != 0 && view->fencing_token != reg_.fencing_token) {
      // A view carries the token of the incarnation stintd knows under this
      // worker id (its own, not the job's or the segment's): another one
      // means stintd's state no longer matches this registration (e.g. it
      // was restored from a backup), so this incarnation cannot commit.
      MarkFenced("stintd reports fencing token " + std::to_string(view->fencing_token) +
                 ", ours is " + std::to_string(reg_.fencing_token));
    }
  }

  void MarkFenced(const std::string& why) {
    if (fenced_.exchange(true)) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_error_ = Status::Aborted("fenced: " + why);
    }
    // The GPUs may already belong to someone else: the deadline is now.
    if (watcher_ != nullptr)
      watcher_->Notify("coordinator fenced", std::chrono::steady_clock::now());
    cv_.notify_all();
  }

  CoordinatorClient* const client_;
  const WorkerRegistration reg_;
  PreemptionWatcher* const watcher_;
  const std::chrono::milliseconds interval_;

  internal::ProgressCell progress_;  // what the next heartbeat sends
  std::atomic<bool> fenced_{false};
  std::atomic<bool> released_{false};
  std::atomic<bool> releasing_{false};  // an Ack/Finished/Leave is in flight

  mutable std::mutex mu_;
  std::condition_variable cv_;  // stopping_, fenced_ or released_ changed
  // Guarded by mu_.
  bool stopping_ = false;
  std::optional<CoordinatorNotice> notice_;
  Status last_error_;

  // Last: they start once everything above is constructed.
  std::thread heartbeat_thread_;
  std::thread notice_thread_;
};

Result<std::unique_ptr<CoordinatorSession>> CoordinatorSession::Start(
    const CoordinatorOptions& options, PreemptionWatcher* watcher) {
  STINT_ASSIGN_OR_RETURN(auto client, CoordinatorClient::Create(options));
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, client->Register());
  return std::unique_ptr<CoordinatorSession>(
      new CoordinatorSession(std::move(client), reg, watcher));
}

CoordinatorSession::CoordinatorSession(std::unique_ptr<CoordinatorClient> client,
                                       WorkerRegistration registration, PreemptionWatcher* watcher)
    : client_(std::move(client)),
      registration_(registration),
      impl_(new Impl(client_.get(), registration_, watcher)) {}

CoordinatorSession::~CoordinatorSession() = default;

bool CoordinatorSession::fenced() const { return impl_->fenced(); }
std::optional<CoordinatorNotice> CoordinatorSession::notice() const { return impl_->notice(); }
Status CoordinatorSession::last_error() const { return impl_->last_error(); }
void CoordinatorSession::SetStep(uint64_t step) { impl_->progress().SetStep(step); }
void CoordinatorSession::ReportLoss(double loss) { impl_->progress().SetLoss(loss); }
void CoordinatorSession::SetSamples(uint64_t samples) { impl_->progress().SetSamples(samples); }

Status CoordinatorSession::Ack(uint64_t step) {
  return impl_->GiveBack([this, step] { return client_->Ack(step); });
}

Status CoordinatorSession::Finished() {
  return impl_->GiveBack([this] { return client_->Finished(); });
}

Status CoordinatorSession::Leave() {
  return impl_->GiveBack([this] { return client_->Leave(); });
}

}  // namespace stint
