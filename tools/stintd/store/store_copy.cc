#include "stintd/store/store_copy.h"

#include <string>
#include <vector>

#include "stintd/store/state_rows.h"

namespace stint::stintd {

Result<StoreCopyStats> CopyStore(Store& from, Store& to) {
  STINT_ASSIGN_OR_RETURN(ClusterState target, to.Load());
  STINT_ASSIGN_OR_RETURN(std::vector<KvRecord> target_kv, to.LoadKv());
  const size_t objects = target.pools.size() + target.windows.size() + target.teams.size() +
                         target.jobs.size() + target.segments.size() + target.workers.size() +
                         target.evals.size() + target.node_credentials.size();
  if (objects != 0 || !target_kv.empty()) {
    return Status::FailedPrecondition(to.path() + " is not empty (" + std::to_string(objects) +
                                      " objects, " + std::to_string(target_kv.size()) +
                                      " kv entries): not copying over it");
  }
  STINT_ASSIGN_OR_RETURN(ClusterState s, from.Load());
  STINT_ASSIGN_OR_RETURN(std::vector<KvRecord> kv, from.LoadKv());
  STINT_RETURN_IF_ERROR(to.Save(s, internal::AllOf(s)));
  for (const KvRecord& e : kv) STINT_RETURN_IF_ERROR(to.PutKv(e));
  StoreCopyStats st;
  st.pools = static_cast<int64_t>(s.pools.size());
  st.windows = static_cast<int64_t>(s.windows.size());
  st.teams = static_cast<int64_t>(s.teams.size());
  st.jobs = static_cast<int64_t>(s.jobs.size());
  st.segments = static_cast<int64_t>(s.segments.size());
  st.workers = static_cast<int64_t>(s.workers.size());
  st.evals = static_cast<int64_t>(s.evals.size());
  st.kv = static_cast<int64_t>(kv.size());
  return st;
}

}  // namespace stint::stintd
