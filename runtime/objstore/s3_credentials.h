// S3Credentials: an access key pair (and an optional session token), and the
// reader of the AWS shared credentials file (~/.aws/credentials, INI).
// S3Config::FromEnvironment uses both. Secrets are never put into a Status
// message: errors name the file, the profile and the missing key only.
// Pure functions and a plain struct: thread-compatible.
#ifndef STINT_RUNTIME_OBJSTORE_S3_CREDENTIALS_H_
#define STINT_RUNTIME_OBJSTORE_S3_CREDENTIALS_H_

#include <string>

#include "stint/status.h"

namespace stint {

struct S3Credentials {
  std::string access_key_id;
  std::string secret_access_key;  // secret: never logged, never in a message
  std::string session_token;      // secret; empty: none (sends no x-amz-security-token)
  bool empty() const { return access_key_id.empty() && secret_access_key.empty(); }
};

// The profile `profile` ("[name]", or "[profile name]" as the config file
// writes it) of a shared credentials file's text: aws_access_key_id,
// aws_secret_access_key and aws_session_token. Lines starting with '#' or
// ';' are comments; keys and values are trimmed. `source` names the file in
// messages. kNotFound when the profile is absent; kInvalidArgument when it
// lacks the key id or the secret, or a line is neither a section, a
// key = value pair, a comment nor blank (the message names the line number,
// not its text, which may hold a secret).
Result<S3Credentials> ParseSharedCredentials(const std::string& text, const std::string& profile,
                                             const std::string& source);

// ParseSharedCredentials on the file at `path`; kNotFound when it does not exist.
Result<S3Credentials> LoadSharedCredentials(const std::string& path, const std::string& profile);

}  // namespace stint

#endif  // STINT_RUNTIME_OBJSTORE_S3_CREDENTIALS_H_
