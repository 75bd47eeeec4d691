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
    // A JSON body becomes its text inside the try too: whatever a reply
    // holds, it is answered, never thrown past the route.
    auto as_text = [](Reply* r) {
      if (!r->text.empty() || !r->content_type.empty()) return;
      r->text = DumpJson(r->body);
      r->content_type = "application/json";
    };
    Reply reply;
    try {
      if (std::optional<Reply> refused = authorization->Route(access, route_pattern, req)) {
        reply = *refused;
      } else {
        reply = handler(req);
      }
      as_text(&reply);
    } catch (const std::exception& e) {
      reply = ErrorReply(Status::Internal(std::string("unexpected error: ") + e.what()));
      as_text(&reply);
    }
    res.status = reply.status;
    res.set_content(reply.text, reply.content_type.c_str());
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
