#include "util/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace stint {

ChildProcess::ChildProcess(const std::string& program, const std::vector<std::string>& args,
                           bool merge_stderr) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return;
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], 1);
    if (merge_stderr) {
      dup2(p[1], 2);
    } else {
      int null = open("/dev/null", O_WRONLY);
      if (null >= 0) dup2(null, 2);
    }
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  close(p[1]);
  if (pid < 0) {
    close(p[0]);
    return;
  }
  pid_ = pid;
  out_ = p[0];
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    Wait();
  }
  if (out_ >= 0) close(out_);
}

bool ChildProcess::WaitForLine(const std::string& prefix, double timeout_seconds) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(int64_t(timeout_seconds * 1000));
  for (;;) {
    // Complete lines not yet searched.
    size_t nl;
    while ((nl = output_.find('\n', scanned_)) != std::string::npos) {
      bool hit = output_.compare(scanned_, prefix.size(), prefix) == 0;
      scanned_ = nl + 1;
      if (hit) return true;
    }
    if (out_ < 0) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{out_, POLLIN, 0};
    int ready = poll(&pfd, 1, int(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;  // re-check the deadline
    char buf[4096];
    ssize_t n = read(out_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    output_.append(buf, size_t(n));
  }
}

int ChildProcess::Wait() {
  if (reaped_) return status_;
  if (out_ >= 0) {
    char buf[4096];
    ssize_t n;
    while ((n = read(out_, buf, sizeof(buf))) != 0) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      output_.append(buf, size_t(n));
    }
    close(out_);
    out_ = -1;
  }
  if (pid_ > 0) {
    while (waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
    }
  }
  reaped_ = true;
  return status_;
}

int ChildProcess::WaitAtMost(double seconds, bool* killed) {
  std::mutex mu;
  std::condition_variable cv;
  bool exited = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return exited; })) {
      if (killed != nullptr) *killed = true;
      if (pid_ > 0) kill(pid_, SIGKILL);
    }
  });
  const int status = Wait();
  {
    std::lock_guard<std::mutex> lock(mu);
    exited = true;
  }
  cv.notify_one();
  watchdog.join();
  return status;
}

RunResult RunProgram(const std::string& program, const std::vector<std::string>& args,
                     bool merge_stderr) {
  ChildProcess child(program, args, merge_stderr);
  RunResult r;
  if (!child.started()) return r;
  int status = child.Wait();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.output = child.output();
  return r;
}

}  // namespace stint
