// What a stintd route answers: a Reply (a JSON body, or text with its content
// type) and the one mapping of a Status to an HTTP status and error body
// (API.md, "Errors"). Every route file and authorization.cc answer through
// these, so the same refusal reads the same everywhere.
#ifndef STINT_TOOLS_STINTD_SERVER_HTTP_REPLY_H_
#define STINT_TOOLS_STINTD_SERVER_HTTP_REPLY_H_

#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "stint/status.h"

namespace stint::stintd {

using nlohmann::json;

struct Reply {
  int status = 200;
  json body;  // sent as JSON unless `text` is set
  std::string text;
  std::string content_type;  // for `text`
};

int HttpStatus(Code code);

// `body` as the text of a reply, the one way stintd writes a JSON answer:
// a string in it that is not valid UTF-8 (from a file, a command's output,
// a request's path) has each bad byte replaced by U+FFFD, so no stored
// string can make a reply fail.
std::string DumpJson(const json& body);

json ErrorBody(const char* code, const std::string& message);

Reply ErrorReply(const Status& s);

// A worker whose segment ended or whose incarnation is stale must stop:
// 410 Gone, distinct from every retryable or caller error.
Reply GoneReply(const std::string& message);

Reply WorkerErrorReply(const Status& s);

}  // namespace stint::stintd

// In a route handler: the value of a Result, or return its error as the
// handler's Reply (a GNU statement expression, usable inside an expression).
#define STINT_HTTP_TRY(expr)                      \
  ({                                              \
    auto _r = (expr);                             \
    if (!_r.ok()) return ErrorReply(_r.status()); \
    std::move(_r).value();                        \
  })

#endif  // STINT_TOOLS_STINTD_SERVER_HTTP_REPLY_H_
