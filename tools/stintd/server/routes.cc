#include "stintd/server/routes.h"

#include <httplib.h>

#include <exception>
#include <string>
#include <utility>

#include "stintd/server/json_model.h"

namespace stint::stintd {

nlohmann::json SegmentJson(const Segment& seg) {
  nlohmann::json j = ToJson(seg);
  if (!seg.external_id.empty()) j["external_id"] = seg.external_id;
  return j;
}

void Routes::Add(Method method, const char* pattern, Access access, Handler handler) {
  const std::string route_pattern = pattern;
  const Authorization* authorization = authorization_;
  auto wrapped = [authorization, access, handler = std::move(handler), route_pattern](
                     const httplib::Request& req, httplib::Response& res) {
    Reply reply;
    try {
      if (std::optional<Reply> refused = authorization->Route(access, route_pattern, req)) {
        reply = *refused;
      } else {
        reply = handler(req);
      }
    } catch (const std::exception& e) {
      reply = ErrorReply(Status::Internal(std::string("unexpected error: ") + e.what()));
    }
    res.status = reply.status;
    if (!reply.text.empty() || !reply.content_type.empty()) {
      res.set_content(reply.text, reply.content_type.c_str());
    } else {
      res.set_content(reply.body.dump(), "application/json");
    }
  };
  switch (method) {
    case Method::kGet:
      server_->Get(pattern, wrapped);
      break;
    case Method::kPost:
      server_->Post(pattern, wrapped);
      break;
    case Method::kPut:
      server_->Put(pattern, wrapped);
      break;
    case Method::kDelete:
      server_->Delete(pattern, wrapped);
      break;
  }
}

}  // namespace stint::stintd
