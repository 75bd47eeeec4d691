#include "stintd/server/coordinator.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "base/strings.h"
#include "common/launch_spec.h"
#include "stintd/core/accounting.h"
#include "stintd/server/worker_secret.h"

namespace stint::stintd {
namespace {

TimeMs SystemNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Keys: [A-Za-z0-9._/-]{1,200}; values up to kKvMaxValueBytes (API.md).
Status CheckKv(const std::string& key, const std::string* value) {
  if (key.empty() || key.size() > 200)
    return Status::InvalidArgument("kv key must be 1 to 200 characters");
  for (char c : key) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '/' || c == '-';
    if (!ok) return Status::InvalidArgument("kv key \"" + key + "\" may only hold [A-Za-z0-9._/-]");
  }
  if (value != nullptr && value->size() > kKvMaxValueBytes) {
    return Status::InvalidArgument("kv value is " + std::to_string(value->size()) +
                                   " bytes; the limit is 1 MiB");
  }
  return Status::OK();
}

// A job that ended (or is gone) keeps no KV.
bool JobEnded(const ClusterState& s, int64_t job_id) {
  auto it = s.jobs.find(job_id);
  return it == s.jobs.end() || it->second.state == JobState::kDone ||
         it->second.state == JobState::kCancelled || it->second.state == JobState::kFailed;
}

int64_t KvBytes(const std::string& key, const std::string& value) {
  return static_cast<int64_t>(key.size() + value.size());
}

// Heartbeats are soft state: a state loaded from the file gives every lease
// a full TTL (the workers were heartbeating to a dead server, not dead
// themselves).
void ResetLeases(ClusterState& state, TimeMs now) {
  for (auto& [id, w] : state.workers) w.last_heartbeat_ms = now;
  for (auto& [id, seg] : state.segments) {
    if (SegmentActive(seg.state)) seg.last_heartbeat_ms = now;
  }
}

}  // namespace

Result<std::unique_ptr<Coordinator>> Coordinator::Open(CoordinatorOptions options) {
  if (!options.clock) options.clock = SystemNowMs;
  if (!(options.tick_seconds > 0)) return Status::InvalidArgument("tick_seconds must be > 0");
  STINT_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(options.db_path));
  if (options.fence) STINT_RETURN_IF_ERROR(store->SetFence(*options.fence));
  STINT_ASSIGN_OR_RETURN(ClusterState state, store->Load());
  STINT_ASSIGN_OR_RETURN(std::vector<KvRecord> entries, store->LoadKv());
  std::map<std::pair<int64_t, std::string>, KvRecord> kv;
  std::set<int64_t> ended;  // entries a stintd from before KV cleanup left behind
  for (KvRecord& e : entries) {
    if (JobEnded(state, e.job_id)) {
      ended.insert(e.job_id);
      continue;
    }
    kv[{e.job_id, e.key}] = std::move(e);
  }
  for (int64_t job : ended) STINT_RETURN_IF_ERROR(store->DeleteJobKv(job));
  ResetLeases(state, options.clock());
  return std::unique_ptr<Coordinator>(
      new Coordinator(std::move(options), std::move(store), std::move(state), std::move(kv)));
}

Coordinator::Coordinator(CoordinatorOptions options, std::unique_ptr<Store> store,
                         ClusterState state, std::map<std::pair<int64_t, std::string>, KvRecord> kv)
    : options_(std::move(options)),
      store_(std::move(store)),
      state_(std::move(state)),
      kv_(std::move(kv)) {
  for (const auto& [id, e] : kv_) {
    KvUsage& u = kv_usage_[e.job_id];
    u.keys++;
    u.bytes += KvBytes(e.key, e.value);
  }
  usage_flushed_ms_ = options_.clock();
  placed_.Rebuild(state_);
  Tick();  // a plan exists before the first request is served
  tick_thread_ = std::thread([this] { TickLoop(); });
}

Coordinator::~Coordinator() {
  {
    std::lock_guard<std::mutex> lock(tick_mu_);
    stopping_ = true;
  }
  stop_ = true;
  tick_cv_.notify_all();
  NotifyEvent();
  tick_thread_.join();
}

void Coordinator::Read(
    const std::function<void(const ClusterState&, const Plan&, TimeMs)>& fn) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  fn(state_, last_plan_, options_.clock());
}

void Coordinator::ReadPlacedOn(
    int64_t window_id,
    const std::function<void(const ClusterState&, const std::set<int64_t>&, TimeMs)>& fn) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  fn(state_, placed_.On(window_id), options_.clock());
}

Status Coordinator::SaveOrRollback(const Changes& changes) {
  if (changes.empty()) return Status::OK();
  Status saved = store_->Save(state_, changes);
  if (saved.ok()) {
    placed_.Update(state_, changes.segments);
    for (int64_t job : changes.jobs) {
      if (!JobEnded(state_, job) || kv_usage_.count(job) == 0) continue;
      // The change itself is durable; entries left by a failed delete go
      // at the next start.
      Status dropped = DropJobKv(job);
      if (!dropped.ok()) {
        std::fprintf(stderr, "stintd: %s\n", dropped.ToString().c_str());
      }
    }
    return saved;
  }
  {
    std::lock_guard<std::mutex> lock(counters_mu_);
    counters_.store_errors++;
  }
  // Memory must not hold what the disk refused: reload the last durable state.
  Result<ClusterState> reloaded = store_->Load();
  if (!reloaded.ok()) {
    // Neither the change nor the old state can be trusted in memory; a
    // restart reloads the file (crash-only: the file is the truth).
    std::fprintf(stderr, "stintd: store write failed (%s) and reload failed (%s); exiting\n",
                 saved.ToString().c_str(), reloaded.status().ToString().c_str());
    std::_Exit(70);
  }
  state_ = std::move(*reloaded);
  placed_.Rebuild(state_);
  ResetLeases(state_, options_.clock());
  return saved.WithContext("stintd could not make the change durable; nothing was changed");
}

Status Coordinator::DropJobKv(int64_t job_id) {
  STINT_RETURN_IF_ERROR(store_->DeleteJobKv(job_id).WithContext(
      "job " + std::to_string(job_id) + " ended but its KV stays until the next start"));
  kv_.erase(kv_.lower_bound({job_id, std::string()}), kv_.lower_bound({job_id + 1, std::string()}));
  kv_usage_.erase(job_id);
  return Status::OK();
}

Status Coordinator::Mutate(const std::function<Status(ClusterState&, TimeMs, Changes*)>& fn) {
  {
    std::lock_guard<std::mutex> writer(write_mu_);
    std::unique_lock<std::shared_mutex> lock(mu_);
    Changes changes;
    // Transitions validate before they change anything, so an error leaves
    // the state as it was.
    STINT_RETURN_IF_ERROR(fn(state_, options_.clock(), &changes));
    STINT_RETURN_IF_ERROR(SaveOrRollback(changes));
  }
  WakeTick();
  NotifyEvent();
  return Status::OK();
}

Result<Pool> Coordinator::AddPool(const Pool& pool) {
  STINT_RETURN_IF_ERROR(Mutate(
      [&](ClusterState& s, TimeMs now, Changes* c) { return stintd::AddPool(s, pool, now, c); }));
  std::shared_lock<std::shared_mutex> lock(mu_);
  return state_.pools.at(pool.name);
}

Result<Pool> Coordinator::SetPoolPrice(const std::string& pool, double price_per_gpu_hour) {
  STINT_RETURN_IF_ERROR(Mutate([&](ClusterState& s, TimeMs now, Changes* c) {
    return stintd::SetPoolPrice(s, pool, price_per_gpu_hour, now, c);
  }));
  std::shared_lock<std::shared_mutex> lock(mu_);
  return state_.pools.at(pool);
}

Result<Pool> Coordinator::SetPoolStorage(const std::string& pool,
                                         const std::vector<std::string>& storage) {
  STINT_RETURN_IF_ERROR(Mutate([&](ClusterState& s, TimeMs, Changes* c) {
    return stintd::SetPoolStorage(s, pool, storage, c);
  }));
  WakeTick();  // a job waiting for storage may start now
  std::shared_lock<std::shared_mutex> lock(mu_);
  return state_.pools.at(pool);
}

Status Coordinator::SetPriceRule(Priority priority, const PriceRule& rule) {
  const Status s = Mutate([&](ClusterState& st, TimeMs, Changes* c) {
    return stintd::SetPriceRule(st, priority, rule, c);
  });
  if (s.ok()) WakeTick();
  return s;
}

Result<Window> Coordinator::AddWindow(const Window& window) {
  int64_t id = 0;
  STINT_RETURN_IF_ERROR(Mutate([&](ClusterState& s, TimeMs now, Changes* c) -> Status {
    STINT_ASSIGN_OR_RETURN(id, stintd::AddWindow(s, window, now, c));
    return Status::OK();
  }));
  std::shared_lock<std::shared_mutex> lock(mu_);
  return state_.windows.at(id);
}

Result<Window> Coordinator::CloseWindow(int64_t window_id, std::optional<TimeMs> lead_ms) {
  STINT_RETURN_IF_ERROR(Mutate([&](ClusterState& s, TimeMs now, Changes* c) -> Status {
    auto it = s.windows.find(window_id);
    const TimeMs lead =
        lead_ms ? *lead_ms : (it == s.windows.end() ? 0 : it->second.notice_lead_ms);
    return stintd::CloseWindow(s, window_id, lead, now, c);
  }));
  std::shared_lock<std::shared_mutex> lock(mu_);
  return state_.windows.at(window_id);
}

Result<Team> Coordinator::PutTeam(const Team& team) {
  STINT_RETURN_IF_ERROR(Mutate(
      [&](ClusterState& s, TimeMs now, Changes* c) { return stintd::PutTeam(s, team, now, c); }));
  std::shared_lock<std::shared_mutex> lock(mu_);
  return state_.teams.at(team.name);
}

Result<Job> Coordinator::SubmitJob(const Job& spec) {
  int64_t id = 0;
  STINT_RETURN_IF_ERROR(Mutate([&](ClusterState& s, TimeMs now, Changes* c) -> Status {
    STINT_ASSIGN_OR_RETURN(id, stintd::SubmitJob(s, spec, now, c));
    return Status::OK();
  }));
  std::shared_lock<std::shared_mutex> lock(mu_);
  return state_.jobs.at(id);
}

Result<Job> Coordinator::CancelJob(int64_t job_id, const std::string& reason) {
  STINT_RETURN_IF_ERROR(Mutate([&](ClusterState& s, TimeMs now, Changes* c) {
    return stintd::CancelJob(s, job_id, reason, now, c);
  }));
  std::shared_lock<std::shared_mutex> lock(mu_);
  return state_.jobs.at(job_id);
}

Result<Job> Coordinator::SetPriority(int64_t job_id, Priority priority) {
  STINT_RETURN_IF_ERROR(Mutate([&](ClusterState& s, TimeMs, Changes* c) {
    return stintd::SetPriority(s, job_id, priority, c);
  }));
  std::shared_lock<std::shared_mutex> lock(mu_);
  return state_.jobs.at(job_id);
}

Result<Worker> Coordinator::RegisterWorker(int64_t job_id, const std::string& name,
                                           std::string* secret, const std::string& node) {
  // Drawn outside the lock; the id it is bound to only inside.
  STINT_ASSIGN_OR_RETURN(WorkerSecret fresh, NewWorkerSecret());
  Worker worker;
  STINT_RETURN_IF_ERROR(Mutate([&](ClusterState& s, TimeMs now, Changes* c) -> Status {
    STINT_ASSIGN_OR_RETURN(worker, stintd::RegisterWorker(s, job_id, name, now, c));
    worker.secret_hash = fresh.hash;
    s.workers[worker.id].secret_hash = fresh.hash;  // saved with the row RegisterWorker marked
    worker.node = node;
    s.workers[worker.id].node = node;
    return Status::OK();
  }));
  *secret = fresh.For(worker.id);
  return worker;
}

Result<WorkerView> Coordinator::Heartbeat(int64_t worker_id, const HeartbeatReport& report) {
  Result<WorkerView> view = [&] {
    std::shared_lock<std::shared_mutex> lock(mu_);
    return ViewWorker(state_, worker_id);
  }();
  if (!view.ok()) return view;
  if (view->active) {
    std::lock_guard<std::mutex> lock(beats_mu_);
    Beat& b = beats_[worker_id];
    b.at = options_.clock();
    b.report.step = std::max(b.report.step, report.step);
    if (report.samples) b.report.samples = report.samples;
    if (report.loss) {
      b.report.loss = report.loss;
      b.report.loss_step = report.loss_step;
    }
  }
  std::lock_guard<std::mutex> lock(counters_mu_);
  counters_.heartbeats++;
  return view;
}

std::chrono::milliseconds Coordinator::LongPollLimit(std::chrono::milliseconds wait) const {
  // A worker waiting in a long-poll is alive: the poll renews its lease on
  // entry and on return, and never waits longer than half a lease.
  return std::min(wait,
                  std::chrono::milliseconds(SecondsToMs(options_.policy.lease_ttl_seconds / 2)));
}

Result<WorkerView> Coordinator::WaitNotice(int64_t worker_id, std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + LongPollLimit(wait);
  Result<WorkerView> first = Heartbeat(worker_id);
  if (!first.ok() || !first->active || first->notice_reason != NoticeReason::kNone) return first;
  for (;;) {
    uint64_t seen;
    {
      std::lock_guard<std::mutex> lock(event_mu_);
      seen = event_seq_;
    }
    Result<WorkerView> view = [&] {
      std::shared_lock<std::shared_mutex> lock(mu_);
      return ViewWorker(state_, worker_id);
    }();
    if (!view.ok() || !view->active || view->notice_reason != NoticeReason::kNone || stop_)
      return view;
    std::unique_lock<std::mutex> lock(event_mu_);
    if (!event_cv_.wait_until(lock, until, [&] { return event_seq_ != seen || stop_.load(); })) {
      lock.unlock();
      return Heartbeat(worker_id);
    }
  }
}

Status Coordinator::ReportProgress(int64_t worker_id, int64_t step, double remaining_seconds) {
  return Mutate([&](ClusterState& s, TimeMs now, Changes* c) {
    return stintd::ReportProgress(s, worker_id, step, remaining_seconds, now, c);
  });
}

Status Coordinator::ReportCheckpoint(int64_t worker_id, int64_t step, double seconds,
                                     uint64_t bytes,
                                     std::optional<double> notice_to_replicas_seconds) {
  return Mutate([&](ClusterState& s, TimeMs now, Changes* c) {
    return stintd::ReportCheckpoint(s, worker_id, step, seconds, bytes, now, c,
                                    notice_to_replicas_seconds);
  });
}

Status Coordinator::ReportStored(int64_t worker_id, const std::string& location, int tier,
                                 int64_t step, uint64_t bytes) {
  return Mutate([&](ClusterState& s, TimeMs now, Changes* c) {
    return stintd::ReportStored(s, worker_id, location, tier, step, bytes, now, c);
  });
}

Status Coordinator::Ack(int64_t worker_id, int64_t step) {
  return Mutate([&](ClusterState& s, TimeMs now, Changes* c) {
    return stintd::AckSegment(s, worker_id, step, now, c);
  });
}

Status Coordinator::Finish(int64_t worker_id) {
  return Mutate([&](ClusterState& s, TimeMs now, Changes* c) {
    return stintd::FinishJob(s, worker_id, now, c);
  });
}

Status Coordinator::Leave(int64_t worker_id) {
  return Mutate([&](ClusterState& s, TimeMs now, Changes* c) {
    return stintd::ReleaseWorker(s, worker_id, now, c);
  });
}

bool Coordinator::CheckFencing(int64_t job_id, uint64_t token, TimeMs* valid_until_ms,
                               std::string* why) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return FencingValid(state_, job_id, token, options_.clock(), valid_until_ms, why);
}

Result<RendezvousView> Coordinator::JoinRendezvous(int64_t worker_id, const std::string& endpoint,
                                                   uint64_t known_generation,
                                                   std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + LongPollLimit(wait);
  STINT_RETURN_IF_ERROR(Heartbeat(worker_id).status());
  RendezvousView joined;
  STINT_RETURN_IF_ERROR(Mutate([&](ClusterState& s, TimeMs now, Changes* c) -> Status {
    STINT_ASSIGN_OR_RETURN(joined, stintd::JoinRendezvous(s, worker_id, endpoint, known_generation,
                                                          now, options_.policy, c));
    return Status::OK();
  }));
  if (joined.ready(known_generation)) return joined;
  return AwaitRendezvous(
      worker_id, [known_generation](const RendezvousView& v) { return v.ready(known_generation); },
      until);
}

Result<RendezvousView> Coordinator::WaitRendezvous(int64_t worker_id, uint64_t known_generation,
                                                   std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + LongPollLimit(wait);
  STINT_RETURN_IF_ERROR(Heartbeat(worker_id).status());
  return AwaitRendezvous(
      worker_id,
      [known_generation](const RendezvousView& v) { return v.generation != known_generation; },
      until);
}

Result<RendezvousView> Coordinator::AwaitRendezvous(
    int64_t worker_id, const std::function<bool(const RendezvousView&)>& done,
    std::chrono::steady_clock::time_point until) {
  for (;;) {
    uint64_t seen;
    {
      std::lock_guard<std::mutex> lock(event_mu_);
      seen = event_seq_;
    }
    TimeMs deadline = kNever;
    Result<RendezvousView> view = [&]() -> Result<RendezvousView> {
      std::shared_lock<std::shared_mutex> lock(mu_);
      Result<WorkerView> w = ViewWorker(state_, worker_id);
      if (!w.ok()) return w.status();
      if (!w->active) {
        return Status::Aborted("worker " + std::to_string(worker_id) + " is fenced: segment " +
                               std::to_string(w->segment_id) + " is " +
                               SegmentStateName(w->segment_state));
      }
      deadline = NextRendezvousDeadline(state_);
      return ViewRendezvous(state_, worker_id);
    }();
    if (!view.ok() || done(*view) || stop_) return view;
    // Wake for the next event, the poll's end, or the last call of an open
    // round (its clock is the coordinator's; the wait is on steady time).
    auto wake = until;
    if (deadline != kNever) {
      const auto to_deadline =
          std::chrono::milliseconds(std::max<TimeMs>(0, deadline - options_.clock()));
      wake = std::min(wake, std::chrono::steady_clock::now() + to_deadline);
    }
    bool event;
    {
      std::unique_lock<std::mutex> lock(event_mu_);
      event = event_cv_.wait_until(lock, wake, [&] { return event_seq_ != seen || stop_.load(); });
    }
    if (event) continue;
    if (std::chrono::steady_clock::now() >= until) {
      Heartbeat(worker_id).status().IgnoreError();
      std::shared_lock<std::shared_mutex> lock(mu_);
      return ViewRendezvous(state_, worker_id);
    }
    STINT_RETURN_IF_ERROR(Mutate([&](ClusterState& s, TimeMs now, Changes* c) {
      AdvanceRendezvous(s, now, options_.policy, c);
      return Status::OK();
    }));
  }
}

Result<int64_t> Coordinator::PutKv(int64_t job_id, const std::string& key, const std::string& value,
                                   std::optional<int64_t> if_version) {
  STINT_RETURN_IF_ERROR(CheckKv(key, &value));
  Result<int64_t> version = Status::Internal("not written");
  {
    std::lock_guard<std::mutex> writer(write_mu_);
    version = PutKvAsWriter(job_id, key, value, if_version);
  }
  if (version.ok()) NotifyEvent();
  return version;
}

Result<KvRecord> Coordinator::AddKv(int64_t job_id, const std::string& key, int64_t delta) {
  STINT_RETURN_IF_ERROR(CheckKv(key, nullptr));
  Result<KvRecord> added = Status::Internal("not written");
  {
    std::lock_guard<std::mutex> writer(write_mu_);
    added = [&]() -> Result<KvRecord> {
      int64_t current = 0;
      {
        std::shared_lock<std::shared_mutex> lock(mu_);
        auto it = kv_.find({job_id, key});
        if (it != kv_.end()) {
          const std::string& v = it->second.value;
          auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), current);
          if (ec != std::errc() || end != v.data() + v.size() || v.empty()) {
            return Status::FailedPrecondition("kv " + key + " of job " + std::to_string(job_id) +
                                              " holds \"" + ValidUtf8Prefix(v, 32) +
                                              "\", not a counter (a decimal integer)");
          }
        }
      }
      if ((delta > 0 && current > INT64_MAX - delta) ||
          (delta < 0 && current < INT64_MIN - delta)) {
        return Status::InvalidArgument("kv " + key + " of job " + std::to_string(job_id) + ": " +
                                       std::to_string(current) + " + " + std::to_string(delta) +
                                       " overflows");
      }
      STINT_RETURN_IF_ERROR(
          PutKvAsWriter(job_id, key, std::to_string(current + delta), std::nullopt).status());
      std::shared_lock<std::shared_mutex> lock(mu_);
      return kv_.at({job_id, key});
    }();
  }
  if (added.ok()) NotifyEvent();
  return added;
}

Result<int64_t> Coordinator::PutKvAsWriter(int64_t job_id, const std::string& key,
                                           const std::string& value,
                                           std::optional<int64_t> if_version) {
  KvRecord e;
  KvUsage after;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    if (!state_.jobs.count(job_id))
      return Status::NotFound("job " + std::to_string(job_id) + " does not exist");
    if (JobEnded(state_, job_id)) {
      return Status::FailedPrecondition("job " + std::to_string(job_id) +
                                        " has ended: its KV is gone and takes no writes");
    }
    auto it = kv_.find({job_id, key});
    const int64_t current = it == kv_.end() ? 0 : it->second.version;
    if (if_version && *if_version != current) {
      return Status::Aborted("kv " + key + " of job " + std::to_string(job_id) + " is at version " +
                             std::to_string(current) + ", not " + std::to_string(*if_version));
    }
    auto used = kv_usage_.find(job_id);
    const KvUsage before = used == kv_usage_.end() ? KvUsage{} : used->second;
    after = before;
    if (it == kv_.end()) {
      after.keys++;
    } else {
      after.bytes -= KvBytes(key, it->second.value);
    }
    after.bytes += KvBytes(key, value);
    if (after.keys > before.keys && after.keys > options_.kv_max_keys_per_job) {
      return Status::ResourceExhausted(
          "job " + std::to_string(job_id) + "'s KV holds " + std::to_string(before.keys) +
          " keys, the most a job may hold (stintd --kv-max-keys-per-job); delete keys first");
    }
    if (after.bytes > before.bytes && after.bytes > options_.kv_max_bytes_per_job) {
      return Status::ResourceExhausted(
          "kv " + key + " would take job " + std::to_string(job_id) + "'s KV to " +
          std::to_string(after.bytes) + " bytes, past the " +
          std::to_string(options_.kv_max_bytes_per_job) +
          " a job may hold (stintd --kv-max-bytes-per-job); delete keys first");
    }
    e = KvRecord{job_id, key, value, current + 1, options_.clock()};
  }
  // The durable write holds only write_mu_: heartbeats and reads, which take
  // mu_ shared, go on during its fsync; no other writer can run meanwhile.
  STINT_RETURN_IF_ERROR(store_->PutKv(e));
  const int64_t version = e.version;
  std::unique_lock<std::shared_mutex> lock(mu_);
  kv_[{job_id, key}] = std::move(e);
  kv_usage_[job_id] = after;
  return version;
}

Result<KvRecord> Coordinator::GetKv(int64_t job_id, const std::string& key, int64_t min_version,
                                    std::chrono::milliseconds wait) {
  STINT_RETURN_IF_ERROR(CheckKv(key, nullptr));
  const auto until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    uint64_t seen;
    {
      std::lock_guard<std::mutex> lock(event_mu_);
      seen = event_seq_;
    }
    {
      std::shared_lock<std::shared_mutex> lock(mu_);
      auto it = kv_.find({job_id, key});
      if (it != kv_.end() && it->second.version >= min_version) return it->second;
    }
    std::unique_lock<std::mutex> lock(event_mu_);
    if (stop_ ||
        !event_cv_.wait_until(lock, until, [&] { return event_seq_ != seen || stop_.load(); })) {
      return Status::NotFound("kv " + key + " of job " + std::to_string(job_id) +
                              (min_version > 1 ? " has no version >= " + std::to_string(min_version)
                                               : std::string(" does not exist")));
    }
  }
}

Status Coordinator::DeleteKv(int64_t job_id, const std::string& key) {
  STINT_RETURN_IF_ERROR(CheckKv(key, nullptr));
  std::lock_guard<std::mutex> writer(write_mu_);
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    if (!kv_.count({job_id, key})) {
      return Status::NotFound("kv " + key + " of job " + std::to_string(job_id) +
                              " does not exist");
    }
  }
  // As in PutKvAsWriter: readers go on during the write's fsync.
  STINT_RETURN_IF_ERROR(store_->DeleteKv(job_id, key));
  std::unique_lock<std::shared_mutex> lock(mu_);
  auto it = kv_.find({job_id, key});
  KvUsage& u = kv_usage_[job_id];
  u.keys--;
  u.bytes -= KvBytes(key, it->second.value);
  if (u.keys == 0) kv_usage_.erase(job_id);
  kv_.erase(it);
  return Status::OK();
}

ServerCounters Coordinator::server_counters() const {
  std::lock_guard<std::mutex> lock(counters_mu_);
  return counters_;
}

void Coordinator::MergeHeartbeats() {
  std::unordered_map<int64_t, Beat> beats;
  std::unordered_map<int64_t, TimeMs> segment_beats;
  {
    std::lock_guard<std::mutex> lock(beats_mu_);
    beats.swap(beats_);
    segment_beats.swap(segment_beats_);
  }
  for (const auto& [id, at] : segment_beats) {
    auto seg = state_.segments.find(id);
    if (seg != state_.segments.end())
      seg->second.last_heartbeat_ms = std::max(seg->second.last_heartbeat_ms, at);
  }
  for (const auto& [id, b] : beats) {
    auto w = state_.workers.find(id);
    if (w == state_.workers.end()) continue;
    w->second.last_heartbeat_ms = std::max(w->second.last_heartbeat_ms, b.at);
    auto seg = state_.segments.find(w->second.segment_id);
    if (seg != state_.segments.end())
      seg->second.last_heartbeat_ms = std::max(seg->second.last_heartbeat_ms, b.at);
    auto job = state_.jobs.find(w->second.job_id);
    if (job == state_.jobs.end()) continue;
    if (b.report.step > job->second.last_step) job->second.last_step = b.report.step;
    // Only a worker of the job's running segment reports its progress.
    if (seg != state_.segments.end() && SegmentActive(seg->second.state) &&
        job->second.segment_id == seg->first && !w->second.released)
      RecordProgress(seg->second, job->second, b.report, b.at);
  }
}

// Grows are kept only as far as stint-agent can launch them: for segments
// on its nodes whose job has a launch spec (nothing starts ranks for the
// others), whole workers (gpus_per_worker) per node window, and none for a
// torchrun launch (its one launcher per node started the node's workers).
// What is dropped stays free for this plan.
namespace {
void KeepLaunchableGrows(const ClusterState& s, Plan* plan) {
  for (GrowDecision& d : plan->grows) {
    auto seg = s.segments.find(d.segment_id);
    auto job = seg == s.segments.end() ? s.jobs.end() : s.jobs.find(seg->second.job_id);
    const Result<tools::LaunchSpec> launch =
        job == s.jobs.end() || seg->second.placement.empty()
            ? Result<tools::LaunchSpec>(Status::NotFound("no job or no placement"))
            : tools::LaunchSpec::Parse(job->second.launch);
    if (!launch.ok()) {
      d.add.clear();
      continue;
    }
    const bool torchrun = launch->ThroughTorchrun();
    const int gpw = launch->GpusPerWorker();
    for (Allocation& a : d.add) {
      auto w = s.windows.find(a.window_id);
      const bool node = w != s.windows.end() && !w->second.node.empty();
      a.gpus = !node || torchrun ? 0 : a.gpus / gpw * gpw;
    }
    d.add.erase(
        std::remove_if(d.add.begin(), d.add.end(), [](const Allocation& a) { return a.gpus <= 0; }),
        d.add.end());
  }
  plan->grows.erase(std::remove_if(plan->grows.begin(), plan->grows.end(),
                                   [](const GrowDecision& d) { return d.add.empty(); }),
                    plan->grows.end());
}
}  // namespace

void Coordinator::Tick() {
  const auto t0 = std::chrono::steady_clock::now();
  bool events = false;
  bool nodes_closed = false;
  {
    // No other writer may change the state between the plan and its
    // application; readers and heartbeats go on meanwhile.
    std::lock_guard<std::mutex> writer(write_mu_);
    const TimeMs now = options_.clock();
    Changes changes;
    {
      std::unique_lock<std::shared_mutex> lock(mu_);
      MergeHeartbeats();
      nodes_closed = CloseSilentNodes(now, &changes);
      AccountTime(state_, now, options_.policy, &changes);
      AdvanceRendezvous(state_, now, options_.policy, &changes);
    }
    const bool rendezvous_changed = !changes.rendezvous.empty() || nodes_closed;
    // Usage, attained service and the GPU-second counters are integrated
    // every tick but written with the next decision or once per flush
    // period: a crash loses at most that much accounting, and an idle tick
    // costs no fsync.
    changes.counters = false;
    if (now - usage_flushed_ms_ >= SecondsToMs(options_.usage_flush_seconds)) {
      for (const auto& [name, t] : state_.teams) changes.teams.insert(name);
      for (const auto& [id, seg] : state_.segments) {
        if (!SegmentActive(seg.state)) continue;
        changes.jobs.insert(seg.job_id);
        changes.segments.insert(id);  // its charges and pace
      }
      changes.counters = true;
      usage_flushed_ms_ = now;
    }
    Plan plan;
    {
      std::shared_lock<std::shared_mutex> lock(mu_);
      plan = MakePlan(state_, now, options_.policy);
    }
    std::unique_lock<std::shared_mutex> lock(mu_);
    KeepLaunchableGrows(state_, &plan);
    ApplyPlan(state_, plan, now, &changes);
    PlaceSegments(changes, &changes);
    events =
        rendezvous_changed || !plan.starts.empty() || !plan.notices.empty() || !plan.lost.empty();
    Status saved = SaveOrRollback(changes);
    if (!saved.ok()) {
      std::fprintf(stderr, "stintd: tick not applied: %s\n", saved.ToString().c_str());
      events = false;
    }
    last_plan_ = std::move(plan);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  {
    std::lock_guard<std::mutex> lock(counters_mu_);
    counters_.plans++;
    counters_.last_plan_seconds = seconds;
    counters_.max_plan_seconds = std::max(counters_.max_plan_seconds, seconds);
  }
  if (events) NotifyEvent();
}

void Coordinator::PlaceSegments(const Changes& started, Changes* changes) {
  std::vector<int64_t> ids(started.segments.begin(), started.segments.end());
  for (int64_t id : ids) {
    auto it = state_.segments.find(id);
    if (it == state_.segments.end()) continue;
    Segment& seg = it->second;
    if (!SegmentActive(seg.state)) continue;
    bool placed = false;
    for (const Allocation& a : seg.allocs) {
      auto w = state_.windows.find(a.window_id);
      if (w == state_.windows.end() || w->second.node.empty()) continue;
      // A started segment gets its indices; a grown one keeps those it
      // holds (its running ranks) and adds more, a new window at the end.
      auto p = std::find_if(seg.placement.begin(), seg.placement.end(),
                            [&](const Placement& x) { return x.window_id == a.window_id; });
      if (p == seg.placement.end()) {
        p = seg.placement.insert(seg.placement.end(), Placement{a.window_id, {}});
      } else if (static_cast<int>(p->gpus.size()) >= a.gpus) {
        continue;
      }
      // The indices active segments hold on this window.
      std::set<int> used(p->gpus.begin(), p->gpus.end());
      for (const auto& [oid, other] : state_.segments) {
        if (oid == id || !SegmentActive(other.state)) continue;
        for (const Placement& q : other.placement) {
          if (q.window_id == a.window_id) used.insert(q.gpus.begin(), q.gpus.end());
        }
      }
      for (int g : w->second.node_gpus) {
        if (static_cast<int>(p->gpus.size()) == a.gpus) break;
        if (!used.count(g)) p->gpus.push_back(g);
      }
      placed = true;
    }
    if (!placed) continue;
    // Chosen once: the ranks a grow adds join the same master.
    if (seg.master_port == 0) seg.master_port = ChooseMasterPort(seg);
    changes->segments.insert(id);
  }
}

int Coordinator::ChooseMasterPort(const Segment& seg) const {
  // The master is the node of the first placement (Assignments, node_routes.cc).
  auto master_node = [&](const Segment& g) -> std::string {
    if (g.placement.empty()) return "";
    auto w = state_.windows.find(g.placement.front().window_id);
    return w == state_.windows.end() ? "" : w->second.node;
  };
  const std::string node = master_node(seg);
  std::set<int> used;
  for (const auto& [oid, other] : state_.segments) {
    if (oid == seg.id || !SegmentActive(other.state) || other.master_port == 0) continue;
    if (master_node(other) == node) used.insert(other.master_port);
  }
  const int first = options_.master_port_first;
  const int size = options_.master_port_last - first + 1;
  for (int i = 0; i < size; i++) {
    const int port = first + static_cast<int>((seg.id + i) % size);
    if (!used.count(port)) return port;
  }
  std::fprintf(stderr,
               "stintd: every port of --master-ports %d-%d is held by an active segment on node "
               "%s; segment %lld shares port %d\n",
               first, options_.master_port_last, node.c_str(), static_cast<long long>(seg.id),
               first + static_cast<int>(seg.id % size));
  return first + static_cast<int>(seg.id % size);
}

void Coordinator::WakeTick() {
  {
    std::lock_guard<std::mutex> lock(tick_mu_);
    tick_requested_ = true;
  }
  tick_cv_.notify_one();
}

void Coordinator::CancelWaits() {
  stop_ = true;
  NotifyEvent();
}

uint64_t Coordinator::EventSeq() const {
  std::lock_guard<std::mutex> lock(event_mu_);
  return event_seq_;
}

bool Coordinator::WaitEvent(uint64_t seen, std::chrono::steady_clock::time_point until) {
  std::unique_lock<std::mutex> lock(event_mu_);
  return event_cv_.wait_until(lock, until, [&] { return event_seq_ != seen || stop_.load(); }) &&
         !stop_.load();
}

std::chrono::milliseconds Coordinator::NodePollLimit(std::chrono::milliseconds wait) const {
  const double seconds = std::min(options_.node_ttl_seconds, options_.policy.lease_ttl_seconds) / 3;
  return std::min(wait, std::chrono::milliseconds(SecondsToMs(seconds)));
}

void Coordinator::NotifyEvent() {
  {
    std::lock_guard<std::mutex> lock(event_mu_);
    event_seq_++;
  }
  event_cv_.notify_all();
}

void Coordinator::TickLoop() {
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(options_.tick_seconds));
  std::unique_lock<std::mutex> lock(tick_mu_);
  while (!stopping_) {
    tick_cv_.wait_for(lock, period, [&] { return tick_requested_ || stopping_; });
    if (stopping_) break;
    tick_requested_ = false;
    lock.unlock();
    Tick();
    lock.lock();
  }
}

}  // namespace stint::stintd
