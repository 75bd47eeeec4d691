// LaunchEnv: who this process is in its job, from the launcher's
// environment, torchrun's or Slurm's (srun, one task per GPU; no torchrun
// between Slurm and the ranks), checked, so that a misconfigured launch fails
// at start-up instead of two ranks writing the same shard.
//
//   stint::LaunchEnv env = stint::LaunchEnvFromEnvironment().value();
//   // env.rank, env.world_size, env.local_rank, env.node_rank,
//   // env.master_addr:env.master_port (the rendezvous of rank 0),
//   // env.job_id and env.restart_count under Slurm.
//
// Under Slurm the master is the first host of SLURM_JOB_NODELIST, expanded
// here (`scontrol` is often missing inside containers), and the port is
// derived from the job id unless MASTER_ADDR / MASTER_PORT are set. The
// Slurm job's end time and self-requeue are in stint/slurm.h.
#ifndef STINT_INCLUDE_STINT_LAUNCH_ENV_H_
#define STINT_INCLUDE_STINT_LAUNCH_ENV_H_

#include <string>
#include <vector>

#include "stint/status.h"

namespace stint {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int node_rank = 0;     // torchrun's GROUP_RANK, Slurm's SLURM_NODEID; else 0
  std::string launcher;  // "torchrun", "slurm" or "none"
  // Where rank 0 serves the rendezvous: MASTER_ADDR / MASTER_PORT where set;
  // under Slurm otherwise the first host of SLURM_JOB_NODELIST and
  // 15000 + (job id mod 10000). Empty / 0 when unknown (one process, or
  // torchrun without them).
  std::string master_addr;
  int master_port = 0;
  // Slurm: SLURM_JOB_ID (the same across requeues) and SLURM_RESTART_COUNT
  // (0 on the first run). Empty / 0 elsewhere.
  std::string job_id;
  int restart_count = 0;
};

// Rank, world size and local rank from torchrun (RANK, WORLD_SIZE,
// LOCAL_RANK) or Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID); (0, 1,
// 0) when neither is set. torchrun wins when any of its variables is set,
// and then all three must be. Slurm is recognized by SLURM_PROCID; an unset
// SLURM_NTASKS means 1 and an unset SLURM_LOCALID 0 (an sbatch script
// without --ntasks). Empty counts as unset. kInvalidArgument, naming the
// variable and its value, for a value that is not a non-negative integer,
// world size 0, a rank or local rank not below the world size, a port out
// of range, or a malformed SLURM_JOB_NODELIST.
Result<LaunchEnv> LaunchEnvFromEnvironment();

// Slurm's hostlist syntax expanded, in order: "gpu[01-03,7],login" ->
// gpu01 gpu02 gpu03 gpu7 login; several bracket groups in one name give
// every combination ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2); a range keeps
// the width of its lower bound's leading zeros. kInvalidArgument naming the
// list and the position for unbalanced brackets, an empty name, a
// descending range or more than 1,000,000 hosts.
Result<std::vector<std::string>> ExpandHostlist(const std::string& hostlist);

}  // namespace stint

#endif  // STINT_INCLUDE_STINT_LAUNCH_ENV_H_
