// S3Url: "s3://bucket/prefix/..." split into a bucket and a key prefix, and
// the keys below that prefix. What a checkpoint tier is configured with.
// A value type: thread-compatible.
#ifndef STINT_RUNTIME_OBJSTORE_S3_URL_H_
#define STINT_RUNTIME_OBJSTORE_S3_URL_H_

#include <string>

#include "stint/status.h"

namespace stint {

struct S3Url {
  std::string bucket;
  // "" or a prefix without a leading slash that ends in '/' ("runs/a/").
  std::string prefix;

  // "s3://bucket", "s3://bucket/", "s3://bucket/a/b" (prefix "a/b/").
  // kInvalidArgument, naming the string, for another scheme, an empty or
  // malformed bucket name (S3's rules: 3..63 of a-z 0-9 . -, starting and
  // ending with a letter or digit), or an empty segment ("a//b").
  static Result<S3Url> Parse(const std::string& url);

  // prefix + name, with one '/' between: Key("step-5/rank-0") under prefix
  // "runs/a/" is "runs/a/step-5/rank-0". A leading '/' of `name` is dropped.
  std::string Key(const std::string& name) const;
  // "s3://bucket/prefix".
  std::string ToString() const;
};

// `a` and `b` joined with exactly one '/' between them ("" joins to the other).
std::string JoinKey(const std::string& a, const std::string& b);

}  // namespace stint

#endif  // STINT_RUNTIME_OBJSTORE_S3_URL_H_
