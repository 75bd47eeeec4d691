// runtime/objstore/s3_request: the key encoded into the path, the sorted
// query string S3Client sends (libcurl 7.88 signs the query as given, so
// it must already be in canonical order), and Content-MD5.
#include "objstore/s3_request.h"

#include <gtest/gtest.h>

#include <string>

namespace stint {
namespace internal {
namespace {

TEST(S3UriEncode, KeepsUnreservedAndSlashInPathsEncodesEverythingElseOnce) {
  EXPECT_EQ(S3UriEncode("a/b c+d&e%f~_-.", true), "a/b%20c%2Bd%26e%25f~_-.");
  EXPECT_EQ(S3UriEncode("a/b", false), "a%2Fb");
  EXPECT_EQ(S3UriEncode("\xC3\xA9", true), "%C3%A9");  // é: each UTF-8 byte, upper-case hex
  EXPECT_EQ(S3UriEncode("=", false), "%3D");
  EXPECT_EQ(S3UriEncode("test$file.text", true), "test%24file.text");  // AWS's PUT example
  EXPECT_EQ(S3UriEncode("a/../b?x#y", true), "a/../b%3Fx%23y");
}

TEST(S3QueryString, EncodesNamesAndValuesAndSortsByEncodedName) {
  EXPECT_EQ(S3QueryString({{"uploadId", "a/b+c"}, {"partNumber", "3"}}),
            "partNumber=3&uploadId=a%2Fb%2Bc");
  EXPECT_EQ(S3QueryString({{"prefix", "J"}, {"max-keys", "2"}}), "max-keys=2&prefix=J");
  EXPECT_EQ(S3QueryString({}), "");
  // Upper-case sorts before lower-case (byte order, as AWS requires).
  EXPECT_EQ(S3QueryString({{"b", "1"}, {"B", "2"}}), "B=2&b=1");
  // The same name twice: by value.
  EXPECT_EQ(S3QueryString({{"a", "2"}, {"a", "1"}}), "a=1&a=2");
}

TEST(S3QueryString, AFlagParameterIsWrittenWithAnEqualsSign) {
  // libcurl 7.88 signs "?uploads" as "uploads" where S3 expects "uploads=".
  EXPECT_EQ(S3QueryString({{"delete", ""}}), "delete=");
  EXPECT_EQ(S3QueryString({{"uploads", ""}, {"prefix", "a b"}, {"max-uploads", "9"}}),
            "max-uploads=9&prefix=a%20b&uploads=");
}

TEST(S3Md5, Md5Base64IsWhatContentMd5Carries) {
  EXPECT_EQ(Md5Base64("", 0), "1B2M2Y8AsgTpgAmY7PhCfg==");
  EXPECT_EQ(Md5Base64("abc", 3), "kAFQmDzST7DWlj99KOF/cg==");
}

}  // namespace
}  // namespace internal
}  // namespace stint
