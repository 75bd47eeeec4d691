#include "launched_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <exception>
#include <string>

namespace stint {

Result<std::unique_ptr<LaunchedGroup>> LaunchedGroup::FromEnvironment(
    std::chrono::milliseconds timeout) {
  STINT_ASSIGN_OR_RETURN(LaunchEnv env, LaunchEnvFromEnvironment());
  if (env.world_size == 1) return std::unique_ptr<LaunchedGroup>();
  if (env.master_addr.empty() || env.master_port == 0) {
    return Status::InvalidArgument(env.launcher + " launch of " + std::to_string(env.world_size) +
                                   " ranks without a master address and port: set MASTER_ADDR "
                                   "and MASTER_PORT");
  }
  const std::string master = env.master_addr + ":" + std::to_string(env.master_port);
  std::unique_ptr<LaunchedGroup> group(new LaunchedGroup());
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env.master_port);
    so.isServer = env.rank == 0;
    so.numWorkers = env.world_size;
    so.waitWorkers = false;
    so.timeout = timeout;
    group->store_ = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    group->backend_ = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>("stint.pg", group->store_), env.rank, env.world_size,
        opts);
  } catch (const std::exception& e) {
    return Status::Unavailable("the process group of rank " + std::to_string(env.rank) + " of " +
                               std::to_string(env.world_size) + " at " + master + " (" +
                               env.launcher + "): " + e.what());
  }
  group->commit_channel_ = std::make_unique<C10dCommitChannel>(
      c10::make_intrusive<c10d::PrefixStore>("stint.ckpt", group->store_),
      "c10d TCPStore at " + master);
  group->env_ = std::move(env);
  return group;
}

}  // namespace stint
