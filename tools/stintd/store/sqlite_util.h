// RAII and error helpers over the sqlite3 C API, internal to store/: an
// owned connection and owned prepared statements, a parameter binder and a
// row reader that keep the first error, and the one place an SQLite result
// code becomes a Status.
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

// Binds a statement's parameters left to right. Each bind is checked; the
// first failure is kept and reported by Finish(), so a row's binds read as
// a plain list. Strings are copied (SQLITE_TRANSIENT): the caller's buffers
// need not outlive the bind.
class Binder {
 public:
  explicit Binder(sqlite3_stmt* stmt) : stmt_(stmt) {}
  void Int(int64_t v);
  // Stored as the int64 with the same bits: exact for every value, and
  // SQLite has no unsigned type.
  void Uint(uint64_t v) { Int(static_cast<int64_t>(v)); }
  void Bool(bool v) { Int(v ? 1 : 0); }
  // SQLite stores a NaN as NULL; RowReader::Double reads NULL back as NaN.
  void Double(double v);
  void Text(std::string_view v);
  void Blob(std::string_view v);
  // OK when every bind succeeded and every parameter got exactly one.
  Status Finish(std::string_view context);

 private:
  void Check(int rc);

  sqlite3_stmt* stmt_;
  int next_ = 1;  // SQLite parameters count from 1
  int rc_ = SQLITE_OK;
  int failed_at_ = 0;
};

// Runs a statement that returns no rows; `stmt` is reset on return.
Status StepDone(sqlite3_stmt* stmt, std::string_view context);

// Reads the current row's columns left to right, checking each column's
// type and range: a mismatch is kDataLoss (the file holds something this
// code never wrote). The first error is kept and reported by Finish().
class RowReader {
 public:
  explicit RowReader(sqlite3_stmt* stmt) : stmt_(stmt), columns_(sqlite3_column_count(stmt)) {}
  int64_t Int();
  uint64_t Uint() { return static_cast<uint64_t>(Int()); }
  int Int32();
  bool Bool();
  // Integer in [lo, hi], for enums.
  int64_t Ranged(int64_t lo, int64_t hi);
  double Double();
  std::string Text();
  std::string Blob();
  // OK when every read succeeded and every column was read.
  Status Finish(std::string_view context);

 private:
  // The next column's index, or -1 (error kept) when it is not of `type`.
  int Next(int type, bool null_ok = false);
  void Fail(int col, std::string what);

  sqlite3_stmt* stmt_;
  int columns_;
  int next_ = 0;
  std::string error_;
  Code code_ = Code::kOk;
};

}  // namespace stint::stintd::internal

#endif  // STINT_TOOLS_STINTD_STORE_SQLITE_UTIL_H_
