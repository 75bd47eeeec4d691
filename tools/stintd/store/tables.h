// The stintd store's tables, internal to store/, whatever the engine: each
// table's layout (its columns, primary key and the SQL made from them in
// SQLite's or PostgreSQL's dialect) and each object's row: BindRow writes
// an object as its table's columns, ReadRow reads it back (row_codec.h),
// KeyOf, BindKey and Describe name the row. The column order of a layout is
// the order of the binds and reads in BindRow/ReadRow (tables.cc);
// Binder::Finish and RowReader::Finish check the counts. sqlite_store.cc
// and postgres_store.cc hold the database, the schema version and its
// migrations, and run the statements.
#ifndef STINT_TOOLS_STINTD_STORE_TABLES_H_
#define STINT_TOOLS_STINTD_STORE_TABLES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stintd/core/model.h"
#include "stintd/store/row_codec.h"
#include "stintd/store/store.h"

namespace stint::stintd::internal {

enum class Type { kInt, kReal, kText, kBlob };

// SQLite: STRICT tables, INTEGER/REAL/TEXT/BLOB, "?" parameters.
// PostgreSQL: BIGINT/DOUBLE PRECISION, text and blobs both BYTEA (a text
// field may hold any bytes, a NUL too, which PostgreSQL's TEXT refuses),
// "$n" parameters.
enum class Dialect { kSqlite, kPostgres };

struct Column {
  const char* name;
  Type type;
};

struct Table {
  const char* name;
  std::vector<const char*> key;  // primary key columns
  std::vector<Column> columns;

  std::string Create(Dialect d) const {
    std::string sql = std::string("CREATE TABLE ") + name + " (";
    for (const Column& c : columns) {
      sql += c.name;
      // REAL is nullable: NULL is how a NaN is stored (row_codec.h).
      switch (c.type) {
        case Type::kInt:
          sql += d == Dialect::kSqlite ? " INTEGER NOT NULL, " : " BIGINT NOT NULL, ";
          break;
        case Type::kReal:
          sql += d == Dialect::kSqlite ? " REAL, " : " DOUBLE PRECISION, ";
          break;
        case Type::kText:
          sql += d == Dialect::kSqlite ? " TEXT NOT NULL, " : " BYTEA NOT NULL, ";
          break;
        case Type::kBlob:
          sql += d == Dialect::kSqlite ? " BLOB NOT NULL, " : " BYTEA NOT NULL, ";
          break;
      }
    }
    sql += "PRIMARY KEY (" + Join(key, ", ") + "))";
    return d == Dialect::kSqlite ? sql + " STRICT" : sql;
  }
  std::string Upsert(Dialect d) const {
    std::vector<std::string> names, marks, sets;
    for (size_t i = 0; i < columns.size(); ++i) {
      names.push_back(columns[i].name);
      marks.push_back(Mark(d, i + 1));
      if (!IsKey(columns[i].name))
        sets.push_back(std::string(columns[i].name) + " = EXCLUDED." + columns[i].name);
    }
    const std::string values = " (" + Join(names, ", ") + ") VALUES (" + Join(marks, ", ") + ")";
    if (d == Dialect::kSqlite) return std::string("INSERT OR REPLACE INTO ") + name + values;
    return std::string("INSERT INTO ") + name + values + " ON CONFLICT (" + Join(key, ", ") +
           ") DO " + (sets.empty() ? "NOTHING" : "UPDATE SET " + Join(sets, ", "));
  }
  std::string Erase(Dialect d) const {
    std::vector<std::string> conds;
    for (size_t i = 0; i < key.size(); ++i) conds.push_back(std::string(key[i]) + " = " + Mark(d, i + 1));
    return std::string("DELETE FROM ") + name + " WHERE " + Join(conds, " AND ");
  }
  std::string Select() const {
    std::vector<const char*> names;
    for (const Column& c : columns) names.push_back(c.name);
    return "SELECT " + Join(names, ", ") + " FROM " + name + " ORDER BY " + Join(key, ", ");
  }

  bool IsKey(std::string_view column) const {
    for (const char* k : key) {
      if (column == k) return true;
    }
    return false;
  }
  // The n-th parameter (from 1).
  static std::string Mark(Dialect d, size_t n) {
    return d == Dialect::kSqlite ? "?" : "$" + std::to_string(n);
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

extern const Table kPools;
extern const Table kWindows;
extern const Table kTeams;
extern const Table kJobs;
extern const Table kSegments;
extern const Table kWorkers;
extern const Table kKv;
extern const Table kRendezvous;
extern const Table kNodeCredentials;
extern const Table kEvals;
extern const Table kMeta;
const std::vector<const Table*>& AllTables();

// BindRow writes one object as the table's columns; ReadRow reads it back.
// KeyOf and Describe name it.

inline const std::string& KeyOf(const Pool& p) { return p.name; }
inline const std::string& KeyOf(const Team& t) { return t.name; }
inline int64_t KeyOf(const Window& w) { return w.id; }
inline int64_t KeyOf(const Job& j) { return j.id; }
inline int64_t KeyOf(const Segment& s) { return s.id; }
inline int64_t KeyOf(const Worker& w) { return w.id; }
inline int64_t KeyOf(const Rendezvous& r) { return r.job_id; }
inline const std::string& KeyOf(const NodeCredential& n) { return n.name; }
inline int64_t KeyOf(const EvalTask& e) { return e.id; }

void BindKey(Binder& b, const std::string& k);
void BindKey(Binder& b, int64_t k);
std::string Describe(const char* what, const std::string& k);
std::string Describe(const char* what, int64_t k);

Status BindRow(Binder& b, const Pool& p);
Status ReadRow(RowReader& r, Pool* p);
Status BindRow(Binder& b, const Window& w);
Status ReadRow(RowReader& r, Window* w);
Status BindRow(Binder& b, const NodeCredential& n);
Status ReadRow(RowReader& r, NodeCredential* n);
Status BindRow(Binder& b, const Team& t);
Status ReadRow(RowReader& r, Team* t);
Status BindRow(Binder& b, const Job& j);
Status ReadRow(RowReader& r, Job* j);
Status BindRow(Binder& b, const Segment& s);
Status ReadRow(RowReader& r, Segment* s);
Status BindRow(Binder& b, const Worker& w);
Status ReadRow(RowReader& r, Worker* w);
Status BindRow(Binder& b, const Rendezvous& r);
Status ReadRow(RowReader& r, Rendezvous* z);
Status BindRow(Binder& b, const EvalTask& e);
Status ReadRow(RowReader& r, EvalTask* e);
Status BindRow(Binder& b, const KvRecord& e);
Status ReadRow(RowReader& r, KvRecord* e);
// The meta table's one row: ClusterState's next ids and its Counters.
Status BindMeta(Binder& b, const ClusterState& s);
Status ReadMeta(RowReader& r, ClusterState* s);

}  // namespace stint::stintd::internal

#endif  // STINT_TOOLS_STINTD_STORE_TABLES_H_
