// ForkJobProcess: starts one process of a job (a worker, an evaluation) on
// this node, as the job's user (JobUsers) and without the agent's
// credentials.
#ifndef STINT_TOOLS_STINT_AGENT_JOB_PROCESS_H_
#define STINT_TOOLS_STINT_AGENT_JOB_PROCESS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "stint-agent/job_users.h"

namespace stint {
namespace agent {

// Variables added to a job process's environment, in order.
using EnvVars = std::vector<std::pair<std::string, std::string>>;

// Forks and executes `command` as a process group of its own, output to
// `log` (readable by the agent's user only), in `workdir` ("": the
// agent's), with `vars` added to the environment, as the job's user `as`
// (nullopt: the agent's; HOME, USER and LOGNAME then are the user's unless
// `vars` sets them). The pid, or -1 when the fork failed.
pid_t ForkJobProcess(std::vector<std::string> command, const std::string& log,
                     const std::string& workdir, const EnvVars& vars,
                     const std::optional<JobIdentity>& as);

}  // namespace agent
}  // namespace stint

#endif  // STINT_TOOLS_STINT_AGENT_JOB_PROCESS_H_
