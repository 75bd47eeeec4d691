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

std::string CommandOutput::Text() const {
  std::string both = errors + output;
  const size_t first = both.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  return both.substr(first, both.find_last_not_of(" \t\r\n") - first + 1);
}

Result<CommandOutput> RunCommand(const std::vector<std::string>& argv,
                                 std::chrono::milliseconds timeout, const CommandEnv& env,
                                 size_t max_output) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string line = CommandLine(argv);
  // One pipe each for stdout and stderr: [0] read end, [1] the child's.
  int out_fds[2], err_fds[2];
  if (pipe2(out_fds, O_CLOEXEC) != 0) return Errno("pipe for `" + line + "`", errno);
  if (pipe2(err_fds, O_CLOEXEC) != 0) {
    const int err = errno;
    close(out_fds[0]);
    close(out_fds[1]);
    return Errno("pipe for `" + line + "`", err);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_fds[1], 2);
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
  close(out_fds[1]);
  close(err_fds[1]);
  if (spawned != 0) {
    close(out_fds[0]);
    close(err_fds[0]);
    if (spawned == ENOENT) return Status::NotFound("`" + argv[0] + "` is not in PATH");
    return Errno("spawn `" + line + "`", spawned);
  }

  CommandOutput out;
  bool timed_out = false;
  pollfd p[2] = {{out_fds[0], POLLIN, 0}, {err_fds[0], POLLIN, 0}};
  std::string* kept_in[2] = {&out.output, &out.errors};
  while (p[0].fd >= 0 || p[1].fd >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    const int ready = poll(p, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    for (int i = 0; i < 2; i++) {
      if (p[i].fd < 0 || p[i].revents == 0) continue;
      char buf[65536];
      const ssize_t n = read(p[i].fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {  // EOF: poll() ignores a negative fd from now on
        close(p[i].fd);
        p[i].fd = -1;
        continue;
      }
      std::string& kept_text = *kept_in[i];
      const size_t kept = std::min(static_cast<size_t>(n), max_output - kept_text.size());
      kept_text.append(buf, kept);
      out.truncated = out.truncated || kept < static_cast<size_t>(n);
    }
  }
  for (const pollfd& f : p)
    if (f.fd >= 0) close(f.fd);
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
