// Store on SQLite: one file, WAL journal, synchronous=FULL, exclusive
// locking (one stintd per file), schema version in PRAGMA user_version.
//
// Schema version 11 (tables are STRICT, so a value of the wrong type is
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
// registered before, as by itself), the windows columns declared and joined (0: windows an agent
// made, or none), segments.master_port (0: started before ports were assigned; stintd then answers
// the old port, 20000 + id % 20000, which its workers already use) and the table node_credentials
// (name, secret_hash, issued_ms): no node has a credential of its own yet. Version 9 -> 10 adds
// prices, budgets and what segments achieved: pools.pricing (0, on demand),
// pools.price_per_gpu_hour (0, unpriced) and pools.price_history ('[]');
// teams.budget (-1, none), budget_period_seconds (30 days),
// period_start_ms and spent (0); jobs.revoked_ms ('[]'), cost (0), samples
// (0), step_time ('{}') and losses ('[]'); segments.price_per_gpu_hour and
// cost (0: segments before prices cost nothing), start_step,
// checkpoint_step, first_step and last_step (-1: unknown), first_step_ms
// and last_step_ms (0) and
// checkpoint_seconds (0); meta.price_rules ('[]': every rule the default);
// jobs.eval (''), eval_every, eval_gpus and checkpoints (0): no job is
// evaluated; and the table evals (EvalTask's fields): none queued.
// Version 10 -> 11 adds segments.external_id ('': no executor named it).
// Version 11 -> 12 adds segments.notice_to_replicas_seconds (-1: none
// reported). Version 12 -> 13 adds pools.storage ('[]': undeclared, every
// location) and jobs.stored ('{}': no location reported).
// jobs.pool holds the job's pools joined by commas (one name before).
// Each table's layout and row codec: tables.h.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "stintd/store/state_rows.h"
#include "stintd/store/tables.h"
#include "stintd/store/sqlite_util.h"
#include "stintd/store/store.h"

namespace stint::stintd {
namespace {

using internal::AllTables;
using internal::Binder;
using internal::EraseKv;
using internal::ReadKv;
using internal::ReadState;
using internal::WriteChanges;
using internal::WriteKv;
using internal::SqliteBinder;
using internal::Dialect;
using internal::Exec;
using internal::kEvals;
using internal::kJobs;
using internal::kKv;
using internal::kMeta;
using internal::kNodeCredentials;
using internal::kPools;
using internal::kRendezvous;
using internal::kSegments;
using internal::kTeams;
using internal::kWindows;
using internal::kWorkers;
using internal::Prepare;
using internal::QueryInt;
using internal::QueryText;
using internal::RowReader;
using internal::SqliteRowReader;
using internal::ScopedReset;
using internal::SqliteDb;
using internal::SqliteStmt;
using internal::StatusFromSqlite;
using internal::StepDone;
using internal::Table;

constexpr int64_t kSchemaVersion = 13;
// STRICT tables need 3.37. Checked at run time too: the shared library
// loaded may be older than the header compiled against.
constexpr int kMinSqliteVersion = 3037000;
static_assert(SQLITE_VERSION_NUMBER >= kMinSqliteVersion, "the stintd store needs SQLite >= 3.37");
// Long enough to ride out a reader that holds the file for a moment (the
// sqlite3 shell, a backup), short enough that a second stintd fails at once.
constexpr int kBusyTimeoutMs = 250;

// The cached statements of one table.
struct TableStmts {
  SqliteStmt upsert;
  SqliteStmt erase;
  SqliteStmt select;
};

// Runs a cached statement with the parameters `bind` sets.
template <typename Bind>
Status RunStmt(sqlite3_stmt* stmt, const std::string& context, Bind bind) {
  ScopedReset reset(stmt);
  SqliteBinder b(stmt);
  STINT_RETURN_IF_ERROR(bind(b).WithContext(context));
  STINT_RETURN_IF_ERROR(b.Finish(context));
  return StepDone(stmt, context);
}

// Calls `row(reader)` for each row of a cached SELECT.
template <typename Row>
Status EachRow(sqlite3_stmt* stmt, const std::string& context, Row row) {
  ScopedReset reset(stmt);
  for (;;) {
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_DONE) return Status::OK();
    if (rc != SQLITE_ROW) return StatusFromSqlite(sqlite3_db_handle(stmt), rc, context);
    SqliteRowReader r(stmt);
    Status s = row(r);
    STINT_RETURN_IF_ERROR(r.Finish(context));
    STINT_RETURN_IF_ERROR(s.WithContext(context));
  }
}

class SqliteStore final : public Store, private internal::TableStatements {
 public:
  static Result<std::unique_ptr<Store>> Open(const std::string& path);

  Result<ClusterState> Load() override;
  Status Save(const ClusterState& s, const Changes& changes) override;
  Result<std::vector<KvRecord>> LoadKv() override;
  Status PutKv(const KvRecord& entry) override;
  Status DeleteKv(int64_t job_id, const std::string& key) override;
  Status DeleteJobKv(int64_t job_id) override;
  Status SetFence(StoreFence) override {
    return Status::Unimplemented(path_ + ": an SQLite store has one stintd, nothing to fence");
  }
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

  // TableStatements, over the cached statements.
  Status Run(const Table& t, Op op, const std::string& context, const Bind& bind) override;
  Status EraseJobKv(int64_t job_id, const std::string& context) override;
  Status ForEachRow(const Table& t, const std::string& context, const Row& row) override;
  TableStmts& StmtsOf(const Table& t);
  // Runs `body` in a transaction: committed if it returns OK, else rolled back.
  template <typename Body>
  Status InTransaction(sqlite3_stmt* begin, Body body);

  // Immutable after construction.
  const std::string path_;
  // Declared before the statements, so it is destroyed after them.
  SqliteDb db_;

  TableStmts pools_, windows_, teams_, jobs_, segments_, workers_, kv_, meta_, rendezvous_;
  TableStmts node_credentials_, evals_;
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
  if (version == 1) STINT_RETURN_IF_ERROR(Migrate(kRendezvous.Create(Dialect::kSqlite), 2));
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
                    kNodeCredentials.Create(Dialect::kSqlite),
                9));
  }
  if (version >= 1 && version <= 9) {
    STINT_RETURN_IF_ERROR(
        Migrate("ALTER TABLE pools ADD COLUMN pricing INTEGER NOT NULL DEFAULT 0;\n"
                "ALTER TABLE pools ADD COLUMN price_per_gpu_hour REAL DEFAULT 0;\n"
                "ALTER TABLE pools ADD COLUMN price_history TEXT NOT NULL DEFAULT '[]';\n"
                "ALTER TABLE teams ADD COLUMN budget REAL DEFAULT -1;\n"
                "ALTER TABLE teams ADD COLUMN budget_period_seconds REAL DEFAULT 2592000;\n"
                "ALTER TABLE teams ADD COLUMN period_start_ms INTEGER NOT NULL DEFAULT 0;\n"
                "ALTER TABLE teams ADD COLUMN spent REAL DEFAULT 0;\n"
                "ALTER TABLE jobs ADD COLUMN revoked_ms TEXT NOT NULL DEFAULT '[]';\n"
                "ALTER TABLE jobs ADD COLUMN cost REAL DEFAULT 0;\n"
                "ALTER TABLE jobs ADD COLUMN samples INTEGER NOT NULL DEFAULT 0;\n"
                "ALTER TABLE jobs ADD COLUMN step_time TEXT NOT NULL DEFAULT '{}';\n"
                "ALTER TABLE jobs ADD COLUMN losses TEXT NOT NULL DEFAULT '[]';\n"
                "ALTER TABLE segments ADD COLUMN price_per_gpu_hour REAL DEFAULT 0;\n"
                "ALTER TABLE segments ADD COLUMN cost REAL DEFAULT 0;\n"
                "ALTER TABLE segments ADD COLUMN start_step INTEGER NOT NULL DEFAULT -1;\n"
                "ALTER TABLE segments ADD COLUMN checkpoint_step INTEGER NOT NULL DEFAULT -1;\n"
                "ALTER TABLE segments ADD COLUMN first_step INTEGER NOT NULL DEFAULT -1;\n"
                "ALTER TABLE segments ADD COLUMN first_step_ms INTEGER NOT NULL DEFAULT 0;\n"
                "ALTER TABLE segments ADD COLUMN last_step INTEGER NOT NULL DEFAULT -1;\n"
                "ALTER TABLE segments ADD COLUMN last_step_ms INTEGER NOT NULL DEFAULT 0;\n"
                "ALTER TABLE segments ADD COLUMN checkpoint_seconds REAL DEFAULT 0;\n"
                "ALTER TABLE meta ADD COLUMN price_rules TEXT NOT NULL DEFAULT '[]';\n"
                "ALTER TABLE jobs ADD COLUMN eval TEXT NOT NULL DEFAULT '';\n"
                "ALTER TABLE jobs ADD COLUMN eval_every INTEGER NOT NULL DEFAULT 0;\n"
                "ALTER TABLE jobs ADD COLUMN eval_gpus INTEGER NOT NULL DEFAULT 0;\n"
                "ALTER TABLE jobs ADD COLUMN checkpoints INTEGER NOT NULL DEFAULT 0;\n" +
                    kEvals.Create(Dialect::kSqlite),
                10));
  }
  if (version >= 1 && version <= 10) {
    STINT_RETURN_IF_ERROR(
        Migrate("ALTER TABLE segments ADD COLUMN external_id TEXT NOT NULL DEFAULT ''", 11));
  }
  if (version >= 1 && version <= 11) {
    STINT_RETURN_IF_ERROR(Migrate(
        "ALTER TABLE segments ADD COLUMN notice_to_replicas_seconds REAL DEFAULT -1", 12));
  }
  if (version >= 1 && version <= 12) {
    // Where each job's steps are, and what storage each pool reaches.
    STINT_RETURN_IF_ERROR(
        Migrate("ALTER TABLE pools ADD COLUMN storage TEXT NOT NULL DEFAULT '[]';\n"
                "ALTER TABLE jobs ADD COLUMN stored TEXT NOT NULL DEFAULT '{}'",
                13));
  }
  return PrepareAll();
}

Status SqliteStore::CreateSchema() {
  sqlite3* db = db_.get();
  std::string sql = "BEGIN;\n";
  for (const Table* t : AllTables()) sql += t->Create(Dialect::kSqlite) + ";\n";
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
  STINT_ASSIGN_OR_RETURN(stmts->upsert, Prepare(db, t.Upsert(Dialect::kSqlite), /*persistent=*/true, what));
  STINT_ASSIGN_OR_RETURN(stmts->erase, Prepare(db, t.Erase(Dialect::kSqlite), /*persistent=*/true, what));
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
  STINT_RETURN_IF_ERROR(PrepareTable(kEvals, &evals_));
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

TableStmts& SqliteStore::StmtsOf(const Table& t) {
  const std::pair<const Table*, TableStmts*> all[] = {
      {&kPools, &pools_},     {&kWindows, &windows_},       {&kTeams, &teams_},
      {&kJobs, &jobs_},       {&kSegments, &segments_},     {&kWorkers, &workers_},
      {&kKv, &kv_},           {&kMeta, &meta_},             {&kRendezvous, &rendezvous_},
      {&kEvals, &evals_},     {&kNodeCredentials, &node_credentials_}};
  for (const auto& [table, stmts] : all) {
    if (table == &t) return *stmts;
  }
  std::abort();  // every table of AllTables() is listed above
}

Status SqliteStore::Run(const Table& t, Op op, const std::string& context, const Bind& bind) {
  TableStmts& stmts = StmtsOf(t);
  return RunStmt(op == Op::kUpsert ? stmts.upsert.get() : stmts.erase.get(), context, bind);
}

Status SqliteStore::EraseJobKv(int64_t job_id, const std::string& context) {
  return RunStmt(kv_erase_job_.get(), context, [&](Binder& b) {
    b.Int(job_id);
    return Status::OK();
  });
}

Status SqliteStore::ForEachRow(const Table& t, const std::string& context, const Row& row) {
  return EachRow(StmtsOf(t).select.get(), context, row);
}

Result<ClusterState> SqliteStore::Load() {
  ClusterState s;
  Status st = InTransaction(begin_read_.get(), [&] { return ReadState(*this, &s); });
  if (!st.ok()) return st.WithContext(path_);
  return s;
}

Status SqliteStore::Save(const ClusterState& s, const Changes& changes) {
  if (changes.empty()) return broken_;
  Status st = InTransaction(begin_write_.get(), [&] { return WriteChanges(*this, s, changes); });
  return st.WithContext(path_);
}

Result<std::vector<KvRecord>> SqliteStore::LoadKv() {
  std::vector<KvRecord> out;
  Status st = InTransaction(begin_read_.get(), [&] { return ReadKv(*this, &out); });
  if (!st.ok()) return st.WithContext(path_);
  return out;
}

// Each KV write is a transaction of its own, durable at return like a Save.
Status SqliteStore::PutKv(const KvRecord& entry) {
  return InTransaction(begin_write_.get(), [&] { return WriteKv(*this, entry); })
      .WithContext(path_);
}

// Deleting an absent key is not an error: the caller's view decides what
// exists, the file only follows it.
Status SqliteStore::DeleteKv(int64_t job_id, const std::string& key) {
  return InTransaction(begin_write_.get(), [&] { return EraseKv(*this, job_id, key); })
      .WithContext(path_);
}

Status SqliteStore::DeleteJobKv(int64_t job_id) {
  const std::string what = "delete the kv of job " + std::to_string(job_id);
  return InTransaction(begin_write_.get(), [&] { return EraseJobKv(job_id, what); })
      .WithContext(path_);
}

}  // namespace

Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path) {
  return SqliteStore::Open(path);
}

}  // namespace stint::stintd
