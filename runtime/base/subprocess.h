// RunCommand: a short external command (squeue, scontrol) run to completion
// with a deadline, its output captured. For the few places the runtime asks
// a scheduler's CLI; nothing long-running.
#ifndef STINT_RUNTIME_BASE_SUBPROCESS_H_
#define STINT_RUNTIME_BASE_SUBPROCESS_H_

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "stint/status.h"

namespace stint {

struct CommandOutput {
  int exit_code = 0;   // the exit status; 128 + N when killed by signal N
  // stdout and stderr apart (a warning on stderr must not reach what the
  // caller parses), each at most max_output bytes.
  std::string output;
  std::string errors;
  bool truncated = false;  // whether the command printed more than was kept
  // Both, stderr first, trimmed: for a message about the command.
  std::string Text() const;
};

// Changes to the command's environment (the caller's otherwise).
struct CommandEnv {
  std::vector<std::string> unset;                           // names removed
  std::vector<std::pair<std::string, std::string>> set;  // added or replaced
};

// Runs argv (argv[0] looked up in PATH) with stdin from /dev/null, the
// caller's environment changed by `env`, and waits at most `timeout` for it
// to exit, keeping at most `max_output` bytes of each output (the rest is
// read and dropped, so the command never blocks on a full pipe; `truncated`
// says so). kNotFound when argv[0] is not found;
// kDeadlineExceeded (the command is then SIGKILLed and reaped) naming the
// command; kIoError for a failed syscall. A non-zero exit is not an error
// here: the caller reads exit_code. REQUIRES: !argv.empty().
Result<CommandOutput> RunCommand(const std::vector<std::string>& argv,
                                 std::chrono::milliseconds timeout, const CommandEnv& env = {},
                                 size_t max_output = size_t{1} << 20);

}  // namespace stint

#endif  // STINT_RUNTIME_BASE_SUBPROCESS_H_
