#include "stint/elastic_group.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "base/clock.h"
#include "elastic/listen_socket.h"

namespace stint {
namespace {

using Clock = std::chrono::steady_clock;

// The job's KV scoped to one generation: "rdzv/g<generation>/<key>".
class GenerationKv final : public GroupKv {
 public:
  GenerationKv(CoordinatorClient* client, uint64_t generation)
      : client_(client), prefix_("rdzv/g" + std::to_string(generation) + "/") {}

  Status Put(const std::string& key, const std::string& value) override {
    return client_->Put(prefix_ + key, value).status();
  }

  Result<std::string> Wait(const std::string& key, std::chrono::milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - Clock::now());
      Result<KvEntry> e = client_->Get(
          prefix_ + key, std::clamp(left, std::chrono::seconds(0), std::chrono::seconds(10)));
      if (e.ok()) return e->value;
      if (e.status().code() != Code::kNotFound) return e.status();
      if (Clock::now() >= deadline) {
        return Status::DeadlineExceeded("kv " + prefix_ + key + " was not put within " +
                                        std::to_string(timeout.count()) + " ms");
      }
    }
  }

 private:
  CoordinatorClient* const client_;
  const std::string prefix_;
};

// True when every rank of `m` put `mine` true under `what` in the
// generation's KV, waiting for each until `timeout`.
Result<bool> EveryRank(GroupKv* kv, const GroupMembership& m, const std::string& what, bool mine,
                       std::chrono::milliseconds timeout) {
  STINT_RETURN_IF_ERROR(kv->Put(what + "/" + std::to_string(m.rank), mine ? "1" : "0"));
  bool every = true;
  for (int r = 0; r < m.world_size; ++r) {
    STINT_ASSIGN_OR_RETURN(std::string v, kv->Wait(what + "/" + std::to_string(r), timeout));
    every = every && v == "1";
  }
  return every;
}

Result<std::pair<std::string, int>> SplitEndpoint(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return Status::Internal("rendezvous endpoint \"" + endpoint + "\" is not host:port");
  }
  const int port = std::atoi(endpoint.c_str() + colon + 1);
  if (port <= 0 || port > 65535)
    return Status::Internal("rendezvous endpoint \"" + endpoint + "\" has a bad port");
  return std::make_pair(endpoint.substr(0, colon), port);
}

// kFailedPrecondition once `factory` left a communicator unreleased
// (CommunicatorFactory::RestartRequired): re-forming in this process is
// off the ladder, only a restart recovers.
Status RestartIfRequired(const CommunicatorFactory* factory, uint64_t generation) {
  if (factory == nullptr || !factory->RestartRequired()) return Status::OK();
  return Status::FailedPrecondition(
      std::string(factory->Name()) + " communicator of generation " + std::to_string(generation) +
      " was left unreleased (releasing it in-process could hang): this process cannot form "
      "another generation; restart it to rejoin the job");
}

std::string DefaultAdvertiseHost() {
  const char* v = std::getenv("STINT_ADVERTISE_HOST");
  return v != nullptr && *v != '\0' ? v : "127.0.0.1";
}

}  // namespace

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "unknown";
}

Result<std::unique_ptr<ElasticGroup>> ElasticGroup::Create(CoordinatorClient* client,
                                                           CommunicatorFactory* factory,
                                                           ElasticOptions options) {
  if (client == nullptr) return Status::InvalidArgument("ElasticGroup needs a coordinator client");
  std::optional<WorkerRegistration> reg = client->registration();
  if (!reg)
    return Status::FailedPrecondition(
        "ElasticGroup: the coordinator client has not registered a worker");
  if (options.advertise_host.empty()) options.advertise_host = DefaultAdvertiseHost();
  if (options.comm.local_host.empty() ||
      options.comm.local_host == CommunicatorOptions().local_host) {
    options.comm.local_host = options.advertise_host;
  }
  STINT_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> own,
                         CoordinatorClient::Create(client->options()));
  own->UseRegistration(*reg);
  return std::unique_ptr<ElasticGroup>(
      new ElasticGroup(client, factory, std::move(options), std::move(own)));
}

ElasticGroup::ElasticGroup(CoordinatorClient* client, CommunicatorFactory* factory,
                           ElasticOptions options, std::unique_ptr<CoordinatorClient> own_client)
    : client_(client),
      factory_(factory),
      options_(std::move(options)),
      own_client_(std::move(own_client)) {
  watcher_ = std::thread([this] { WatchLoop(); });
}

ElasticGroup::~ElasticGroup() {
  if (comm_) comm_->Abort();
  Cancel();
  watcher_.join();
}

void ElasticGroup::Cancel() {
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    stop_ = true;
  }
  watch_cv_.notify_all();
  own_client_->Shutdown();
}

void ElasticGroup::WatchLoop() {
  while (!stop_) {
    {
      // Nothing to watch before the first generation or while a change is
      // already known (until the re-form publishes the new generation).
      std::unique_lock<std::mutex> lock(watch_mu_);
      watch_cv_.wait(lock, [&] { return stop_ || (generation_ != 0 && !changed_); });
      if (stop_) return;
    }
    const uint64_t ours = generation_;
    Result<RendezvousInfo> info = own_client_->WaitRendezvous(ours, std::chrono::seconds(20));
    if (!info.ok()) {
      if (info.status().code() == Code::kCancelled || IsFenced(info.status())) return;
      // stintd unreachable past the retry deadline: the next collective or
      // heartbeat says more; look again shortly.
      std::unique_lock<std::mutex> lock(watch_mu_);
      watch_cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stop_.load(); });
      continue;
    }
    if (info->generation != ours && generation_ == ours) changed_ = true;
  }
}

Result<RendezvousInfo> ElasticGroup::JoinNext(uint64_t known, int* listen_fd,
                                              Clock::time_point deadline) {
  // A fresh listener per attempt: if this worker becomes rank 0 its store
  // takes it over, and no stale connection of an older generation waits in
  // its backlog.
  STINT_ASSIGN_OR_RETURN(internal::ListenSocket listener,
                         internal::ListenSocket::Open(options_.advertise_host));
  const std::string endpoint = options_.advertise_host + ":" + std::to_string(listener.port());
  RendezvousInfo last;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return Status::DeadlineExceeded(
          "no group formed within " + std::to_string(options_.join_timeout.count() / 1000) +
          " s: generation " + std::to_string(last.generation) + " is " +
          (last.formed ? "formed" : "joining") + " with " + std::to_string(last.world_size) +
          " of min " + std::to_string(last.min_workers) + " workers" +
          (last.standby ? " (this worker is a standby: the group is full)" : ""));
    }
    STINT_ASSIGN_OR_RETURN(
        last, own_client_->JoinRendezvous(endpoint, known,
                                          std::min(left, std::chrono::milliseconds(20000))));
    if (last.ready(known)) {
      *listen_fd = last.rank == 0 ? listener.Release() : -1;
      return last;
    }
  }
}

Status ElasticGroup::FormCommunicator(const RendezvousInfo& next, int listen_fd) {
  GroupMembership m;
  m.generation = next.generation;
  m.rank = next.rank;
  m.world_size = next.world_size;
  STINT_ASSIGN_OR_RETURN(auto master, SplitEndpoint(next.master_endpoint));
  m.master_host = master.first;
  m.master_port = master.second;
  m.master_listen_fd = listen_fd;
  std::vector<uint64_t> ids;
  for (const RendezvousMemberInfo& member : next.members) ids.push_back(member.worker_id);

  std::unique_ptr<Communicator> old = std::move(comm_);
  if (factory_ != nullptr) {
    GenerationKv kv(client_, next.generation);
    Result<std::unique_ptr<Communicator>> formed =
        Status(Code::kUnimplemented, "no old communicator");
    // Only ranks left, in order: the backend may shrink in place.
    std::vector<int> excluded;
    size_t at = 0;
    for (size_t r = 0; r < member_ids_.size(); ++r) {
      if (at < ids.size() && ids[at] == member_ids_[r]) {
        at++;
      } else {
        excluded.push_back(static_cast<int>(r));
      }
    }
    // Every rank shrinks or every rank forms: a collective some ranks skip
    // would hang the others. Whether the new generation is the old one less
    // some ranks is the same fact on every rank that formed the old one (a
    // newcomer makes it false everywhere); whether this rank still holds a
    // usable communicator, and whether its shrink worked, are not: both are
    // agreed through the generation's KV, and when any rank's shrink
    // failed, every rank aborts what it has and forms anew.
    if (at == ids.size() && !excluded.empty()) {
      STINT_ASSIGN_OR_RETURN(bool every,
                             EveryRank(&kv, m, "shrink", old != nullptr && !old->aborted(),
                                       options_.join_timeout));
      if (every) {
        formed = factory_->Shrink(*old, m, excluded);
        STINT_ASSIGN_OR_RETURN(
            every, EveryRank(&kv, m, "shrunk", formed.ok(), options_.join_timeout));
        if (!every && formed.ok()) {
          (*formed)->Abort();
          formed = Status(Code::kAborted, "another rank could not shrink");
        }
      }
    }
    if (old) old->Abort();
    old.reset();
    if (!formed.ok()) {
      Status restart = RestartIfRequired(factory_, membership_.generation);
      if (!restart.ok()) {
        if (listen_fd >= 0) close(listen_fd);  // Form() would have owned it
        return restart;
      }
      formed = factory_->Form(m, kv);
    }
    if (!formed.ok())
      return formed.status().WithContext("form generation " + std::to_string(m.generation));
    comm_ = std::move(*formed);
  } else if (listen_fd >= 0) {
    close(listen_fd);  // the caller's own group binds master_port itself
  }
  membership_ = m;
  membership_.master_listen_fd = -1;
  member_ids_ = std::move(ids);
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    generation_ = m.generation;
    changed_ = false;
  }
  watch_cv_.notify_all();
  return Status::OK();
}

void ElasticGroup::DropCommunicator() {
  if (comm_) comm_->Abort();
  comm_.reset();
}

Result<ElasticStep> ElasticGroup::Reform(bool failed, ElasticState* state) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + options_.join_timeout;
  uint64_t known = membership_.generation;
  // A broken generation's communicator goes at once: closing its
  // connections fails a peer still blocked in a collective with it now,
  // not after that peer's timeout.
  if (failed) DropCommunicator();
  STINT_RETURN_IF_ERROR(RestartIfRequired(factory_, known));
  for (;;) {
    int listen_fd = -1;
    STINT_ASSIGN_OR_RETURN(RendezvousInfo next, JoinNext(known, &listen_fd, deadline));
    Status formed = FormCommunicator(next, listen_fd);
    if (formed.ok() && state != nullptr && comm_ != nullptr) formed = state->Synchronize(*comm_);
    if (formed.ok()) break;
    if (IsFenced(formed)) return formed;
    if (factory_ != nullptr && factory_->RestartRequired()) return formed;
    // A peer of the new generation died while it formed: that generation
    // failed too; join the next one.
    DropCommunicator();
    known = next.generation;
    if (Clock::now() >= deadline) return formed.WithContext("re-form");
  }
  ElasticStep step;
  step.reformed = true;
  step.generation = membership_.generation;
  step.rank = membership_.rank;
  step.world_size = membership_.world_size;
  step.reform_seconds = SecondsSince(t0);
  return step;
}

Result<ElasticStep> ElasticGroup::Join(ElasticState* state) { return Reform(false, state); }

Result<ElasticStep> ElasticGroup::StepBoundary(bool stop_requested, ElasticState* state) {
  ElasticStep step;
  step.generation = membership_.generation;
  step.rank = membership_.rank;
  step.world_size = membership_.world_size;
  if (comm_ == nullptr) {
    step.stop = stop_requested;
    return step;
  }
  // One agreement per step, so every rank takes the same branch.
  int64_t flags[2] = {changed_ ? 1 : 0, stop_requested ? 1 : 0};
  bool failed = comm_->aborted();
  if (!failed) failed = !comm_->AllReduce(flags, 2, DType::kInt64, ReduceOp::kMax).ok();
  if (!failed && flags[1] != 0) {
    step.stop = true;
    return step;
  }
  if (!failed && flags[0] == 0) return step;
  // A stop request that met a failed agreement is agreed at the next
  // boundary, in the new generation (the caller's flag is still set).
  return Reform(failed, state);
}

}  // namespace stint
