// The whole state as rows of the store's tables (tables.h), whatever the
// engine: which table each object goes to, in which order they load, and
// which rows a Changes names. An engine (SqliteStore, PostgresStore) runs
// the statements; this file decides what they are given.
#ifndef STINT_TOOLS_STINTD_STORE_STATE_ROWS_H_
#define STINT_TOOLS_STINTD_STORE_STATE_ROWS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "stint/status.h"
#include "stintd/core/model.h"
#include "stintd/core/transitions.h"
#include "stintd/store/row_codec.h"
#include "stintd/store/store.h"
#include "stintd/store/tables.h"

namespace stint::stintd::internal {

// One engine's statements over the tables, run inside the caller's
// transaction.
class TableStatements {
 public:
  enum class Op { kUpsert, kErase };
  using Bind = std::function<Status(Binder&)>;
  using Row = std::function<Status(RowReader&)>;
  virtual ~TableStatements() = default;
  // Runs `op` on `t` with the parameters `bind` sets.
  virtual Status Run(const Table& t, Op op, const std::string& context, const Bind& bind) = 0;
  // Deletes every kv row of a job (DELETE FROM kv WHERE job_id = ...).
  virtual Status EraseJobKv(int64_t job_id, const std::string& context) = 0;
  // Calls `row` for each row of `t`'s SELECT.
  virtual Status ForEachRow(const Table& t, const std::string& context, const Row& row) = 0;
};

// Every object (not the kv rows) into `s`.
Status ReadState(TableStatements& st, ClusterState* s);
// The rows `changes` names as they are in `s` (a named object missing from
// `s` is deleted), and the meta row when it names the counters.
Status WriteChanges(TableStatements& st, const ClusterState& s, const Changes& changes);
// Every object and counter of `s`: what a copy of the whole state writes.
Changes AllOf(const ClusterState& s);

Status ReadKv(TableStatements& st, std::vector<KvRecord>* out);
Status WriteKv(TableStatements& st, const KvRecord& entry);
Status EraseKv(TableStatements& st, int64_t job_id, const std::string& key);

}  // namespace stint::stintd::internal

#endif  // STINT_TOOLS_STINTD_STORE_STATE_ROWS_H_
