#include "objstore/s3_config.h"

#include <cstdlib>

#include "base/strings.h"

namespace stint {

std::string S3Endpoint::HostHeader() const {
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  const bool default_port = (scheme == "http" && port == 80) || (scheme == "https" && port == 443);
  return default_port ? h : h + ":" + std::to_string(port);
}

std::string S3Endpoint::ToString() const {
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return scheme + "://" + h + ":" + std::to_string(port);
}

Result<S3Endpoint> ParseS3Endpoint(const std::string& endpoint) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("S3 endpoint '" + endpoint + "': " + why +
                                   " (expected http(s)://host[:port])");
  };
  S3Endpoint out;
  const size_t sep = endpoint.find("://");
  if (sep == std::string::npos) return bad("no scheme");
  out.scheme = endpoint.substr(0, sep);
  if (out.scheme != "http" && out.scheme != "https") return bad("scheme must be http or https");
  std::string rest = endpoint.substr(sep + 3);
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find_first_of("/?#@") != std::string::npos) return bad("has a path, query or user");
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
    if (!ParseDecimalU64(port, &p) || p < 1 || p > 65535) return bad("port not in 1..65535");
    out.port = static_cast<int>(p);
  }
  return out;
}

Result<S3Config> S3Config::FromEnvironment(const std::function<std::string(const char*)>& getenv) {
  S3Config config;
  std::string region = getenv("AWS_REGION");
  if (region.empty()) region = getenv("AWS_DEFAULT_REGION");
  if (!region.empty()) config.region = region;
  std::string endpoint = getenv("AWS_ENDPOINT_URL_S3");
  if (endpoint.empty()) endpoint = getenv("AWS_ENDPOINT_URL");
  if (endpoint.empty()) {
    config.endpoint = "https://s3." + config.region + ".amazonaws.com";
    config.path_style = false;
  } else {
    STINT_RETURN_IF_ERROR(ParseS3Endpoint(endpoint).status());
    config.endpoint = endpoint;
    config.path_style = true;
  }
  const std::string key_id = getenv("AWS_ACCESS_KEY_ID");
  const std::string secret = getenv("AWS_SECRET_ACCESS_KEY");
  if (!key_id.empty() || !secret.empty()) {
    if (key_id.empty() || secret.empty()) {
      return Status::InvalidArgument(
          std::string("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: ") +
          (key_id.empty() ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY") +
          " is not set while the other is");
    }
    config.credentials.access_key_id = key_id;
    config.credentials.secret_access_key = secret;
    config.credentials.session_token = getenv("AWS_SESSION_TOKEN");
    return config;
  }
  std::string profile = getenv("AWS_PROFILE");
  if (profile.empty()) profile = "default";
  std::string path = getenv("AWS_SHARED_CREDENTIALS_FILE");
  const bool named = !path.empty();
  if (path.empty()) {
    const std::string home = getenv("HOME");
    if (home.empty()) return config;  // nowhere to look: anonymous
    path = home + "/.aws/credentials";
  }
  Result<S3Credentials> creds = LoadSharedCredentials(path, profile);
  if (creds.ok()) {
    config.credentials = *creds;
    return config;
  }
  // No default file (or no default profile in it) means anonymous; a file
  // or profile someone named must be there.
  const bool asked = named || !getenv("AWS_PROFILE").empty();
  if (creds.status().code() == Code::kNotFound && !asked) return config;
  return creds.status();
}

Result<S3Config> S3Config::FromEnvironment() {
  return FromEnvironment([](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  });
}

}  // namespace stint
