// Evaluation tasks (EvalTask in model.h): queued from a job's durable
// checkpoints, placed on stint-agent nodes' leftover capacity (a CPU slot,
// or a GPU no segment holds), and their results. Pure, like transitions.h.
#ifndef STINT_TOOLS_STINTD_CORE_EVALS_H_
#define STINT_TOOLS_STINTD_CORE_EVALS_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "stintd/core/model.h"
#include "stintd/core/transitions.h"

namespace stint::stintd {

// How many of a job's evaluations that ended without a result (superseded,
// failed) are kept; older ones are deleted. Results are all kept.
constexpr size_t kKeptWithoutResult = 16;

// A durable checkpoint of `step` was reported for `job`: counted, and every
// job.eval_every-th queued for evaluation (superseding the job's evaluation
// still waiting, so the backlog never grows; beyond kKeptWithoutResult, the
// oldest that ended without a result are deleted). Nothing for a job without
// an evaluation.
void QueueEvaluation(ClusterState& s, Job& job, int64_t step, TimeMs now, Changes* changes);

// What node window `window` runs now, at most `slots` evaluations at once
// and never more than the GPUs it lends: its evaluations still running,
// less those on a GPU a segment is now placed on (stopped: pending again,
// so training never waits for one), then pending ones of jobs that may run
// in the window's pool, oldest first: CPU ones, and GPU ones on a GPU of
// the window that no segment and no other evaluation holds. Evaluations left
// running on a node without an open window wait again. The ids to run.
std::vector<int64_t> PlaceEvaluations(ClusterState& s, const Window& window, int slots, TimeMs now,
                                      Changes* changes);

// Node `node` reports evaluation `eval_id` ended: exit 0 with `result`
// (the JSON object it printed last; the caller checks it is one) makes it
// done, anything else failed with `message`. Ignored (OK) when the task is
// not running on that node (stopped meanwhile, or a repeated report).
Status ReportEvaluation(ClusterState& s, const std::string& node, int64_t eval_id, int exit_code,
                        const std::string& result, const std::string& message, TimeMs now,
                        Changes* changes);

// The steps of job `job_id` that an evaluation is queued (pending) or
// running on: retention of the job's checkpoints keeps them until it ends.
std::set<int64_t> PinnedSteps(const ClusterState& s, int64_t job_id);

// The GPU indices of `window` an active segment is placed on; `among`: the
// ids of the segments placed there when the caller knows them (stintd's
// placement index), else every segment is looked at.
std::vector<int> HeldGpus(const ClusterState& s, const Window& window,
                          const std::set<int64_t>* among = nullptr);

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_CORE_EVALS_H_
