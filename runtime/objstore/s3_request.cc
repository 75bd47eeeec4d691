#include "objstore/s3_request.h"

#include <openssl/evp.h>

#include <algorithm>

#include "base/strings.h"

namespace stint {
namespace internal {

std::string S3UriEncode(const std::string& s, bool keep_slash) {
  return PercentEncode(s, keep_slash);
}

std::string S3QueryString(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(query.size());
  for (const auto& [name, value] : query) {
    encoded.emplace_back(S3UriEncode(name, false), S3UriEncode(value, false));
  }
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) {
    if (!out.empty()) out += '&';
    out += name + "=" + value;
  }
  return out;
}

std::string Md5Base64(const char* data, size_t size) {
  // EVP_Digest fails only on allocation failure, which the rest of the
  // process would not survive either.
  unsigned char md5[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data, size, md5, &len, EVP_md5(), nullptr);
  unsigned char out[32];
  const int n = EVP_EncodeBlock(out, md5, static_cast<int>(len));
  return std::string(reinterpret_cast<char*>(out), n);
}

}  // namespace internal
}  // namespace stint
