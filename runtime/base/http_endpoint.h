// HttpEndpoint: "scheme://host[:port][/]" as the HTTP clients take it (the
// coordinator's URL, an S3 endpoint): http or https, a host name or an
// [IPv6] address, no path, query or user part. Pure.
#ifndef STINT_RUNTIME_BASE_HTTP_ENDPOINT_H_
#define STINT_RUNTIME_BASE_HTTP_ENDPOINT_H_

#include <string>

#include "stint/status.h"

namespace stint {

struct HttpEndpoint {
  std::string scheme;  // "http" or "https"
  std::string host;    // without brackets for IPv6
  int port = 0;        // the scheme's default (80, 443) when the text has none
  // host[:port] as the Host header carries it (no port when the scheme's default).
  std::string HostHeader() const;
  // scheme://host:port ([host] for IPv6).
  std::string ToString() const;
};

// `text` split. `what` names it in errors ("coordinator url '...': no
// host"); `default_scheme` is taken when `text` has none ("" : a scheme is
// required). kInvalidArgument for anything else.
Result<HttpEndpoint> ParseHttpEndpoint(const std::string& text, const std::string& what,
                                       const std::string& default_scheme = "");

}  // namespace stint

#endif  // STINT_RUNTIME_BASE_HTTP_ENDPOINT_H_
