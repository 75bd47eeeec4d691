// The coordinators stint-sim compares, all behind engine.h's Scheduler:
//
//   fifo            strict FIFO, no backfill, no preemption, window-oblivious
//   easy            FIFO + EASY backfill (one reservation for the head job)
//   slurm           multifactor (QOS + age + fair share with decay) + EASY
//                   backfill + QOS preemption with GraceTime, window-aware
//                   with --time-min style segment shrinking
//   stint           tools/stintd/core itself: SubmitJob, AddWindow,
//                   CloseWindow, MakePlan/ApplyPlan, RegisterWorker,
//                   Heartbeat, ReportCheckpoint, ReportProgress, AckSegment,
//                   FinishJob, AccountTime: no re-implementation
//   stint-no-X      stint with one feature off (see ParsePolicy)
//   stint-first-fit, stint-cheapest-only
//                   stint with another routing between pools (below)
//
// Schedulers are single-threaded objects confined to the engine's thread.
#ifndef STINT_TOOLS_STINT_SIM_SIM_SCHEDULERS_H_
#define STINT_TOOLS_STINT_SIM_SIM_SCHEDULERS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "stintd/core/policy.h"
#include "sim/engine.h"

namespace stint::sim {

enum class PolicyKind { kFifo, kEasy, kSlurm, kStint };

// How the stint scheduler chooses among the pools (everything else the
// same). kPrice: stintd's planner with the replay's prices (among fits at
// the soonest start, the cheapest per useful GPU-hour). kFirstFit: the
// first pool, in the price table's order (else by name), among those where
// the job fits soonest: the planner gets prices that rank the pools in that
// order, 100^rank, so far apart that its spot correction (at most x20)
// cannot reorder them. kCheapestOnly: each job may use only the pool with
// the lowest listed price that can ever hold it (ties: table order) and
// waits for it.
enum class Routing { kPrice, kFirstFit, kCheapestOnly };

struct PolicySpec {
  std::string name;
  PolicyKind kind = PolicyKind::kFifo;
  stintd::PolicyConfig stint;           // kStint: the config MakePlan gets
  bool runtime_estimates = true;        // kStint: submit remaining_seconds (false: unknown)
  bool workers_ignore_notices = false;  // an engine-side ablation
  bool team_limits = false;             // kSlurm: team_borrow_limits as GrpTRES caps (slurm-limits)
  Routing routing = Routing::kPrice;    // kStint: how it chooses among pools
};

// stintd's policy defaults, except where the sim's workers differ: they
// can always re-form larger (grow_elastic), and one sim worker stands for
// every rank of a gang (shrink_min_workers 1). Price migration is on (off
// in stintd unless --price-migration; METHOD.md, "Prices").
inline stintd::PolicyConfig SimPolicyConfig() {
  stintd::PolicyConfig c;
  c.grow_elastic = true;
  c.shrink_min_workers = 1;
  c.price_migration = true;
  return c;
}

struct SchedulerOptions {
  double estimate_factor = 1.0;          // runtime estimates (time limits) = true remaining x this
  stintd::PolicyConfig stint = SimPolicyConfig();  // the base config for stint and its ablations
  double slurm_age_max_s = 7 * 86400.0;  // PriorityMaxAge
  int team_guarantee_gpus = 0;           // stint: every team's guarantee (0: none) ...
  std::map<std::string, int> team_guarantees;  // ... unless the team is named here
  // stint: per-team borrowing limits (GPUs above the guarantee); a team not
  // named here borrows without limit (see TeamBorrowLimits).
  std::map<std::string, int> team_borrow_limits;
};

// The guarantee a team gets under `o` (stint's; the baselines have none).
int TeamGuarantee(const SchedulerOptions& o, const std::string& team);

// Borrowing limits for --team-borrow-factor F: each team of `jobs` may
// borrow max(ceil(F x its guarantee), its largest job's min_gpus - its
// guarantee) GPUs, so that every job can still start.
std::map<std::string, int> TeamBorrowLimits(const SchedulerOptions& o,
                                            const std::vector<SimJob>& jobs, double factor);

// Names: fifo, easy, slurm, slurm-limits (Slurm-like with team_borrow_limits
// as GrpTRES caps), stint, stint-no-backfill (plan_depth = 1),
// stint-no-aging (aging_points_per_hour = 0), stint-no-fairshare
// (fair_share_points = 0, guarantee_bonus_points = 0), stint-no-preemption
// (min_run_seconds = 1e12), stint-no-service (service_class_points = 0,
// service_preempt_classes = 0), stint-no-service-preemption
// (service_preempt_classes = 0), stint-no-shrink (shrink_before_preempt =
// false, grow_elastic = false), stint-no-starvation-guard (service_starvation_guard = false),
// stint-las (service_class_by_remaining = false: classes by attained service only),
// stint-no-notices (workers ignore notices),
// stint-no-estimates (remaining_seconds = 0: no runtime knowledge),
// stint-no-migration (price_migration = false),
// stint-first-fit (Routing::kFirstFit), stint-cheapest-only
// (Routing::kCheapestOnly); both without price migration.
Result<PolicySpec> ParsePolicy(const std::string& name, const SchedulerOptions& options);
std::vector<std::string> AllPolicyNames();

std::unique_ptr<Scheduler> MakeScheduler(const PolicySpec& spec, const SchedulerOptions& options);

}  // namespace stint::sim

#endif  // STINT_TOOLS_STINT_SIM_SIM_SCHEDULERS_H_
