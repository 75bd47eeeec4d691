// The stintd store's tables, internal to store/: each table's layout (its
// columns, primary key and the SQL made from them) and each object's row:
// BindRow writes an object as its table's columns, ReadRow reads it back,
// KeyOf, BindKey and Describe name the row. The column order of a layout is
// the order of the binds and reads in BindRow/ReadRow (sqlite_tables.cc);
// Binder::Finish and RowReader::Finish check the counts. sqlite_store.cc
// holds the file, the schema version and its migrations, and runs the
// statements.
#ifndef STINT_TOOLS_STINTD_STORE_SQLITE_TABLES_H_
#define STINT_TOOLS_STINTD_STORE_SQLITE_TABLES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "stintd/core/model.h"
#include "stintd/store/sqlite_util.h"
#include "stintd/store/store.h"

namespace stint::stintd::internal {

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

#endif  // STINT_TOOLS_STINTD_STORE_SQLITE_TABLES_H_
