// RAII and error helpers over libpq, internal to store/: an owned
// connection and result, the row codec's binder and row reader
// (row_codec.h) in libpq's binary format, and the one place a PostgreSQL
// error becomes a Status.
//
// Every parameter and result column travels in binary: BIGINT as 8 bytes
// big-endian, DOUBLE PRECISION as the IEEE 754 bits big-endian, BYTEA as
// its bytes (text fields are BYTEA: tables.h). Thread-compatible, like the
// connection.
#ifndef STINT_TOOLS_STINTD_STORE_POSTGRES_UTIL_H_
#define STINT_TOOLS_STINTD_STORE_POSTGRES_UTIL_H_

#include <libpq-fe.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "stint/status.h"
#include "stintd/store/row_codec.h"

namespace stint::stintd::internal {

struct PgConnCloser {
  void operator()(PGconn* c) const { PQfinish(c); }
};
using PgConn = std::unique_ptr<PGconn, PgConnCloser>;

struct PgResultCloser {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, PgResultCloser>;

// The URL with any password replaced by "***": what messages and path() show.
std::string RedactPostgresUrl(const std::string& url);

// A connection to `url`; kUnavailable naming `shown` (the redacted URL)
// with libpq's reason when the server cannot be reached.
Result<PgConn> ConnectPg(const std::string& url, const std::string& shown);

// libpq's last error on `conn`, without its trailing newlines.
std::string PgErrorMessage(PGconn* conn);

// A failed command's result (null: the connection's error) as a Status
// whose message is "context: <server message> (SQLSTATE xxxxx)":
// kUnavailable for a lost connection (class 08, or no result), a server
// shutting down (57P) or a serialization failure or deadlock (40);
// kResourceExhausted for class 53 (disk full, out of memory); kDataLoss for
// XX001/XX002 (corrupted data); kInternal for errors that mean a bug here
// (classes 22, 23, 42); kIoError for everything else.
Status StatusFromPg(PGconn* conn, const PGresult* res, std::string_view context);

// Runs `sql` (no parameters, text results) and checks for `want`
// (PGRES_COMMAND_OK or PGRES_TUPLES_OK).
Result<PgResult> ExecPg(PGconn* conn, const std::string& sql, ExecStatusType want,
                        std::string_view context);

// ExecPg with text parameters ($1, $2, ...) and text results.
Result<PgResult> ExecPgText(PGconn* conn, const std::string& sql,
                            const std::vector<std::string>& params, ExecStatusType want,
                            std::string_view context);

// Binder (row_codec.h) collecting one prepared statement's parameters.
class PgBinder final : public Binder {
 public:
  explicit PgBinder(int params) : params_(params) {}
  void Int(int64_t v) override;
  void Double(double v) override;
  void Text(std::string_view v) override { Bytes(v); }
  void Blob(std::string_view v) override { Bytes(v); }
  Status Finish(std::string_view context) override;

  // For PQexecPrepared, valid while this binder lives.
  int count() const { return static_cast<int>(values_.size()); }
  const char* const* values() const { return pointers_.data(); }
  const int* lengths() const { return lengths_.data(); }
  const int* formats() const { return formats_.data(); }

 private:
  void Bytes(std::string_view v);
  void Push(std::string bytes, bool null);

  const int params_;
  std::vector<std::string> values_;
  std::vector<bool> null_;
  std::vector<const char*> pointers_;
  std::vector<int> lengths_, formats_;
};

// RowReader (row_codec.h) of row `row` of a binary-format result.
class PgRowReader final : public RowReader {
 public:
  PgRowReader(const PGresult* res, int row) : RowReader(PQnfields(res)), res_(res), row_(row) {}

 private:
  bool ReadInt(int col, int64_t* v, std::string* why) override;
  bool ReadReal(int col, double* v, std::string* why) override;
  bool ReadBytes(int col, Kind kind, std::string* v, std::string* why) override;
  std::string ColumnName(int col) const override;

  const PGresult* res_;
  int row_;
};

}  // namespace stint::stintd::internal

#endif  // STINT_TOOLS_STINTD_STORE_POSTGRES_UTIL_H_
