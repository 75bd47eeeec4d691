// JobUsers: the user a job's processes run as on this node (stint-agent
// --job-user, --job-uids; API.md, "Launching"). A job's code must not act
// as its node: under a user other than the agent's it cannot read the
// agent's token file, its /proc/<pid>/environ or memory (the agent is not
// dumpable either), and with a uid of its own per job (--job-uids) not the
// STINT_WORKER_SECRET of another job's processes either.
//
// Not thread-safe: the agent's Run() thread owns it.
#ifndef STINT_TOOLS_STINT_AGENT_JOB_USERS_H_
#define STINT_TOOLS_STINT_AGENT_JOB_USERS_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "stint/status.h"

namespace stint {
namespace agent {

// Who a process becomes between fork and exec (BecomeJobUser).
struct JobIdentity {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups: --job-user's, or just `gid`
  std::string name;           // USER and LOGNAME: the user's name, or the uid's number
  std::string home;           // HOME; "": none (a --job-uids uid has no passwd entry)
};

class JobUsers {
 public:
  // `user`: a user name (or number) every job runs as; `uids` "FIRST-LAST":
  // each job on this node a uid of its own from that range (gid the same
  // number, no other group), never one an active job holds. At most one of
  // the two, neither root nor the agent's own uid, and only for an agent
  // that runs as root (kInvalidArgument naming the flag). Both empty: jobs
  // run as the agent's user.
  static Result<JobUsers> Create(const std::string& user, const std::string& uids);

  // Whether jobs run as a user other than the agent's.
  bool configured() const { return fixed_.has_value() || first_ <= last_; }

  // The identity of job `job`'s processes; nullopt: the agent's own.
  // `active`: the jobs with processes on this node now, whose uids stay
  // theirs. A uid newly handed to `job` first has every process left under
  // it killed (an escaped process of a job that held it before must not
  // meet the next one). kResourceExhausted when active jobs hold the whole
  // range.
  Result<std::optional<JobIdentity>> For(int64_t job, const std::set<int64_t>& active);

 private:
  std::optional<JobIdentity> fixed_;   // --job-user
  uid_t first_ = 1, last_ = 0;         // --job-uids; first_ > last_: none
  uid_t next_ = 0;                     // where the search for a free uid starts
  std::map<int64_t, uid_t> assigned_;  // by job: the uid it had last
};

// In a forked child before exec (async-signal-safe calls only): drops to
// `id` (setgroups, setgid, setuid, each checked, then checked that root
// cannot be regained). False, with errno, when any step failed: the child
// must then exit, not exec.
bool BecomeJobUser(const JobIdentity& id);

}  // namespace agent
}  // namespace stint

#endif  // STINT_TOOLS_STINT_AGENT_JOB_USERS_H_
