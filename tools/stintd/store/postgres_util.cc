#include "stintd/store/postgres_util.h"

#include <cmath>
#include <cstring>
#include <utility>

namespace stint::stintd::internal {
namespace {

// PostgreSQL's type OIDs (catalog/pg_type.h) of the columns tables.h makes.
constexpr Oid kByteaOid = 17;
constexpr Oid kInt8Oid = 20;
constexpr Oid kFloat8Oid = 701;

std::string BigEndian(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i) {
    out[static_cast<size_t>(i)] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  return out;
}

uint64_t FromBigEndian(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

}  // namespace

std::string RedactPostgresUrl(const std::string& url) {
  std::string out = url;
  // postgresql://user:password@host/...: the password sits between the
  // first ':' after the scheme and the '@'.
  const size_t scheme = out.find("://");
  const size_t at = out.find('@', scheme == std::string::npos ? 0 : scheme + 3);
  if (scheme != std::string::npos && at != std::string::npos) {
    const size_t colon = out.find(':', scheme + 3);
    if (colon != std::string::npos && colon < at) out.replace(colon + 1, at - colon - 1, "***");
  }
  // ...?password=... as a parameter.
  for (size_t p = out.find("password="); p != std::string::npos; p = out.find("password=", p + 1)) {
    const size_t end = out.find('&', p);
    out.replace(p + 9, (end == std::string::npos ? out.size() : end) - p - 9, "***");
  }
  return out;
}

Status StatusFromPg(PGconn* conn, const PGresult* res, std::string_view context) {
  std::string message = res != nullptr ? PQresultErrorMessage(res) : "";
  if (message.empty() && conn != nullptr) message = PQerrorMessage(conn);
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  const char* state = res != nullptr ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  const std::string sqlstate = state != nullptr ? state : "";
  std::string text = std::string(context) + ": " + (message.empty() ? "no answer" : message);
  if (!sqlstate.empty()) text += " (SQLSTATE " + sqlstate + ")";
  const bool lost = res == nullptr || (conn != nullptr && PQstatus(conn) == CONNECTION_BAD);
  if (lost || sqlstate.rfind("08", 0) == 0 || sqlstate.rfind("57P", 0) == 0 ||
      sqlstate.rfind("40", 0) == 0) {
    return Status::Unavailable(text);
  }
  if (sqlstate.rfind("53", 0) == 0) return Status::ResourceExhausted(text);
  if (sqlstate == "XX001" || sqlstate == "XX002") return Status::DataLoss(text);
  if (sqlstate.rfind("22", 0) == 0 || sqlstate.rfind("23", 0) == 0 ||
      sqlstate.rfind("42", 0) == 0) {
    return Status::Internal(text);
  }
  return Status::IoError(text);
}

std::string PgErrorMessage(PGconn* conn) {
  std::string why = PQerrorMessage(conn);
  while (!why.empty() && why.back() == '\n') why.pop_back();
  return why;
}

Result<PgConn> ConnectPg(const std::string& url, const std::string& shown) {
  PgConn conn(PQconnectdb(url.c_str()));
  if (conn == nullptr) return Status::ResourceExhausted(shown + ": libpq could not allocate");
  if (PQstatus(conn.get()) != CONNECTION_OK)
    return Status::Unavailable(shown + ": cannot connect: " + PgErrorMessage(conn.get()));
  return conn;
}

Result<PgResult> ExecPg(PGconn* conn, const std::string& sql, ExecStatusType want,
                        std::string_view context) {
  PgResult res(PQexec(conn, sql.c_str()));
  if (res == nullptr || PQresultStatus(res.get()) != want)
    return StatusFromPg(conn, res.get(), context);
  return res;
}

Result<PgResult> ExecPgText(PGconn* conn, const std::string& sql,
                            const std::vector<std::string>& params, ExecStatusType want,
                            std::string_view context) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const std::string& p : params) values.push_back(p.c_str());
  PgResult res(PQexecParams(conn, sql.c_str(), static_cast<int>(values.size()), nullptr,
                            values.data(), nullptr, nullptr, /*resultFormat=*/0));
  if (res == nullptr || PQresultStatus(res.get()) != want)
    return StatusFromPg(conn, res.get(), context);
  return res;
}

void PgBinder::Push(std::string bytes, bool null) {
  values_.push_back(std::move(bytes));
  null_.push_back(null);
  lengths_.push_back(static_cast<int>(values_.back().size()));
  formats_.push_back(1);
  // values_ may have moved its strings: point at them again.
  pointers_.clear();
  for (size_t i = 0; i < values_.size(); ++i)
    pointers_.push_back(null_[i] ? nullptr : values_[i].data());
}

void PgBinder::Int(int64_t v) { Push(BigEndian(static_cast<uint64_t>(v)), false); }

void PgBinder::Double(double v) {
  if (std::isnan(v)) {  // stored as NULL, as by SQLite
    Push(std::string(), true);
    return;
  }
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(bits));
  Push(BigEndian(bits), false);
}

void PgBinder::Bytes(std::string_view v) { Push(std::string(v), false); }

Status PgBinder::Finish(std::string_view context) {
  if (count() != params_) {
    return Status::Internal(std::string(context) + ": bound " + std::to_string(count()) +
                            " parameters, the statement has " + std::to_string(params_));
  }
  return Status::OK();
}

std::string PgRowReader::ColumnName(int col) const {
  const char* name = PQfname(res_, col);
  return name != nullptr ? name : std::to_string(col);
}

bool PgRowReader::ReadInt(int col, int64_t* v, std::string* why) {
  if (PQftype(res_, col) != kInt8Oid || PQgetisnull(res_, row_, col) ||
      PQgetlength(res_, row_, col) != 8) {
    *why = "not a BIGINT (type oid " + std::to_string(PQftype(res_, col)) + ")";
    return false;
  }
  *v = static_cast<int64_t>(FromBigEndian(PQgetvalue(res_, row_, col)));
  return true;
}

bool PgRowReader::ReadReal(int col, double* v, std::string* why) {
  if (PQftype(res_, col) != kFloat8Oid) {
    *why = "not a DOUBLE PRECISION (type oid " + std::to_string(PQftype(res_, col)) + ")";
    return false;
  }
  if (PQgetisnull(res_, row_, col)) {
    *v = std::nan("");  // see Binder::Double
    return true;
  }
  if (PQgetlength(res_, row_, col) != 8) {
    *why = "a DOUBLE PRECISION of " + std::to_string(PQgetlength(res_, row_, col)) + " bytes";
    return false;
  }
  const uint64_t bits = FromBigEndian(PQgetvalue(res_, row_, col));
  std::memcpy(v, &bits, sizeof(*v));
  return true;
}

bool PgRowReader::ReadBytes(int col, Kind, std::string* v, std::string* why) {
  if (PQftype(res_, col) != kByteaOid || PQgetisnull(res_, row_, col)) {
    *why = "not a BYTEA (type oid " + std::to_string(PQftype(res_, col)) + ")";
    return false;
  }
  v->assign(PQgetvalue(res_, row_, col), static_cast<size_t>(PQgetlength(res_, row_, col)));
  return true;
}

}  // namespace stint::stintd::internal
