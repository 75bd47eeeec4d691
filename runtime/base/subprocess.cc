#include "base/subprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

extern char** environ;

namespace stint {
namespace {

std::string CommandLine(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& a : argv) line += (line.empty() ? "" : " ") + a;
  return line;
}

Status Errno(const std::string& what, int err) {
  return Status::IoError(what + ": " + std::strerror(err));
}

// The child's exit status as RunCommand reports it.
int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// The caller's environment with `env` applied, as "NAME=value" strings.
std::vector<std::string> Environment(const CommandEnv& env) {
  auto changed = [&](const std::string& entry) {
    const std::string name = entry.substr(0, entry.find('='));
    for (const std::string& u : env.unset)
      if (u == name) return true;
    for (const auto& [k, v] : env.set)
      if (k == name) return true;
    return false;
  };
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; e++)
    if (!changed(*e)) out.emplace_back(*e);
  for (const auto& [k, v] : env.set) out.push_back(k + "=" + v);
  return out;
}

}  // namespace

Result<CommandOutput> RunCommand(const std::vector<std::string>& argv,
                                 std::chrono::milliseconds timeout, const CommandEnv& env,
                                 size_t max_output) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string line = CommandLine(argv);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Errno("pipe for `" + line + "`", errno);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  // The caller may block signals (a watcher thread); the command gets the
  // defaults.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> vars = Environment(env);
  std::vector<char*> envp;
  for (std::string& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, args[0], &actions, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (spawned != 0) {
    close(fds[0]);
    if (spawned == ENOENT) return Status::NotFound("`" + argv[0] + "` is not in PATH");
    return Errno("spawn `" + line + "`", spawned);
  }

  CommandOutput out;
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    char buf[65536];
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the command closed its output
    const size_t kept = std::min(static_cast<size_t>(n), max_output - out.output.size());
    out.output.append(buf, kept);
    out.truncated = out.truncated || kept < static_cast<size_t>(n);
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  // After EOF the command exits promptly; a command that closed its output
  // and lingers is bounded by the same deadline.
  for (;;) {
    const pid_t r = waitpid(pid, &status, timed_out ? 0 : WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return Errno("waitpid `" + line + "`", errno);
    if (r == 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        timed_out = true;
        kill(pid, SIGKILL);
      } else {
        usleep(10000);
      }
    }
  }
  if (timed_out) {
    return Status::DeadlineExceeded("`" + line + "` did not finish within " +
                                    std::to_string(timeout.count()) + " ms");
  }
  out.exit_code = ExitCode(status);
  return out;
}

}  // namespace stint
