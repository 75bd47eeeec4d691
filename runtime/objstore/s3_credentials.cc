#include "objstore/s3_credentials.h"

#include <cerrno>
#include <fstream>
#include <iterator>
#include <sstream>

#include "base/strings.h"

namespace stint {

Result<S3Credentials> ParseSharedCredentials(const std::string& text, const std::string& profile,
                                             const std::string& source) {
  const std::string where = "credentials file " + source + " profile '" + profile + "'";
  S3Credentials creds;
  bool found = false;
  bool in_profile = false;
  std::istringstream in(text);
  std::string raw;
  for (int line_no = 1; std::getline(in, raw); ++line_no) {
    const std::string line = Trim(raw);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line[0] == '[') {
      if (line.back() != ']') {
        return Status::InvalidArgument("credentials file " + source + " line " +
                                       std::to_string(line_no) + ": unterminated [section]");
      }
      std::string name = Trim(line.substr(1, line.size() - 2));
      // The config file's spelling; the credentials file names it bare.
      if (name.compare(0, 8, "profile ") == 0) name = Trim(name.substr(8));
      in_profile = name == profile;
      found = found || in_profile;
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos) {
      // Not quoted: the line may be a secret pasted on its own.
      return Status::InvalidArgument("credentials file " + source + " line " +
                                     std::to_string(line_no) + ": expected key = value");
    }
    if (!in_profile) continue;
    const std::string key = Trim(line.substr(0, eq));
    const std::string value = Trim(line.substr(eq + 1));
    if (key == "aws_access_key_id") {
      creds.access_key_id = value;
    } else if (key == "aws_secret_access_key") {
      creds.secret_access_key = value;
    } else if (key == "aws_session_token") {
      creds.session_token = value;
    }
  }
  if (!found) return Status::NotFound(where + ": no such profile");
  if (creds.access_key_id.empty()) return Status::InvalidArgument(where + ": no aws_access_key_id");
  if (creds.secret_access_key.empty()) {
    return Status::InvalidArgument(where + ": no aws_secret_access_key");
  }
  return creds;
}

Result<S3Credentials> LoadSharedCredentials(const std::string& path, const std::string& profile) {
  std::ifstream in(path);
  if (!in) return StatusFromErrno("credentials file " + path, errno);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return ParseSharedCredentials(text, profile, path);
}

}  // namespace stint
