#include "stintd/store/sqlite_util.h"

#include <limits>

namespace stint::stintd::internal {

void SqliteCloser::operator()(sqlite3* db) const {
  // close_v2 never fails for a valid handle: with statements still alive it
  // defers the close until the last one is finalized. Nothing to report.
  sqlite3_close_v2(db);
}

void SqliteFinalizer::operator()(sqlite3_stmt* stmt) const {
  // finalize returns the error of the statement's last step, which was
  // reported when that step ran.
  sqlite3_finalize(stmt);
}

Status StatusFromSqlite(sqlite3* db, int rc, std::string_view context) {
  std::string msg(context);
  msg += ": ";
  // sqlite3_errmsg describes the connection's most recent failure, which is
  // `rc` unless a later call overwrote it; then the generic text is honest.
  if (db != nullptr && sqlite3_extended_errcode(db) == rc) {
    msg += sqlite3_errmsg(db);
  } else {
    msg += sqlite3_errstr(rc);
  }
  const int sys_errno = db != nullptr ? sqlite3_system_errno(db) : 0;
  switch (rc & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return Status(Code::kDataLoss, std::move(msg));
    case SQLITE_FULL:
      return Status(Code::kResourceExhausted, std::move(msg), sys_errno);
    case SQLITE_NOMEM:
      return Status(Code::kResourceExhausted, std::move(msg));
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Status(Code::kUnavailable, std::move(msg));
    case SQLITE_ERROR:
    case SQLITE_CONSTRAINT:
    case SQLITE_MISUSE:
    case SQLITE_RANGE:
    case SQLITE_MISMATCH:
      return Status(Code::kInternal, std::move(msg));
    default:
      return Status(Code::kIoError, std::move(msg), sys_errno);
  }
}

Result<SqliteStmt> Prepare(sqlite3* db, std::string_view sql, bool persistent,
                           std::string_view context) {
  sqlite3_stmt* raw = nullptr;
  const char* tail = nullptr;
  int rc = sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()),
                              persistent ? SQLITE_PREPARE_PERSISTENT : 0, &raw, &tail);
  SqliteStmt stmt(raw);
  if (rc != SQLITE_OK) return StatusFromSqlite(db, rc, context);
  if (stmt == nullptr) return Status::Internal(std::string(context) + ": empty SQL");
  for (const char* p = tail; p != nullptr && p < sql.data() + sql.size(); ++p) {
    if (*p != ' ' && *p != '\n' && *p != '\t' && *p != ';') {
      return Status::Internal(std::string(context) + ": more than one statement");
    }
  }
  return stmt;
}

Status Exec(sqlite3* db, const char* sql, std::string_view context) {
  // Rows are not wanted; sqlite3_exec's error text is the connection's.
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return StatusFromSqlite(db, rc, context);
  return Status::OK();
}

namespace {

// Steps `sql` once and hands the row to `read`; the statement is finalized
// before returning so it holds no lock afterwards.
template <typename T, typename Read>
Result<T> QueryOne(sqlite3* db, const char* sql, std::string_view context, Read read) {
  STINT_ASSIGN_OR_RETURN(SqliteStmt stmt, Prepare(db, sql, /*persistent=*/false, context));
  int rc = sqlite3_step(stmt.get());
  if (rc == SQLITE_DONE) return Status::Internal(std::string(context) + ": no row");
  if (rc != SQLITE_ROW) return StatusFromSqlite(db, rc, context);
  SqliteRowReader r(stmt.get());
  T value = read(r);
  STINT_RETURN_IF_ERROR(r.Finish(context));
  return value;
}

}  // namespace

Result<std::string> QueryText(sqlite3* db, const char* sql, std::string_view context) {
  return QueryOne<std::string>(db, sql, context, [](RowReader& r) { return r.Text(); });
}

Result<int64_t> QueryInt(sqlite3* db, const char* sql, std::string_view context) {
  return QueryOne<int64_t>(db, sql, context, [](RowReader& r) { return r.Int(); });
}

ScopedReset::~ScopedReset() {
  // reset repeats the error of the last step, already reported by whoever
  // stepped; here it only returns the statement to its initial state.
  sqlite3_reset(stmt_);
}

void SqliteBinder::Check(int rc) {
  if (rc != SQLITE_OK && rc_ == SQLITE_OK) {
    rc_ = rc;
    failed_at_ = next_;
  }
  ++next_;
}

void SqliteBinder::Int(int64_t v) { Check(sqlite3_bind_int64(stmt_, next_, v)); }

void SqliteBinder::Double(double v) { Check(sqlite3_bind_double(stmt_, next_, v)); }

// A null pointer would bind SQL NULL, so an empty string_view (whose data()
// may be null) binds "" instead.
void SqliteBinder::Text(std::string_view v) {
  Check(sqlite3_bind_text64(stmt_, next_, v.empty() ? "" : v.data(), v.size(), SQLITE_TRANSIENT,
                            SQLITE_UTF8));
}

void SqliteBinder::Blob(std::string_view v) {
  Check(sqlite3_bind_blob64(stmt_, next_, v.empty() ? "" : v.data(), v.size(), SQLITE_TRANSIENT));
}

Status SqliteBinder::Finish(std::string_view context) {
  if (rc_ != SQLITE_OK) {
    return StatusFromSqlite(
        sqlite3_db_handle(stmt_), rc_,
        std::string(context) + ": bind parameter " + std::to_string(failed_at_));
  }
  const int want = sqlite3_bind_parameter_count(stmt_);
  if (next_ - 1 != want) {
    return Status::Internal(std::string(context) + ": bound " + std::to_string(next_ - 1) +
                            " parameters, the statement has " + std::to_string(want));
  }
  return Status::OK();
}

Status StepDone(sqlite3_stmt* stmt, std::string_view context) {
  ScopedReset reset(stmt);
  int rc = sqlite3_step(stmt);
  if (rc == SQLITE_DONE) return Status::OK();
  if (rc == SQLITE_ROW) return Status::Internal(std::string(context) + ": returned a row");
  return StatusFromSqlite(sqlite3_db_handle(stmt), rc, context);
}

namespace {

const char* TypeName(int type) {
  switch (type) {
    case SQLITE_INTEGER:
      return "INTEGER";
    case SQLITE_FLOAT:
      return "REAL";
    case SQLITE_TEXT:
      return "TEXT";
    case SQLITE_BLOB:
      return "BLOB";
    case SQLITE_NULL:
      return "NULL";
  }
  return "unknown";
}

}  // namespace

std::string SqliteRowReader::ColumnName(int col) const {
  const char* name = sqlite3_column_name(stmt_, col);
  return name != nullptr ? name : std::to_string(col);
}

bool SqliteRowReader::ReadInt(int col, int64_t* v, std::string* why) {
  const int got = sqlite3_column_type(stmt_, col);
  if (got != SQLITE_INTEGER) {
    *why = std::string("type ") + TypeName(got) + ", expected INTEGER";
    return false;
  }
  *v = sqlite3_column_int64(stmt_, col);
  return true;
}

bool SqliteRowReader::ReadReal(int col, double* v, std::string* why) {
  const int got = sqlite3_column_type(stmt_, col);
  if (got == SQLITE_NULL) {
    *v = std::numeric_limits<double>::quiet_NaN();  // see Binder::Double
    return true;
  }
  // A REAL column may hold an integral value stored as an integer.
  if (got != SQLITE_FLOAT && got != SQLITE_INTEGER) {
    *why = std::string("type ") + TypeName(got) + ", expected REAL";
    return false;
  }
  *v = sqlite3_column_double(stmt_, col);
  return true;
}

bool SqliteRowReader::ReadBytes(int col, Kind kind, std::string* v, std::string* why) {
  const int want = kind == Kind::kText ? SQLITE_TEXT : SQLITE_BLOB;
  const int got = sqlite3_column_type(stmt_, col);
  if (got != want) {
    *why = std::string("type ") + TypeName(got) + ", expected " + TypeName(want);
    return false;
  }
  const void* p = kind == Kind::kText ? static_cast<const void*>(sqlite3_column_text(stmt_, col))
                                      : sqlite3_column_blob(stmt_, col);
  const int n = sqlite3_column_bytes(stmt_, col);
  if (n == 0) {  // a zero-length blob reads as a null pointer
    v->clear();
    return true;
  }
  if (p == nullptr) {
    *why = "out of memory reading it";
    Fail(col, *why, Code::kResourceExhausted);
    return false;
  }
  v->assign(static_cast<const char*>(p), static_cast<size_t>(n));
  return true;
}

}  // namespace stint::stintd::internal
