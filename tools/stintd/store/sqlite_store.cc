// Store on SQLite: one file, WAL journal, synchronous=FULL, exclusive
// locking (one stintd per file), schema version in PRAGMA user_version.
//
// Schema version 9 (tables are STRICT, so a value of the wrong type is
// refused when written, not discovered when read):
//   pools, windows, teams, jobs, segments, workers: one row per object,
//     one column per field of model.h, named as the field; enums as their
//     integer values, bools as 0/1, uint64 as the int64 with the same bits,
//     Segment.allocs as JSON [{"window_id":W,"gpus":N},...], NaN as NULL;
//   kv: (job_id, key) -> value BLOB, version, updated_ms;
//   rendezvous (added in version 2): one row per job, members as JSON
//     [{"worker_id":W,"endpoint":"h:p","rank":R},...], previous and
//     dropped (version 4) as JSON arrays of worker ids;
//   meta: the one row (id 0) of next_id, next_fencing_token and every
//     Counters field, wait_buckets as a JSON array.
// A change to this layout raises kSchemaVersion and migrates older files in
// Init(): version 1 -> 2 adds the rendezvous table, 2 -> 3 the jobs column
// service_gpu_seconds (0 for the jobs already there: their service so far
// is unknown, and counts from the migration on), 3 -> 4 the rendezvous
// column dropped ('[]' for the rows already there: nobody was dropped from
// an open round yet, as version 3 did not fence per worker).
// Since version 4 each worker row holds a token of its own; the rows of
// older files keep the one token their segment's workers shared (the
// workers hold it), and FencingValid accepts it while any holder may commit.
// Version 4 -> 5 adds the workers column secret_hash ('' for the rows
// already there: those workers got no secret and keep acting with the
// shared worker token until their segment ends). Version 5 -> 6 adds the
// windows columns node and node_gpus ('' and '[]' for the rows already
// there: admin-declared windows, on no node). Version 6 -> 7 adds the
// columns jobs.launch (''), segments.placement ('[]') and windows.node_addr
// (''): jobs without a launch spec, segments on no node. Version 7 -> 8
// adds jobs.crash_ms ('[]': no crash remembered). Version 8 -> 9 adds the
// segments columns shrink_release ('[]', as allocs), leaving_workers ('[]',
// worker ids), shrink_notice_ms, shrink_deadline_ms and shrink_for (0): no
// shrink in flight (version 8 kept them in memory only, so a file of a
// stintd stopped mid-shrink has none), and workers.node ('': a worker
// registered before, as by itself), the windows columns declared and joined (0: windows an agent made, or none),
// segments.master_port (0: started before ports were assigned; stintd then
// answers the old port, 20000 + id % 20000, which its workers already use)
// and the table node_credentials (name, secret_hash, issued_ms): no node
// has a credential of its own yet.
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "stintd/store/sqlite_util.h"
#include "stintd/store/store.h"

namespace stint::stintd {
namespace {

using internal::Binder;
using internal::Exec;
using internal::Prepare;
using internal::QueryInt;
using internal::QueryText;
using internal::RowReader;
using internal::ScopedReset;
using internal::SqliteDb;
using internal::SqliteStmt;
using internal::StatusFromSqlite;
using internal::StepDone;

constexpr int64_t kSchemaVersion = 9;
// STRICT tables need 3.37. Checked at run time too: the shared library
// loaded may be older than the header compiled against.
constexpr int kMinSqliteVersion = 3037000;
static_assert(SQLITE_VERSION_NUMBER >= kMinSqliteVersion, "the stintd store needs SQLite >= 3.37");
// Long enough to ride out a reader that holds the file for a moment (the
// sqlite3 shell, a backup), short enough that a second stintd fails at once.
constexpr int kBusyTimeoutMs = 250;

// The last enumerator of each enum as stored. Save refuses a value above it
// (so the file never holds what Load would refuse) and Load checks it; a new
// enumerator raises its bound here.
constexpr int64_t kMaxPriority = static_cast<int64_t>(Priority::kCritical);
constexpr int64_t kMaxWindowKind = static_cast<int64_t>(WindowKind::kSpot);
constexpr int64_t kMaxJobState = static_cast<int64_t>(JobState::kFailed);
constexpr int64_t kMaxSegmentState = static_cast<int64_t>(SegmentState::kCancelled);
constexpr int64_t kMaxNoticeReason = static_cast<int64_t>(NoticeReason::kCancelled);
constexpr int64_t kMaxRendezvousPhase = static_cast<int64_t>(RendezvousPhase::kFormed);

// ---------------------------------------------------------------------------
// Table layout. The column order here is the order of the binds and reads in
// BindRow/ReadRow below; Binder::Finish and RowReader::Finish check the counts.

enum class Type { kInt, kReal, kText, kBlob };

struct Column {
  const char* name;
  Type type;
};

struct Table {
  const char* name;
  std::vector<const char*> key;  // primary key columns
  std::vector<Column> columns;

  std::string Create() const {
    std::string sql = std::string("CREATE TABLE ") + name + " (";
    for (const Column& c : columns) {
      sql += c.name;
      switch (c.type) {
        case Type::kInt:
          sql += " INTEGER NOT NULL, ";
          break;
        case Type::kReal:
          sql += " REAL, ";
          break;  // NULL is how SQLite stores NaN
        case Type::kText:
          sql += " TEXT NOT NULL, ";
          break;
        case Type::kBlob:
          sql += " BLOB NOT NULL, ";
          break;
      }
    }
    sql += "PRIMARY KEY (" + Join(key, ", ") + ")) STRICT";
    return sql;
  }
  std::string Upsert() const {
    std::vector<const char*> names;
    std::vector<const char*> marks;
    for (const Column& c : columns) {
      names.push_back(c.name);
      marks.push_back("?");
    }
    return std::string("INSERT OR REPLACE INTO ") + name + " (" + Join(names, ", ") + ") VALUES (" +
           Join(marks, ", ") + ")";
  }
  std::string Erase() const {
    std::vector<std::string> conds;
    for (const char* k : key) conds.push_back(std::string(k) + " = ?");
    return std::string("DELETE FROM ") + name + " WHERE " + Join(conds, " AND ");
  }
  std::string Select() const {
    std::vector<const char*> names;
    for (const Column& c : columns) names.push_back(c.name);
    return "SELECT " + Join(names, ", ") + " FROM " + name + " ORDER BY " + Join(key, ", ");
  }

  template <typename S>
  static std::string Join(const std::vector<S>& parts, const char* sep) {
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i > 0) out += sep;
      out += parts[i];
    }
    return out;
  }
};

const Table kPools = {"pools", {"name"}, {{"name", Type::kText}, {"description", Type::kText}}};

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
                       {"usage_at_ms", Type::kInt}}};

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
                      {"crash_ms", Type::kText}}};

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
                          {"master_port", Type::kInt}}};

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
                      {"accounted_ms", Type::kInt}}};

const std::vector<const Table*>& AllTables() {
  static const std::vector<const Table*> kAll = {&kPools,      &kWindows,        &kTeams, &kJobs,
                                                 &kSegments,   &kWorkers,        &kKv,    &kMeta,
                                                 &kRendezvous, &kNodeCredentials};
  return kAll;
}

// ---------------------------------------------------------------------------
// Rows <-> columns.

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

// BindRow writes one object as the table's columns; ReadRow reads it back.
// KeyOf and Describe name it.

const std::string& KeyOf(const Pool& p) { return p.name; }
const std::string& KeyOf(const Team& t) { return t.name; }
int64_t KeyOf(const Window& w) { return w.id; }
int64_t KeyOf(const Job& j) { return j.id; }
int64_t KeyOf(const Segment& s) { return s.id; }
int64_t KeyOf(const Worker& w) { return w.id; }
int64_t KeyOf(const Rendezvous& r) { return r.job_id; }
const std::string& KeyOf(const NodeCredential& n) { return n.name; }

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
  return Status::OK();
}

Status ReadRow(RowReader& r, Pool* p) {
  p->name = r.Text();
  p->description = r.Text();
  return Status::OK();
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
  return Status::OK();
}

Status ReadRow(RowReader& r, Team* t) {
  t->name = r.Text();
  t->guaranteed_gpus = r.Int32();
  t->borrow_limit_gpus = r.Int32();
  t->usage_gpu_seconds = r.Double();
  t->usage_at_ms = r.Int();
  return Status::OK();
}

Status BindRow(Binder& b, const Job& j) {
  STINT_RETURN_IF_ERROR(CheckEnum("priority", static_cast<int64_t>(j.priority), kMaxPriority));
  STINT_RETURN_IF_ERROR(CheckEnum("state", static_cast<int64_t>(j.state), kMaxJobState));
  b.Int(j.id);
  b.Text(j.name);
  b.Text(j.team);
  b.Text(j.pool);
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
  return Status::OK();
}

Status ReadRow(RowReader& r, Job* j) {
  j->id = r.Int();
  j->name = r.Text();
  j->team = r.Text();
  j->pool = r.Text();
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
  return BucketsFromJson(r.Text(), &j->crash_ms);
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

constexpr int64_t kMetaRowId = 0;

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
  return BucketsFromJson(buckets, &c.wait_buckets);
}

// ---------------------------------------------------------------------------

// The cached statements of one table.
struct TableStmts {
  SqliteStmt upsert;
  SqliteStmt erase;
  SqliteStmt select;
};

// Runs a cached statement with the parameters `bind` sets.
template <typename Bind>
Status Run(sqlite3_stmt* stmt, const std::string& context, Bind bind) {
  ScopedReset reset(stmt);
  Binder b(stmt);
  STINT_RETURN_IF_ERROR(bind(b).WithContext(context));
  STINT_RETURN_IF_ERROR(b.Finish(context));
  return StepDone(stmt, context);
}

// Calls `row(reader)` for each row of a cached SELECT.
template <typename Row>
Status ForEachRow(sqlite3_stmt* stmt, const std::string& context, Row row) {
  ScopedReset reset(stmt);
  for (;;) {
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_DONE) return Status::OK();
    if (rc != SQLITE_ROW) return StatusFromSqlite(sqlite3_db_handle(stmt), rc, context);
    RowReader r(stmt);
    Status s = row(r);
    STINT_RETURN_IF_ERROR(r.Finish(context));
    STINT_RETURN_IF_ERROR(s.WithContext(context));
  }
}

// Reads every row of `t` into `out`, keyed as ClusterState keys them.
template <typename Key, typename Obj>
Status LoadTable(const char* what, TableStmts& t, std::map<Key, Obj>* out) {
  return ForEachRow(t.select.get(), std::string("load ") + what, [&](RowReader& r) {
    Obj obj;
    Status s = ReadRow(r, &obj);
    Key key = KeyOf(obj);
    out->emplace(std::move(key), std::move(obj));
    return s;
  });
}

// Upserts or deletes the rows named in `keys` as `objs` has them.
template <typename Key, typename Obj>
Status SaveTable(const char* what, TableStmts& t, const std::set<Key>& keys,
                 const std::map<Key, Obj>& objs) {
  for (const Key& key : keys) {
    auto it = objs.find(key);
    if (it == objs.end()) {
      STINT_RETURN_IF_ERROR(Run(t.erase.get(), "delete " + Describe(what, key), [&](Binder& b) {
        BindKey(b, key);
        return Status::OK();
      }));
      continue;
    }
    // The row's key is the object's own; a map entry filed under another
    // key would write (or overwrite) the wrong row.
    if (KeyOf(it->second) != key) {
      return Status::Internal("save " + Describe(what, key) + ": the object's own key is " +
                              Describe(what, KeyOf(it->second)));
    }
    STINT_RETURN_IF_ERROR(Run(t.upsert.get(), "save " + Describe(what, key),
                              [&](Binder& b) { return BindRow(b, it->second); }));
  }
  return Status::OK();
}

class SqliteStore final : public Store {
 public:
  static Result<std::unique_ptr<Store>> Open(const std::string& path);

  Result<ClusterState> Load() override;
  Status Save(const ClusterState& s, const Changes& changes) override;
  Result<std::vector<KvRecord>> LoadKv() override;
  Status PutKv(const KvRecord& entry) override;
  Status DeleteKv(int64_t job_id, const std::string& key) override;
  Status DeleteJobKv(int64_t job_id) override;
  const std::string& path() const override { return path_; }

 private:
  SqliteStore(std::string path, SqliteDb db) : path_(std::move(path)), db_(std::move(db)) {}

  // Locks, checks and if needed creates the schema; prepares the statements.
  // Messages do not name the path; Open adds it.
  Status Init();
  Status CreateSchema();
  Status Migrate(const std::string& ddl, int64_t to_version);
  Status PrepareTable(const Table& t, TableStmts* stmts);
  Status PrepareAll();

  Status WriteChanges(const ClusterState& s, const Changes& changes);
  Status ReadAll(ClusterState* s);
  // Runs `body` in a transaction: committed if it returns OK, else rolled back.
  template <typename Body>
  Status InTransaction(sqlite3_stmt* begin, Body body);

  // Immutable after construction.
  const std::string path_;
  // Declared before the statements, so it is destroyed after them.
  SqliteDb db_;

  TableStmts pools_, windows_, teams_, jobs_, segments_, workers_, kv_, meta_, rendezvous_;
  TableStmts node_credentials_;
  SqliteStmt kv_erase_job_;
  SqliteStmt begin_read_, begin_write_, commit_, rollback_;

  // Set when the connection's state is no longer known (a failed rollback,
  // an I/O error during commit); every later call returns it. After a
  // failed fsync the only safe way on is to reopen and read what the file
  // really holds.
  Status broken_;
};

Result<std::unique_ptr<Store>> SqliteStore::Open(const std::string& path) {
  const int runtime_version = sqlite3_libversion_number();
  if (runtime_version < kMinSqliteVersion) {
    return Status::FailedPrecondition("the stintd store needs SQLite >= 3.37, this is " +
                                      std::string(sqlite3_libversion()));
  }
  sqlite3* raw = nullptr;
  // NOMUTEX: the store is used by one thread at a time (it is
  // thread-compatible), so SQLite's own per-connection mutex is waste.
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  SqliteDb db(raw);  // owned even when the open failed
  if (rc != SQLITE_OK) return StatusFromSqlite(db.get(), rc, "open " + path);
  std::unique_ptr<SqliteStore> store(new SqliteStore(path, std::move(db)));
  Status s = store->Init();
  if (s.ok()) return std::unique_ptr<Store>(std::move(store));
  // The exclusive lock is the only lock there is, and stintd the only
  // program that takes it; a busy file is one another stintd holds.
  if (s.code() == Code::kUnavailable) {
    return Status::FailedPrecondition(path + " is in use by another stintd (" + s.message() + ")");
  }
  if (s.code() == Code::kDataLoss) {
    return Status::DataLoss(path + ": not a stintd database, or damaged (" + s.message() +
                            "); restore it from a backup or move it aside");
  }
  return s.WithContext(path);
}

Status SqliteStore::Init() {
  sqlite3* db = db_.get();
  int rc = sqlite3_extended_result_codes(db, 1);
  if (rc != SQLITE_OK) return StatusFromSqlite(db, rc, "enable extended result codes");
  rc = sqlite3_busy_timeout(db, kBusyTimeoutMs);
  if (rc != SQLITE_OK) return StatusFromSqlite(db, rc, "set the busy timeout");

  // Exclusive locking mode keeps every lock once taken, and in WAL mode
  // keeps the WAL index in heap memory (no -shm file, so WAL works on any
  // local file system).
  STINT_ASSIGN_OR_RETURN(std::string locking,
                         QueryText(db, "PRAGMA locking_mode=EXCLUSIVE", "set exclusive locking"));
  if (locking != "exclusive") {
    return Status::IoError("SQLite refused exclusive locking (locking_mode is \"" + locking +
                           "\")");
  }

  // Reads first, and nothing written before the schema, its version and
  // the integrity are known, so a refused file is left exactly as it was.
  // (A write transaction, even an empty one, initializes page 1 of a file
  // SQLite takes for empty, such as one cut inside its first page.) The
  // first read takes the lock: a second stintd fails here.
  STINT_ASSIGN_OR_RETURN(int64_t objects,
                         QueryInt(db, "SELECT count(*) FROM sqlite_master", "read the schema"));
  STINT_ASSIGN_OR_RETURN(int64_t version, QueryInt(db, "PRAGMA user_version", "read user_version"));
  if (version > kSchemaVersion || version < 0) {
    return Status::FailedPrecondition("schema version " + std::to_string(version) +
                                      " is not one this stintd knows (it knows 1 to " +
                                      std::to_string(kSchemaVersion) +
                                      "): written by a newer stintd?");
  }
  STINT_ASSIGN_OR_RETURN(std::string check, QueryText(db, "PRAGMA quick_check", "quick_check"));
  if (check != "ok") return Status::DataLoss("quick_check: " + check);
  // user_version 0 is also what any other SQLite file says; adding our
  // tables to someone else's database would hide a wrong --db path.
  if (version == 0 && objects != 0) {
    return Status::FailedPrecondition("an SQLite database with " + std::to_string(objects) +
                                      " objects but no stintd schema (user_version 0); not "
                                      "adding tables to it");
  }
  // The write lock, held from now on (in WAL mode the read above took it).
  STINT_RETURN_IF_ERROR(Exec(db, "BEGIN EXCLUSIVE; COMMIT", "take the exclusive lock"));

  STINT_ASSIGN_OR_RETURN(std::string journal,
                         QueryText(db, "PRAGMA journal_mode=WAL", "set WAL journaling"));
  if (journal != "wal") {
    return Status::IoError("SQLite cannot use a WAL journal here (journal_mode stays \"" + journal +
                           "\"); the store needs a file on a local file system");
  }
  // FULL: the WAL is synced at every commit, so a Save that returned is on
  // disk. (NORMAL would sync only at checkpoints and lose the newest
  // commits on a power cut.)
  STINT_RETURN_IF_ERROR(Exec(db, "PRAGMA synchronous=FULL", "set synchronous=FULL"));
  STINT_ASSIGN_OR_RETURN(int64_t sync, QueryInt(db, "PRAGMA synchronous", "read synchronous"));
  if (sync != 2) {
    return Status::IoError("SQLite refused synchronous=FULL (synchronous is " +
                           std::to_string(sync) + ")");
  }

  if (version == 0) STINT_RETURN_IF_ERROR(CreateSchema());
  if (version == 1) STINT_RETURN_IF_ERROR(Migrate(kRendezvous.Create(), 2));
  if (version == 1 || version == 2) {
    // Appended, as the column is last in kJobs. A version-1 file is done
    // after this step: the rendezvous table it just got already has the
    // version-4 column `dropped`.
    STINT_RETURN_IF_ERROR(Migrate("ALTER TABLE jobs ADD COLUMN service_gpu_seconds REAL DEFAULT 0",
                                  version == 1 ? 4 : 3));
  }
  if (version == 2 || version == 3) {
    // Appended, as the column is last in kRendezvous; the default fills the
    // rows already there.
    STINT_RETURN_IF_ERROR(
        Migrate("ALTER TABLE rendezvous ADD COLUMN dropped TEXT NOT NULL DEFAULT '[]'", 4));
  }
  if (version >= 1 && version <= 4) {
    // Appended, as the column is last in kWorkers.
    STINT_RETURN_IF_ERROR(
        Migrate("ALTER TABLE workers ADD COLUMN secret_hash TEXT NOT NULL DEFAULT ''", 5));
  }
  if (version >= 1 && version <= 5) {
    // Appended, as the columns are last in kWindows.
    STINT_RETURN_IF_ERROR(
        Migrate("ALTER TABLE windows ADD COLUMN node TEXT NOT NULL DEFAULT '';\n"
                "ALTER TABLE windows ADD COLUMN node_gpus TEXT NOT NULL DEFAULT '[]'",
                6));
  }
  if (version >= 1 && version <= 6) {
    // Appended, as each column is last in its table.
    STINT_RETURN_IF_ERROR(
        Migrate("ALTER TABLE jobs ADD COLUMN launch TEXT NOT NULL DEFAULT '';\n"
                "ALTER TABLE segments ADD COLUMN placement TEXT NOT NULL DEFAULT '[]';\n"
                "ALTER TABLE windows ADD COLUMN node_addr TEXT NOT NULL DEFAULT ''",
                7));
  }
  if (version >= 1 && version <= 7) {
    STINT_RETURN_IF_ERROR(
        Migrate("ALTER TABLE jobs ADD COLUMN crash_ms TEXT NOT NULL DEFAULT '[]'", 8));
  }
  if (version >= 1 && version <= 8) {
    // Appended, as the columns are last in kSegments, kWorkers and kWindows.
    STINT_RETURN_IF_ERROR(
        Migrate("ALTER TABLE segments ADD COLUMN shrink_release TEXT NOT NULL DEFAULT '[]';\n"
                "ALTER TABLE segments ADD COLUMN leaving_workers TEXT NOT NULL DEFAULT '[]';\n"
                "ALTER TABLE segments ADD COLUMN shrink_notice_ms INTEGER NOT NULL DEFAULT 0;\n"
                "ALTER TABLE segments ADD COLUMN shrink_deadline_ms INTEGER NOT NULL DEFAULT 0;\n"
                "ALTER TABLE segments ADD COLUMN shrink_for INTEGER NOT NULL DEFAULT 0;\n"
                "ALTER TABLE segments ADD COLUMN master_port INTEGER NOT NULL DEFAULT 0;\n"
                "ALTER TABLE workers ADD COLUMN node TEXT NOT NULL DEFAULT '';\n"
                "ALTER TABLE windows ADD COLUMN declared INTEGER NOT NULL DEFAULT 0;\n"
                "ALTER TABLE windows ADD COLUMN joined INTEGER NOT NULL DEFAULT 0;\n" +
                    kNodeCredentials.Create(),
                9));
  }
  return PrepareAll();
}

Status SqliteStore::CreateSchema() {
  sqlite3* db = db_.get();
  std::string sql = "BEGIN;\n";
  for (const Table* t : AllTables()) sql += t->Create() + ";\n";
  // In the same transaction: a crash leaves either no schema (and version
  // 0, so the next Open creates it) or all of it at kSchemaVersion.
  sql += "PRAGMA user_version=" + std::to_string(kSchemaVersion) + ";\nCOMMIT;";
  Status s = Exec(db, sql.c_str(), "create the schema");
  if (!s.ok() && !sqlite3_get_autocommit(db)) {
    // The error above is what matters; a failed rollback changes nothing
    // on disk, and Open discards this connection.
    Exec(db, "ROLLBACK", "roll back the schema").IgnoreError();
  }
  return s;
}

Status SqliteStore::Migrate(const std::string& ddl, int64_t to_version) {
  sqlite3* db = db_.get();
  // One transaction: a crash leaves the file at the old version, unchanged.
  const std::string sql =
      "BEGIN;\n" + ddl + ";\nPRAGMA user_version=" + std::to_string(to_version) + ";\nCOMMIT;";
  Status s = Exec(db, sql.c_str(), "migrate the schema to version " + std::to_string(to_version));
  if (!s.ok() && !sqlite3_get_autocommit(db))
    Exec(db, "ROLLBACK", "roll back the migration").IgnoreError();
  return s;
}

Status SqliteStore::PrepareTable(const Table& t, TableStmts* stmts) {
  sqlite3* db = db_.get();
  const std::string what = std::string("prepare ") + t.name;
  STINT_ASSIGN_OR_RETURN(stmts->upsert, Prepare(db, t.Upsert(), /*persistent=*/true, what));
  STINT_ASSIGN_OR_RETURN(stmts->erase, Prepare(db, t.Erase(), /*persistent=*/true, what));
  STINT_ASSIGN_OR_RETURN(stmts->select, Prepare(db, t.Select(), /*persistent=*/true, what));
  return Status::OK();
}

Status SqliteStore::PrepareAll() {
  STINT_RETURN_IF_ERROR(PrepareTable(kPools, &pools_));
  STINT_RETURN_IF_ERROR(PrepareTable(kWindows, &windows_));
  STINT_RETURN_IF_ERROR(PrepareTable(kTeams, &teams_));
  STINT_RETURN_IF_ERROR(PrepareTable(kJobs, &jobs_));
  STINT_RETURN_IF_ERROR(PrepareTable(kSegments, &segments_));
  STINT_RETURN_IF_ERROR(PrepareTable(kWorkers, &workers_));
  STINT_RETURN_IF_ERROR(PrepareTable(kKv, &kv_));
  STINT_RETURN_IF_ERROR(PrepareTable(kMeta, &meta_));
  STINT_RETURN_IF_ERROR(PrepareTable(kRendezvous, &rendezvous_));
  STINT_RETURN_IF_ERROR(PrepareTable(kNodeCredentials, &node_credentials_));
  sqlite3* db = db_.get();
  STINT_ASSIGN_OR_RETURN(kv_erase_job_, Prepare(db, "DELETE FROM kv WHERE job_id = ?", true,
                                                "prepare kv erase by job"));
  STINT_ASSIGN_OR_RETURN(begin_read_, Prepare(db, "BEGIN", true, "prepare begin"));
  // IMMEDIATE: take the write lock at BEGIN (it is ours already, held since
  // Open, so this never waits).
  STINT_ASSIGN_OR_RETURN(begin_write_, Prepare(db, "BEGIN IMMEDIATE", true, "prepare begin"));
  STINT_ASSIGN_OR_RETURN(commit_, Prepare(db, "COMMIT", true, "prepare commit"));
  STINT_ASSIGN_OR_RETURN(rollback_, Prepare(db, "ROLLBACK", true, "prepare rollback"));
  return Status::OK();
}

template <typename Body>
Status SqliteStore::InTransaction(sqlite3_stmt* begin, Body body) {
  if (!broken_.ok()) return broken_;
  sqlite3* db = db_.get();
  STINT_RETURN_IF_ERROR(StepDone(begin, "begin"));
  Status s = body();
  if (s.ok()) {
    s = StepDone(commit_.get(), "commit");
    // An I/O error at commit (a failed WAL write or fsync) leaves it unknown
    // whether the transaction is on disk: only a reopen can tell.
    if (s.code() == Code::kIoError || s.code() == Code::kDataLoss) {
      broken_ = s.WithContext("store unusable after");
    }
  }
  if (!s.ok() && !sqlite3_get_autocommit(db)) {
    // Some errors (SQLITE_FULL, IOERR, NOMEM) roll back by themselves;
    // otherwise the transaction is still open and must not be committed by
    // a later call.
    Status r = StepDone(rollback_.get(), "rollback after: " + s.message());
    if (!r.ok()) broken_ = r.WithContext("store unusable after");
  }
  return s;
}

Result<ClusterState> SqliteStore::Load() {
  ClusterState s;
  Status st = InTransaction(begin_read_.get(), [&] { return ReadAll(&s); });
  if (!st.ok()) return st.WithContext(path_);
  return s;
}

Status SqliteStore::ReadAll(ClusterState* s) {
  STINT_RETURN_IF_ERROR(LoadTable("pool", pools_, &s->pools));
  STINT_RETURN_IF_ERROR(LoadTable("window", windows_, &s->windows));
  STINT_RETURN_IF_ERROR(LoadTable("team", teams_, &s->teams));
  STINT_RETURN_IF_ERROR(LoadTable("job", jobs_, &s->jobs));
  STINT_RETURN_IF_ERROR(LoadTable("segment", segments_, &s->segments));
  STINT_RETURN_IF_ERROR(LoadTable("worker", workers_, &s->workers));
  STINT_RETURN_IF_ERROR(LoadTable("rendezvous", rendezvous_, &s->rendezvous));
  STINT_RETURN_IF_ERROR(LoadTable("node credential", node_credentials_, &s->node_credentials));
  // No meta row yet (nothing saved with counters): the defaults stand.
  return ForEachRow(meta_.select.get(), "load meta", [&](RowReader& r) { return ReadMeta(r, s); });
}

Status SqliteStore::Save(const ClusterState& s, const Changes& changes) {
  if (changes.empty()) return broken_;
  Status st = InTransaction(begin_write_.get(), [&] { return WriteChanges(s, changes); });
  return st.WithContext(path_);
}

Status SqliteStore::WriteChanges(const ClusterState& s, const Changes& c) {
  STINT_RETURN_IF_ERROR(SaveTable("pool", pools_, c.pools, s.pools));
  STINT_RETURN_IF_ERROR(SaveTable("window", windows_, c.windows, s.windows));
  STINT_RETURN_IF_ERROR(SaveTable("team", teams_, c.teams, s.teams));
  STINT_RETURN_IF_ERROR(SaveTable("job", jobs_, c.jobs, s.jobs));
  STINT_RETURN_IF_ERROR(SaveTable("segment", segments_, c.segments, s.segments));
  STINT_RETURN_IF_ERROR(SaveTable("worker", workers_, c.workers, s.workers));
  STINT_RETURN_IF_ERROR(SaveTable("rendezvous", rendezvous_, c.rendezvous, s.rendezvous));
  STINT_RETURN_IF_ERROR(
      SaveTable("node credential", node_credentials_, c.node_credentials, s.node_credentials));
  if (c.counters) {
    STINT_RETURN_IF_ERROR(
        Run(meta_.upsert.get(), "save counters", [&](Binder& b) { return BindMeta(b, s); }));
  }
  return Status::OK();
}

Result<std::vector<KvRecord>> SqliteStore::LoadKv() {
  std::vector<KvRecord> out;
  Status st = InTransaction(begin_read_.get(), [&] {
    return ForEachRow(kv_.select.get(), "load kv", [&](RowReader& r) {
      out.emplace_back();
      return ReadRow(r, &out.back());
    });
  });
  if (!st.ok()) return st.WithContext(path_);
  return out;
}

// Each KV write is a transaction of its own, durable at return like a Save.
Status SqliteStore::PutKv(const KvRecord& entry) {
  const std::string what =
      "put kv job " + std::to_string(entry.job_id) + " key \"" + entry.key + "\"";
  Status st = InTransaction(begin_write_.get(), [&] {
    return Run(kv_.upsert.get(), what, [&](Binder& b) { return BindRow(b, entry); });
  });
  return st.WithContext(path_);
}

// Deleting an absent key is not an error: the caller's view decides what
// exists, the file only follows it.
Status SqliteStore::DeleteKv(int64_t job_id, const std::string& key) {
  const std::string what = "delete kv job " + std::to_string(job_id) + " key \"" + key + "\"";
  Status st = InTransaction(begin_write_.get(), [&] {
    return Run(kv_.erase.get(), what, [&](Binder& b) {
      b.Int(job_id);
      b.Text(key);
      return Status::OK();
    });
  });
  return st.WithContext(path_);
}

Status SqliteStore::DeleteJobKv(int64_t job_id) {
  const std::string what = "delete the kv of job " + std::to_string(job_id);
  Status st = InTransaction(begin_write_.get(), [&] {
    return Run(kv_erase_job_.get(), what, [&](Binder& b) {
      b.Int(job_id);
      return Status::OK();
    });
  });
  return st.WithContext(path_);
}

}  // namespace

Result<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  return SqliteStore::Open(path);
}

}  // namespace stint::stintd
