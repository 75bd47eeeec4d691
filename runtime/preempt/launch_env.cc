// LaunchEnvFromEnvironment: rank and world size from torchrun's or Slurm's
// variables, checked, so that a misconfigured launch fails at start-up
// instead of two ranks writing the same shard.
#include <climits>
#include <cstdlib>
#include <string>

#include "stint/preemption.h"

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

}  // namespace

Result<LaunchEnv> LaunchEnvFromEnvironment() {
  LaunchEnv env;
  // torchrun always exports all three, so any one of them means torchrun
  // and a partial set is a broken launch script.
  if (Get("RANK") || Get("WORLD_SIZE") || Get("LOCAL_RANK")) {
    env.launcher = "torchrun";
    STINT_ASSIGN_OR_RETURN(env.rank, Required("RANK", "torchrun"));
    STINT_ASSIGN_OR_RETURN(env.world_size, Required("WORLD_SIZE", "torchrun"));
    STINT_ASSIGN_OR_RETURN(env.local_rank, Required("LOCAL_RANK", "torchrun"));
    STINT_RETURN_IF_ERROR(Check(env, "RANK", "WORLD_SIZE", "LOCAL_RANK"));
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
    STINT_RETURN_IF_ERROR(Check(env, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"));
    return env;
  }
  env.launcher = "none";
  return env;
}

}  // namespace stint
