// RAII and error helpers over the sqlite3 C API, internal to store/: an
// owned connection and owned prepared statements, the row codec's binder
// and row reader (row_codec.h) for a statement, and the one place an
// SQLite result code becomes a Status.
//
// Thread-compatible, like the connection they wrap (opened NOMUTEX): one
// thread at a time per connection.
#ifndef STINT_TOOLS_STINTD_STORE_SQLITE_UTIL_H_
#define STINT_TOOLS_STINTD_STORE_SQLITE_UTIL_H_

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "stint/status.h"
#include "stintd/store/row_codec.h"

namespace stint::stintd::internal {

struct SqliteCloser {
  void operator()(sqlite3* db) const;
};
using SqliteDb = std::unique_ptr<sqlite3, SqliteCloser>;

struct SqliteFinalizer {
  void operator()(sqlite3_stmt* stmt) const;
};
using SqliteStmt = std::unique_ptr<sqlite3_stmt, SqliteFinalizer>;

// `rc` (an SQLite result code, not SQLITE_OK) as a Status whose message is
// "context: <sqlite3_errmsg>". kDataLoss for SQLITE_CORRUPT/NOTADB,
// kResourceExhausted for SQLITE_FULL/NOMEM, kUnavailable for
// SQLITE_BUSY/LOCKED, kInternal for errors that mean a bug here (SQL,
// constraint, misuse, range), kIoError for everything else. The OS errno
// SQLite saw, if any, is carried as sys_errno.
Status StatusFromSqlite(sqlite3* db, int rc, std::string_view context);

// Compiles one statement. `persistent`: it will be cached and reused many
// times (SQLITE_PREPARE_PERSISTENT). A trailing second statement is an error.
Result<SqliteStmt> Prepare(sqlite3* db, std::string_view sql, bool persistent,
                           std::string_view context);

// Runs `sql` (one or more statements), discarding any rows.
Status Exec(sqlite3* db, const char* sql, std::string_view context);

// The first column of the first row of `sql`; kInternal when it returns no row.
Result<std::string> QueryText(sqlite3* db, const char* sql, std::string_view context);
Result<int64_t> QueryInt(sqlite3* db, const char* sql, std::string_view context);

// Resets a cached statement when it goes out of scope, so a failed step
// never leaves it busy (a busy statement holds its transaction open).
class ScopedReset {
 public:
  explicit ScopedReset(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ~ScopedReset();
  ScopedReset(const ScopedReset&) = delete;
  ScopedReset& operator=(const ScopedReset&) = delete;

 private:
  sqlite3_stmt* stmt_;
};

// Binder (row_codec.h) of an SQLite statement: strings are copied
// (SQLITE_TRANSIENT); text is bound as TEXT, blobs as BLOB.
class SqliteBinder final : public Binder {
 public:
  explicit SqliteBinder(sqlite3_stmt* stmt) : stmt_(stmt) {}
  void Int(int64_t v) override;
  void Double(double v) override;
  void Text(std::string_view v) override;
  void Blob(std::string_view v) override;
  Status Finish(std::string_view context) override;

 private:
  void Check(int rc);

  sqlite3_stmt* stmt_;
  int next_ = 1;  // SQLite parameters count from 1
  int rc_ = SQLITE_OK;
  int failed_at_ = 0;
};

// Runs a statement that returns no rows; `stmt` is reset on return.
Status StepDone(sqlite3_stmt* stmt, std::string_view context);

// RowReader (row_codec.h) of the current row of an SQLite statement.
class SqliteRowReader final : public RowReader {
 public:
  explicit SqliteRowReader(sqlite3_stmt* stmt)
      : RowReader(sqlite3_column_count(stmt)), stmt_(stmt) {}

 private:
  bool ReadInt(int col, int64_t* v, std::string* why) override;
  bool ReadReal(int col, double* v, std::string* why) override;
  bool ReadBytes(int col, Kind kind, std::string* v, std::string* why) override;
  std::string ColumnName(int col) const override;

  sqlite3_stmt* stmt_;
};

}  // namespace stint::stintd::internal

#endif  // STINT_TOOLS_STINTD_STORE_SQLITE_UTIL_H_
