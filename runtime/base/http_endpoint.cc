#include "base/http_endpoint.h"

#include <cstdint>

#include "base/strings.h"

namespace stint {

std::string HttpEndpoint::HostHeader() const {
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  const bool default_port = (scheme == "http" && port == 80) || (scheme == "https" && port == 443);
  return default_port ? h : h + ":" + std::to_string(port);
}

std::string HttpEndpoint::ToString() const {
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return scheme + "://" + h + ":" + std::to_string(port);
}

Result<HttpEndpoint> ParseHttpEndpoint(const std::string& text, const std::string& what,
                                       const std::string& default_scheme) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(what + " '" + text + "': " + why +
                                   " (expected http(s)://host[:port])");
  };
  HttpEndpoint out;
  std::string rest = text;
  const size_t sep = rest.find("://");
  if (sep != std::string::npos) {
    out.scheme = rest.substr(0, sep);
    rest = rest.substr(sep + 3);
  } else if (default_scheme.empty()) {
    return bad("no scheme");
  } else {
    out.scheme = default_scheme;
  }
  if (out.scheme != "http" && out.scheme != "https") return bad("scheme must be http or https");
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find_first_of("/?#@") != std::string::npos) return bad("has a path, query or user part");
  std::string port;
  if (!rest.empty() && rest[0] == '[') {
    const size_t close = rest.find(']');
    if (close == std::string::npos) return bad("unterminated [IPv6] host");
    out.host = rest.substr(1, close - 1);
    const std::string after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return bad("junk after the [IPv6] host");
      port = after.substr(1);
      if (port.empty()) return bad("empty port");
    }
  } else {
    const size_t colon = rest.find(':');
    out.host = rest.substr(0, colon);
    if (colon != std::string::npos) {
      port = rest.substr(colon + 1);
      if (port.empty()) return bad("empty port");
    }
  }
  if (out.host.empty()) return bad("no host");
  if (port.empty()) {
    out.port = out.scheme == "https" ? 443 : 80;
  } else {
    uint64_t p = 0;
    if (!ParseDecimalU64(port, &p) || p < 1 || p > 65535) {
      return bad("port '" + port + "' is not in 1..65535");
    }
    out.port = static_cast<int>(p);
  }
  return out;
}

}  // namespace stint
