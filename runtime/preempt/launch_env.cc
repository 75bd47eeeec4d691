// LaunchEnvFromEnvironment: rank and world size from torchrun's or Slurm's
// variables, checked, so that a misconfigured launch fails at start-up
// instead of two ranks writing the same shard; and Slurm's hostlist syntax.
#include "stint/launch_env.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

namespace stint {
namespace {

const char* Get(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && value[0] != '\0') ? value : nullptr;
}

// A non-negative decimal int, nothing else ("3", not " 3", "+3", "3x" or "-1").
Result<int> ParseCount(const char* name, const char* text) {
  auto bad = [&](const char* why) {
    return Status::InvalidArgument(std::string(name) + "='" + text + "': " + why);
  };
  if (text[0] == '-') return bad("must not be negative");
  long long value = 0;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') return bad("not a non-negative integer");
    value = value * 10 + (*p - '0');
    if (value > INT_MAX) return bad("too large");
  }
  return static_cast<int>(value);
}

Result<int> Required(const char* name, const char* launcher) {
  const char* text = Get(name);
  if (text == nullptr) {
    return Status::InvalidArgument(std::string(name) + " is not set, but other " + launcher +
                                   " variables are");
  }
  return ParseCount(name, text);
}

Result<int> Optional(const char* name, int fallback) {
  const char* text = Get(name);
  if (text == nullptr) return fallback;
  return ParseCount(name, text);
}

Status Check(const LaunchEnv& env, const char* rank_name, const char* world_name,
             const char* local_name) {
  if (env.world_size < 1) {
    return Status::InvalidArgument(std::string(world_name) + "='" + std::to_string(env.world_size) +
                                   "': must be at least 1");
  }
  if (env.rank >= env.world_size) {
    return Status::InvalidArgument(std::string(rank_name) + "='" + std::to_string(env.rank) +
                                   "' is not below " + world_name + "='" +
                                   std::to_string(env.world_size) + "'");
  }
  if (env.local_rank >= env.world_size) {
    return Status::InvalidArgument(std::string(local_name) + "='" + std::to_string(env.local_rank) +
                                   "' is not below " + world_name + "='" +
                                   std::to_string(env.world_size) + "'");
  }
  return Status::OK();
}

// MASTER_ADDR / MASTER_PORT where set (either launcher).
Status MasterFromEnvironment(LaunchEnv* env) {
  if (const char* addr = Get("MASTER_ADDR")) env->master_addr = addr;
  if (const char* port = Get("MASTER_PORT")) {
    STINT_ASSIGN_OR_RETURN(env->master_port, ParseCount("MASTER_PORT", port));
    if (env->master_port < 1 || env->master_port > 65535)
      return Status::InvalidArgument(std::string("MASTER_PORT='") + port + "': not a TCP port");
  }
  return Status::OK();
}

// Under Slurm without MASTER_ADDR / MASTER_PORT: the first host of the
// job's nodelist (where task 0 runs with the default block distribution)
// and a port from the job id, the same on every task and every requeue.
Status SlurmMaster(LaunchEnv* env) {
  if (env->master_addr.empty()) {
    const char* name = Get("SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST" : "SLURM_NODELIST";
    if (const char* list = Get(name)) {
      Result<std::vector<std::string>> hosts = ExpandHostlist(list);
      if (!hosts.ok()) return hosts.status().WithContext(name);
      env->master_addr = hosts->front();
    }
  }
  if (env->master_port == 0 && !env->job_id.empty()) {
    uint64_t id = 0;
    for (char c : env->job_id) {
      if (c < '0' || c > '9') {
        return Status::InvalidArgument("SLURM_JOB_ID='" + env->job_id +
                                       "': not a job number (set MASTER_PORT)");
      }
      id = (id * 10 + static_cast<uint64_t>(c - '0')) % 10000;
    }
    env->master_port = 15000 + static_cast<int>(id);
  }
  return Status::OK();
}

// One name of a hostlist ("r[1-2]n[01-02]") expanded into `out`.
Status ExpandName(const std::string& list, size_t begin, size_t end,
                  std::vector<std::string>* out) {
  std::vector<std::string> names = {""};
  auto bad = [&](size_t at, const std::string& why) {
    return Status::InvalidArgument("hostlist '" + list + "' at " + std::to_string(at) + ": " +
                                   why);
  };
  size_t i = begin;
  while (i < end) {
    if (list[i] != '[') {
      const size_t next = std::min(list.find('[', i), end);
      if (list.find(']', i) < next) return bad(list.find(']', i), "']' without '['");
      for (std::string& n : names) n += list.substr(i, next - i);
      i = next;
      continue;
    }
    const size_t close = list.find(']', i);
    if (close == std::string::npos || close >= end) return bad(i, "'[' without ']'");
    std::vector<std::string> suffixes;
    size_t r = i + 1;
    while (r <= close) {
      const size_t stop = std::min(list.find(',', r), close);
      const std::string range = list.substr(r, stop - r);
      const size_t dash = range.find('-');
      const std::string lo = range.substr(0, dash);
      const std::string hi = dash == std::string::npos ? lo : range.substr(dash + 1);
      auto digits = [](const std::string& t) {
        return !t.empty() && t.size() <= 9 && t.find_first_not_of("0123456789") == std::string::npos;
      };
      if (!digits(lo) || !digits(hi)) return bad(r, "'" + range + "' is not N or N-M");
      const long first = std::stol(lo), last = std::stol(hi);
      if (last < first) return bad(r, "'" + range + "' descends");
      if (suffixes.size() + static_cast<size_t>(last - first) > 1000000)
        return bad(r, "more than 1000000 hosts");
      for (long k = first; k <= last; ++k) {
        std::string num = std::to_string(k);
        if (num.size() < lo.size()) num.insert(0, lo.size() - num.size(), '0');
        suffixes.push_back(num);
      }
      r = stop + 1;
    }
    std::vector<std::string> grown;
    if (names.size() * suffixes.size() > 1000000) return bad(i, "more than 1000000 hosts");
    for (const std::string& n : names) {
      for (const std::string& sfx : suffixes) grown.push_back(n + sfx);
    }
    names = std::move(grown);
    i = close + 1;
  }
  if (names.size() == 1 && names[0].empty()) return bad(begin, "an empty name");
  out->insert(out->end(), names.begin(), names.end());
  if (out->size() > 1000000) return bad(begin, "more than 1000000 hosts");
  return Status::OK();
}

}  // namespace

Result<std::vector<std::string>> ExpandHostlist(const std::string& hostlist) {
  std::vector<std::string> hosts;
  size_t begin = 0;
  int depth = 0;
  for (size_t i = 0; i <= hostlist.size(); ++i) {
    if (i < hostlist.size() && hostlist[i] == '[') depth++;
    if (i < hostlist.size() && hostlist[i] == ']') depth--;
    // A comma outside brackets ends a name.
    if (i == hostlist.size() || (hostlist[i] == ',' && depth == 0)) {
      STINT_RETURN_IF_ERROR(ExpandName(hostlist, begin, i, &hosts));
      begin = i + 1;
    }
  }
  return hosts;
}

Result<LaunchEnv> LaunchEnvFromEnvironment() {
  LaunchEnv env;
  // torchrun always exports all three, so any one of them means torchrun
  // and a partial set is a broken launch script.
  if (Get("RANK") || Get("WORLD_SIZE") || Get("LOCAL_RANK")) {
    env.launcher = "torchrun";
    STINT_ASSIGN_OR_RETURN(env.rank, Required("RANK", "torchrun"));
    STINT_ASSIGN_OR_RETURN(env.world_size, Required("WORLD_SIZE", "torchrun"));
    STINT_ASSIGN_OR_RETURN(env.local_rank, Required("LOCAL_RANK", "torchrun"));
    STINT_ASSIGN_OR_RETURN(env.node_rank, Optional("GROUP_RANK", 0));
    STINT_RETURN_IF_ERROR(Check(env, "RANK", "WORLD_SIZE", "LOCAL_RANK"));
    STINT_RETURN_IF_ERROR(MasterFromEnvironment(&env));
    return env;
  }
  // Slurm sets SLURM_PROCID in every step, the batch script included, but
  // SLURM_NTASKS only when --ntasks was given: then there is one task.
  // SLURM_NTASKS alone (an salloc shell) is not a task, so it does not count.
  if (Get("SLURM_PROCID")) {
    env.launcher = "slurm";
    STINT_ASSIGN_OR_RETURN(env.rank, ParseCount("SLURM_PROCID", Get("SLURM_PROCID")));
    STINT_ASSIGN_OR_RETURN(env.world_size, Optional("SLURM_NTASKS", 1));
    STINT_ASSIGN_OR_RETURN(env.local_rank, Optional("SLURM_LOCALID", 0));
    STINT_ASSIGN_OR_RETURN(env.node_rank, Optional("SLURM_NODEID", 0));
    STINT_ASSIGN_OR_RETURN(env.restart_count, Optional("SLURM_RESTART_COUNT", 0));
    if (const char* id = Get("SLURM_JOB_ID")) env.job_id = id;
    STINT_RETURN_IF_ERROR(Check(env, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"));
    STINT_RETURN_IF_ERROR(MasterFromEnvironment(&env));
    STINT_RETURN_IF_ERROR(SlurmMaster(&env));
    return env;
  }
  env.launcher = "none";
  return env;
}

}  // namespace stint
