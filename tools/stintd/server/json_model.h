// JSON views of the model (API.md "Objects") and strict request parsing:
// a request body is an object whose fields have the expected types, with no
// unknown fields; every refusal names the field.
#ifndef STINT_TOOLS_STINTD_SERVER_JSON_MODEL_H_
#define STINT_TOOLS_STINTD_SERVER_JSON_MODEL_H_

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/json_fields.h"
#include "stintd/core/accounting.h"
#include "stintd/core/model.h"
#include "stintd/core/policy.h"
#include "stintd/core/rendezvous.h"
#include "stintd/core/transitions.h"
#include "stintd/store/store.h"

namespace stint::stintd {

using nlohmann::json;

json TimeJson(TimeMs t);  // null for kNever
json ToJson(const Pool& p);
json ToJson(const ClusterState& s, const Window& w, TimeMs now);
json ToJson(const ClusterState& s, const Team& t, TimeMs now);
json ToJson(const Job& j);
json ToJson(const Segment& seg);
json ToJson(const JobFigures& f);
// The job's loss curve: {"points": [[step, loss, segment_id, at_ms], ...],
// "segments": [{"id", "start_ms", "start_step", "gpus"}, ...]}.
json LossCurveJson(const ClusterState& s, const Job& j);
json ToJson(const EvalTask& e);
// The job's evaluations, oldest first.
json EvalsOf(const ClusterState& s, const Job& j);
json ToJson(const WorkerView& v);
json ToJson(const KvRecord& e);
json ToJson(const ClusterState& s, const PendingInfo& p, TimeMs now);
json ToJson(const PlanStats& st);
json ToJson(const Rendezvous& r);
json ToJson(const RendezvousView& v);

// A parsed request body, read through internal::JsonFields with stintd's
// request policy: a null field is an absent one, an integral float (3.0) is
// an integer, and every refusal is kInvalidArgument naming the field
// ("min_gpus must be an integer", "name is required"). Owns the JSON, so it
// may be moved.
class RequestBody : public internal::JsonFields {
 public:
  // kInvalidArgument for bad JSON, a non-object, or a field not in `allowed`.
  static Result<RequestBody> Parse(const std::string& body,
                                   std::initializer_list<const char*> allowed);

 private:
  explicit RequestBody(std::unique_ptr<const json> j);
  std::unique_ptr<const json>
      j_;  // what the JsonFields base reads; on the heap, so a move keeps it
};

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SERVER_JSON_MODEL_H_
