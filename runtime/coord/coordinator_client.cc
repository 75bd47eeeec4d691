// CoordinatorClient: the worker endpoints of API.md, one call each, over
// HttpJsonClient (which owns the connections, the retries and the error
// mapping).
#include "stint/coordinator_client.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "coord/http_json.h"
#include "coord/wall_clock.h"

namespace stint {
namespace {

using internal::HttpReply;
using internal::HttpRequest;
using internal::Json;

constexpr size_t kMaxKvValueBytes = 1u << 20;
constexpr size_t kMaxKvKeyBytes = 200;
constexpr int64_t kMaxNoticeWaitSeconds = 60;

// Reads fields of an answer. A missing or mistyped field is stintd's bug (or
// a version mismatch), reported as kInternal naming the field; the first
// such error sticks.
class ReplyReader {
 public:
  ReplyReader(const Json& j, std::string what) : j_(j), what_(std::move(what)) {
    if (!j_.is_object()) Fail("the answer", "is not a JSON object");
  }

  uint64_t U64(const char* key, bool required = true) {
    const Json* v = Find(key, required);
    if (v == nullptr) return 0;
    if (v->is_number_unsigned()) return v->get<uint64_t>();
    if (v->is_number_integer() && v->get<int64_t>() >= 0) return uint64_t(v->get<int64_t>());
    Fail(key, "is not a non-negative integer");
    return 0;
  }
  int64_t I64(const char* key, bool required = true) {
    const Json* v = Find(key, required);
    if (v == nullptr) return 0;
    if (v->is_number_integer()) return v->get<int64_t>();
    if (v->is_number_float() && std::isfinite(v->get<double>())) return std::llround(v->get<double>());
    Fail(key, "is not an integer");
    return 0;
  }
  std::optional<int64_t> OptionalI64(const char* key) {
    if (Find(key, false) == nullptr) return std::nullopt;
    return I64(key);
  }
  double Seconds(const char* key, bool required = true) {
    const Json* v = Find(key, required);
    if (v == nullptr) return 0;
    if (v->is_number() && std::isfinite(v->get<double>()) && v->get<double>() >= 0) return v->get<double>();
    Fail(key, "is not a non-negative number of seconds");
    return 0;
  }
  bool Bool(const char* key) {
    const Json* v = Find(key, true);
    if (v == nullptr) return false;
    if (v->is_boolean()) return v->get<bool>();
    Fail(key, "is not a boolean");
    return false;
  }
  std::string Str(const char* key, bool required = true) {
    const Json* v = Find(key, required);
    if (v == nullptr) return "";
    if (v->is_string()) return v->get<std::string>();
    Fail(key, "is not a string");
    return "";
  }
  // Absent: nullptr.
  const Json* Array(const char* key) {
    const Json* v = Find(key, true);
    if (v == nullptr) return nullptr;
    if (v->is_array()) return v;
    Fail(key, "is not an array");
    return nullptr;
  }
  // Null or absent: nullptr.
  const Json* Object(const char* key) {
    const Json* v = Find(key, false);
    if (v == nullptr) return nullptr;
    if (v->is_object()) return v;
    Fail(key, "is not an object or null");
    return nullptr;
  }
  const Status& status() const { return status_; }

 private:
  const Json* Find(const char* key, bool required) {
    if (!j_.is_object()) return nullptr;
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) {
      if (required) Fail(key, "is missing");
      return nullptr;
    }
    return &*it;
  }
  void Fail(const std::string& key, const std::string& why) {
    if (status_.ok()) status_ = Status::Internal("stintd's answer to " + what_ + ": \"" + key + "\" " + why);
  }

  const Json& j_;
  const std::string what_;
  Status status_;
};

std::chrono::milliseconds SecondsToMs(double s) {
  return std::chrono::milliseconds(std::llround(s * 1000));
}

Result<WorkerView> ParseView(const HttpReply& reply, const std::string& what) {
  ReplyReader r(reply.body, what);
  WorkerView v;
  v.active = r.Bool("active");
  v.fencing_token = r.U64("fencing_token", false);
  v.segment_id = r.U64("segment_id", false);
  v.segment_state = r.Str("segment_state", false);
  if (const Json* n = r.Object("notice")) {
    ReplyReader nr(*n, what + " notice");
    CoordinatorNotice notice;
    notice.reason = nr.Str("reason");
    notice.deadline_ms = nr.I64("deadline_ms");
    notice.notice_ms = nr.I64("notice_ms", false);
    STINT_RETURN_IF_ERROR(nr.status());
    v.notice = std::move(notice);
  }
  STINT_RETURN_IF_ERROR(r.status());
  return v;
}

Result<RendezvousInfo> ParseRendezvous(const HttpReply& reply, const std::string& what) {
  ReplyReader r(reply.body, what);
  RendezvousInfo v;
  v.generation = r.U64("generation");
  v.formed = r.Str("phase") == "formed";
  v.member = r.Bool("member");
  v.standby = r.Bool("standby");
  v.rank = static_cast<int>(r.I64("rank"));
  v.world_size = static_cast<int>(r.I64("world_size"));
  v.min_workers = static_cast<int>(r.I64("min_workers"));
  v.max_workers = static_cast<int>(r.I64("max_workers"));
  v.master_endpoint = r.Str("master_endpoint");
  if (const Json* members = r.Array("members")) {
    for (const Json& m : *members) {
      ReplyReader mr(m, what + " member");
      v.members.push_back({mr.U64("worker_id"), mr.Str("endpoint"), static_cast<int>(mr.I64("rank"))});
      STINT_RETURN_IF_ERROR(mr.status());
    }
  }
  if (const Json* previous = r.Array("previous")) {
    for (const Json& id : *previous) {
      if (!id.is_number_integer()) return Status::Internal("stintd's answer to " + what + ": \"previous\" holds a non-integer");
      v.previous.push_back(id.get<uint64_t>());
    }
  }
  STINT_RETURN_IF_ERROR(r.status());
  return v;
}

bool ValidKvKey(const std::string& key) {
  if (key.empty() || key.size() > kMaxKvKeyBytes) return false;
  for (unsigned char c : key) {
    if (!(std::isalnum(c) || c == '.' || c == '_' || c == '/' || c == '-')) return false;
  }
  return true;
}

std::string DefaultWorkerName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::snprintf(host, sizeof(host), "unknown");
  return std::string(host) + ":" + std::to_string(getpid());
}

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

}  // namespace

bool IsFenced(const Status& status) {
  if (status.code() != Code::kAborted) return false;
  const std::string& m = status.message();
  // WithContext() puts "what: " in front, so look after any prefix too.
  return m.rfind("fenced: ", 0) == 0 || m.find(": fenced: ") != std::string::npos;
}

namespace internal {

Result<CoordinatorOptions> CoordinatorOptionsFromLookup(const std::function<std::string(const char*)>& lookup) {
  CoordinatorOptions o;
  std::string url = lookup("STINT_COORD_URL");
  if (!url.empty()) {
    auto parsed = internal::ParseCoordinatorUrl(url);
    if (!parsed.ok()) return Status::InvalidArgument("STINT_COORD_URL: " + parsed.status().message());
    o.url = url;
  }
  o.token = lookup("STINT_COORD_TOKEN");
  if (o.token.empty()) {
    return Status::InvalidArgument("STINT_COORD_TOKEN is not set (the worker token stintd was started with)");
  }
  std::string job = lookup("STINT_JOB_ID");
  if (job.empty()) return Status::InvalidArgument("STINT_JOB_ID is not set (the stintd job this process runs)");
  uint64_t id = 0;
  for (char c : job) {
    if (c < '0' || c > '9' || id > (std::numeric_limits<uint64_t>::max() - 9) / 10) {
      return Status::InvalidArgument("STINT_JOB_ID='" + job + "' is not a positive integer");
    }
    id = id * 10 + uint64_t(c - '0');
  }
  if (id == 0) return Status::InvalidArgument("STINT_JOB_ID='" + job + "' is not a positive integer");
  o.job_id = id;
  o.worker_name = lookup("STINT_WORKER_NAME");
  return o;
}

}  // namespace internal

Result<CoordinatorOptions> CoordinatorOptionsFromEnvironment() {
  return internal::CoordinatorOptionsFromLookup(Getenv);
}

Result<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Create(const CoordinatorOptions& options) {
  internal::HttpJsonOptions h;
  h.url = options.url;
  h.token = options.token;
  h.connect_timeout = options.connect_timeout;
  h.request_timeout = options.request_timeout;
  h.retry = options.retry;
  if (options.fencing_margin.count() < 0) return Status::InvalidArgument("fencing_margin must be >= 0");
  STINT_ASSIGN_OR_RETURN(auto http, internal::HttpJsonClient::Create(h));
  CoordinatorOptions o = options;
  if (o.worker_name.empty()) o.worker_name = DefaultWorkerName();
  return std::unique_ptr<CoordinatorClient>(new CoordinatorClient(o, std::move(http)));
}

CoordinatorClient::CoordinatorClient(const CoordinatorOptions& options,
                                     std::unique_ptr<internal::HttpJsonClient> http)
    : options_(options), http_(std::move(http)) {}

CoordinatorClient::~CoordinatorClient() = default;

void CoordinatorClient::Shutdown() { http_->Shutdown(); }

std::optional<WorkerRegistration> CoordinatorClient::registration() const {
  std::lock_guard<std::mutex> lock(mu_);
  return registration_;
}

void CoordinatorClient::UseRegistration(const WorkerRegistration& registration) {
  std::lock_guard<std::mutex> lock(mu_);
  registration_ = registration;
}

Result<WorkerRegistration> CoordinatorClient::RequireRegistration() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!registration_) return Status::FailedPrecondition("not registered with stintd: call Register() first");
  return *registration_;
}

Result<WorkerRegistration> CoordinatorClient::Register() {
  if (options_.job_id == 0) return Status::InvalidArgument("CoordinatorOptions.job_id is not set");
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/jobs/" + std::to_string(options_.job_id) + "/workers";
  req.body = Json{{"name", options_.worker_name}};
  // A lost answer must not make a second worker: only retried when it surely
  // did not arrive (a duplicate would hold the job's lease until its TTL).
  req.idempotent = false;
  STINT_ASSIGN_OR_RETURN(HttpReply reply, http_->Call(req));
  ReplyReader r(reply.body, req.method + " " + req.path);
  WorkerRegistration reg;
  reg.worker_id = r.U64("worker_id");
  reg.job_id = r.U64("job_id", false);
  if (reg.job_id == 0) reg.job_id = options_.job_id;
  reg.segment_id = r.U64("segment_id", false);
  reg.fencing_token = r.U64("fencing_token");
  reg.lease_ttl = SecondsToMs(r.Seconds("lease_ttl_seconds", false));
  reg.heartbeat_interval = SecondsToMs(r.Seconds("heartbeat_interval_seconds", false));
  STINT_RETURN_IF_ERROR(r.status());
  std::lock_guard<std::mutex> lock(mu_);
  registration_ = reg;
  return reg;
}

Result<WorkerView> CoordinatorClient::Heartbeat(std::optional<uint64_t> step) {
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/workers/" + std::to_string(reg.worker_id) + "/heartbeat";
  req.body = Json::object();
  if (step) (*req.body)["step"] = *step;
  STINT_ASSIGN_OR_RETURN(HttpReply reply, http_->Call(req));
  return ParseView(reply, req.method + " " + req.path);
}

Result<WorkerView> CoordinatorClient::WaitNotice(std::chrono::seconds wait) {
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  int64_t seconds = std::max<int64_t>(0, std::min<int64_t>(wait.count(), kMaxNoticeWaitSeconds));
  HttpRequest req;
  req.method = "GET";
  req.path = "/v1/workers/" + std::to_string(reg.worker_id) + "/notice?wait_seconds=" + std::to_string(seconds);
  req.server_wait = std::chrono::seconds(seconds);
  STINT_ASSIGN_OR_RETURN(HttpReply reply, http_->Call(req));
  return ParseView(reply, req.method + " " + req.path);
}

Result<RendezvousInfo> CoordinatorClient::JoinRendezvous(const std::string& endpoint, uint64_t known_generation,
                                                        std::chrono::milliseconds wait) {
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  wait = std::clamp(wait, std::chrono::milliseconds(0), std::chrono::milliseconds(kMaxNoticeWaitSeconds * 1000));
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/workers/" + std::to_string(reg.worker_id) + "/rendezvous/join";
  req.body = Json{{"endpoint", endpoint}, {"known_generation", known_generation}, {"wait_seconds", wait.count() / 1000.0}};
  req.server_wait = wait;
  STINT_ASSIGN_OR_RETURN(HttpReply reply, http_->Call(req));
  return ParseRendezvous(reply, req.method + " " + req.path);
}

Result<RendezvousInfo> CoordinatorClient::WaitRendezvous(uint64_t known_generation, std::chrono::milliseconds wait) {
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  wait = std::clamp(wait, std::chrono::milliseconds(0), std::chrono::milliseconds(kMaxNoticeWaitSeconds * 1000));
  HttpRequest req;
  req.method = "GET";
  req.path = "/v1/workers/" + std::to_string(reg.worker_id) + "/rendezvous?known_generation=" +
             std::to_string(known_generation) + "&wait_seconds=" + std::to_string(wait.count() / 1000.0);
  req.server_wait = wait;
  STINT_ASSIGN_OR_RETURN(HttpReply reply, http_->Call(req));
  return ParseRendezvous(reply, req.method + " " + req.path);
}

namespace {

Status PostWorker(internal::HttpJsonClient* http, uint64_t worker_id, const char* what, Json body) {
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/workers/" + std::to_string(worker_id) + "/" + what;
  req.body = std::move(body);
  return http->Call(req).status();
}

}  // namespace

Status CoordinatorClient::ReportProgress(uint64_t step, std::optional<double> remaining_seconds) {
  Json body{{"step", step}};
  if (remaining_seconds) body["remaining_seconds"] = *remaining_seconds;
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  return PostWorker(http_.get(), reg.worker_id, "progress", std::move(body));
}

Status CoordinatorClient::ReportCheckpoint(uint64_t step, double seconds, std::optional<uint64_t> bytes) {
  if (!std::isfinite(seconds) || seconds < 0) {
    return Status::InvalidArgument("ReportCheckpoint: seconds must be a finite number >= 0");
  }
  Json body{{"step", step}, {"seconds", seconds}};
  if (bytes) body["bytes"] = *bytes;
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  return PostWorker(http_.get(), reg.worker_id, "checkpoint", std::move(body));
}

Status CoordinatorClient::Ack(uint64_t step) {
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  return PostWorker(http_.get(), reg.worker_id, "ack", Json{{"step", step}});
}

Status CoordinatorClient::Finished() {
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  return PostWorker(http_.get(), reg.worker_id, "finished", Json::object());
}

Status CoordinatorClient::Leave() {
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  return PostWorker(http_.get(), reg.worker_id, "leave", Json::object());
}

Result<FencingCheck> CoordinatorClient::CheckFencing() {
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  return CheckFencing(reg.job_id, reg.fencing_token);
}

Result<FencingCheck> CoordinatorClient::CheckFencing(uint64_t job_id, uint64_t fencing_token) {
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/fencing/check";
  req.body = Json{{"job_id", job_id}, {"fencing_token", fencing_token}};
  STINT_ASSIGN_OR_RETURN(HttpReply reply, http_->Call(req));
  ReplyReader r(reply.body, req.method + " " + req.path);
  FencingCheck check;
  check.valid = r.Bool("valid");
  check.valid_until_ms = r.OptionalI64("valid_until_ms");
  STINT_RETURN_IF_ERROR(r.status());
  return check;
}

Status CoordinatorClient::GuardCommit(uint64_t step) {
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  const std::string who = "fencing token " + std::to_string(reg.fencing_token) + " of job " +
                          std::to_string(reg.job_id);
  const std::string what = "not committing step " + std::to_string(step);
  auto check = CheckFencing(reg.job_id, reg.fencing_token);
  if (!check.ok()) {
    return check.status().WithContext("cannot confirm " + who + ", " + what);
  }
  if (!check->valid) {
    return Status::Aborted("fenced: " + who + " is stale (stintd gave the job to a newer incarnation or "
                           "ended its segment): " + what);
  }
  if (check->valid_until_ms) {
    const int64_t left_ms = *check->valid_until_ms - internal::WallNowMs();
    if (left_ms < options_.fencing_margin.count()) {
      char buf[160];
      std::snprintf(buf, sizeof(buf), " is valid for %.3f s more, under the %.3f s margin: ",
                    double(left_ms) / 1000, double(options_.fencing_margin.count()) / 1000);
      return Status::Aborted("fenced: " + who + buf + what);
    }
  }
  return Status::OK();
}

std::function<Status(uint64_t)> CoordinatorClient::CommitGuard() {
  return [this](uint64_t step) { return GuardCommit(step); };
}

Result<uint64_t> CoordinatorClient::Put(const std::string& key, const std::string& value,
                                        std::optional<uint64_t> if_version) {
  if (options_.job_id == 0) return Status::InvalidArgument("CoordinatorOptions.job_id is not set");
  if (!ValidKvKey(key)) {
    return Status::InvalidArgument("KV key '" + key.substr(0, 64) + "' is not [A-Za-z0-9._/-]{1,200}");
  }
  if (value.size() > kMaxKvValueBytes) {
    return Status::InvalidArgument("KV value for '" + key + "' has " + std::to_string(value.size()) +
                                   " bytes, more than 1 MiB");
  }
  HttpRequest req;
  req.method = "PUT";
  req.path = "/v1/jobs/" + std::to_string(options_.job_id) + "/kv/" + key;
  req.body = Json{{"value", value}};
  if (if_version) (*req.body)["if_version"] = *if_version;
  // Repeating a compare-and-set whose answer was lost would report kAborted
  // against our own write.
  req.idempotent = !if_version.has_value();
  STINT_ASSIGN_OR_RETURN(HttpReply reply, http_->Call(req));
  ReplyReader r(reply.body, req.method + " " + req.path);
  uint64_t version = r.U64("version");
  STINT_RETURN_IF_ERROR(r.status());
  return version;
}

Result<KvEntry> CoordinatorClient::Get(const std::string& key, std::chrono::seconds wait, uint64_t min_version) {
  if (options_.job_id == 0) return Status::InvalidArgument("CoordinatorOptions.job_id is not set");
  if (!ValidKvKey(key)) {
    return Status::InvalidArgument("KV key '" + key.substr(0, 64) + "' is not [A-Za-z0-9._/-]{1,200}");
  }
  const int64_t seconds = std::max<int64_t>(0, wait.count());
  HttpRequest req;
  req.method = "GET";
  req.path = "/v1/jobs/" + std::to_string(options_.job_id) + "/kv/" + key + "?wait_seconds=" + std::to_string(seconds);
  // Versions start at 1, and stintd refuses min_version=0: "any" is no parameter.
  if (min_version > 0) req.path += "&min_version=" + std::to_string(min_version);
  req.server_wait = std::chrono::seconds(seconds);
  STINT_ASSIGN_OR_RETURN(HttpReply reply, http_->Call(req));
  ReplyReader r(reply.body, req.method + " " + req.path);
  KvEntry e;
  e.key = r.Str("key", false);
  if (e.key.empty()) e.key = key;
  e.value = r.Str("value");
  e.version = r.U64("version");
  e.updated_ms = r.I64("updated_ms", false);
  STINT_RETURN_IF_ERROR(r.status());
  return e;
}

Status CoordinatorClient::Delete(const std::string& key) {
  if (options_.job_id == 0) return Status::InvalidArgument("CoordinatorOptions.job_id is not set");
  if (!ValidKvKey(key)) {
    return Status::InvalidArgument("KV key '" + key.substr(0, 64) + "' is not [A-Za-z0-9._/-]{1,200}");
  }
  HttpRequest req;
  req.method = "DELETE";
  req.path = "/v1/jobs/" + std::to_string(options_.job_id) + "/kv/" + key;
  return http_->Call(req).status();
}

}  // namespace stint
