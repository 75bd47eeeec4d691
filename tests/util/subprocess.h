// ChildProcess: a program run by a test, with its stdout (and, if asked,
// stderr) on a pipe the test reads line by line; killed and reaped on
// destruction if still running. No shell is involved.
#ifndef STINT_TESTS_UTIL_SUBPROCESS_H_
#define STINT_TESTS_UTIL_SUBPROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace stint {

class ChildProcess {
 public:
  ChildProcess(const std::string& program, const std::vector<std::string>& args,
               bool merge_stderr = true);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool started() const { return pid_ > 0; }
  // Reads output until a line starting with `prefix`; false at the end of
  // the output or after `timeout_seconds` (a stuck child fails, not hangs).
  bool WaitForLine(const std::string& prefix, double timeout_seconds = 120);
  // Reads the rest of the output and reaps the child; returns its wait status.
  int Wait();
  // Wait(), but a child still running after `seconds` is SIGKILLed (and
  // *killed set): the bound turns a hung child into a failure, not a hang.
  int WaitAtMost(double seconds, bool* killed = nullptr);
  // Everything read so far.
  const std::string& output() const { return output_; }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::string output_;
  size_t scanned_ = 0;  // output_ before this was searched by WaitForLine
};

struct RunResult {
  int exit_code = -1;  // -1 when the program died of a signal
  std::string output;
};

// Runs a program to completion.
RunResult RunProgram(const std::string& program, const std::vector<std::string>& args,
                     bool merge_stderr = true);

}  // namespace stint

#endif  // STINT_TESTS_UTIL_SUBPROCESS_H_
