#include "stint-agent/process_tree.h"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <utility>
#include <vector>

namespace stint {
namespace agent {
namespace {

// /proc/<pid>/stat: "pid (comm) state ppid ... starttime ...": comm may
// hold spaces and parentheses, so the fields count from its last ')'.
bool ReadStat(pid_t pid, ProcessEntry* entry) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream fields(line.substr(close + 1));
  std::string state;
  long long ppid = 0;
  fields >> state >> ppid;
  std::string skip;
  for (int i = 0; i < 17; i++) fields >> skip;  // pgrp .. itrealvalue
  unsigned long long start = 0;
  if (!(fields >> start)) return false;  // field 22
  entry->ppid = static_cast<pid_t>(ppid);
  entry->start = start;
  entry->zombie = state == "Z" || state == "X";
  return true;
}

}  // namespace

bool BecomeSubreaper() { return prctl(PR_SET_CHILD_SUBREAPER, 1) == 0; }

ProcessTable ReadProcessTable() {
  ProcessTable table;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return table;
  while (const dirent* d = readdir(dir)) {
    if (!std::isdigit(static_cast<unsigned char>(d->d_name[0]))) continue;
    const pid_t pid = static_cast<pid_t>(std::atoll(d->d_name));
    ProcessEntry entry;
    if (ReadStat(pid, &entry)) table[pid] = entry;
  }
  closedir(dir);
  return table;
}

ProcessTree::ProcessTree(pid_t root, std::string marker)
    : root_(root), marker_(std::move(marker)) {}

bool ProcessTree::Carries(pid_t pid) const {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string var;
  while (std::getline(in, var, '\0')) {
    if (var == marker_) return true;
  }
  return false;
}

void ProcessTree::Update(const ProcessTable& table, pid_t agent) {
  for (auto it = members_.begin(); it != members_.end();) {
    auto p = table.find(it->first);
    const bool alive = p != table.end() && p->second.start == it->second && !p->second.zombie;
    it = alive ? std::next(it) : members_.erase(it);
  }
  std::multimap<pid_t, pid_t> children;  // parent -> child
  for (const auto& [pid, e] : table) {
    if (!e.zombie) children.emplace(e.ppid, pid);
  }
  std::vector<pid_t> todo = {root_};
  for (const auto& [pid, start] : members_) todo.push_back(pid);
  auto [first, last] = children.equal_range(agent);
  for (auto it = first; it != last; ++it) {
    if (it->second != root_ && !members_.count(it->second) && Carries(it->second))
      todo.push_back(it->second);
  }
  while (!todo.empty()) {
    const pid_t parent = todo.back();
    todo.pop_back();
    if (parent != root_) members_.emplace(parent, table.at(parent).start);
    auto [from, to] = children.equal_range(parent);
    for (auto it = from; it != to; ++it) {
      if (!members_.count(it->second)) todo.push_back(it->second);
    }
  }
}

void ProcessTree::Kill() const {
  kill(-root_, SIGKILL);  // ESRCH once the group is empty
  for (const auto& [pid, start] : members_) kill(pid, SIGKILL);
}

}  // namespace agent
}  // namespace stint
