#include "stintd/store/leader_lease.h"

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "stintd/store/postgres_util.h"

namespace stint::stintd {
namespace {

using internal::ExecPg;
using internal::ExecPgText;
using internal::PgConn;
using internal::PgResult;

// Serializes the first creation of the tables by stintds that start
// together (a transaction-scoped lock: given back at COMMIT).
constexpr const char* kCreateLock = "SELECT pg_advisory_xact_lock(7310176884282469)";

// expires_at starts at the Unix epoch: ended, and subtractable (an
// infinite timestamp is not).
constexpr const char* kCreateTables =
    "CREATE TABLE IF NOT EXISTS stintd_leader ("
    " id INT PRIMARY KEY CHECK (id = 1), holder TEXT NOT NULL, url TEXT NOT NULL,"
    " epoch BIGINT NOT NULL, expires_at TIMESTAMPTZ NOT NULL);"
    "INSERT INTO stintd_leader VALUES (1, '', '', 0, to_timestamp(0)) ON CONFLICT (id) DO NOTHING;"
    "CREATE TABLE IF NOT EXISTS stintd_members ("
    " holder TEXT PRIMARY KEY, url TEXT NOT NULL, seen_at TIMESTAMPTZ NOT NULL);"
    "CREATE TABLE IF NOT EXISTS stintd_journal ("
    " id BIGSERIAL PRIMARY KEY, epoch BIGINT NOT NULL, what TEXT NOT NULL,"
    " at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())";
// In the takeover's transaction, after FOR UPDATE waited for the writes in
// flight: every write of the old epoch has a smaller id. The journal keeps
// its last million rows.
constexpr const char* kJournalTakeover =
    "INSERT INTO stintd_journal (epoch, what) VALUES ($1, 'takeover')";
constexpr const char* kJournalPrune =
    "DELETE FROM stintd_journal WHERE id < currval('stintd_journal_id_seq') - 1000000";

// Row locks, so that the leader's renewals never wait for its own writes
// and a takeover waits for every write in flight: a write transaction
// holds the row FOR KEY SHARE (many at once); a renewal's UPDATE of
// expires_at takes FOR NO KEY UPDATE, which does not conflict with it; a
// takeover takes FOR UPDATE, which does, before it changes the row.
// clock_timestamp(), not now(): a takeover judges the lease by the time it
// got the row, not by when its transaction began.
constexpr const char* kEnded =
    "SELECT expires_at <= clock_timestamp() FROM stintd_leader WHERE id = 1";
constexpr const char* kEndedLocked =
    "SELECT expires_at <= clock_timestamp() FROM stintd_leader WHERE id = 1 FOR UPDATE";
constexpr const char* kTakeOver =
    "UPDATE stintd_leader SET holder = $1, url = $2, epoch = epoch + 1,"
    " expires_at = clock_timestamp() + $3 * interval '1 millisecond'"
    " WHERE id = 1 RETURNING epoch";
constexpr const char* kRenew =
    "UPDATE stintd_leader SET expires_at = clock_timestamp() + $3 * interval '1 millisecond'"
    " WHERE id = 1 AND holder = $1 AND epoch = $2 RETURNING epoch";
constexpr const char* kRelease =
    "UPDATE stintd_leader SET expires_at = to_timestamp(0)"
    " WHERE id = 1 AND holder = $1 AND epoch = $2";
constexpr const char* kSeen =
    "INSERT INTO stintd_members VALUES ($1, $2, clock_timestamp()) ON CONFLICT (holder)"
    " DO UPDATE SET url = EXCLUDED.url, seen_at = EXCLUDED.seen_at";
// Members gone for a day are forgotten.
constexpr const char* kForget =
    "DELETE FROM stintd_members WHERE seen_at < clock_timestamp() - interval '1 day'";
constexpr const char* kReadLeader =
    "SELECT holder, url, epoch, EXTRACT(EPOCH FROM expires_at - clock_timestamp())"
    " FROM stintd_leader WHERE id = 1";
constexpr const char* kReadMembers =
    "SELECT holder, url, EXTRACT(EPOCH FROM clock_timestamp() - seen_at) FROM stintd_members"
    " WHERE seen_at > clock_timestamp() - $1 * interval '1 millisecond' ORDER BY holder";

Result<PgConn> Connect(const std::string& url, const std::string& shown,
                       std::chrono::milliseconds lease) {
  STINT_ASSIGN_OR_RETURN(PgConn conn, internal::ConnectPg(url, shown));
  // A lock of the lease is never waited for longer than a lease (a
  // takeover held back by a stalled writer tries again), nor a statement
  // for two: a renewal that cannot finish in time is as good as lost.
  const std::string ms = std::to_string(lease.count());
  const std::string twice = std::to_string(2 * lease.count());
  STINT_RETURN_IF_ERROR(ExecPg(conn.get(),
                               "SET client_min_messages = warning; SET lock_timeout = " + ms +
                                   "; SET statement_timeout = " + twice,
                               PGRES_COMMAND_OK, "set the lease's timeouts")
                            .status()
                            .WithContext(shown));
  return conn;
}

}  // namespace

struct LeaderLease::Conn {
  PgConn pg;
};

Result<std::unique_ptr<LeaderLease>> LeaderLease::Open(const std::string& url, std::string holder,
                                                       std::string advertise_url,
                                                       std::chrono::milliseconds lease) {
  if (lease.count() < 100) return Status::InvalidArgument("the leader lease must be >= 100 ms");
  if (holder.empty()) return Status::InvalidArgument("a lease holder needs a name");
  const std::string shown = internal::RedactPostgresUrl(url);
  STINT_ASSIGN_OR_RETURN(PgConn pg, Connect(url, shown, lease));
  PGconn* c = pg.get();
  STINT_RETURN_IF_ERROR(ExecPg(c, "BEGIN", PGRES_COMMAND_OK, "begin").status().WithContext(shown));
  Status made = ExecPg(c, kCreateLock, PGRES_TUPLES_OK, "lock the lease tables' creation").status();
  if (made.ok())
    made = ExecPg(c, kCreateTables, PGRES_COMMAND_OK, "create the lease tables").status();
  if (made.ok()) made = ExecPg(c, "COMMIT", PGRES_COMMAND_OK, "commit the lease tables").status();
  if (!made.ok()) {
    ExecPg(c, "ROLLBACK", PGRES_COMMAND_OK, "roll back").status().IgnoreError();
    return made.WithContext(shown);
  }
  auto conn = std::make_unique<Conn>();
  conn->pg = std::move(pg);
  return std::unique_ptr<LeaderLease>(new LeaderLease(std::move(conn), url, shown,
                                                      std::move(holder), std::move(advertise_url),
                                                      lease));
}

LeaderLease::LeaderLease(std::unique_ptr<Conn> conn, std::string url, std::string shown,
                         std::string holder, std::string advertise_url,
                         std::chrono::milliseconds lease)
    : conn_(std::move(conn)),
      url_(std::move(url)),
      shown_(std::move(shown)),
      holder_(std::move(holder)),
      advertise_url_(std::move(advertise_url)),
      lease_(lease) {}

LeaderLease::~LeaderLease() = default;

Status LeaderLease::Reconnect() {
  if (conn_->pg != nullptr && PQstatus(conn_->pg.get()) == CONNECTION_OK) return Status::OK();
  conn_->pg.reset();
  STINT_ASSIGN_OR_RETURN(conn_->pg, Connect(url_, shown_, lease_));
  return Status::OK();
}

Result<int64_t> LeaderLease::TryAcquire() {
  STINT_RETURN_IF_ERROR(Reconnect());
  PGconn* c = conn_->pg.get();
  STINT_RETURN_IF_ERROR(ExecPgText(c, kSeen, {holder_, advertise_url_}, PGRES_COMMAND_OK,
                                   "record this stintd as seen")
                            .status()
                            .WithContext(shown_));
  // Unlocked first: a standby's polls never hold the leader's writes up.
  STINT_ASSIGN_OR_RETURN(PgResult ended,
                         ExecPg(c, kEnded, PGRES_TUPLES_OK, "read the leader lease"));
  if (PQntuples(ended.get()) != 1 || std::string(PQgetvalue(ended.get(), 0, 0)) != "t")
    return int64_t{0};
  STINT_RETURN_IF_ERROR(ExecPg(c, "BEGIN", PGRES_COMMAND_OK, "begin").status().WithContext(shown_));
  int64_t epoch = 0;
  Status s = [&]() -> Status {
    STINT_ASSIGN_OR_RETURN(PgResult locked,
                           ExecPg(c, kEndedLocked, PGRES_TUPLES_OK, "lock the leader lease"));
    // Renewed meanwhile: the leader lives.
    if (std::string(PQgetvalue(locked.get(), 0, 0)) != "t") return Status::OK();
    STINT_ASSIGN_OR_RETURN(
        PgResult taken,
        ExecPgText(c, kTakeOver, {holder_, advertise_url_, std::to_string(lease_.count())},
                   PGRES_TUPLES_OK, "take the leader lease"));
    epoch = std::atoll(PQgetvalue(taken.get(), 0, 0));
    STINT_RETURN_IF_ERROR(ExecPgText(c, kJournalTakeover, {std::to_string(epoch)},
                                     PGRES_COMMAND_OK, "journal the takeover")
                              .status());
    return ExecPg(c, kJournalPrune, PGRES_COMMAND_OK, "prune the journal").status();
  }();
  if (s.ok()) s = ExecPg(c, "COMMIT", PGRES_COMMAND_OK, "commit the takeover").status();
  if (!s.ok()) {
    ExecPg(c, "ROLLBACK", PGRES_COMMAND_OK, "roll back").status().IgnoreError();
    // A writer of the old leader held the row past lock_timeout: not yet.
    if (s.message().find("55P03") != std::string::npos) return int64_t{0};
    return s.WithContext(shown_);
  }
  return epoch;
}

Status LeaderLease::Renew(int64_t epoch) {
  STINT_RETURN_IF_ERROR(Reconnect());
  PGconn* c = conn_->pg.get();
  STINT_ASSIGN_OR_RETURN(
      PgResult renewed,
      ExecPgText(c, kRenew, {holder_, std::to_string(epoch), std::to_string(lease_.count())},
                 PGRES_TUPLES_OK, "renew the leader lease"));
  if (PQntuples(renewed.get()) == 0) {
    Result<LeaderView> now = Read();
    std::string by = now.ok() ? " (it is at epoch " + std::to_string(now->epoch) + ", held by " +
                                    now->holder + " at " + now->url + ")"
                              : "";
    return Status::Aborted("fenced: the lease of epoch " + std::to_string(epoch) +
                           " was taken over" + by);
  }
  ExecPgText(c, kSeen, {holder_, advertise_url_}, PGRES_COMMAND_OK, "record as seen")
      .status()
      .IgnoreError();
  ExecPg(c, kForget, PGRES_COMMAND_OK, "forget old members").status().IgnoreError();
  return Status::OK();
}

Status LeaderLease::Release(int64_t epoch) {
  STINT_RETURN_IF_ERROR(Reconnect());
  return ExecPgText(conn_->pg.get(), kRelease, {holder_, std::to_string(epoch)}, PGRES_COMMAND_OK,
                    "give the leader lease up")
      .status()
      .WithContext(shown_);
}

Result<LeaderView> LeaderLease::Read() {
  STINT_RETURN_IF_ERROR(Reconnect());
  PGconn* c = conn_->pg.get();
  STINT_ASSIGN_OR_RETURN(PgResult row,
                         ExecPg(c, kReadLeader, PGRES_TUPLES_OK, "read the leader lease"));
  if (PQntuples(row.get()) != 1) return Status::DataLoss(shown_ + ": stintd_leader has no row");
  LeaderView v;
  v.holder = PQgetvalue(row.get(), 0, 0);
  v.url = PQgetvalue(row.get(), 0, 1);
  v.epoch = std::atoll(PQgetvalue(row.get(), 0, 2));
  v.expires_in_seconds = std::atof(PQgetvalue(row.get(), 0, 3));
  STINT_ASSIGN_OR_RETURN(
      PgResult members,
      ExecPgText(c, kReadMembers, {std::to_string(3 * lease_.count())}, PGRES_TUPLES_OK,
                 "read the stintds seen"));
  for (int i = 0; i < PQntuples(members.get()); ++i) {
    LeaseMember m;
    m.holder = PQgetvalue(members.get(), i, 0);
    if (m.holder == v.holder && v.expires_in_seconds > 0) continue;
    m.url = PQgetvalue(members.get(), i, 1);
    m.seen_seconds_ago = std::atof(PQgetvalue(members.get(), i, 2));
    v.standbys.push_back(std::move(m));
  }
  return v;
}

}  // namespace stint::stintd
