// Metrics over a SimResult, the FIFO-normalised table, and the
// utilisation-over-time SVG (written by hand: no plotting dependency).
// Definitions are in METHOD.md; pure functions, thread-compatible.
#ifndef STINT_TOOLS_STINT_SIM_SIM_REPORT_H_
#define STINT_TOOLS_STINT_SIM_SIM_REPORT_H_

#include <map>
#include <string>
#include <vector>

#include "sim/engine.h"

namespace stint::sim {

struct TeamMetrics {
  int jobs = 0;
  double queue_mean_s = 0;  // first start - submit, over its started jobs
  double slowdown_mean = 0;  // JCT / work over its finished jobs (what Jain is taken over)
};

struct Metrics {
  std::string policy;
  int jobs = 0;
  int finished = 0;
  double jct_mean_s = 0, jct_median_s = 0, jct_p99_s = 0;
  double queue_mean_s = 0, queue_p99_s = 0;  // first start - submit, over started jobs
  double gpu_util = 0;                       // allocated / offered GPU-s over the replay
  double window_util = 0;                    // allocated / integral of min(offered, demand)
  double fragmentation = 0;                  // GPU-s idle while a job waited / offered
  double goodput = 0;                        // useful (finished work) / allocated GPU-s
  double lost_gpu_h = 0;
  double interrupts_per_job = 0;   // segments ended without finishing
  double preemptions_per_job = 0;  // of those, for a higher-priority job
  double resizes_per_job = 0;      // shrinks and grows of running segments
  double fairness_jain = 0;        // Jain's index over per-team mean slowdown (JCT / work)
  std::map<std::string, TeamMetrics> teams;
  // Cost at the Workload's prices (0 without them): every GPU-second held x
  // its pool's price, summed over all jobs, and that over the jobs.
  double cost_total = 0;
  double cost_per_job = 0;
  std::map<std::string, PoolUse> pools;  // GPU-seconds held and cost, by pool
  // Over finished jobs with a coordinator account (Scheduler::CoordinatorCost
  // >= 0): the largest |engine cost - coordinator cost| / max(engine cost,
  // 1e-9); -1 when no job has one.
  double coordinator_cost_gap = -1;
  double makespan_s = 0;
  int64_t violations = 0;
  uint64_t log_hash = 0;
};

Metrics ComputeMetrics(const SimResult& r);

// A lower bound on any policy's mean JCT over `w` that counts capacity:
// the GPUs of every window (spot ones until their revocation) pooled into
// one server of rate C(t) GPU-seconds per second, each job a volume of
// work_s x max_gpus arriving at its submit, served shortest remaining
// first, which minimises the mean completion time on one server whatever
// its speed profile; any real schedule is such a schedule with more
// constraints. The larger of that mean and the mean work_s (no job runs
// faster than its work). Jobs the pooled capacity never finishes are left
// out.
double MeanJctLowerBoundS(const Workload& w);

// Markdown: the absolute values, then every column divided by the row of
// `baseline` (FIFO = 1.0). `header` lines are printed first (sources, labels).
std::string FormatTable(const std::vector<Metrics>& rows, const std::string& baseline,
                        const std::vector<std::string>& header);

// Markdown: per policy the cost (total, per job, and / `baseline`'s), mean
// and p99 JCT beside `baseline`'s, the GPU-hours held in each pool, the
// interruptions per job and the coordinator's own account's gap (stint).
// Pools in the price table's order.
std::string FormatCostTable(const std::vector<Metrics>& rows, const std::string& baseline,
                            const PriceTable& prices);

// Utilisation (allocated / offered, binned) over time, one line per policy.
std::string UtilisationSvg(const std::vector<SimResult>& results, const std::string& title);

}  // namespace stint::sim

#endif  // STINT_TOOLS_STINT_SIM_SIM_REPORT_H_
