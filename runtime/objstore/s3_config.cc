#include "objstore/s3_config.h"

#include <cstdlib>


namespace stint {

Result<HttpEndpoint> ParseS3Endpoint(const std::string& endpoint) {
  return ParseHttpEndpoint(endpoint, "S3 endpoint");
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
