#include "stintd/store/state_rows.h"

#include <map>
#include <set>
#include <utility>

namespace stint::stintd::internal {
namespace {

using Op = TableStatements::Op;

// Reads every row of `t` into `out`, keyed as ClusterState keys them.
template <typename Key, typename Obj>
Status LoadTable(TableStatements& st, const char* what, const Table& t, std::map<Key, Obj>* out) {
  return st.ForEachRow(t, std::string("load ") + what, [&](RowReader& r) {
    Obj obj;
    Status s = ReadRow(r, &obj);
    Key key = KeyOf(obj);
    out->emplace(std::move(key), std::move(obj));
    return s;
  });
}

// Upserts or deletes the rows named in `keys` as `objs` has them.
template <typename Key, typename Obj>
Status SaveTable(TableStatements& st, const char* what, const Table& t, const std::set<Key>& keys,
                 const std::map<Key, Obj>& objs) {
  for (const Key& key : keys) {
    auto it = objs.find(key);
    if (it == objs.end()) {
      STINT_RETURN_IF_ERROR(st.Run(t, Op::kErase, "delete " + Describe(what, key), [&](Binder& b) {
        BindKey(b, key);
        return Status::OK();
      }));
      continue;
    }
    // The row's key is the object's own; a map entry filed under another
    // key would write (or overwrite) the wrong row.
    if (KeyOf(it->second) != key) {
      return Status::Internal("save " + Describe(what, key) + ": the object's own key is " +
                              Describe(what, KeyOf(it->second)));
    }
    STINT_RETURN_IF_ERROR(st.Run(t, Op::kUpsert, "save " + Describe(what, key),
                                 [&](Binder& b) { return BindRow(b, it->second); }));
  }
  return Status::OK();
}

template <typename Key, typename Obj>
void Keys(const std::map<Key, Obj>& objs, std::set<Key>* keys) {
  for (const auto& [key, obj] : objs) keys->insert(key);
}

}  // namespace

Status ReadState(TableStatements& st, ClusterState* s) {
  STINT_RETURN_IF_ERROR(LoadTable(st, "pool", kPools, &s->pools));
  STINT_RETURN_IF_ERROR(LoadTable(st, "window", kWindows, &s->windows));
  STINT_RETURN_IF_ERROR(LoadTable(st, "team", kTeams, &s->teams));
  STINT_RETURN_IF_ERROR(LoadTable(st, "job", kJobs, &s->jobs));
  STINT_RETURN_IF_ERROR(LoadTable(st, "segment", kSegments, &s->segments));
  STINT_RETURN_IF_ERROR(LoadTable(st, "worker", kWorkers, &s->workers));
  STINT_RETURN_IF_ERROR(LoadTable(st, "rendezvous", kRendezvous, &s->rendezvous));
  STINT_RETURN_IF_ERROR(
      LoadTable(st, "node credential", kNodeCredentials, &s->node_credentials));
  STINT_RETURN_IF_ERROR(LoadTable(st, "evaluation", kEvals, &s->evals));
  // No meta row yet (nothing saved with counters): the defaults stand.
  return st.ForEachRow(kMeta, "load meta", [&](RowReader& r) { return ReadMeta(r, s); });
}

Status WriteChanges(TableStatements& st, const ClusterState& s, const Changes& c) {
  STINT_RETURN_IF_ERROR(SaveTable(st, "pool", kPools, c.pools, s.pools));
  STINT_RETURN_IF_ERROR(SaveTable(st, "window", kWindows, c.windows, s.windows));
  STINT_RETURN_IF_ERROR(SaveTable(st, "team", kTeams, c.teams, s.teams));
  STINT_RETURN_IF_ERROR(SaveTable(st, "job", kJobs, c.jobs, s.jobs));
  STINT_RETURN_IF_ERROR(SaveTable(st, "segment", kSegments, c.segments, s.segments));
  STINT_RETURN_IF_ERROR(SaveTable(st, "worker", kWorkers, c.workers, s.workers));
  STINT_RETURN_IF_ERROR(SaveTable(st, "rendezvous", kRendezvous, c.rendezvous, s.rendezvous));
  STINT_RETURN_IF_ERROR(SaveTable(st, "node credential", kNodeCredentials, c.node_credentials,
                                  s.node_credentials));
  STINT_RETURN_IF_ERROR(SaveTable(st, "evaluation", kEvals, c.evals, s.evals));
  if (c.counters) {
    STINT_RETURN_IF_ERROR(st.Run(kMeta, Op::kUpsert, "save counters",
                                 [&](Binder& b) { return BindMeta(b, s); }));
  }
  return Status::OK();
}

Changes AllOf(const ClusterState& s) {
  Changes c;
  Keys(s.pools, &c.pools);
  Keys(s.windows, &c.windows);
  Keys(s.teams, &c.teams);
  Keys(s.jobs, &c.jobs);
  Keys(s.segments, &c.segments);
  Keys(s.workers, &c.workers);
  Keys(s.rendezvous, &c.rendezvous);
  Keys(s.node_credentials, &c.node_credentials);
  Keys(s.evals, &c.evals);
  c.counters = true;
  return c;
}

Status ReadKv(TableStatements& st, std::vector<KvRecord>* out) {
  return st.ForEachRow(kKv, "load kv", [&](RowReader& r) {
    out->emplace_back();
    return ReadRow(r, &out->back());
  });
}

Status WriteKv(TableStatements& st, const KvRecord& entry) {
  const std::string what =
      "put kv job " + std::to_string(entry.job_id) + " key \"" + entry.key + "\"";
  return st.Run(kKv, Op::kUpsert, what, [&](Binder& b) { return BindRow(b, entry); });
}

Status EraseKv(TableStatements& st, int64_t job_id, const std::string& key) {
  const std::string what = "delete kv job " + std::to_string(job_id) + " key \"" + key + "\"";
  return st.Run(kKv, Op::kErase, what, [&](Binder& b) {
    b.Int(job_id);
    b.Text(key);
    return Status::OK();
  });
}

}  // namespace stint::stintd::internal
