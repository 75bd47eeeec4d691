#include "stint-agent/job_users.h"

#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <limits>

namespace stint {
namespace agent {
namespace {

// A whole decimal number in [1, max uid), else nullopt.
std::optional<uid_t> ParseUid(const std::string& text) {
  if (text.empty() || text.size() > 10) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  // (uid_t)-1 means "unchanged" to setuid; 0 is root.
  if (v == 0 || v >= std::numeric_limits<uid_t>::max()) return std::nullopt;
  return static_cast<uid_t>(v);
}

// --job-user: a name, or a number without a passwd entry.
Result<JobIdentity> NamedUser(const std::string& user) {
  JobIdentity id;
  errno = 0;
  const passwd* pw = getpwnam(user.c_str());
  if (pw == nullptr && errno != 0 && errno != ENOENT)
    return StatusFromErrno("--job-user " + user + ": getpwnam", errno);
  if (pw == nullptr) {
    const std::optional<uid_t> uid = ParseUid(user);
    if (!uid) {
      return Status::InvalidArgument("--job-user: no user \"" + user +
                                     "\" (give a name from the passwd database or a uid > 0)");
    }
    pw = getpwuid(*uid);
  }
  if (pw != nullptr) {
    id.uid = pw->pw_uid;
    id.gid = pw->pw_gid;
    id.name = pw->pw_name;
    id.home = pw->pw_dir;
    int n = 0;
    getgrouplist(pw->pw_name, pw->pw_gid, nullptr, &n);  // -1: n is the count needed
    id.groups.resize(static_cast<size_t>(std::max(n, 1)));
    if (getgrouplist(pw->pw_name, pw->pw_gid, id.groups.data(), &n) < 0)
      return Status::Internal("--job-user " + user + ": getgrouplist failed");
    id.groups.resize(static_cast<size_t>(n));
  } else {
    id.uid = *ParseUid(user);
    id.gid = static_cast<gid_t>(id.uid);
    id.name = user;
    id.groups = {id.gid};
  }
  if (id.uid == 0) {
    return Status::InvalidArgument("--job-user " + user +
                                   " is root: the jobs would act as this node; leave the flag out "
                                   "to run them as the agent's user");
  }
  return id;
}

// Kills every process running as `uid` (a forked child that becomes `uid`
// signals all it may, kill(-1): exactly that uid's processes but itself).
Status KillEveryProcessOf(uid_t uid) {
  const pid_t pid = fork();
  if (pid < 0) return StatusFromErrno("fork", errno);
  if (pid == 0) {
    const gid_t gid = static_cast<gid_t>(uid);
    if (setgroups(1, &gid) != 0 || setgid(gid) != 0 || setuid(uid) != 0) _exit(1);
    _exit(kill(-1, SIGKILL) == 0 || errno == ESRCH ? 0 : 2);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return StatusFromErrno("waitpid", errno);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::Internal("could not kill the processes left under uid " + std::to_string(uid) +
                            " (exit " + std::to_string(status) + ")");
  }
  return Status::OK();
}

}  // namespace

Result<JobUsers> JobUsers::Create(const std::string& user, const std::string& uids) {
  JobUsers users;
  if (user.empty() && uids.empty()) return users;
  if (!user.empty() && !uids.empty())
    return Status::InvalidArgument("give --job-user or --job-uids, not both");
  const char* flag = user.empty() ? "--job-uids" : "--job-user";
  if (geteuid() != 0) {
    return Status::InvalidArgument(std::string(flag) +
                                   " needs an agent that runs as root (it switches users)");
  }
  if (!user.empty()) {
    STINT_ASSIGN_OR_RETURN(JobIdentity id, NamedUser(user));
    users.fixed_ = std::move(id);
    return users;
  }
  const size_t dash = uids.find('-');
  const std::optional<uid_t> first =
      dash == std::string::npos ? std::nullopt : ParseUid(uids.substr(0, dash));
  const std::optional<uid_t> last =
      dash == std::string::npos ? std::nullopt : ParseUid(uids.substr(dash + 1));
  if (!first || !last || *first > *last) {
    return Status::InvalidArgument(
        "--job-uids must be FIRST-LAST, uids with 0 < FIRST <= LAST "
        "(got \"" +
        uids + "\")");
  }
  if (*last - *first >= 65536)
    return Status::InvalidArgument("--job-uids: at most 65536 uids (got \"" + uids + "\")");
  users.first_ = *first;
  users.last_ = *last;
  users.next_ = *first;
  return users;
}

Result<std::optional<JobIdentity>> JobUsers::For(int64_t job, const std::set<int64_t>& active) {
  if (fixed_) return fixed_;
  if (first_ > last_) return std::optional<JobIdentity>();
  std::set<uid_t> held;  // by another active job
  for (const auto& [j, uid] : assigned_) {
    if (j != job && active.count(j)) held.insert(uid);
  }
  auto had = assigned_.find(job);
  const bool keeps = had != assigned_.end() && !held.count(had->second);
  if (!keeps) {
    const uint64_t count = static_cast<uint64_t>(last_) - first_ + 1;
    std::optional<uid_t> free;
    // From past the last one handed out: a uid just given up is reused last.
    for (uint64_t k = 0; k < count && !free; k++) {
      const uid_t uid = static_cast<uid_t>(first_ + (next_ - first_ + k) % count);
      if (!held.count(uid)) free = uid;
    }
    if (!free) {
      return Status::ResourceExhausted("every uid of --job-uids " + std::to_string(first_) + "-" +
                                       std::to_string(last_) +
                                       " is held by a job running on this node");
    }
    STINT_RETURN_IF_ERROR(KillEveryProcessOf(*free));
    for (auto it = assigned_.begin(); it != assigned_.end();) {
      it = it->second == *free ? assigned_.erase(it) : std::next(it);
    }
    assigned_[job] = *free;
    next_ = *free == last_ ? first_ : *free + 1;
  }
  JobIdentity id;
  id.uid = assigned_[job];
  id.gid = static_cast<gid_t>(id.uid);
  id.groups = {id.gid};
  id.name = std::to_string(id.uid);
  return std::optional<JobIdentity>(std::move(id));
}

bool BecomeJobUser(const JobIdentity& id) {
  if (setgroups(id.groups.size(), id.groups.data()) != 0) return false;
  if (setgid(id.gid) != 0 || setuid(id.uid) != 0) return false;
  // setuid from root sets all three uids; were it to have left one, the
  // process could become root again.
  if (setuid(0) == 0 || getuid() != id.uid || geteuid() != id.uid || getegid() != id.gid) {
    errno = EPERM;
    return false;
  }
  return true;
}

}  // namespace agent
}  // namespace stint
