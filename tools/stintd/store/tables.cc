// The stintd store's table layouts and row codecs (tables.h).
#include "stintd/store/tables.h"

#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace stint::stintd::internal {
namespace {

// The last enumerator of each enum as stored. Save refuses a value above it
// (so the file never holds what Load would refuse) and Load checks it; a new
// enumerator raises its bound here.
constexpr int64_t kMaxPriority = static_cast<int64_t>(Priority::kCritical);
constexpr int64_t kMaxWindowKind = static_cast<int64_t>(WindowKind::kSpot);
constexpr int64_t kMaxJobState = static_cast<int64_t>(JobState::kFailed);
constexpr int64_t kMaxSegmentState = static_cast<int64_t>(SegmentState::kCancelled);
constexpr int64_t kMaxNoticeReason = static_cast<int64_t>(NoticeReason::kMigrate);
constexpr int64_t kMaxEvalState = static_cast<int64_t>(EvalState::kSuperseded);
constexpr int64_t kMaxPoolPricing = static_cast<int64_t>(PoolPricing::kOnPrem);
constexpr int64_t kMaxRendezvousPhase = static_cast<int64_t>(RendezvousPhase::kFormed);

Status CheckEnum(const char* field, int64_t v, int64_t max) {
  if (v < 0 || v > max) {
    return Status::Internal(std::string(field) + " " + std::to_string(v) + " is not a known value");
  }
  return Status::OK();
}

std::string AllocsToJson(const std::vector<Allocation>& allocs) {
  nlohmann::json a = nlohmann::json::array();
  for (const Allocation& x : allocs) a.push_back({{"window_id", x.window_id}, {"gpus", x.gpus}});
  return a.dump();
}

// Reads an integer member of a parsed JSON object; false when it is missing,
// not an integer, or out of T's range.
template <typename T>
bool JsonInt(const nlohmann::json& obj, const char* name, T* out) {
  auto it = obj.find(name);
  if (it == obj.end() || !it->is_number_integer()) return false;
  if (it->is_number_unsigned()) {
    const uint64_t u = it->template get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
    *out = static_cast<T>(u);
    return true;
  }
  const int64_t v = it->template get<int64_t>();
  if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
      v > static_cast<int64_t>(std::numeric_limits<T>::max())) {
    return false;
  }
  *out = static_cast<T>(v);
  return true;
}

Status AllocsFromJson(const std::string& text, std::vector<Allocation>* allocs) {
  const nlohmann::json a = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!a.is_array()) return Status::DataLoss("allocs is not a JSON array: " + text);
  for (const nlohmann::json& x : a) {
    Allocation alloc;
    if (!x.is_object() || !JsonInt(x, "window_id", &alloc.window_id) ||
        !JsonInt(x, "gpus", &alloc.gpus)) {
      return Status::DataLoss("allocs entry is not {\"window_id\":int,\"gpus\":int}: " + text);
    }
    allocs->push_back(alloc);
  }
  return Status::OK();
}

std::string BucketsToJson(const std::vector<int64_t>& buckets) {
  return nlohmann::json(buckets).dump();
}

Status BucketsFromJson(const std::string& text, std::vector<int64_t>* buckets) {
  const nlohmann::json a = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!a.is_array()) return Status::DataLoss("wait_buckets is not a JSON array: " + text);
  for (const nlohmann::json& x : a) {
    if (!x.is_number_integer() || (x.is_number_unsigned() && x.get<uint64_t>() > INT64_MAX)) {
      return Status::DataLoss("wait_buckets holds a non-int64: " + text);
    }
    buckets->push_back(x.get<int64_t>());
  }
  return Status::OK();
}

Status IdsFromJson(const char* what, const std::string& text, std::vector<int64_t>* ids) {
  const nlohmann::json a = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!a.is_array()) {
    return Status::DataLoss(std::string(what) + " is not a JSON array: " + text);
  }
  for (const nlohmann::json& x : a) {
    if (!x.is_number_integer() || (x.is_number_unsigned() && x.get<uint64_t>() > INT64_MAX)) {
      return Status::DataLoss(std::string(what) + " holds a non-int64: " + text);
    }
    ids->push_back(x.get<int64_t>());
  }
  return Status::OK();
}

std::string MembersToJson(const std::vector<RendezvousMember>& members) {
  nlohmann::json a = nlohmann::json::array();
  for (const RendezvousMember& m : members) {
    a.push_back({{"worker_id", m.worker_id}, {"endpoint", m.endpoint}, {"rank", m.rank}});
  }
  return a.dump();
}

Status MembersFromJson(const std::string& text, std::vector<RendezvousMember>* members) {
  const nlohmann::json a = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!a.is_array()) return Status::DataLoss("rendezvous members is not a JSON array: " + text);
  for (const nlohmann::json& x : a) {
    RendezvousMember m;
    if (!x.is_object() || !JsonInt(x, "worker_id", &m.worker_id) || !JsonInt(x, "rank", &m.rank) ||
        !x.contains("endpoint") || !x["endpoint"].is_string()) {
      return Status::DataLoss(
          "rendezvous member is not {\"worker_id\":int,\"endpoint\":str,\"rank\":int}: " + text);
    }
    m.endpoint = x["endpoint"].get<std::string>();
    members->push_back(std::move(m));
  }
  return Status::OK();
}

// Compact arrays of arrays: a job keeps thousands of loss points.
std::string PricesToJson(const std::vector<PricePoint>& prices) {
  nlohmann::json a = nlohmann::json::array();
  for (const PricePoint& p : prices) a.push_back({p.at_ms, p.price_per_gpu_hour});
  return a.dump();
}

Status PricesFromJson(const std::string& text, std::vector<PricePoint>* prices) {
  const nlohmann::json a = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!a.is_array()) return Status::DataLoss("price_history is not a JSON array: " + text);
  for (const nlohmann::json& x : a) {
    if (!x.is_array() || x.size() != 2 || !x[0].is_number_integer() || !x[1].is_number())
      return Status::DataLoss("price_history entry is not [at_ms, price]: " + x.dump());
    prices->push_back(PricePoint{x[0].get<int64_t>(), x[1].get<double>()});
  }
  return Status::OK();
}

std::string LossesToJson(const std::vector<LossPoint>& losses) {
  nlohmann::json a = nlohmann::json::array();
  for (const LossPoint& p : losses) a.push_back({p.step, p.loss, p.segment_id, p.at_ms});
  return a.dump();
}

Status LossesFromJson(const std::string& text, std::vector<LossPoint>* losses) {
  const nlohmann::json a = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!a.is_array()) return Status::DataLoss("losses is not a JSON array: " + text);
  for (const nlohmann::json& x : a) {
    if (!x.is_array() || x.size() != 4 || !x[0].is_number_integer() || !x[1].is_number() ||
        !x[2].is_number_integer() || !x[3].is_number_integer())
      return Status::DataLoss("losses entry is not [step, loss, segment_id, at_ms]: " + x.dump());
    losses->push_back(LossPoint{x[0].get<int64_t>(), x[1].get<double>(), x[2].get<int64_t>(),
                                x[3].get<int64_t>()});
  }
  return Status::OK();
}

std::string StepTimeToJson(const std::map<int, StepTime>& step_time) {
  nlohmann::json o = nlohmann::json::object();
  for (const auto& [gpus, t] : step_time) o[std::to_string(gpus)] = {t.seconds, t.steps};
  return o.dump();
}

Status StepTimeFromJson(const std::string& text, std::map<int, StepTime>* step_time) {
  const nlohmann::json o = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!o.is_object()) return Status::DataLoss("step_time is not a JSON object: " + text);
  for (const auto& [key, value] : o.items()) {
    char* end = nullptr;
    const long gpus = std::strtol(key.c_str(), &end, 10);
    if (end == key.c_str() || *end != '\0' || gpus < 1 || gpus > 1000000 || !value.is_array() ||
        value.size() != 2 || !value[0].is_number() || !value[1].is_number_integer())
      return Status::DataLoss("step_time entry is not \"gpus\": [seconds, steps]: " + text);
    (*step_time)[static_cast<int>(gpus)] =
        StepTime{value[0].get<double>(), value[1].get<int64_t>()};
  }
  return Status::OK();
}

std::string PriceRulesToJson(const std::array<PriceRule, 4>& rules) {
  nlohmann::json a = nlohmann::json::array();
  for (const PriceRule& r : rules) {
    a.push_back(
        {r.max_price_per_gpu_hour, r.spot_fallback_revocations, r.spot_fallback_window_seconds});
  }
  return a.dump();
}

Status PriceRulesFromJson(const std::string& text, std::array<PriceRule, 4>* rules) {
  const nlohmann::json a = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  // '[]': a file from before prices (schema version 10): every rule the default.
  if (a.is_array() && a.empty()) return Status::OK();
  if (!a.is_array() || a.size() != rules->size())
    return Status::DataLoss("price_rules is not an array of 4 rules: " + text);
  for (size_t i = 0; i < rules->size(); i++) {
    const nlohmann::json& x = a[i];
    if (!x.is_array() || x.size() != 3 || !x[0].is_number() || !x[1].is_number_integer() ||
        !x[2].is_number())
      return Status::DataLoss("price rule is not [max_price, revocations, window_seconds]: " +
                              x.dump());
    (*rules)[i] = PriceRule{x[0].get<double>(), x[1].get<int>(), x[2].get<double>()};
  }
  return Status::OK();
}

// A pool's storage prefixes: ["/mnt/ckpt", "s3://bucket/runs"].
Status StorageFromJson(const std::string& text, std::vector<std::string>* storage) {
  const nlohmann::json a = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!a.is_array()) return Status::DataLoss("storage is not a JSON array: " + text);
  for (const nlohmann::json& x : a) {
    if (!x.is_string()) return Status::DataLoss("storage entry is not a string: " + x.dump());
    storage->push_back(x.get<std::string>());
  }
  return Status::OK();
}

// Where a job's steps are: {"location": [step, tier, bytes, pool, segment_id, at_ms]}.
std::string StoredToJson(const std::map<std::string, StoredStep>& stored) {
  nlohmann::json o = nlohmann::json::object();
  for (const auto& [location, at] : stored)
    o[location] = {at.step, at.tier, at.bytes, at.pool, at.segment_id, at.at_ms};
  return o.dump();
}

Status StoredFromJson(const std::string& text, std::map<std::string, StoredStep>* stored) {
  const nlohmann::json o = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!o.is_object()) return Status::DataLoss("stored is not a JSON object: " + text);
  for (const auto& [location, x] : o.items()) {
    if (!x.is_array() || x.size() != 6 || !x[0].is_number_integer() ||
        !x[1].is_number_integer() || !x[2].is_number_unsigned() || !x[3].is_string() ||
        !x[4].is_number_integer() || !x[5].is_number_integer())
      return Status::DataLoss(
          "stored entry is not [step, tier, bytes, pool, segment_id, at_ms]: " + x.dump());
    (*stored)[location] = StoredStep{x[0].get<int64_t>(), x[1].get<int>(), x[2].get<uint64_t>(),
                                     x[3].get<std::string>(), x[4].get<int64_t>(),
                                     x[5].get<int64_t>()};
  }
  return Status::OK();
}

constexpr int64_t kMetaRowId = 0;

}  // namespace

const Table kPools = {"pools",
                      {"name"},
                      {{"name", Type::kText},
                       {"description", Type::kText},
                       {"pricing", Type::kInt},
                       {"price_per_gpu_hour", Type::kReal},
                       {"price_history", Type::kText},
                       {"storage", Type::kText}}};

const Table kWindows = {"windows",
                        {"id"},
                        {{"id", Type::kInt},
                         {"pool", Type::kText},
                         {"gpus", Type::kInt},
                         {"start_ms", Type::kInt},
                         {"end_ms", Type::kInt},
                         {"kind", Type::kInt},
                         {"notice_lead_ms", Type::kInt},
                         {"closed_early", Type::kInt},
                         {"node", Type::kText},
                         {"node_gpus", Type::kText},
                         {"node_addr", Type::kText},
                         {"declared", Type::kInt},
                         {"joined", Type::kInt}}};

const Table kTeams = {"teams",
                      {"name"},
                      {{"name", Type::kText},
                       {"guaranteed_gpus", Type::kInt},
                       {"borrow_limit_gpus", Type::kInt},
                       {"usage_gpu_seconds", Type::kReal},
                       {"usage_at_ms", Type::kInt},
                       {"budget", Type::kReal},
                       {"budget_period_seconds", Type::kReal},
                       {"period_start_ms", Type::kInt},
                       {"spent", Type::kReal}}};

const Table kJobs = {"jobs",
                     {"id"},
                     {{"id", Type::kInt},
                      {"name", Type::kText},
                      {"team", Type::kText},
                      {"pool", Type::kText},
                      {"priority", Type::kInt},
                      {"min_gpus", Type::kInt},
                      {"max_gpus", Type::kInt},
                      {"gang", Type::kInt},
                      {"preemptible", Type::kInt},
                      {"checkpoint_seconds", Type::kReal},
                      {"restart_seconds", Type::kReal},
                      {"checkpoint_interval_seconds", Type::kReal},
                      {"remaining_seconds", Type::kReal},
                      {"submit_ms", Type::kInt},
                      {"eligible_ms", Type::kInt},
                      {"state", Type::kInt},
                      {"segment_id", Type::kInt},
                      {"fencing_token", Type::kInt},
                      {"last_step", Type::kInt},
                      {"checkpoint_step", Type::kInt},
                      {"checkpoint_ms", Type::kInt},
                      {"segments", Type::kInt},
                      {"preemptions", Type::kInt},
                      {"lost_gpu_seconds", Type::kReal},
                      {"message", Type::kText},
                      {"service_gpu_seconds", Type::kReal},
                      {"launch", Type::kText},
                      {"crash_ms", Type::kText},
                      {"revoked_ms", Type::kText},
                      {"cost", Type::kReal},
                      {"samples", Type::kInt},
                      {"step_time", Type::kText},
                      {"losses", Type::kText},
                      {"eval", Type::kText},
                      {"eval_every", Type::kInt},
                      {"eval_gpus", Type::kInt},
                      {"checkpoints", Type::kInt},
                      {"stored", Type::kText}}};

const Table kSegments = {"segments",
                         {"id"},
                         {{"id", Type::kInt},
                          {"job_id", Type::kInt},
                          {"allocs", Type::kText},
                          {"fencing_token", Type::kInt},
                          {"start_ms", Type::kInt},
                          {"planned_end_ms", Type::kInt},
                          {"state", Type::kInt},
                          {"notice_reason", Type::kInt},
                          {"notice_ms", Type::kInt},
                          {"deadline_ms", Type::kInt},
                          {"preempted_for", Type::kInt},
                          {"ended_ms", Type::kInt},
                          {"last_heartbeat_ms", Type::kInt},
                          {"placement", Type::kText},
                          {"shrink_release", Type::kText},
                          {"leaving_workers", Type::kText},
                          {"shrink_notice_ms", Type::kInt},
                          {"shrink_deadline_ms", Type::kInt},
                          {"shrink_for", Type::kInt},
                          {"master_port", Type::kInt},
                          {"price_per_gpu_hour", Type::kReal},
                          {"cost", Type::kReal},
                          {"start_step", Type::kInt},
                          {"checkpoint_step", Type::kInt},
                          {"first_step", Type::kInt},
                          {"first_step_ms", Type::kInt},
                          {"last_step", Type::kInt},
                          {"last_step_ms", Type::kInt},
                          {"checkpoint_seconds", Type::kReal},
                          {"external_id", Type::kText},
                          {"notice_to_replicas_seconds", Type::kReal}}};

const Table kWorkers = {"workers",
                        {"id"},
                        {{"id", Type::kInt},
                         {"job_id", Type::kInt},
                         {"segment_id", Type::kInt},
                         {"name", Type::kText},
                         {"fencing_token", Type::kInt},
                         {"registered_ms", Type::kInt},
                         {"last_heartbeat_ms", Type::kInt},
                         {"released", Type::kInt},
                         {"secret_hash", Type::kText},
                         {"node", Type::kText}}};

const Table kKv = {"kv",
                   {"job_id", "key"},
                   {{"job_id", Type::kInt},
                    {"key", Type::kText},
                    {"value", Type::kBlob},
                    {"version", Type::kInt},
                    {"updated_ms", Type::kInt}}};

const Table kRendezvous = {"rendezvous",
                           {"job_id"},
                           {{"job_id", Type::kInt},
                            {"generation", Type::kInt},
                            {"phase", Type::kInt},
                            {"members", Type::kText},
                            {"previous", Type::kText},
                            {"opened_ms", Type::kInt},
                            {"last_call_ms", Type::kInt},
                            {"formed_ms", Type::kInt},
                            {"dropped", Type::kText}}};

const Table kNodeCredentials = {
    "node_credentials",
    {"name"},
    {{"name", Type::kText}, {"secret_hash", Type::kText}, {"issued_ms", Type::kInt}}};

const Table kEvals = {"evals",
                      {"id"},
                      {{"id", Type::kInt},
                       {"job_id", Type::kInt},
                       {"step", Type::kInt},
                       {"state", Type::kInt},
                       {"node", Type::kText},
                       {"gpu", Type::kInt},
                       {"created_ms", Type::kInt},
                       {"started_ms", Type::kInt},
                       {"ended_ms", Type::kInt},
                       {"attempts", Type::kInt},
                       {"result", Type::kText},
                       {"message", Type::kText}}};

const Table kMeta = {"meta",
                     {"id"},
                     {{"id", Type::kInt},
                      {"next_id", Type::kInt},
                      {"next_fencing_token", Type::kInt},
                      {"segments_started", Type::kInt},
                      {"notices_sent", Type::kInt},
                      {"preemptions", Type::kInt},
                      {"revocations", Type::kInt},
                      {"acks", Type::kInt},
                      {"segments_lost", Type::kInt},
                      {"lost_gpu_seconds", Type::kReal},
                      {"window_gpu_seconds", Type::kReal},
                      {"used_gpu_seconds", Type::kReal},
                      {"wait_seconds_sum", Type::kReal},
                      {"wait_buckets", Type::kText},
                      {"accounted_ms", Type::kInt},
                      {"price_rules", Type::kText}}};

const std::vector<const Table*>& AllTables() {
  static const std::vector<const Table*> kAll = {&kPools,      &kWindows,         &kTeams, &kJobs,
                                                 &kSegments,   &kWorkers,         &kKv,    &kMeta,
                                                 &kRendezvous, &kNodeCredentials, &kEvals};
  return kAll;
}

void BindKey(Binder& b, const std::string& k) { b.Text(k); }
void BindKey(Binder& b, int64_t k) { b.Int(k); }

std::string Describe(const char* what, const std::string& k) {
  return std::string(what) + " \"" + k + "\"";
}
std::string Describe(const char* what, int64_t k) {
  return std::string(what) + " " + std::to_string(k);
}

Status BindRow(Binder& b, const Pool& p) {
  b.Text(p.name);
  b.Text(p.description);
  STINT_RETURN_IF_ERROR(CheckEnum("pricing", static_cast<int64_t>(p.pricing), kMaxPoolPricing));
  b.Int(static_cast<int64_t>(p.pricing));
  b.Double(p.price_per_gpu_hour);
  b.Text(PricesToJson(p.price_history));
  b.Text(nlohmann::json(p.storage).dump());
  return Status::OK();
}

Status ReadRow(RowReader& r, Pool* p) {
  p->name = r.Text();
  p->description = r.Text();
  p->pricing = static_cast<PoolPricing>(r.Ranged(0, kMaxPoolPricing));
  p->price_per_gpu_hour = r.Double();
  STINT_RETURN_IF_ERROR(PricesFromJson(r.Text(), &p->price_history));
  return StorageFromJson(r.Text(), &p->storage);
}

Status BindRow(Binder& b, const Window& w) {
  STINT_RETURN_IF_ERROR(CheckEnum("kind", static_cast<int64_t>(w.kind), kMaxWindowKind));
  b.Int(w.id);
  b.Text(w.pool);
  b.Int(w.gpus);
  b.Int(w.start_ms);
  b.Int(w.end_ms);
  b.Int(static_cast<int64_t>(w.kind));
  b.Int(w.notice_lead_ms);
  b.Bool(w.closed_early);
  b.Text(w.node);
  b.Text(nlohmann::json(w.node_gpus).dump());
  b.Text(w.node_addr);
  b.Bool(w.declared);
  b.Bool(w.joined);
  return Status::OK();
}

Status ReadRow(RowReader& r, Window* w) {
  w->id = r.Int();
  w->pool = r.Text();
  w->gpus = r.Int32();
  w->start_ms = r.Int();
  w->end_ms = r.Int();
  w->kind = static_cast<WindowKind>(r.Ranged(0, kMaxWindowKind));
  w->notice_lead_ms = r.Int();
  w->closed_early = r.Bool();
  w->node = r.Text();
  const std::string gpus = r.Text();
  const nlohmann::json a = nlohmann::json::parse(gpus, nullptr, /*allow_exceptions=*/false);
  if (!a.is_array()) return Status::DataLoss("node_gpus is not a JSON array: " + gpus);
  for (const nlohmann::json& x : a) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > 1000000)
      return Status::DataLoss("node_gpus holds a value that is not a GPU index: " + gpus);
    w->node_gpus.push_back(x.get<int>());
  }
  w->node_addr = r.Text();
  w->declared = r.Bool();
  w->joined = r.Bool();
  return Status::OK();
}

Status BindRow(Binder& b, const NodeCredential& n) {
  b.Text(n.name);
  b.Text(n.secret_hash);
  b.Int(n.issued_ms);
  return Status::OK();
}

Status ReadRow(RowReader& r, NodeCredential* n) {
  n->name = r.Text();
  n->secret_hash = r.Text();
  n->issued_ms = r.Int();
  return Status::OK();
}

Status BindRow(Binder& b, const Team& t) {
  b.Text(t.name);
  b.Int(t.guaranteed_gpus);
  b.Int(t.borrow_limit_gpus);
  b.Double(t.usage_gpu_seconds);
  b.Int(t.usage_at_ms);
  b.Double(t.budget);
  b.Double(t.budget_period_seconds);
  b.Int(t.period_start_ms);
  b.Double(t.spent);
  return Status::OK();
}

Status ReadRow(RowReader& r, Team* t) {
  t->name = r.Text();
  t->guaranteed_gpus = r.Int32();
  t->borrow_limit_gpus = r.Int32();
  t->usage_gpu_seconds = r.Double();
  t->usage_at_ms = r.Int();
  t->budget = r.Double();
  t->budget_period_seconds = r.Double();
  t->period_start_ms = r.Int();
  t->spent = r.Double();
  return Status::OK();
}

Status BindRow(Binder& b, const Job& j) {
  STINT_RETURN_IF_ERROR(CheckEnum("priority", static_cast<int64_t>(j.priority), kMaxPriority));
  STINT_RETURN_IF_ERROR(CheckEnum("state", static_cast<int64_t>(j.state), kMaxJobState));
  b.Int(j.id);
  b.Text(j.name);
  b.Text(j.team);
  b.Text(JoinPoolNames(j.pools));
  b.Int(static_cast<int64_t>(j.priority));
  b.Int(j.min_gpus);
  b.Int(j.max_gpus);
  b.Bool(j.gang);
  b.Bool(j.preemptible);
  b.Double(j.checkpoint_seconds);
  b.Double(j.restart_seconds);
  b.Double(j.checkpoint_interval_seconds);
  b.Double(j.remaining_seconds);
  b.Int(j.submit_ms);
  b.Int(j.eligible_ms);
  b.Int(static_cast<int64_t>(j.state));
  b.Int(j.segment_id);
  b.Uint(j.fencing_token);
  b.Int(j.last_step);
  b.Int(j.checkpoint_step);
  b.Int(j.checkpoint_ms);
  b.Int(j.segments);
  b.Int(j.preemptions);
  b.Double(j.lost_gpu_seconds);
  b.Text(j.message);
  b.Double(j.service_gpu_seconds);
  b.Text(j.launch);
  b.Text(BucketsToJson(j.crash_ms));
  b.Text(BucketsToJson(j.revoked_ms));
  b.Double(j.cost);
  b.Int(j.samples);
  b.Text(StepTimeToJson(j.step_time));
  b.Text(LossesToJson(j.losses));
  b.Text(j.eval);
  b.Int(j.eval_every);
  b.Int(j.eval_gpus);
  b.Int(j.checkpoints);
  b.Text(StoredToJson(j.stored));
  return Status::OK();
}

Status ReadRow(RowReader& r, Job* j) {
  j->id = r.Int();
  j->name = r.Text();
  j->team = r.Text();
  j->pools = SplitPoolNames(r.Text());
  j->priority = static_cast<Priority>(r.Ranged(0, kMaxPriority));
  j->min_gpus = r.Int32();
  j->max_gpus = r.Int32();
  j->gang = r.Bool();
  j->preemptible = r.Bool();
  j->checkpoint_seconds = r.Double();
  j->restart_seconds = r.Double();
  j->checkpoint_interval_seconds = r.Double();
  j->remaining_seconds = r.Double();
  j->submit_ms = r.Int();
  j->eligible_ms = r.Int();
  j->state = static_cast<JobState>(r.Ranged(0, kMaxJobState));
  j->segment_id = r.Int();
  j->fencing_token = r.Uint();
  j->last_step = r.Int();
  j->checkpoint_step = r.Int();
  j->checkpoint_ms = r.Int();
  j->segments = r.Int32();
  j->preemptions = r.Int32();
  j->lost_gpu_seconds = r.Double();
  j->message = r.Text();
  j->service_gpu_seconds = r.Double();
  j->launch = r.Text();
  STINT_RETURN_IF_ERROR(BucketsFromJson(r.Text(), &j->crash_ms));
  STINT_RETURN_IF_ERROR(BucketsFromJson(r.Text(), &j->revoked_ms));
  j->cost = r.Double();
  j->samples = r.Int();
  STINT_RETURN_IF_ERROR(StepTimeFromJson(r.Text(), &j->step_time));
  STINT_RETURN_IF_ERROR(LossesFromJson(r.Text(), &j->losses));
  j->eval = r.Text();
  j->eval_every = r.Int32();
  j->eval_gpus = r.Int32();
  j->checkpoints = r.Int();
  return StoredFromJson(r.Text(), &j->stored);
}

Status BindRow(Binder& b, const Segment& s) {
  STINT_RETURN_IF_ERROR(CheckEnum("state", static_cast<int64_t>(s.state), kMaxSegmentState));
  STINT_RETURN_IF_ERROR(
      CheckEnum("notice_reason", static_cast<int64_t>(s.notice_reason), kMaxNoticeReason));
  b.Int(s.id);
  b.Int(s.job_id);
  b.Text(AllocsToJson(s.allocs));
  b.Uint(s.fencing_token);
  b.Int(s.start_ms);
  b.Int(s.planned_end_ms);
  b.Int(static_cast<int64_t>(s.state));
  b.Int(static_cast<int64_t>(s.notice_reason));
  b.Int(s.notice_ms);
  b.Int(s.deadline_ms);
  b.Int(s.preempted_for);
  b.Int(s.ended_ms);
  b.Int(s.last_heartbeat_ms);
  nlohmann::json placement = nlohmann::json::array();
  for (const Placement& p : s.placement)
    placement.push_back({{"window_id", p.window_id}, {"gpus", p.gpus}});
  b.Text(placement.dump());
  b.Text(AllocsToJson(s.shrink_release));
  b.Text(nlohmann::json(s.leaving_workers).dump());
  b.Int(s.shrink_notice_ms);
  b.Int(s.shrink_deadline_ms);
  b.Int(s.shrink_for);
  b.Int(s.master_port);
  b.Double(s.price_per_gpu_hour);
  b.Double(s.cost);
  b.Int(s.start_step);
  b.Int(s.checkpoint_step);
  b.Int(s.first_step);
  b.Int(s.first_step_ms);
  b.Int(s.last_step);
  b.Int(s.last_step_ms);
  b.Double(s.checkpoint_seconds);
  b.Text(s.external_id);
  b.Double(s.notice_to_replicas_seconds);
  return Status::OK();
}

Status ReadRow(RowReader& r, Segment* s) {
  s->id = r.Int();
  s->job_id = r.Int();
  const std::string allocs = r.Text();
  s->fencing_token = r.Uint();
  s->start_ms = r.Int();
  s->planned_end_ms = r.Int();
  s->state = static_cast<SegmentState>(r.Ranged(0, kMaxSegmentState));
  s->notice_reason = static_cast<NoticeReason>(r.Ranged(0, kMaxNoticeReason));
  s->notice_ms = r.Int();
  s->deadline_ms = r.Int();
  s->preempted_for = r.Int();
  s->ended_ms = r.Int();
  s->last_heartbeat_ms = r.Int();
  const std::string placement = r.Text();
  const nlohmann::json a = nlohmann::json::parse(placement, nullptr, /*allow_exceptions=*/false);
  if (!a.is_array()) return Status::DataLoss("placement is not a JSON array: " + placement);
  for (const nlohmann::json& x : a) {
    Placement p;
    const nlohmann::json gpus = x.is_object() ? x.value("gpus", nlohmann::json()) : nlohmann::json();
    if (!x.is_object() || !JsonInt(x, "window_id", &p.window_id) || !gpus.is_array())
      return Status::DataLoss("placement entry is not {\"window_id\",\"gpus\"}: " + placement);
    for (const nlohmann::json& g : gpus) {
      if (!g.is_number_integer()) return Status::DataLoss("placement holds a non-index: " + placement);
      p.gpus.push_back(g.get<int>());
    }
    s->placement.push_back(std::move(p));
  }
  const std::string release = r.Text();
  const std::string leaving = r.Text();
  s->shrink_notice_ms = r.Int();
  s->shrink_deadline_ms = r.Int();
  s->shrink_for = r.Int();
  STINT_RETURN_IF_ERROR(AllocsFromJson(release, &s->shrink_release));
  STINT_RETURN_IF_ERROR(IdsFromJson("segment leaving_workers", leaving, &s->leaving_workers));
  s->master_port = static_cast<int>(r.Ranged(0, 65535));
  s->price_per_gpu_hour = r.Double();
  s->cost = r.Double();
  s->start_step = r.Int();
  s->checkpoint_step = r.Int();
  s->first_step = r.Int();
  s->first_step_ms = r.Int();
  s->last_step = r.Int();
  s->last_step_ms = r.Int();
  s->checkpoint_seconds = r.Double();
  s->external_id = r.Text();
  s->notice_to_replicas_seconds = r.Double();
  return AllocsFromJson(allocs, &s->allocs);
}

Status BindRow(Binder& b, const Worker& w) {
  b.Int(w.id);
  b.Int(w.job_id);
  b.Int(w.segment_id);
  b.Text(w.name);
  b.Uint(w.fencing_token);
  b.Int(w.registered_ms);
  b.Int(w.last_heartbeat_ms);
  b.Bool(w.released);
  b.Text(w.secret_hash);
  b.Text(w.node);
  return Status::OK();
}

Status ReadRow(RowReader& r, Worker* w) {
  w->id = r.Int();
  w->job_id = r.Int();
  w->segment_id = r.Int();
  w->name = r.Text();
  w->fencing_token = r.Uint();
  w->registered_ms = r.Int();
  w->last_heartbeat_ms = r.Int();
  w->released = r.Bool();
  w->secret_hash = r.Text();
  w->node = r.Text();
  return Status::OK();
}

Status BindRow(Binder& b, const Rendezvous& r) {
  b.Int(r.job_id);
  b.Uint(r.generation);
  b.Int(static_cast<int64_t>(r.phase));
  b.Text(MembersToJson(r.members));
  b.Text(nlohmann::json(r.previous).dump());
  b.Int(r.opened_ms);
  b.Int(r.last_call_ms);
  b.Int(r.formed_ms);
  b.Text(nlohmann::json(r.dropped).dump());
  return Status::OK();
}

Status ReadRow(RowReader& r, Rendezvous* z) {
  z->job_id = r.Int();
  z->generation = r.Uint();
  z->phase = static_cast<RendezvousPhase>(r.Ranged(0, kMaxRendezvousPhase));
  const std::string members = r.Text();
  const std::string previous = r.Text();
  z->opened_ms = r.Int();
  z->last_call_ms = r.Int();
  z->formed_ms = r.Int();
  const std::string dropped = r.Text();
  STINT_RETURN_IF_ERROR(MembersFromJson(members, &z->members));
  STINT_RETURN_IF_ERROR(IdsFromJson("rendezvous previous", previous, &z->previous));
  return IdsFromJson("rendezvous dropped", dropped, &z->dropped);
}

Status BindRow(Binder& b, const EvalTask& e) {
  STINT_RETURN_IF_ERROR(CheckEnum("eval state", static_cast<int64_t>(e.state), kMaxEvalState));
  b.Int(e.id);
  b.Int(e.job_id);
  b.Int(e.step);
  b.Int(static_cast<int64_t>(e.state));
  b.Text(e.node);
  b.Int(e.gpu);
  b.Int(e.created_ms);
  b.Int(e.started_ms);
  b.Int(e.ended_ms);
  b.Int(e.attempts);
  b.Text(e.result);
  b.Text(e.message);
  return Status::OK();
}

Status ReadRow(RowReader& r, EvalTask* e) {
  e->id = r.Int();
  e->job_id = r.Int();
  e->step = r.Int();
  e->state = static_cast<EvalState>(r.Ranged(0, kMaxEvalState));
  e->node = r.Text();
  e->gpu = r.Int32();
  e->created_ms = r.Int();
  e->started_ms = r.Int();
  e->ended_ms = r.Int();
  e->attempts = r.Int32();
  e->result = r.Text();
  e->message = r.Text();
  return Status::OK();
}

Status BindRow(Binder& b, const KvRecord& e) {
  b.Int(e.job_id);
  b.Text(e.key);
  b.Blob(e.value);
  b.Int(e.version);
  b.Int(e.updated_ms);
  return Status::OK();
}

Status ReadRow(RowReader& r, KvRecord* e) {
  e->job_id = r.Int();
  e->key = r.Text();
  e->value = r.Blob();
  e->version = r.Int();
  e->updated_ms = r.Int();
  return Status::OK();
}

Status BindMeta(Binder& b, const ClusterState& s) {
  const Counters& c = s.counters;
  b.Int(kMetaRowId);
  b.Int(s.next_id);
  b.Uint(s.next_fencing_token);
  b.Int(c.segments_started);
  b.Int(c.notices_sent);
  b.Int(c.preemptions);
  b.Int(c.revocations);
  b.Int(c.acks);
  b.Int(c.segments_lost);
  b.Double(c.lost_gpu_seconds);
  b.Double(c.window_gpu_seconds);
  b.Double(c.used_gpu_seconds);
  b.Double(c.wait_seconds_sum);
  b.Text(BucketsToJson(c.wait_buckets));
  b.Int(c.accounted_ms);
  b.Text(PriceRulesToJson(s.price_rules));
  return Status::OK();
}

Status ReadMeta(RowReader& r, ClusterState* s) {
  Counters& c = s->counters;
  r.Ranged(kMetaRowId, kMetaRowId);
  s->next_id = r.Int();
  s->next_fencing_token = r.Uint();
  c.segments_started = r.Int();
  c.notices_sent = r.Int();
  c.preemptions = r.Int();
  c.revocations = r.Int();
  c.acks = r.Int();
  c.segments_lost = r.Int();
  c.lost_gpu_seconds = r.Double();
  c.window_gpu_seconds = r.Double();
  c.used_gpu_seconds = r.Double();
  c.wait_seconds_sum = r.Double();
  const std::string buckets = r.Text();
  c.accounted_ms = r.Int();
  STINT_RETURN_IF_ERROR(PriceRulesFromJson(r.Text(), &s->price_rules));
  return BucketsFromJson(buckets, &c.wait_buckets);
}

}  // namespace stint::stintd::internal
