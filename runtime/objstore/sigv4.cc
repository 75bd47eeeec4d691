#include "objstore/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace stint {
namespace internal {
namespace {

std::string Hex(const unsigned char* p, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

// One-shot digest; EVP_Digest fails only on allocation failure, which the
// rest of the process would not survive either.
std::string Digest(const EVP_MD* md, const char* data, size_t size) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data, size, out, &len, md, nullptr);
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string HmacSha256(const std::string& key, const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// SigV4's header value rule: trimmed, inner runs of spaces folded to one.
std::string CanonicalHeaderValue(const std::string& v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

}  // namespace

const char kEmptyPayloadSha256[] =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
const char kUnsignedPayload[] = "UNSIGNED-PAYLOAD";

std::string Sha256Hex(const char* data, size_t size) {
  const std::string d = Digest(EVP_sha256(), data, size);
  return Hex(reinterpret_cast<const unsigned char*>(d.data()), d.size());
}

std::string Md5Base64(const char* data, size_t size) {
  const std::string d = Digest(EVP_md5(), data, size);
  unsigned char out[32];
  const int n = EVP_EncodeBlock(out, reinterpret_cast<const unsigned char*>(d.data()),
                                static_cast<int>(d.size()));
  return std::string(reinterpret_cast<char*>(out), n);
}

std::string S3UriEncode(const std::string& s, bool keep_slash) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

std::string CanonicalQueryString(const std::vector<std::pair<std::string, std::string>>& query) {
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

SigV4Signature SignV4(const SigV4Request& request, const S3Credentials& credentials,
                      const std::string& region, const std::string& amz_date) {
  std::vector<std::pair<std::string, std::string>> headers;
  for (const auto& [name, value] : request.headers) {
    headers.emplace_back(Lower(name), CanonicalHeaderValue(value));
  }
  std::sort(headers.begin(), headers.end());
  std::string canonical_headers, signed_headers;
  for (const auto& [name, value] : headers) {
    canonical_headers += name + ":" + value + "\n";
    if (!signed_headers.empty()) signed_headers += ';';
    signed_headers += name;
  }
  SigV4Signature out;
  out.canonical_request = request.method + "\n" + request.canonical_uri + "\n" +
                          CanonicalQueryString(request.query) + "\n" + canonical_headers + "\n" +
                          signed_headers + "\n" + request.payload_hash;
  const std::string date = amz_date.substr(0, 8);
  const std::string scope = date + "/" + region + "/s3/aws4_request";
  out.string_to_sign =
      "AWS4-HMAC-SHA256\n" + amz_date + "\n" + scope + "\n" + Sha256Hex(out.canonical_request);
  const std::string k_date = HmacSha256("AWS4" + credentials.secret_access_key, date);
  const std::string k_region = HmacSha256(k_date, region);
  const std::string k_service = HmacSha256(k_region, "s3");
  const std::string k_signing = HmacSha256(k_service, "aws4_request");
  const std::string mac = HmacSha256(k_signing, out.string_to_sign);
  out.signature = Hex(reinterpret_cast<const unsigned char*>(mac.data()), mac.size());
  out.authorization = "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" + scope +
                      ",SignedHeaders=" + signed_headers + ",Signature=" + out.signature;
  return out;
}

}  // namespace internal
}  // namespace stint
