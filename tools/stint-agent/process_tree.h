// ProcessTree: every process an evaluation started, so that all of them can
// be killed and waited for. A descendant that left the root's process group
// or session (setsid) is followed through /proc by its parent; one whose
// parent died (a double fork) is reparented to the agent, a child subreaper
// (PR_SET_CHILD_SUBREAPER), and still belongs to the tree: it was seen
// under a member before, or its environment carries the tree's marker (a
// variable only the root's command was given, e.g. STINT_EVAL_ID=7).
//
// Not thread-safe: the agent's thread alone uses it.
#ifndef STINT_TOOLS_STINT_AGENT_PROCESS_TREE_H_
#define STINT_TOOLS_STINT_AGENT_PROCESS_TREE_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>

namespace stint {
namespace agent {

// Makes the calling process a child subreaper: orphaned descendants become
// its children (which waitpid(-1) then reaps), not init's. False with errno
// set when the kernel refuses it.
bool BecomeSubreaper();

// One process of a /proc snapshot.
struct ProcessEntry {
  pid_t ppid = 0;
  uint64_t start = 0;   // start time (clock ticks since boot): tells a reused pid apart
  bool zombie = false;  // exited, not yet reaped: gone for a tree
};
using ProcessTable = std::map<pid_t, ProcessEntry>;

// Every process of /proc now (a process that exits while it is read is
// left out).
ProcessTable ReadProcessTable();

class ProcessTree {
 public:
  // `root`: the process the agent forked (and reaps itself); `marker`: the
  // NAME=VALUE its environment carries, and so every descendant's unless
  // one cleared it.
  ProcessTree(pid_t root, std::string marker);

  // Follows the tree into `table`: adds the live descendants of the root
  // and of every member, and the agent's children (`agent`: its pid) that
  // carry the marker; drops the members gone.
  void Update(const ProcessTable& table, pid_t agent);
  // SIGKILLs the root's process group and every member.
  void Kill() const;
  // Whether a member (not counting the root) is alive, as of Update().
  bool HasMembers() const { return !members_.empty(); }

 private:
  bool Carries(pid_t pid) const;  // its environment holds marker_

  const pid_t root_;
  const std::string marker_;
  std::map<pid_t, uint64_t> members_;  // pid -> start time
};

}  // namespace agent
}  // namespace stint

#endif  // STINT_TOOLS_STINT_AGENT_PROCESS_TREE_H_
