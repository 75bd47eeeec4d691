#include "stintd/server/http_reply.h"

namespace stint::stintd {

int HttpStatus(Code code) {
  switch (code) {
    case Code::kOk:
      return 200;
    case Code::kInvalidArgument:
      return 400;
    case Code::kUnauthenticated:
      return 401;
    case Code::kPermissionDenied:
      return 403;
    case Code::kNotFound:
      return 404;
    case Code::kAlreadyExists:
    case Code::kFailedPrecondition:
    case Code::kAborted:
      return 409;
    case Code::kResourceExhausted:
      return 429;
    case Code::kUnavailable:
      return 503;
    case Code::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string DumpJson(const json& body) {
  return body.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

json ErrorBody(const char* code, const std::string& message) {
  return {{"error", {{"code", code}, {"message", message}}}};
}

Reply ErrorReply(const Status& s) {
  return {HttpStatus(s.code()), ErrorBody(CodeName(s.code()), s.message()), {}, {}};
}

Reply GoneReply(const std::string& message) { return {410, ErrorBody("GONE", message), {}, {}}; }

Reply WorkerErrorReply(const Status& s) {
  return s.code() == Code::kAborted ? GoneReply(s.message()) : ErrorReply(s);
}

}  // namespace stint::stintd
