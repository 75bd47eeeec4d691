// ForkJobProcess (job_process.h).
#include "stint-agent/job_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace stint {
namespace agent {

pid_t ForkJobProcess(std::vector<std::string> command, const std::string& log,
                     const std::string& workdir, const EnvVars& vars,
                     const std::optional<JobIdentity>& as) {
  std::vector<char*> argv;
  for (std::string& arg : command) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t agent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    // Opened as the agent's user: the job's user gets the descriptor only.
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    if (as && !BecomeJobUser(*as)) {
      std::fprintf(stderr, "stint-agent: cannot run as uid %u gid %u: %s\n",
                   static_cast<unsigned>(as->uid), static_cast<unsigned>(as->gid),
                   std::strerror(errno));
      _exit(126);
    }
    // Workers never outlive the agent: killed when it dies, however it dies.
    // After the change of user, which clears it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != agent) _exit(125);  // it died before the line above
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);  // the agent blocks its stop signals
    if (as) {
      if (!as->home.empty()) setenv("HOME", as->home.c_str(), 1);
      setenv("USER", as->name.c_str(), 1);
      setenv("LOGNAME", as->name.c_str(), 1);
    }
    if (!workdir.empty() && chdir(workdir.c_str()) != 0) {
      std::fprintf(stderr, "stint-agent: chdir %s: %s\n", workdir.c_str(), std::strerror(errno));
      _exit(127);
    }
    unsetenv("STINT_AGENT_TOKEN");  // the agent's right is not the worker's
    // No credential but the one set below for this process.
    for (const char* k : {"STINT_COORD_TOKEN", "STINT_WORKER_ID", "STINT_WORKER_SECRET"})
      unsetenv(k);
    for (const auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "stint-agent: exec %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  if (pid < 0) {
    std::fprintf(stderr, "stint-agent: fork: %s\n", std::strerror(errno));
    return -1;
  }
  setpgid(pid, pid);  // also here: no race with a kill of the group
  return pid;
}

}  // namespace agent
}  // namespace stint
