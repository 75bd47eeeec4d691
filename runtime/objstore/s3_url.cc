#include "objstore/s3_url.h"

#include <cctype>

namespace stint {
namespace {

bool ValidBucketName(const std::string& b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (unsigned char c : b) {
    if (!(std::islower(c) || std::isdigit(c) || c == '.' || c == '-')) return false;
  }
  auto edge = [](unsigned char c) { return std::islower(c) || std::isdigit(c); };
  return edge(b.front()) && edge(b.back()) && b.find("..") == std::string::npos;
}

}  // namespace

Result<S3Url> S3Url::Parse(const std::string& url) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("s3 url '" + url + "': " + why +
                                   " (expected s3://bucket[/prefix])");
  };
  constexpr char kScheme[] = "s3://";
  if (url.compare(0, sizeof(kScheme) - 1, kScheme) != 0) return bad("not s3://");
  const std::string rest = url.substr(sizeof(kScheme) - 1);
  const size_t slash = rest.find('/');
  S3Url out;
  out.bucket = rest.substr(0, slash);
  if (out.bucket.empty()) return bad("no bucket");
  if (!ValidBucketName(out.bucket)) {
    return bad("bucket '" + out.bucket + "' is not a valid S3 bucket name");
  }
  if (slash == std::string::npos) return out;
  std::string prefix = rest.substr(slash + 1);
  if (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (prefix.empty()) return out;
  if (prefix.front() == '/' || prefix.find("//") != std::string::npos) {
    return bad("empty path segment");
  }
  out.prefix = prefix + "/";
  return out;
}

std::string S3Url::Key(const std::string& name) const { return JoinKey(prefix, name); }

std::string S3Url::ToString() const {
  std::string p = prefix;
  if (!p.empty()) p.pop_back();
  return "s3://" + bucket + (p.empty() ? "" : "/" + p);
}

std::string JoinKey(const std::string& a, const std::string& b) {
  std::string tail = b;
  while (!tail.empty() && tail.front() == '/') tail.erase(0, 1);
  if (a.empty()) return tail;
  if (tail.empty()) return a;
  return a.back() == '/' ? a + tail : a + "/" + tail;
}

}  // namespace stint
