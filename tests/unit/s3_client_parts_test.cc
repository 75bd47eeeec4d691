// runtime/objstore: the pure parts of the S3 client. S3Url, S3Config from an
// environment given as a map, the shared credentials file, the XML scanner
// on S3's answers (entities included), and secrets kept out of messages;
// and what S3Client puts on the wire, against a canned loopback server.
// The client against a real server is in integration/s3_client_test.cc.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "objstore/s3_client.h"
#include "objstore/s3_config.h"
#include "objstore/s3_credentials.h"
#include "objstore/s3_url.h"
#include "objstore/s3_xml.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

using internal::XmlUnescape;

constexpr char kSecret[] = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

std::function<std::string(const char*)> Env(std::map<std::string, std::string> vars) {
  return [vars](const char* name) {
    auto it = vars.find(name);
    return it == vars.end() ? std::string() : it->second;
  };
}

TEST(S3Url, SplitsBucketAndPrefixAndJoinsKeys) {
  auto u = S3Url::Parse("s3://my-bucket/runs/exp 1/");
  ASSERT_OK(u);
  EXPECT_EQ(u->bucket, "my-bucket");
  EXPECT_EQ(u->prefix, "runs/exp 1/");
  EXPECT_EQ(u->Key("step-5/rank-0"), "runs/exp 1/step-5/rank-0");
  EXPECT_EQ(u->Key("/x"), "runs/exp 1/x");
  EXPECT_EQ(u->ToString(), "s3://my-bucket/runs/exp 1");

  auto bare = S3Url::Parse("s3://bkt");
  ASSERT_OK(bare);
  EXPECT_EQ(bare->prefix, "");
  EXPECT_EQ(bare->Key("a"), "a");
  ASSERT_OK(S3Url::Parse("s3://bkt/"));
  EXPECT_EQ(JoinKey("a/", "/b"), "a/b");
  EXPECT_EQ(JoinKey("a", "b"), "a/b");
  EXPECT_EQ(JoinKey("", "b"), "b");
}

TEST(S3Url, MalformedUrlsAreInvalidArgumentNamingTheString) {
  for (const std::string bad :
       {"http://bkt/a", "s3://", "s3:///a", "s3://Upper/a", "s3://ab/a", "s3://bkt//a",
        "s3://bkt/a//b", "bkt/a", "s3://-bkt/a", "s3://b_kt"}) {
    auto u = S3Url::Parse(bad);
    ASSERT_FALSE(u.ok()) << bad;
    EXPECT_EQ(u.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(u.status().message().find("'" + bad + "'"), std::string::npos)
        << u.status().ToString();
  }
}

TEST(S3Config, EnvironmentKeysEndpointAndRegionFollowAwsPrecedence) {
  auto c = S3Config::FromEnvironment(Env({{"AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9000"},
                                          {"AWS_ENDPOINT_URL", "http://other:1"},
                                          {"AWS_REGION", "eu-west-3"},
                                          {"AWS_DEFAULT_REGION", "us-west-2"},
                                          {"AWS_ACCESS_KEY_ID", "AK"},
                                          {"AWS_SECRET_ACCESS_KEY", kSecret},
                                          {"AWS_SESSION_TOKEN", "TOK"}}));
  ASSERT_OK(c);
  EXPECT_EQ(c->endpoint, "http://127.0.0.1:9000");
  EXPECT_TRUE(c->path_style);
  EXPECT_EQ(c->region, "eu-west-3");
  EXPECT_EQ(c->credentials.access_key_id, "AK");
  EXPECT_EQ(c->credentials.secret_access_key, kSecret);
  EXPECT_EQ(c->credentials.session_token, "TOK");

  auto aws = S3Config::FromEnvironment(Env({{"AWS_DEFAULT_REGION", "us-west-2"}}));
  ASSERT_OK(aws);
  EXPECT_EQ(aws->endpoint, "https://s3.us-west-2.amazonaws.com");
  EXPECT_FALSE(aws->path_style);
  EXPECT_TRUE(aws->credentials.empty());  // no HOME, no file: anonymous

  auto fallback = S3Config::FromEnvironment(Env({{"AWS_ENDPOINT_URL", "https://minio:9000/"}}));
  ASSERT_OK(fallback);
  EXPECT_EQ(fallback->endpoint, "https://minio:9000/");
  EXPECT_EQ(fallback->region, "us-east-1");
}

TEST(S3Config, HalfAKeyPairOrABadEndpointIsRefusedWithoutTheSecret) {
  auto half = S3Config::FromEnvironment(Env({{"AWS_SECRET_ACCESS_KEY", kSecret}}));
  ASSERT_FALSE(half.ok());
  EXPECT_EQ(half.status().code(), Code::kInvalidArgument);
  EXPECT_NE(half.status().message().find("AWS_ACCESS_KEY_ID"), std::string::npos);
  EXPECT_EQ(half.status().message().find(kSecret), std::string::npos);
  auto endpoint = S3Config::FromEnvironment(Env({{"AWS_ENDPOINT_URL", "ftp://x"}}));
  ASSERT_FALSE(endpoint.ok());
  EXPECT_NE(endpoint.status().message().find("ftp://x"), std::string::npos);
}

TEST(S3Config, CredentialsComeFromTheSharedFileAndProfile) {
  TempDir dir;
  const std::string path = dir.Sub("credentials");
  ASSERT_TRUE(WriteWholeFile(path,
                             "# comment\n"
                             "[default]\n"
                             "aws_access_key_id = DEFAULTKEY\n"
                             "aws_secret_access_key=default-secret\n"
                             "\n"
                             "; another comment\n"
                             "[profile ci]\n"
                             "  aws_access_key_id =  CIKEY  \n"
                             "aws_secret_access_key = ci-secret\n"
                             "aws_session_token = ci-token\n"
                             "region = eu-north-1\n"));
  auto d = S3Config::FromEnvironment(Env({{"AWS_SHARED_CREDENTIALS_FILE", path}}));
  ASSERT_OK(d);
  EXPECT_EQ(d->credentials.access_key_id, "DEFAULTKEY");
  EXPECT_EQ(d->credentials.secret_access_key, "default-secret");
  EXPECT_EQ(d->credentials.session_token, "");
  auto ci = S3Config::FromEnvironment(
      Env({{"AWS_SHARED_CREDENTIALS_FILE", path}, {"AWS_PROFILE", "ci"}}));
  ASSERT_OK(ci);
  EXPECT_EQ(ci->credentials.access_key_id, "CIKEY");
  EXPECT_EQ(ci->credentials.session_token, "ci-token");
  // The environment's keys win over the file.
  auto env = S3Config::FromEnvironment(Env({{"AWS_SHARED_CREDENTIALS_FILE", path},
                                            {"AWS_ACCESS_KEY_ID", "E"},
                                            {"AWS_SECRET_ACCESS_KEY", "S"}}));
  ASSERT_OK(env);
  EXPECT_EQ(env->credentials.access_key_id, "E");
  // $HOME/.aws/credentials when no file is named.
  ASSERT_EQ(::mkdir(dir.Sub(".aws").c_str(), 0700), 0);
  ASSERT_TRUE(WriteWholeFile(dir.Sub(".aws/credentials"),
                             "[default]\naws_access_key_id=H\n"
                             "aws_secret_access_key=hs\n"));
  auto home = S3Config::FromEnvironment(Env({{"HOME", dir.path()}}));
  ASSERT_OK(home);
  EXPECT_EQ(home->credentials.access_key_id, "H");
  // A named profile that is not there is an error; a named file too.
  auto missing = S3Config::FromEnvironment(
      Env({{"AWS_SHARED_CREDENTIALS_FILE", path}, {"AWS_PROFILE", "nope"}}));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("'nope'"), std::string::npos);
  auto no_file =
      S3Config::FromEnvironment(Env({{"AWS_SHARED_CREDENTIALS_FILE", dir.Sub("absent")}}));
  ASSERT_FALSE(no_file.ok());
  EXPECT_EQ(no_file.status().code(), Code::kNotFound);
}

TEST(S3SharedCredentials, MissingKeysAndBadLinesNameTheLineNotTheSecret) {
  auto no_secret = ParseSharedCredentials("[default]\naws_access_key_id = A\n", "default", "f");
  ASSERT_FALSE(no_secret.ok());
  EXPECT_EQ(no_secret.status().code(), Code::kInvalidArgument);
  EXPECT_NE(no_secret.status().message().find("aws_secret_access_key"), std::string::npos);
  auto no_id = ParseSharedCredentials("[default]\naws_secret_access_key = S\n", "default", "f");
  ASSERT_FALSE(no_id.ok());
  EXPECT_NE(no_id.status().message().find("aws_access_key_id"), std::string::npos);
  // A secret pasted on a line of its own: the error names line 3, not its text.
  auto pasted = ParseSharedCredentials(
      std::string("[default]\naws_access_key_id = A\n") + kSecret + "\n", "default", "f");
  ASSERT_FALSE(pasted.ok());
  EXPECT_NE(pasted.status().message().find("line 3"), std::string::npos);
  EXPECT_EQ(pasted.status().message().find(kSecret), std::string::npos);
  // Keys of other profiles do not leak into the one asked for.
  auto other = ParseSharedCredentials(
      "[a]\naws_access_key_id = A\naws_secret_access_key = SA\n[b]\naws_access_key_id = B\n", "b",
      "f");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("aws_secret_access_key"), std::string::npos);
}

TEST(S3Xml, UnescapesThePredefinedEntitiesAndNumericReferences) {
  EXPECT_EQ(XmlUnescape("a &amp; b &lt;c&gt; &quot;d&quot; &apos;e&apos;"), "a & b <c> \"d\" 'e'");
  EXPECT_EQ(XmlUnescape("&#233;&#x20AC;&#x1F600;"), "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
  EXPECT_EQ(XmlUnescape("&amp;amp;"), "&amp;");  // decoded once
  EXPECT_EQ(XmlUnescape("a & b &bogus; &#xZZ;"), "a & b &bogus; &#xZZ;");
  EXPECT_EQ(internal::XmlEscape("a&<>\"'"), "a&amp;&lt;&gt;&quot;&apos;");
}

TEST(S3Xml, ListObjectsV2PageWithEntitiesAndContinuation) {
  const std::string xml =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<Name>bkt</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys>"
      "<IsTruncated>true</IsTruncated>"
      "<Contents><Key>p/a &amp; b+c.bin</Key><LastModified>2024-01-01T00:00:00Z</LastModified>"
      "<ETag>&quot;abc&quot;</ETag><Size>123</Size><StorageClass>STANDARD</StorageClass>"
      "</Contents>"
      "<Contents>\n  <Key>p/&lt;caf&#233;&gt;</Key>\n  <Size>0</Size>\n"
      "<Owner><ID>x</ID><DisplayName>y</DisplayName></Owner></Contents>"
      "<NextContinuationToken>tok/&amp;=</NextContinuationToken>"
      "</ListBucketResult>";
  auto page = internal::ParseListObjectsV2(xml);
  ASSERT_OK(page);
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].key, "p/a & b+c.bin");
  EXPECT_EQ(page->objects[0].size, 123u);
  EXPECT_EQ(page->objects[0].etag, "\"abc\"");
  EXPECT_EQ(page->objects[1].key, "p/<caf\xC3\xA9>");
  EXPECT_EQ(page->objects[1].size, 0u);
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_continuation_token, "tok/&=");

  auto last = internal::ParseListObjectsV2(
      "<ListBucketResult><IsTruncated>false</IsTruncated><KeyCount>0</KeyCount>"
      "</ListBucketResult>");
  ASSERT_OK(last);
  EXPECT_TRUE(last->objects.empty());
  EXPECT_FALSE(last->truncated);
}

TEST(S3Xml, MalformedListingsAreErrorsNotGuesses) {
  EXPECT_FALSE(internal::ParseListObjectsV2("<html>proxy error</html>").ok());
  EXPECT_FALSE(internal::ParseListObjectsV2(
                   "<ListBucketResult><Contents><Key>k</Key><Size>12x</Size></Contents>"
                   "</ListBucketResult>")
                   .ok());
  EXPECT_FALSE(internal::ParseListObjectsV2(
                   "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>")
                   .ok());
}

TEST(S3Xml, ErrorBodyCodeAndMessage) {
  auto e = internal::ParseS3Error(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code>"
      "<Message>The specified key does not exist: a &amp; b</Message><Key>a &amp; b</Key>"
      "<RequestId>1</RequestId></Error>");
  EXPECT_EQ(e.code, "NoSuchKey");
  EXPECT_EQ(e.message, "The specified key does not exist: a & b");
  EXPECT_EQ(internal::ParseS3Error("").code, "");
  EXPECT_EQ(internal::ParseS3Error("<html>502 Bad Gateway</html>").code, "");
}

TEST(S3Xml, MultipartAnswers) {
  auto id = internal::ParseInitiateMultipartUpload(
      "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key>"
      "<UploadId>VXBsb2FkIElE</UploadId></InitiateMultipartUploadResult>");
  ASSERT_OK(id);
  EXPECT_EQ(*id, "VXBsb2FkIElE");
  EXPECT_FALSE(internal::ParseInitiateMultipartUpload("<Error/>").ok());

  auto uploads = internal::ParseListMultipartUploads(
      "<ListMultipartUploadsResult><Bucket>b</Bucket><KeyMarker></KeyMarker>"
      "<NextKeyMarker>my-movie.m2ts</NextKeyMarker><NextUploadIdMarker>YW55IGlk</"
      "NextUploadIdMarker>"
      "<IsTruncated>true</IsTruncated>"
      "<Upload><Key>my-divisor</Key><UploadId>XMgbGlrZSBlbHZpbmcncyBub3QgaGF2aW5nIG11Y2ggbHVjaw"
      "</UploadId><Initiated>2010-11-10T20:48:33.000Z</Initiated></Upload>"
      "<Upload><Key>a &amp; b</Key><UploadId>id2</UploadId></Upload>"
      "</ListMultipartUploadsResult>");
  ASSERT_OK(uploads);
  ASSERT_EQ(uploads->uploads.size(), 2u);
  EXPECT_EQ(uploads->uploads[0].key, "my-divisor");
  EXPECT_EQ(uploads->uploads[0].initiated, "2010-11-10T20:48:33.000Z");
  EXPECT_EQ(uploads->uploads[1].key, "a & b");
  EXPECT_TRUE(uploads->truncated);
  EXPECT_EQ(uploads->next_key_marker, "my-movie.m2ts");
  EXPECT_EQ(uploads->next_upload_id_marker, "YW55IGlk");

  auto parts = internal::ParseListParts(
      "<ListPartsResult><Bucket>b</Bucket><Key>k</Key><UploadId>u</UploadId>"
      "<PartNumberMarker>1</PartNumberMarker><NextPartNumberMarker>3</NextPartNumberMarker>"
      "<MaxParts>2</MaxParts><IsTruncated>true</IsTruncated>"
      "<Part><PartNumber>2</PartNumber><LastModified>x</LastModified>"
      "<ETag>\"7778aef83f66abc1fa1e8477f296d394\"</ETag><Size>10485760</Size></Part>"
      "<Part><PartNumber>3</PartNumber><ETag>&quot;aaaa&quot;</ETag><Size>5</Size></Part>"
      "</ListPartsResult>");
  ASSERT_OK(parts);
  ASSERT_EQ(parts->parts.size(), 2u);
  EXPECT_EQ(parts->parts[0].part_number, 2);
  EXPECT_EQ(parts->parts[0].size, 10485760u);
  EXPECT_EQ(parts->parts[0].etag, "\"7778aef83f66abc1fa1e8477f296d394\"");
  EXPECT_EQ(parts->parts[1].etag, "\"aaaa\"");
  EXPECT_EQ(parts->next_part_number_marker, "3");
  EXPECT_FALSE(internal::ParseListParts(
                   "<ListPartsResult><Part><PartNumber>0</PartNumber><Size>1</Size></Part>"
                   "</ListPartsResult>")
                   .ok());

  auto errors = internal::ParseDeleteErrors(
      "<DeleteResult><Deleted><Key>ok</Key></Deleted>"
      "<Error><Key>a&amp;b</Key><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
      "</DeleteResult>");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "a&b: AccessDenied: Access Denied");
}

TEST(S3Xml, ElementsMatchWholeTagNamesOnly) {
  const auto keys = internal::XmlElements("<KeyMarker>m</KeyMarker><Key>k</Key><Key/>", "Key");
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0], "k");
  EXPECT_EQ(keys[1], "");
}

TEST(S3Client, CreateRefusesBadSettings) {
  S3Config config;
  config.endpoint = "http://127.0.0.1:9";
  EXPECT_OK(S3Client::Create(config, "bkt"));
  EXPECT_FALSE(S3Client::Create(config, "").ok());
  config.max_retries = -1;
  EXPECT_FALSE(S3Client::Create(config, "bkt").ok());
  config.max_retries = 0;
  config.list_page_size = 0;
  EXPECT_FALSE(S3Client::Create(config, "bkt").ok());
  config.list_page_size = 1000;
  config.endpoint = "127.0.0.1:9";
  EXPECT_FALSE(S3Client::Create(config, "bkt").ok());
}

// Nothing listens on port 1 of loopback: the refusal comes at once. The
// message names the operation, the key and the endpoint, never the secret
// or the session token, even when the key itself looks like the secret.
TEST(S3Client, AnUnreachableEndpointNamesTheRequestButNotTheSecret) {
  S3Config config;
  config.endpoint = "http://127.0.0.1:1";
  config.credentials = {"AKID", kSecret, "SESSION-TOKEN-VALUE"};
  config.max_retries = 2;
  config.initial_backoff = std::chrono::milliseconds(1);
  config.max_backoff = std::chrono::milliseconds(2);
  auto client = S3Client::Create(config, "bkt");
  ASSERT_OK(client);
  char buf[4];
  const Status s = (*client)->GetRange(std::string("dir/") + kSecret, 0, sizeof(buf), buf);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("GetRange"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("http://127.0.0.1:1"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("3 attempts"), std::string::npos) << s.ToString();
  EXPECT_EQ(s.message().find(kSecret), std::string::npos) << s.ToString();
  EXPECT_EQ(s.message().find("SESSION-TOKEN-VALUE"), std::string::npos) << s.ToString();
}

// A loopback HTTP server that records each request (head and body) and
// answers every one with `reply`, closing the connection after it.
class CannedServer {
 public:
  explicit CannedServer(std::string reply) : reply_(std::move(reply)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd_, 8) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen on loopback";
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~CannedServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void Serve() {
    while (!stop_) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string in;
      char buf[4096];
      size_t head_end = std::string::npos;
      size_t want = 0;
      while (head_end == std::string::npos || in.size() < want) {
        const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
        if (n <= 0) break;
        in.append(buf, n);
        if (head_end == std::string::npos &&
            (head_end = in.find("\r\n\r\n")) != std::string::npos) {
          want = head_end + 4;
          const size_t cl = in.find("Content-Length: ");
          if (cl != std::string::npos && cl < head_end) want += std::stoul(in.substr(cl + 16));
        }
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(in);
      }
      ::send(c, reply_.data(), reply_.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }

  const std::string reply_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> requests_;  // Guarded by mu_
};

std::string Http200(const std::string& body, const std::string& extra_headers = "") {
  return "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n" + extra_headers + "\r\n" + body;
}

// libcurl signs; the request carries what S3 needs for that to verify: the
// sorted query with "uploads=", the key encoded once, UNSIGNED-PAYLOAD, the
// session token among the signed headers, the region in the scope, and
// never the secret.
TEST(S3Client, RequestsCarryTheSortedQueryUnsignedPayloadAndASignedSessionToken) {
  CannedServer server(Http200(
      "<InitiateMultipartUploadResult><UploadId>u1</UploadId></InitiateMultipartUploadResult>"));
  S3Config config;
  config.endpoint = server.endpoint();
  config.region = "eu-west-1";
  config.credentials = {"AKIDEXAMPLELONGKEYID", kSecret, "SESSION-TOKEN-VALUE"};
  auto client = S3Client::Create(config, "bkt");
  ASSERT_OK(client);
  auto id = (*client)->CreateMultipartUpload("a b/c+d");
  ASSERT_OK(id);
  EXPECT_EQ(*id, "u1");
  ASSERT_OK((*client)->AbortMultipartUpload("k", "x/y+z"));
  const std::vector<std::string> got = server.requests();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].rfind("POST /bkt/a%20b/c%2Bd?uploads= HTTP/1.1\r\n", 0), 0u) << got[0];
  EXPECT_EQ(got[1].rfind("DELETE /bkt/k?uploadId=x%2Fy%2Bz HTTP/1.1\r\n", 0), 0u) << got[1];
  for (const std::string& r : got) {
    EXPECT_NE(r.find("\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\n"), std::string::npos) << r;
    EXPECT_NE(r.find("\r\nx-amz-security-token: SESSION-TOKEN-VALUE\r\n"), std::string::npos) << r;
    EXPECT_NE(r.find("\r\nAuthorization: AWS4-HMAC-SHA256 Credential=AKIDEXAMPLELONGKEYID/"),
              std::string::npos)
        << r;
    EXPECT_NE(r.find("/eu-west-1/s3/aws4_request"), std::string::npos) << r;
    const size_t signed_headers = r.find("SignedHeaders=");
    ASSERT_NE(signed_headers, std::string::npos) << r;
    const std::string names =
        r.substr(signed_headers, r.find(',', signed_headers) - signed_headers);
    EXPECT_NE(names.find("x-amz-content-sha256"), std::string::npos) << names;
    EXPECT_NE(names.find("x-amz-security-token"), std::string::npos) << names;
    EXPECT_EQ(names.find("expect"), std::string::npos) << names;
    EXPECT_EQ(r.find(kSecret), std::string::npos) << r;
  }
}

// A server that ignores Range answers 200 with the whole object and no
// Content-Range: GetRange takes the range's bytes from it and stops.
TEST(S3Client, GetRangeTakesTheRangeFromAWholeObjectAnswer) {
  std::string object(100000, '\0');
  for (size_t i = 0; i < object.size(); ++i) object[i] = static_cast<char>(i * 31 + i / 253);
  CannedServer server(Http200(object));
  S3Config config;
  config.endpoint = server.endpoint();
  config.credentials = {"AKIDEXAMPLELONGKEYID", kSecret, ""};
  auto client = S3Client::Create(config, "bkt");
  ASSERT_OK(client);
  for (const auto& [offset, length] :
       std::vector<std::pair<uint64_t, size_t>>{{0, 10}, {12345, 5000}, {99990, 10}, {0, 100000}}) {
    std::string buf(length + 8, '\x5A');
    ASSERT_OK((*client)->GetRange("obj", offset, length, buf.data())) << offset << "+" << length;
    EXPECT_TRUE(buf.compare(0, length, object, offset, length) == 0) << offset << "+" << length;
    EXPECT_EQ(buf.substr(length), std::string(8, '\x5A'));
  }
  std::string buf(20, '\0');
  const Status short_read = (*client)->GetRange("obj", 99990, 20, buf.data());
  EXPECT_EQ(short_read.code(), Code::kDataLoss) << short_read.ToString();
  ASSERT_FALSE(server.requests().empty());
  EXPECT_NE(server.requests()[1].find("\r\nrange: bytes=12345-17344\r\n"), std::string::npos)
      << server.requests()[1];
}

}  // namespace
}  // namespace stint
