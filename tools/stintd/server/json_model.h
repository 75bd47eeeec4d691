// JSON views of the model (API.md "Objects") and strict request parsing:
// a request body is an object whose fields have the expected types, with no
// unknown fields; every refusal names the field.
#ifndef STINT_TOOLS_STINTD_SERVER_JSON_MODEL_H_
#define STINT_TOOLS_STINTD_SERVER_JSON_MODEL_H_

#include <initializer_list>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

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
json ToJson(const ClusterState& s, const Team& t);
json ToJson(const Job& j);
json ToJson(const Segment& seg);
json ToJson(const WorkerView& v);
json ToJson(const KvRecord& e);
json ToJson(const ClusterState& s, const PendingInfo& p, TimeMs now);
json ToJson(const PlanStats& st);
json ToJson(const Rendezvous& r);
json ToJson(const RendezvousView& v);

// A parsed request body.
class RequestBody {
 public:
  // kInvalidArgument for bad JSON, a non-object, or a field not in `allowed`.
  static Result<RequestBody> Parse(const std::string& body, std::initializer_list<const char*> allowed);

  Result<std::optional<std::string>> String(const char* field) const;
  Result<std::optional<int64_t>> Int(const char* field) const;  // integral JSON numbers only
  Result<std::optional<double>> Number(const char* field) const;
  Result<std::optional<bool>> Bool(const char* field) const;
  // The same, required.
  Result<std::string> RequiredString(const char* field) const;
  Result<int64_t> RequiredInt(const char* field) const;

 private:
  explicit RequestBody(json j) : j_(std::move(j)) {}
  json j_;
};

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SERVER_JSON_MODEL_H_
