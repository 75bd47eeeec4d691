// store_uploader ROOT REPLICA_ROOT HOLD: opens a Checkpointer on ROOT with
// tier 2 in REPLICA_ROOT (an s3:// prefix; the store from the AWS_*
// environment) and waits until what it replicates at open is replicated
// (FlushReplication), then prints "replicated" and exits 0. Reading the
// tier-1 file named HOLD ("" for none) prints "holding HOLD" and blocks
// until the process is killed (at most 5 minutes, then it fails): the
// upload is cut off right there, after every file before HOLD went up
// whole. upload_resume_test SIGKILLs it there.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>

#include "stint/checkpointer.h"
#include "stint/env.h"

namespace {

class HoldingEnv final : public stint::EnvWrapper {
 public:
  HoldingEnv(stint::Env* base, std::string hold) : EnvWrapper(base), hold_(std::move(hold)) {}

  stint::Result<std::unique_ptr<stint::RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const stint::FileOptions& options) override {
    const size_t slash = path.find_last_of('/');
    if (!hold_.empty() && path.substr(slash + 1) == hold_) {
      std::printf("holding %s\n", hold_.c_str());
      std::fflush(stdout);
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::minutes(5), [] { return false; });
      return stint::Status::DeadlineExceeded("store_uploader: not killed within 5 minutes");
    }
    return EnvWrapper::NewRandomAccessFile(path, options);
  }

 private:
  const std::string hold_;
  std::mutex mu_;
  std::condition_variable cv_;  // never notified: only the deadline ends the wait
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: store_uploader ROOT REPLICA_ROOT HOLD\n");
    return 2;
  }
  HoldingEnv env(stint::Env::Default(), argv[3]);
  stint::CheckpointOptions o;
  o.root = argv[1];
  o.replica_root = argv[2];
  o.env = &env;
  auto ckpt = stint::Checkpointer::Open(o);
  if (!ckpt.ok()) {
    std::fprintf(stderr, "open: %s\n", ckpt.status().ToString().c_str());
    return 1;
  }
  stint::Status s = (*ckpt)->FlushReplication(std::chrono::minutes(5));
  if (!s.ok()) {
    std::fprintf(stderr, "flush: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("replicated\n");
  return 0;
}
