// Store on PostgreSQL (stintd --store postgresql://...), through libpq.
//
// The same tables as the SQLite store (tables.h, in PostgreSQL's dialect:
// BIGINT, DOUBLE PRECISION, BYTEA) at the same schema version, kept in
// stintd_schema's one row; a database with none of them gets them in one
// transaction. Each Save or kv write is one transaction, committed before
// it returns (PostgreSQL's default synchronous_commit: on the server's WAL
// on disk). Loads read one snapshot (REPEATABLE READ).
//
// Several stintds may open one database; the leader lease
// (leader_lease.h) says which one acts, and SetFence makes every write
// transaction check it first (the lease row FOR KEY SHARE, which a
// takeover's FOR UPDATE waits for), so an old leader's late writes are
// refused.
// Statements are prepared once per connection, parameters and results
// travel in binary.
//
// A lost connection, or a commit whose outcome is unknown (the connection
// dropped while it ran), leaves the store refusing every call: the caller's
// state may differ from the database's, and only a reopen (Load) tells.
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "stintd/store/postgres_util.h"
#include "stintd/store/state_rows.h"
#include "stintd/store/store.h"
#include "stintd/store/tables.h"

namespace stint::stintd {
namespace {

using internal::AllTables;
using internal::Binder;
using internal::Dialect;
using internal::ExecPg;
using internal::PgBinder;
using internal::PgConn;
using internal::PgResult;
using internal::PgRowReader;
using internal::RowReader;
using internal::StatusFromPg;
using internal::Table;

// What SqliteStore calls kSchemaVersion: the layout of tables.h.
constexpr int64_t kSchemaVersion = 13;
// Serializes the schema's creation by stintds that start together: a
// transaction-scoped lock ("stintd" in ASCII), given back at COMMIT.
constexpr const char* kSchemaLock = "SELECT pg_advisory_xact_lock(7310176884282468)";
constexpr const char* kReadLease = "SELECT holder, epoch FROM stintd_leader WHERE id = 1 FOR KEY SHARE";

class PostgresStore final : public Store, private internal::TableStatements {
 public:
  static Result<std::unique_ptr<Store>> Open(const std::string& url);

  Result<ClusterState> Load() override;
  Status Save(const ClusterState& s, const Changes& changes) override;
  Result<std::vector<KvRecord>> LoadKv() override;
  Status PutKv(const KvRecord& entry) override;
  Status DeleteKv(int64_t job_id, const std::string& key) override;
  Status DeleteJobKv(int64_t job_id) override;
  Status SetFence(StoreFence fence) override;
  const std::string& path() const override { return shown_; }

 private:
  PostgresStore(std::string shown, PgConn conn) : shown_(std::move(shown)), conn_(std::move(conn)) {}

  Status Init();
  // The statements every call uses, once per connection.
  Status PrepareAll();
  // After the connection was lost (a database restart or failover): a new
  // one, as this store had it. Only Load() calls it: what it reads then is
  // the truth the caller's memory is replaced with.
  Status Reconnect();
  Status Prepare(const std::string& name, const std::string& sql, int params);
  // Runs `body` in a transaction begun with `begin`: committed if it
  // returns OK, else rolled back.
  template <typename Body>
  Status InTransaction(const char* begin, Body body);
  // A write transaction: InTransaction that first checks the fence.
  template <typename Body>
  Status InWriteTransaction(Body body);
  Status CheckFence();
  // With a fence: the server ends a transaction idle past its idle_limit.
  Status LimitIdleTransactions();
  Result<PgResult> ExecPrepared(const std::string& name, const PgBinder& b, ExecStatusType want,
                                const std::string& context);

  // TableStatements, over the prepared statements "<table>.<op>".
  Status Run(const Table& t, Op op, const std::string& context, const Bind& bind) override;
  Status EraseJobKv(int64_t job_id, const std::string& context) override;
  Status ForEachRow(const Table& t, const std::string& context, const Row& row) override;

  const std::string shown_;  // the URL without its password
  PgConn conn_;
  std::optional<StoreFence> fence_;
  Status broken_;
};

Result<std::unique_ptr<Store>> PostgresStore::Open(const std::string& url) {
  const std::string shown = internal::RedactPostgresUrl(url);
  STINT_ASSIGN_OR_RETURN(PgConn conn, internal::ConnectPg(url, shown));
  std::unique_ptr<PostgresStore> store(new PostgresStore(shown, std::move(conn)));
  Status s = store->Init();
  if (!s.ok()) return s.WithContext(shown);
  return std::unique_ptr<Store>(std::move(store));
}

Status PostgresStore::Init() {
  PGconn* c = conn_.get();
  STINT_RETURN_IF_ERROR(
      ExecPg(c, "BEGIN", PGRES_COMMAND_OK, "begin the schema check").status());
  Status s = [&]() -> Status {
    STINT_RETURN_IF_ERROR(
        ExecPg(c, kSchemaLock, PGRES_TUPLES_OK, "lock the schema's creation").status());
    STINT_ASSIGN_OR_RETURN(PgResult has,
                           ExecPg(c, "SELECT to_regclass('stintd_schema') IS NOT NULL",
                                  PGRES_TUPLES_OK, "read the schema"));
    if (std::string(PQgetvalue(has.get(), 0, 0)) == "t") {
      STINT_ASSIGN_OR_RETURN(PgResult v, ExecPg(c, "SELECT version FROM stintd_schema",
                                                PGRES_TUPLES_OK, "read the schema version"));
      const int64_t version = PQntuples(v.get()) == 1 ? std::atoll(PQgetvalue(v.get(), 0, 0)) : -1;
      if (version != kSchemaVersion) {
        return Status::FailedPrecondition(
            "schema version " + std::to_string(version) + " is not one this stintd knows (it knows " +
            std::to_string(kSchemaVersion) + "): written by a newer stintd?");
      }
      return Status::OK();
    }
    // A database that holds our tables without the version row is someone
    // else's, or a half-made one: never add to it.
    for (const Table* t : AllTables()) {
      STINT_ASSIGN_OR_RETURN(PgResult other,
                             ExecPg(c, std::string("SELECT to_regclass('") + t->name + "') IS NULL",
                                    PGRES_TUPLES_OK, "read the schema"));
      if (std::string(PQgetvalue(other.get(), 0, 0)) != "t") {
        return Status::FailedPrecondition(std::string("the database has a table ") + t->name +
                                          " but no stintd_schema; not adding tables to it");
      }
    }
    std::string ddl;
    for (const Table* t : AllTables()) ddl += t->Create(Dialect::kPostgres) + ";\n";
    ddl += "CREATE TABLE stintd_schema (version BIGINT NOT NULL);\n"
           "INSERT INTO stintd_schema VALUES (" + std::to_string(kSchemaVersion) + ")";
    return ExecPg(c, ddl, PGRES_COMMAND_OK, "create the schema").status();
  }();
  if (!s.ok()) {
    ExecPg(c, "ROLLBACK", PGRES_COMMAND_OK, "roll back").status().IgnoreError();
    return s;
  }
  STINT_RETURN_IF_ERROR(ExecPg(c, "COMMIT", PGRES_COMMAND_OK, "commit the schema").status());
  return PrepareAll();
}

Status PostgresStore::PrepareAll() {
  for (const Table* t : AllTables()) {
    const int columns = static_cast<int>(t->columns.size());
    STINT_RETURN_IF_ERROR(Prepare(std::string(t->name) + ".upsert", t->Upsert(Dialect::kPostgres),
                                  columns));
    STINT_RETURN_IF_ERROR(Prepare(std::string(t->name) + ".erase", t->Erase(Dialect::kPostgres),
                                  static_cast<int>(t->key.size())));
    STINT_RETURN_IF_ERROR(Prepare(std::string(t->name) + ".select", t->Select(), 0));
  }
  return Prepare("kv.erase_job", "DELETE FROM kv WHERE job_id = $1", 1);
}

Status PostgresStore::Prepare(const std::string& name, const std::string& sql, int params) {
  PgResult res(PQprepare(conn_.get(), name.c_str(), sql.c_str(), params, nullptr));
  if (res == nullptr || PQresultStatus(res.get()) != PGRES_COMMAND_OK)
    return StatusFromPg(conn_.get(), res.get(), "prepare " + name);
  return Status::OK();
}

Result<PgResult> PostgresStore::ExecPrepared(const std::string& name, const PgBinder& b,
                                             ExecStatusType want, const std::string& context) {
  PgResult res(PQexecPrepared(conn_.get(), name.c_str(), b.count(), b.values(), b.lengths(),
                              b.formats(), /*resultFormat=*/1));
  if (res == nullptr || PQresultStatus(res.get()) != want)
    return StatusFromPg(conn_.get(), res.get(), context);
  return res;
}

template <typename Body>
Status PostgresStore::InTransaction(const char* begin, Body body) {
  if (!broken_.ok()) return broken_;
  PGconn* c = conn_.get();
  Status s = ExecPg(c, begin, PGRES_COMMAND_OK, "begin").status();
  if (s.ok()) s = body();
  if (s.ok()) {
    s = ExecPg(c, "COMMIT", PGRES_COMMAND_OK, "commit").status();
    // A commit the connection dropped under may or may not have happened.
    if (!s.ok()) broken_ = s.WithContext("store unusable after");
    return s;
  }
  if (PQstatus(c) == CONNECTION_BAD) {
    broken_ = s.WithContext("store unusable after");
    return s;
  }
  Status r = ExecPg(c, "ROLLBACK", PGRES_COMMAND_OK, "rollback after: " + s.message()).status();
  if (!r.ok()) broken_ = r.WithContext("store unusable after");
  return s;
}

Status PostgresStore::Run(const Table& t, Op op, const std::string& context, const Bind& bind) {
  const bool upsert = op == Op::kUpsert;
  PgBinder b(static_cast<int>(upsert ? t.columns.size() : t.key.size()));
  STINT_RETURN_IF_ERROR(bind(b).WithContext(context));
  STINT_RETURN_IF_ERROR(b.Finish(context));
  return ExecPrepared(std::string(t.name) + (upsert ? ".upsert" : ".erase"), b, PGRES_COMMAND_OK,
                      context)
      .status();
}

Status PostgresStore::EraseJobKv(int64_t job_id, const std::string& context) {
  PgBinder b(1);
  b.Int(job_id);
  return ExecPrepared("kv.erase_job", b, PGRES_COMMAND_OK, context).status();
}

Status PostgresStore::ForEachRow(const Table& t, const std::string& context, const Row& row) {
  PgBinder none(0);
  STINT_ASSIGN_OR_RETURN(PgResult res, ExecPrepared(std::string(t.name) + ".select", none,
                                                    PGRES_TUPLES_OK, context));
  for (int i = 0; i < PQntuples(res.get()); ++i) {
    PgRowReader r(res.get(), i);
    Status s = row(r);
    STINT_RETURN_IF_ERROR(r.Finish(context));
    STINT_RETURN_IF_ERROR(s.WithContext(context));
  }
  return Status::OK();
}

template <typename Body>
Status PostgresStore::InWriteTransaction(Body body) {
  return InTransaction("BEGIN", [&] {
    STINT_RETURN_IF_ERROR(CheckFence());
    return body();
  });
}

Status PostgresStore::CheckFence() {
  if (!fence_) return Status::OK();
  STINT_ASSIGN_OR_RETURN(PgResult lease,
                         ExecPg(conn_.get(), kReadLease, PGRES_TUPLES_OK, "check the lease"));
  const std::string holder = PQntuples(lease.get()) == 1 ? PQgetvalue(lease.get(), 0, 0) : "";
  const int64_t epoch = PQntuples(lease.get()) == 1 ? std::atoll(PQgetvalue(lease.get(), 0, 1)) : 0;
  if (holder == fence_->holder && epoch == fence_->epoch) {
    // Under the share lock: before any later takeover's row (leader_lease.h).
    return ExecPg(conn_.get(),
                  "INSERT INTO stintd_journal (epoch, what) VALUES (" + std::to_string(epoch) +
                      ", 'write')",
                  PGRES_COMMAND_OK, "journal the write")
        .status();
  }
  Status fenced = Status::Aborted(
      "fenced: this stintd led at epoch " + std::to_string(fence_->epoch) +
      " and the lease is now at epoch " + std::to_string(epoch) + ", held by " + holder +
      "; write refused");
  if (fence_->on_fenced) fence_->on_fenced(fenced);
  return fenced;
}

Status PostgresStore::SetFence(StoreFence fence) {
  if (!broken_.ok()) return broken_;
  fence_ = std::move(fence);
  return LimitIdleTransactions().WithContext(shown_);
}

Status PostgresStore::LimitIdleTransactions() {
  if (!fence_) return Status::OK();
  return ExecPg(conn_.get(),
                "SET idle_in_transaction_session_timeout = " +
                    std::to_string(fence_->idle_limit.count()),
                PGRES_COMMAND_OK, "limit idle transactions")
      .status();
}

constexpr const char* kBeginRead = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

Status PostgresStore::Reconnect() {
  PGconn* c = conn_.get();
  if (PQstatus(c) == CONNECTION_OK) return Status::OK();
  PQreset(c);
  if (PQstatus(c) != CONNECTION_OK)
    return Status::Unavailable("cannot connect again: " + internal::PgErrorMessage(c));
  STINT_RETURN_IF_ERROR(PrepareAll());
  return LimitIdleTransactions();
}

Result<ClusterState> PostgresStore::Load() {
  if (!broken_.ok()) {
    STINT_RETURN_IF_ERROR(Reconnect().WithContext(shown_));
    broken_ = Status::OK();
  }
  ClusterState s;
  Status st = InTransaction(kBeginRead, [&] { return ReadState(*this, &s); });
  if (!st.ok()) return st.WithContext(shown_);
  return s;
}

Status PostgresStore::Save(const ClusterState& s, const Changes& changes) {
  if (changes.empty()) return broken_;
  return InWriteTransaction([&] { return WriteChanges(*this, s, changes); })
      .WithContext(shown_);
}

Result<std::vector<KvRecord>> PostgresStore::LoadKv() {
  std::vector<KvRecord> out;
  Status st = InTransaction(kBeginRead, [&] { return ReadKv(*this, &out); });
  if (!st.ok()) return st.WithContext(shown_);
  return out;
}

Status PostgresStore::PutKv(const KvRecord& entry) {
  return InWriteTransaction([&] { return WriteKv(*this, entry); }).WithContext(shown_);
}

Status PostgresStore::DeleteKv(int64_t job_id, const std::string& key) {
  return InWriteTransaction([&] { return EraseKv(*this, job_id, key); })
      .WithContext(shown_);
}

Status PostgresStore::DeleteJobKv(int64_t job_id) {
  const std::string what = "delete the kv of job " + std::to_string(job_id);
  return InWriteTransaction([&] { return EraseJobKv(job_id, what); }).WithContext(shown_);
}

}  // namespace

Result<std::unique_ptr<Store>> OpenPostgresStore(const std::string& url) {
  return PostgresStore::Open(url);
}

}  // namespace stint::stintd
