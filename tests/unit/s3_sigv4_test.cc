// runtime/objstore/sigv4: the four worked examples of AWS's "Signature
// Version 4, header-based authentication" page for S3 (GET Object, PUT
// Object, GET Bucket Lifecycle, GET Bucket list), the URI encoding, and
// the digests. A wrong canonicalisation changes every signature here.
#include "objstore/sigv4.h"

#include <gtest/gtest.h>

#include <string>

namespace stint {
namespace internal {
namespace {

const S3Credentials kExample{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                             ""};
constexpr char kDate[] = "20130524T000000Z";
constexpr char kHost[] = "examplebucket.s3.amazonaws.com";

SigV4Request BucketGet(std::vector<std::pair<std::string, std::string>> query) {
  SigV4Request r;
  r.method = "GET";
  r.canonical_uri = "/";
  r.query = std::move(query);
  r.headers = {
      {"Host", kHost}, {"x-amz-date", kDate}, {"x-amz-content-sha256", kEmptyPayloadSha256}};
  r.payload_hash = kEmptyPayloadSha256;
  return r;
}

TEST(S3SigV4, GetObjectExampleMatchesAwsCanonicalRequestAndSignature) {
  SigV4Request r;
  r.method = "GET";
  r.canonical_uri = "/test.txt";
  // Any case and surrounding spaces: the signer lower-cases and trims.
  r.headers = {{"x-amz-date", kDate},
               {"Range", " bytes=0-9 "},
               {"Host", kHost},
               {"x-amz-content-sha256", kEmptyPayloadSha256}};
  r.payload_hash = kEmptyPayloadSha256;
  const SigV4Signature s = SignV4(r, kExample, "us-east-1", kDate);
  EXPECT_EQ(s.canonical_request,
            "GET\n/test.txt\n\n"
            "host:examplebucket.s3.amazonaws.com\n"
            "range:bytes=0-9\n"
            "x-amz-content-sha256:"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
            "x-amz-date:20130524T000000Z\n\n"
            "host;range;x-amz-content-sha256;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(s.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  EXPECT_EQ(s.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(S3SigV4, PutObjectExampleEncodesTheDollarInTheKeyOnce) {
  const std::string body = "Welcome to Amazon S3.";
  const std::string hash = Sha256Hex(body);
  ASSERT_EQ(hash, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  SigV4Request r;
  r.method = "PUT";
  r.canonical_uri = "/" + S3UriEncode("test$file.text", /*keep_slash=*/true);
  ASSERT_EQ(r.canonical_uri, "/test%24file.text");
  r.headers = {{"Date", "Fri, 24 May 2013 00:00:00 GMT"},
               {"Host", kHost},
               {"x-amz-date", kDate},
               {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
               {"x-amz-content-sha256", hash}};
  r.payload_hash = hash;
  const SigV4Signature s = SignV4(r, kExample, "us-east-1", kDate);
  EXPECT_NE(s.authorization.find(
                "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class,"),
            std::string::npos)
      << s.authorization;
  EXPECT_EQ(s.signature, "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

TEST(S3SigV4, LifecycleExampleSignsAFlagParameterAsNameEquals) {
  const SigV4Signature s = SignV4(BucketGet({{"lifecycle", ""}}), kExample, "us-east-1", kDate);
  EXPECT_NE(s.canonical_request.find("\n/\nlifecycle=\n"), std::string::npos);
  EXPECT_EQ(s.signature, "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST(S3SigV4, ListObjectsExampleSortsTheQuery) {
  // Given out of order: the canonical query string sorts by name.
  const SigV4Signature s =
      SignV4(BucketGet({{"prefix", "J"}, {"max-keys", "2"}}), kExample, "us-east-1", kDate);
  EXPECT_NE(s.canonical_request.find("\n/\nmax-keys=2&prefix=J\n"), std::string::npos);
  EXPECT_EQ(s.signature, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST(S3SigV4, ASessionTokenHeaderIsSignedAndTheSecretIsNotInTheOutput) {
  SigV4Request r = BucketGet({});
  r.headers.emplace_back("x-amz-security-token", "TOKEN");
  const SigV4Signature s = SignV4(r, kExample, "eu-west-1", kDate);
  EXPECT_NE(s.authorization.find("x-amz-security-token"), std::string::npos);
  EXPECT_NE(s.authorization.find("/eu-west-1/s3/aws4_request"), std::string::npos);
  for (const std::string& text : {s.canonical_request, s.string_to_sign, s.authorization}) {
    EXPECT_EQ(text.find(kExample.secret_access_key), std::string::npos) << text;
  }
}

TEST(S3UriEncode, KeepsUnreservedAndSlashInPathsEncodesEverythingElseOnce) {
  EXPECT_EQ(S3UriEncode("a/b c+d&e%f~_-.", true), "a/b%20c%2Bd%26e%25f~_-.");
  EXPECT_EQ(S3UriEncode("a/b", false), "a%2Fb");
  EXPECT_EQ(S3UriEncode("\xC3\xA9", true), "%C3%A9");  // é: each UTF-8 byte, upper-case hex
  EXPECT_EQ(S3UriEncode("=", false), "%3D");
}

TEST(S3CanonicalQueryString, EncodesNamesAndValuesAndSortsByEncodedName) {
  EXPECT_EQ(CanonicalQueryString({{"uploadId", "a/b+c"}, {"partNumber", "3"}}),
            "partNumber=3&uploadId=a%2Fb%2Bc");
  EXPECT_EQ(CanonicalQueryString({{"delete", ""}}), "delete=");
  EXPECT_EQ(CanonicalQueryString({}), "");
  // Upper-case sorts before lower-case (byte order, as AWS requires).
  EXPECT_EQ(CanonicalQueryString({{"b", "1"}, {"B", "2"}}), "B=2&b=1");
}

TEST(S3Digests, Md5Base64IsWhatContentMd5Carries) {
  EXPECT_EQ(Md5Base64("", 0), "1B2M2Y8AsgTpgAmY7PhCfg==");
  EXPECT_EQ(Md5Base64("abc", 3), "kAFQmDzST7DWlj99KOF/cg==");
  EXPECT_EQ(Sha256Hex(""), kEmptyPayloadSha256);
}

}  // namespace
}  // namespace internal
}  // namespace stint
