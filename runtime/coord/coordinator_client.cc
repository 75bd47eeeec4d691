// CoordinatorClient: the worker endpoints of API.md, one call each, over
// HttpJsonClient (which owns the connections, the retries and the error
// mapping).
#include "stint/coordinator_client.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "base/json_fields.h"
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

// A missing or mistyped field in an answer is stintd's bug (or a version
// mismatch): kInternal naming the request and the field,
// 'stintd's answer to POST /v1/...: "fencing_token" is missing'. Null reads
// as absent, and a float where an integer belongs is rounded.
Status ReplyFieldError(const internal::JsonFieldError& e) {
  using internal::JsonKind;
  using Problem = internal::JsonFieldError::Problem;
  std::string key = e.key, why;
  switch (e.problem) {
    case Problem::kNotObject:
      key = "the answer";
      why = "is not a JSON object";
      break;
    case Problem::kMissing:
      why = "is missing";
      break;
    case Problem::kWrongType:
      switch (e.expected) {
        case JsonKind::kUint64:
          why = "is not a non-negative integer";
          break;
        case JsonKind::kInt64:
          why = "is not an integer";
          break;
        case JsonKind::kNonNegativeNumber:
          why = "is not a non-negative number of seconds";
          break;
        case JsonKind::kBool:
          why = "is not a boolean";
          break;
        case JsonKind::kObject:
          why = "is not an object or null";
          break;
        default:
          why = std::string("is not ") + internal::JsonKindPhrase(e.expected);
          break;
      }
      break;
    case Problem::kBadElement:
      why = e.expected == JsonKind::kInt64
                ? std::string("holds a non-integer")
                : std::string("holds a value that is not ") + internal::JsonKindPhrase(e.expected);
      break;
    case Problem::kBadValue:
      why = e.detail;
      break;
  }
  return Status::Internal("stintd's answer to " + e.object_path + ": \"" + key + "\" " + why);
}

constexpr internal::JsonFieldPolicy kReplyFields{
    /*null_is_absent=*/true, internal::JsonFieldPolicy::Floats::kRound, ReplyFieldError};

// Reads an answer (or an object in it); `what` names the request.
internal::JsonFields ReplyFields(const Json& j, std::string what) {
  return internal::JsonFields(j, std::move(what), kReplyFields);
}

std::chrono::milliseconds SecondsToMs(double s) {
  return std::chrono::milliseconds(std::llround(s * 1000));
}

Result<WorkerView> ParseView(const HttpReply& reply, const std::string& what) {
  const internal::JsonFields r = ReplyFields(reply.body, what);
  STINT_RETURN_IF_ERROR(r.CheckObject());
  WorkerView v;
  STINT_ASSIGN_OR_RETURN(v.active, r.Bool("active"));
  STINT_ASSIGN_OR_RETURN(std::optional<uint64_t> token, r.OptionalUint64("fencing_token"));
  STINT_ASSIGN_OR_RETURN(std::optional<uint64_t> segment, r.OptionalUint64("segment_id"));
  STINT_ASSIGN_OR_RETURN(std::optional<std::string> segment_state,
                         r.OptionalString("segment_state"));
  v.fencing_token = token.value_or(0);
  v.segment_id = segment.value_or(0);
  v.segment_state = segment_state.value_or("");
  STINT_ASSIGN_OR_RETURN(const Json* n, r.OptionalObject("notice"));
  if (n != nullptr) {
    const internal::JsonFields nr = ReplyFields(*n, what + " notice");
    CoordinatorNotice notice;
    STINT_ASSIGN_OR_RETURN(notice.reason, nr.String("reason"));
    STINT_ASSIGN_OR_RETURN(notice.deadline_ms, nr.Int64("deadline_ms"));
    STINT_ASSIGN_OR_RETURN(std::optional<int64_t> notice_ms, nr.OptionalInt64("notice_ms"));
    notice.notice_ms = notice_ms.value_or(0);
    v.notice = std::move(notice);
  }
  return v;
}

Result<RendezvousInfo> ParseRendezvous(const HttpReply& reply, const std::string& what) {
  const internal::JsonFields r = ReplyFields(reply.body, what);
  STINT_RETURN_IF_ERROR(r.CheckObject());
  RendezvousInfo v;
  STINT_ASSIGN_OR_RETURN(v.generation, r.Uint64("generation"));
  STINT_ASSIGN_OR_RETURN(std::string phase, r.String("phase"));
  v.formed = phase == "formed";
  STINT_ASSIGN_OR_RETURN(v.member, r.Bool("member"));
  STINT_ASSIGN_OR_RETURN(v.standby, r.Bool("standby"));
  STINT_ASSIGN_OR_RETURN(int64_t rank, r.Int64("rank"));
  STINT_ASSIGN_OR_RETURN(int64_t world_size, r.Int64("world_size"));
  STINT_ASSIGN_OR_RETURN(int64_t min_workers, r.Int64("min_workers"));
  STINT_ASSIGN_OR_RETURN(int64_t max_workers, r.Int64("max_workers"));
  v.rank = static_cast<int>(rank);
  v.world_size = static_cast<int>(world_size);
  v.min_workers = static_cast<int>(min_workers);
  v.max_workers = static_cast<int>(max_workers);
  STINT_ASSIGN_OR_RETURN(v.master_endpoint, r.String("master_endpoint"));
  STINT_ASSIGN_OR_RETURN(const Json* members, r.Array("members"));
  for (const Json& m : *members) {
    const internal::JsonFields mr = ReplyFields(m, what + " member");
    STINT_RETURN_IF_ERROR(mr.CheckObject());
    RendezvousMemberInfo member;
    STINT_ASSIGN_OR_RETURN(member.worker_id, mr.Uint64("worker_id"));
    STINT_ASSIGN_OR_RETURN(member.endpoint, mr.String("endpoint"));
    STINT_ASSIGN_OR_RETURN(int64_t member_rank, mr.Int64("rank"));
    member.rank = static_cast<int>(member_rank);
    v.members.push_back(std::move(member));
  }
  STINT_ASSIGN_OR_RETURN(const Json* previous, r.Array("previous"));
  for (const Json& id : *previous) {
    if (!id.is_number_integer()) {
      return r.Refuse(internal::JsonFieldError::Problem::kBadElement, "previous",
                      internal::JsonKind::kInt64, &id);
    }
    v.previous.push_back(id.get<uint64_t>());
  }
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
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
    std::snprintf(host, sizeof(host), "unknown");
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

Result<CoordinatorOptions> CoordinatorOptionsFromLookup(
    const std::function<std::string(const char*)>& lookup) {
  CoordinatorOptions o;
  std::string url = lookup("STINT_COORD_URL");
  if (!url.empty()) {
    auto parsed = internal::ParseCoordinatorUrls(url);
    if (!parsed.ok())
      return Status::InvalidArgument("STINT_COORD_URL: " + parsed.status().message());
    o.url = url;
  }
  o.ca_file = lookup("STINT_CA_FILE");
  o.token = lookup("STINT_COORD_TOKEN");
  const std::string secret = lookup("STINT_WORKER_SECRET");
  if (o.token.empty() && secret.empty()) {
    return Status::InvalidArgument(
        "STINT_COORD_TOKEN is not set (the worker token stintd was started with)");
  }
  auto parse_id = [&](const char* name, bool required, uint64_t* out) -> Status {
    const std::string text = lookup(name);
    if (text.empty()) {
      if (!required) return Status::OK();
      return Status::InvalidArgument(std::string(name) + " is not set");
    }
    uint64_t id = 0;
    for (char c : text) {
      if (c < '0' || c > '9' || id > (std::numeric_limits<uint64_t>::max() - 9) / 10) {
        return Status::InvalidArgument(std::string(name) + "='" + text +
                                       "' is not a positive integer");
      }
      id = id * 10 + uint64_t(c - '0');
    }
    if (id == 0 && std::string(name) != "STINT_FENCING_TOKEN") {
      return Status::InvalidArgument(std::string(name) + "='" + text +
                                     "' is not a positive integer");
    }
    *out = id;
    return Status::OK();
  };
  if (lookup("STINT_JOB_ID").empty())
    return Status::InvalidArgument("STINT_JOB_ID is not set (the stintd job this process runs)");
  STINT_RETURN_IF_ERROR(parse_id("STINT_JOB_ID", true, &o.job_id));
  o.worker_name = lookup("STINT_WORKER_NAME");
  if (!secret.empty() || !lookup("STINT_WORKER_ID").empty()) {
    WorkerRegistration reg;
    reg.job_id = o.job_id;
    reg.secret = secret;
    if (secret.empty()) return Status::InvalidArgument("STINT_WORKER_ID without STINT_WORKER_SECRET");
    STINT_RETURN_IF_ERROR(parse_id("STINT_WORKER_ID", true, &reg.worker_id));
    STINT_RETURN_IF_ERROR(parse_id("STINT_FENCING_TOKEN", true, &reg.fencing_token));
    STINT_RETURN_IF_ERROR(parse_id("STINT_SEGMENT_ID", false, &reg.segment_id));
    auto seconds = [&](const char* name, std::chrono::milliseconds* out) -> Status {
      const std::string text = lookup(name);
      if (text.empty()) return Status::OK();
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (end != text.c_str() + text.size() || !(v >= 0 && v < 1e9))
        return Status::InvalidArgument(std::string(name) + "='" + text + "' is not seconds");
      *out = SecondsToMs(v);
      return Status::OK();
    };
    STINT_RETURN_IF_ERROR(seconds("STINT_LEASE_TTL_SECONDS", &reg.lease_ttl));
    STINT_RETURN_IF_ERROR(seconds("STINT_HEARTBEAT_INTERVAL_SECONDS", &reg.heartbeat_interval));
    o.preregistered = reg;
  }
  return o;
}

}  // namespace internal

Result<CoordinatorOptions> CoordinatorOptionsFromEnvironment() {
  return internal::CoordinatorOptionsFromLookup(Getenv);
}

Result<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Create(
    const CoordinatorOptions& options) {
  internal::HttpJsonOptions h;
  h.url = options.url;
  h.token = options.token;
  h.ca_file = options.ca_file;
  h.connect_timeout = options.connect_timeout;
  h.request_timeout = options.request_timeout;
  h.retry = options.retry;
  if (options.fencing_margin.count() < 0)
    return Status::InvalidArgument("fencing_margin must be >= 0");
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
  if (!registration_)
    return Status::FailedPrecondition("not registered with stintd: call Register() first");
  return *registration_;
}

Result<WorkerRegistration> CoordinatorClient::Register() {
  if (options_.job_id == 0) return Status::InvalidArgument("CoordinatorOptions.job_id is not set");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (options_.preregistered && !adopted_) {
      adopted_ = true;
      registration_ = *options_.preregistered;
      if (registration_->job_id == 0) registration_->job_id = options_.job_id;
      return *registration_;
    }
  }
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/jobs/" + std::to_string(options_.job_id) + "/workers";
  req.body = Json{{"name", options_.worker_name}};
  // A lost answer must not make a second worker: only retried when it surely
  // did not arrive (a duplicate would hold the job's lease until its TTL).
  req.idempotent = false;
  STINT_ASSIGN_OR_RETURN(HttpReply reply, http_->Call(req));
  const internal::JsonFields r = ReplyFields(reply.body, req.method + " " + req.path);
  STINT_RETURN_IF_ERROR(r.CheckObject());
  WorkerRegistration reg;
  STINT_ASSIGN_OR_RETURN(reg.worker_id, r.Uint64("worker_id"));
  STINT_ASSIGN_OR_RETURN(std::optional<uint64_t> job_id, r.OptionalUint64("job_id"));
  reg.job_id = job_id.value_or(0);
  if (reg.job_id == 0) reg.job_id = options_.job_id;
  STINT_ASSIGN_OR_RETURN(std::optional<uint64_t> segment_id, r.OptionalUint64("segment_id"));
  reg.segment_id = segment_id.value_or(0);
  STINT_ASSIGN_OR_RETURN(reg.fencing_token, r.Uint64("fencing_token"));
  STINT_ASSIGN_OR_RETURN(std::optional<double> ttl,
                         r.OptionalNonNegativeNumber("lease_ttl_seconds"));
  STINT_ASSIGN_OR_RETURN(std::optional<double> interval,
                         r.OptionalNonNegativeNumber("heartbeat_interval_seconds"));
  reg.lease_ttl = SecondsToMs(ttl.value_or(0));
  reg.heartbeat_interval = SecondsToMs(interval.value_or(0));
  // Absent from a stintd older than per-worker secrets.
  STINT_ASSIGN_OR_RETURN(std::optional<std::string> secret, r.OptionalString("worker_secret"));
  reg.secret = secret.value_or("");
  std::lock_guard<std::mutex> lock(mu_);
  registration_ = reg;
  return reg;
}

Result<WorkerView> CoordinatorClient::Heartbeat(std::optional<uint64_t> step) {
  WorkerProgress progress;
  progress.step = step;
  return Heartbeat(progress);
}

Result<WorkerView> CoordinatorClient::Heartbeat(const WorkerProgress& progress) {
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/workers/" + std::to_string(reg.worker_id) + "/heartbeat";
  req.token = reg.secret;
  req.body = Json::object();
  if (progress.step) (*req.body)["step"] = *progress.step;
  if (progress.samples) (*req.body)["samples"] = *progress.samples;
  if (progress.loss && std::isfinite(*progress.loss)) {
    (*req.body)["loss"] = *progress.loss;
    if (progress.loss_step) (*req.body)["loss_step"] = *progress.loss_step;
  }
  STINT_ASSIGN_OR_RETURN(HttpReply reply, http_->Call(req));
  return ParseView(reply, req.method + " " + req.path);
}

Result<WorkerView> CoordinatorClient::WaitNotice(std::chrono::seconds wait) {
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  int64_t seconds = std::max<int64_t>(0, std::min<int64_t>(wait.count(), kMaxNoticeWaitSeconds));
  HttpRequest req;
  req.method = "GET";
  req.path = "/v1/workers/" + std::to_string(reg.worker_id) +
             "/notice?wait_seconds=" + std::to_string(seconds);
  req.token = reg.secret;
  req.server_wait = std::chrono::seconds(seconds);
  STINT_ASSIGN_OR_RETURN(HttpReply reply, http_->Call(req));
  return ParseView(reply, req.method + " " + req.path);
}

Result<RendezvousInfo> CoordinatorClient::JoinRendezvous(const std::string& endpoint,
                                                         uint64_t known_generation,
                                                         std::chrono::milliseconds wait) {
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  wait = std::clamp(wait, std::chrono::milliseconds(0),
                    std::chrono::milliseconds(kMaxNoticeWaitSeconds * 1000));
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/workers/" + std::to_string(reg.worker_id) + "/rendezvous/join";
  req.token = reg.secret;
  req.body = Json{{"endpoint", endpoint},
                  {"known_generation", known_generation},
                  {"wait_seconds", wait.count() / 1000.0}};
  req.server_wait = wait;
  STINT_ASSIGN_OR_RETURN(HttpReply reply, http_->Call(req));
  return ParseRendezvous(reply, req.method + " " + req.path);
}

Result<RendezvousInfo> CoordinatorClient::WaitRendezvous(uint64_t known_generation,
                                                         std::chrono::milliseconds wait) {
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  wait = std::clamp(wait, std::chrono::milliseconds(0),
                    std::chrono::milliseconds(kMaxNoticeWaitSeconds * 1000));
  HttpRequest req;
  req.method = "GET";
  req.path = "/v1/workers/" + std::to_string(reg.worker_id) +
             "/rendezvous?known_generation=" + std::to_string(known_generation) +
             "&wait_seconds=" + std::to_string(wait.count() / 1000.0);
  req.token = reg.secret;
  req.server_wait = wait;
  STINT_ASSIGN_OR_RETURN(HttpReply reply, http_->Call(req));
  return ParseRendezvous(reply, req.method + " " + req.path);
}

namespace {

Status PostWorker(internal::HttpJsonClient* http, const WorkerRegistration& reg, const char* what,
                  Json body) {
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/workers/" + std::to_string(reg.worker_id) + "/" + what;
  req.token = reg.secret;
  req.body = std::move(body);
  return http->Call(req).status();
}

}  // namespace

Status CoordinatorClient::ReportProgress(uint64_t step, std::optional<double> remaining_seconds) {
  Json body{{"step", step}};
  if (remaining_seconds) body["remaining_seconds"] = *remaining_seconds;
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  return PostWorker(http_.get(), reg, "progress", std::move(body));
}

Status CoordinatorClient::ReportCheckpoint(uint64_t step, double seconds,
                                           std::optional<uint64_t> bytes,
                                           std::optional<double> notice_to_replicas_seconds) {
  if (!std::isfinite(seconds) || seconds < 0) {
    return Status::InvalidArgument("ReportCheckpoint: seconds must be a finite number >= 0");
  }
  if (notice_to_replicas_seconds &&
      (!std::isfinite(*notice_to_replicas_seconds) || *notice_to_replicas_seconds < 0)) {
    return Status::InvalidArgument(
        "ReportCheckpoint: notice_to_replicas_seconds must be a finite number >= 0");
  }
  Json body{{"step", step}, {"seconds", seconds}};
  if (bytes) body["bytes"] = *bytes;
  if (notice_to_replicas_seconds) body["notice_to_replicas_seconds"] = *notice_to_replicas_seconds;
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  return PostWorker(http_.get(), reg, "checkpoint", std::move(body));
}

Status CoordinatorClient::ReportStored(const std::string& location, int tier, uint64_t step,
                                       uint64_t bytes) {
  if (tier != 1 && tier != 2) return Status::InvalidArgument("ReportStored: tier must be 1 or 2");
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  return PostWorker(http_.get(), reg, "stored",
                    Json{{"location", location}, {"tier", tier}, {"step", step}, {"bytes", bytes}});
}

Status CoordinatorClient::Ack(uint64_t step) {
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  return PostWorker(http_.get(), reg, "ack", Json{{"step", step}});
}

Status CoordinatorClient::Finished() {
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  return PostWorker(http_.get(), reg, "finished", Json::object());
}

Status CoordinatorClient::Leave() {
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  return PostWorker(http_.get(), reg, "leave", Json::object());
}

Result<FencingCheck> CoordinatorClient::CheckFencing() {
  STINT_ASSIGN_OR_RETURN(WorkerRegistration reg, RequireRegistration());
  return CheckFencing(reg.job_id, reg.fencing_token);
}

std::string CoordinatorClient::JobToken() const {
  // The worker's own secret once it has one: stintd refuses the shared
  // worker token there, and a registration token needs no more reach.
  std::lock_guard<std::mutex> lock(mu_);
  if (registration_ && !registration_->secret.empty()) return registration_->secret;
  if (!registration_ && options_.preregistered) return options_.preregistered->secret;
  return "";  // options().token
}

Result<FencingCheck> CoordinatorClient::CheckFencing(uint64_t job_id, uint64_t fencing_token) {
  HttpRequest req;
  req.token = JobToken();
  req.method = "POST";
  req.path = "/v1/fencing/check";
  req.body = Json{{"job_id", job_id}, {"fencing_token", fencing_token}};
  STINT_ASSIGN_OR_RETURN(HttpReply reply, http_->Call(req));
  const internal::JsonFields r = ReplyFields(reply.body, req.method + " " + req.path);
  STINT_RETURN_IF_ERROR(r.CheckObject());
  FencingCheck check;
  STINT_ASSIGN_OR_RETURN(check.valid, r.Bool("valid"));
  STINT_ASSIGN_OR_RETURN(check.valid_until_ms, r.OptionalInt64("valid_until_ms"));
  // Absent from older stintds (and from valid answers).
  STINT_ASSIGN_OR_RETURN(std::optional<std::string> reason, r.OptionalString("reason"));
  check.reason = reason.value_or("");
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
    // The token names this incarnation: it is stale once this worker left,
    // its segment ended, or the job's rendezvous dropped it.
    const std::string why =
        check->reason.empty() ? "this worker incarnation left or was dropped, or its segment ended"
                              : check->reason;
    return Status::Aborted("fenced: " + who + " is stale (" + why + "): " + what);
  }
  if (check->valid_until_ms) {
    const int64_t left_ms = *check->valid_until_ms - internal::WallNowMs();
    if (left_ms < options_.fencing_margin.count()) {
      char buf[160];
      std::snprintf(buf, sizeof(buf),
                    " is valid for %.3f s more, under the %.3f s margin: ", double(left_ms) / 1000,
                    double(options_.fencing_margin.count()) / 1000);
      return Status::Aborted("fenced: " + who + buf + what);
    }
  }
  return Status::OK();
}

std::function<Status(uint64_t)> CoordinatorClient::CommitGuard() {
  return [this](uint64_t step) { return GuardCommit(step); };
}

Result<std::set<uint64_t>> CoordinatorClient::PinnedSteps() {
  if (options_.job_id == 0) return Status::InvalidArgument("CoordinatorOptions.job_id is not set");
  HttpRequest req;
  req.token = JobToken();
  req.method = "GET";
  req.path = "/v1/jobs/" + std::to_string(options_.job_id) + "/pinned_steps";
  Result<HttpReply> answer = http_->Call(req);
  // A stintd from before pinned steps, or one that does not know the job,
  // has no evaluation to keep a step for.
  if (answer.status().code() == Code::kNotFound) return std::set<uint64_t>();
  STINT_ASSIGN_OR_RETURN(HttpReply reply, std::move(answer));
  const std::string what = req.method + " " + req.path;
  const Json steps = reply.body.is_object() ? reply.body.value("steps", Json()) : Json();
  if (!steps.is_array()) return Status::DataLoss(what + ": the answer has no \"steps\" array");
  std::set<uint64_t> pinned;
  for (const Json& step : steps) {
    if (!step.is_number_unsigned()) {
      return Status::DataLoss(what + ": \"steps\" holds " + step.dump() + ", not a step");
    }
    pinned.insert(step.get<uint64_t>());
  }
  return pinned;
}

std::function<Result<std::set<uint64_t>>()> CoordinatorClient::RetentionPins() {
  return [this] { return PinnedSteps(); };
}

namespace {

// A request on key `key` of the job's KV, with `token`; kInvalidArgument for
// a client without a job or a key stintd would refuse.
Result<HttpRequest> KvRequest(const CoordinatorOptions& options, const std::string& token,
                              const char* method, const std::string& key) {
  if (options.job_id == 0) return Status::InvalidArgument("CoordinatorOptions.job_id is not set");
  if (!ValidKvKey(key)) {
    return Status::InvalidArgument("KV key '" + key.substr(0, 64) +
                                   "' is not [A-Za-z0-9._/-]{1,200}");
  }
  HttpRequest req;
  req.method = method;
  req.path = "/v1/jobs/" + std::to_string(options.job_id) + "/kv/" + key;
  req.token = token;
  return req;
}

}  // namespace

Result<uint64_t> CoordinatorClient::Put(const std::string& key, const std::string& value,
                                        std::optional<uint64_t> if_version) {
  if (value.size() > kMaxKvValueBytes) {
    return Status::InvalidArgument("KV value for '" + key + "' has " +
                                   std::to_string(value.size()) + " bytes, more than 1 MiB");
  }
  STINT_ASSIGN_OR_RETURN(HttpRequest req, KvRequest(options_, JobToken(), "PUT", key));
  req.body = Json{{"value", value}};
  if (if_version) (*req.body)["if_version"] = *if_version;
  // Repeating a compare-and-set whose answer was lost would report kAborted
  // against our own write.
  req.idempotent = !if_version.has_value();
  STINT_ASSIGN_OR_RETURN(HttpReply reply, http_->Call(req));
  const internal::JsonFields r = ReplyFields(reply.body, req.method + " " + req.path);
  return r.Uint64("version");
}

Result<int64_t> CoordinatorClient::Add(const std::string& key, int64_t delta) {
  STINT_ASSIGN_OR_RETURN(HttpRequest req, KvRequest(options_, JobToken(), "POST", key));
  req.body = Json{{"add", delta}};
  // Repeating an add whose answer was lost would count it twice.
  req.idempotent = false;
  STINT_ASSIGN_OR_RETURN(HttpReply reply, http_->Call(req));
  const internal::JsonFields r = ReplyFields(reply.body, req.method + " " + req.path);
  STINT_ASSIGN_OR_RETURN(std::string value, r.String("value"));
  int64_t sum = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), sum);
  if (ec != std::errc() || end != value.data() + value.size()) {
    return Status::DataLoss(req.method + " " + req.path + ": the sum \"" + value.substr(0, 32) +
                            "\" is not an integer");
  }
  return sum;
}

Result<KvEntry> CoordinatorClient::Get(const std::string& key, std::chrono::seconds wait,
                                       uint64_t min_version) {
  const int64_t seconds = std::max<int64_t>(0, wait.count());
  STINT_ASSIGN_OR_RETURN(HttpRequest req, KvRequest(options_, JobToken(), "GET", key));
  req.path += "?wait_seconds=" + std::to_string(seconds);
  // Versions start at 1, and stintd refuses min_version=0: "any" is no parameter.
  if (min_version > 0) req.path += "&min_version=" + std::to_string(min_version);
  req.server_wait = std::chrono::seconds(seconds);
  STINT_ASSIGN_OR_RETURN(HttpReply reply, http_->Call(req));
  const internal::JsonFields r = ReplyFields(reply.body, req.method + " " + req.path);
  STINT_RETURN_IF_ERROR(r.CheckObject());
  KvEntry e;
  STINT_ASSIGN_OR_RETURN(std::optional<std::string> stored_key, r.OptionalString("key"));
  e.key = stored_key.value_or("");
  if (e.key.empty()) e.key = key;
  STINT_ASSIGN_OR_RETURN(e.value, r.String("value"));
  STINT_ASSIGN_OR_RETURN(e.version, r.Uint64("version"));
  STINT_ASSIGN_OR_RETURN(std::optional<int64_t> updated_ms, r.OptionalInt64("updated_ms"));
  e.updated_ms = updated_ms.value_or(0);
  return e;
}

Status CoordinatorClient::Delete(const std::string& key) {
  STINT_ASSIGN_OR_RETURN(HttpRequest req, KvRequest(options_, JobToken(), "DELETE", key));
  return http_->Call(req).status();
}

}  // namespace stint
