// HttpApi's Stop() in process, on a real Coordinator (SQLite file) and a
// bound loopback socket: a Stop() that comes before Serve() has begun to
// listen must still end it. cpp-httplib's stop() alone does nothing then,
// and stintd hung on a SIGTERM that came right after it said "listening".
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>

#include "stintd/server/coordinator.h"
#include "stintd/server/http_api.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint::stintd {
namespace {

class HttpApiStopTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }

  void Open() {
    CoordinatorOptions options;
    options.db_path = dir_.Sub("stintd.db");
    Result<std::unique_ptr<Coordinator>> c = Coordinator::Open(options);
    ASSERT_OK(c);
    coordinator_ = std::move(*c);
    Result<TokenAuth> auth =
        TokenAuth::Create({"admin-token-0123456789abcdef"}, {"worker-token-0123456789abcdef"});
    ASSERT_OK(auth);
    HttpOptions http;
    http.port = 0;
    http.threads = 4;
    Result<std::unique_ptr<HttpApi>> api =
        HttpApi::Bind(coordinator_.get(), std::move(*auth), http);
    ASSERT_OK(api);
    api_ = std::move(*api);
  }

  // Serve() on its own thread; it must return within 30 s. If it does
  // not, the test fails and a second Stop() (the server now listens) ends
  // it so the test does not hang.
  void ExpectServeReturns(std::future<Status>& served) {
    if (served.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      ADD_FAILURE() << "Serve() still running after Stop()";
      api_->Stop();
    }
    Status s = served.get();
    EXPECT_OK(s);
  }

  TempDir dir_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<HttpApi> api_;
};

TEST_F(HttpApiStopTest, StopBeforeServeMakesServeReturnAtOnce) {
  api_->Stop();
  std::future<Status> served = std::async(std::launch::async, [&] { return api_->Serve(); });
  ExpectServeReturns(served);
}

TEST_F(HttpApiStopTest, StopRacingServesStartEndsIt) {
  // Serve() and Stop() started together, many times: whichever runs first,
  // Serve() returns.
  for (int i = 0; i < 20 && !HasFailure(); ++i) {
    if (i > 0) Open();
    std::future<Status> served = std::async(std::launch::async, [&] { return api_->Serve(); });
    api_->Stop();
    ExpectServeReturns(served);
    api_.reset();
    coordinator_.reset();
  }
}

}  // namespace
}  // namespace stint::stintd
