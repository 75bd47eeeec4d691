// The coordinator client's pure parts: URL parsing, HTTP status to Status,
// the retry decision, IsFenced, the wall-to-steady clock conversion and the
// options read from the environment. No sockets.
#include <gtest/gtest.h>

#include <map>

#include "coord/http_json.h"
#include "coord/wall_clock.h"
#include "stint/coordinator_client.h"
#include "util/status_matchers.h"

namespace stint {
namespace {

using internal::ParseCoordinatorUrl;
using internal::ParseCoordinatorUrls;
using internal::ShouldRetry;
using internal::StatusFromHttp;

TEST(CoordinatorUrl, AcceptsHostPortWithOrWithoutSchemeAndTrailingSlash) {
  auto a = ParseCoordinatorUrl("http://127.0.0.1:7077");
  ASSERT_OK(a);
  EXPECT_EQ(a->scheme, "http");
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 7077);
  auto b = ParseCoordinatorUrl("stintd.internal:8080/");
  ASSERT_OK(b);
  EXPECT_EQ(b->ToString(), "http://stintd.internal:8080");
  auto c = ParseCoordinatorUrl("http://[::1]:7077");
  ASSERT_OK(c);
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->ToString(), "http://[::1]:7077");
  auto d = ParseCoordinatorUrl("https://coord");
  ASSERT_OK(d);
  EXPECT_EQ(d->port, 443);
}

TEST(CoordinatorUrl, RefusesPathsBadPortsAndOtherSchemes) {
  for (const char* bad :
       {"", "http://", "ftp://h:1", "http://h:0", "http://h:65536", "http://h:x",
        "http://h:7077/v1", "http://h:7077?x=1", "http://user@h:1", "http://[::1"}) {
    auto r = ParseCoordinatorUrl(bad);
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
  }
}

// The stintds sharing a database (CoordinatorOptions::url): comma-separated,
// each checked as one URL; an empty or bad entry refuses the whole list.
TEST(CoordinatorUrl, AListOfSeveralIsCommaSeparatedAndEveryEntryChecked) {
  auto two = ParseCoordinatorUrls("http://a:7077,https://b:7078/");
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].ToString(), "http://a:7077");
  EXPECT_EQ((*two)[1].ToString(), "https://b:7078");
  auto one = ParseCoordinatorUrls("c:1");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->size(), 1u);
  for (const char* bad : {"http://a:1,", ",http://a:1", "http://a:1,,http://b:2", "http://a:1,ftp://b:2"}) {
    EXPECT_EQ(ParseCoordinatorUrls(bad).status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(StatusFromHttp, MapsStatusesAndKeepsTheServersMessageFirst) {
  const std::string body =
      R"j({"error":{"code":"INVALID_ARGUMENT","message":"jobs: min_gpus must be >= 1 (got 0)"}})j";
  Status s = StatusFromHttp(400, body, "POST /v1/jobs");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("jobs: min_gpus must be >= 1 (got 0)", 0), 0u) << s.message();
  EXPECT_NE(s.message().find("POST /v1/jobs"), std::string::npos);

  EXPECT_EQ(StatusFromHttp(401, "", "x").code(), Code::kUnauthenticated);
  EXPECT_EQ(StatusFromHttp(403, "", "x").code(), Code::kPermissionDenied);
  EXPECT_EQ(StatusFromHttp(404, "", "x").code(), Code::kNotFound);
  EXPECT_EQ(StatusFromHttp(409, R"({"error":{"code":"ALREADY_EXISTS","message":"m"}})", "x").code(),
            Code::kAlreadyExists);
  EXPECT_EQ(StatusFromHttp(409, R"({"error":{"code":"ABORTED","message":"m"}})", "x").code(),
            Code::kAborted);
  EXPECT_EQ(
      StatusFromHttp(409, R"({"error":{"code":"FAILED_PRECONDITION","message":"m"}})", "x").code(),
      Code::kFailedPrecondition);
  EXPECT_EQ(StatusFromHttp(500, R"({"error":{"code":"IO_ERROR","message":"m"}})", "x").code(),
            Code::kIoError);
  EXPECT_EQ(StatusFromHttp(500, "", "x").code(), Code::kInternal);
  EXPECT_EQ(StatusFromHttp(503, "", "x").code(), Code::kUnavailable);
  EXPECT_EQ(StatusFromHttp(413, "", "x").code(), Code::kInvalidArgument);
  // A body that is not the error object still reaches the message.
  EXPECT_NE(StatusFromHttp(502, "Bad Gateway", "x").message().find("Bad Gateway"),
            std::string::npos);
}

TEST(StatusFromHttp, GoneIsFencedAndACasLossIsNot) {
  Status gone = StatusFromHttp(410, R"({"error":{"code":"GONE","message":"segment 4 is ended"}})",
                               "POST /v1/workers/7/heartbeat");
  EXPECT_EQ(gone.code(), Code::kAborted);
  EXPECT_TRUE(IsFenced(gone)) << gone.ToString();
  EXPECT_TRUE(IsFenced(gone.WithContext("background save of step 3")));
  Status cas =
      StatusFromHttp(409, R"({"error":{"code":"ABORTED","message":"version is 3, not 2"}})", "PUT");
  EXPECT_FALSE(IsFenced(cas));
  EXPECT_FALSE(IsFenced(Status::OK()));
  EXPECT_FALSE(IsFenced(Status::FailedPrecondition("fenced: wrong code")));
}

TEST(ShouldRetry, ConnectionFailuresAnd5xxAlwaysLostAnswersOnlyWhenIdempotent) {
  EXPECT_TRUE(ShouldRetry(0, /*connection_failed=*/true, /*idempotent=*/false));
  EXPECT_TRUE(ShouldRetry(0, false, true));
  EXPECT_FALSE(ShouldRetry(0, false, false));
  EXPECT_TRUE(ShouldRetry(500, false, false));
  EXPECT_TRUE(ShouldRetry(503, false, true));
  for (int status : {400, 401, 403, 404, 409, 410, 413})
    EXPECT_FALSE(ShouldRetry(status, false, true)) << status;
}

TEST(WallClock, DeadlinesKeepTheirDistanceFromNow) {
  const auto now = std::chrono::steady_clock::now();
  const int64_t wall = 1764698400000;
  EXPECT_EQ(internal::SteadyFromWallMs(wall + 90000, wall, now), now + std::chrono::seconds(90));
  EXPECT_EQ(internal::SteadyFromWallMs(wall - 500, wall, now),
            now - std::chrono::milliseconds(500));
  // Garbage is clamped rather than overflowing.
  auto far = internal::SteadyFromWallMs(INT64_MAX, wall, now);
  EXPECT_GT(far, now + std::chrono::hours(24 * 365));
  auto past = internal::SteadyFromWallMs(INT64_MIN, wall, now);
  EXPECT_LT(past, now - std::chrono::hours(24 * 365));
}

class OptionsFromEnvTest : public ::testing::Test {
 protected:
  Result<CoordinatorOptions> Read() {
    return internal::CoordinatorOptionsFromLookup([this](const char* name) {
      auto it = env_.find(name);
      return it == env_.end() ? std::string() : it->second;
    });
  }
  std::map<std::string, std::string> env_{{"STINT_COORD_TOKEN", "tok"}, {"STINT_JOB_ID", "12"}};
};

TEST_F(OptionsFromEnvTest, ReadsTheVariablesWithDefaults) {
  auto o = Read();
  ASSERT_OK(o);
  EXPECT_EQ(o->url, "http://127.0.0.1:7077");
  EXPECT_EQ(o->token, "tok");
  EXPECT_EQ(o->job_id, 12u);
  env_["STINT_COORD_URL"] = "http://10.0.0.5:9000";
  env_["STINT_WORKER_NAME"] = "node7:rank3";
  o = Read();
  ASSERT_OK(o);
  EXPECT_EQ(o->url, "http://10.0.0.5:9000");
  EXPECT_EQ(o->worker_name, "node7:rank3");
}

TEST_F(OptionsFromEnvTest, ErrorsNameTheVariable) {
  auto expect_error = [&](const char* variable) {
    auto o = Read();
    ASSERT_EQ(o.status().code(), Code::kInvalidArgument);
    EXPECT_NE(o.status().message().find(variable), std::string::npos) << o.status().message();
  };
  env_["STINT_JOB_ID"] = "12x";
  expect_error("STINT_JOB_ID");
  env_["STINT_JOB_ID"] = "0";
  expect_error("STINT_JOB_ID");
  env_["STINT_JOB_ID"] = "99999999999999999999999";
  expect_error("STINT_JOB_ID");
  env_.erase("STINT_JOB_ID");
  expect_error("STINT_JOB_ID");
  env_["STINT_JOB_ID"] = "3";
  env_["STINT_COORD_URL"] = "http://h:7077/v1";
  expect_error("STINT_COORD_URL");
  env_.erase("STINT_COORD_URL");
  env_.erase("STINT_COORD_TOKEN");
  expect_error("STINT_COORD_TOKEN");
}

TEST(CoordinatorClient, CreateChecksOptionsWithoutConnecting) {
  CoordinatorOptions o;
  o.url = "http://127.0.0.1:1";  // nothing listens; Create must not care
  o.job_id = 1;
  auto c = CoordinatorClient::Create(o);
  ASSERT_OK(c);
  EXPECT_FALSE((*c)->registration().has_value());
  EXPECT_FALSE((*c)->options().worker_name.empty());  // host:pid
  // Worker calls before Register() are refused locally.
  EXPECT_EQ((*c)->Heartbeat().status().code(), Code::kFailedPrecondition);
  EXPECT_EQ((*c)->GuardCommit(5).code(), Code::kFailedPrecondition);
  o.url = "gopher://x";
  EXPECT_EQ(CoordinatorClient::Create(o).status().code(), Code::kInvalidArgument);
  o.url = "http://127.0.0.1:1";
  o.retry.initial_backoff = std::chrono::milliseconds(0);
  EXPECT_EQ(CoordinatorClient::Create(o).status().code(), Code::kInvalidArgument);
}

TEST(CoordinatorClient, KvArgumentsAreCheckedBeforeSending) {
  CoordinatorOptions o;
  o.url = "http://127.0.0.1:1";
  o.job_id = 1;
  auto c = CoordinatorClient::Create(o);
  ASSERT_OK(c);
  EXPECT_EQ((*c)->Put("", "v").status().code(), Code::kInvalidArgument);
  EXPECT_EQ((*c)->Put("a b", "v").status().code(), Code::kInvalidArgument);
  EXPECT_EQ((*c)->Put(std::string(201, 'k'), "v").status().code(), Code::kInvalidArgument);
  EXPECT_EQ((*c)->Put("k", std::string((1 << 20) + 1, 'v')).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ((*c)->Get("a?b").status().code(), Code::kInvalidArgument);
  EXPECT_EQ((*c)->Delete("").code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace stint
