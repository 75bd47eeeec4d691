// Planner: one pass of the scheduling policy (MakePlan in policy.h), and
// the state its steps share. Internal to core/.
//
// Run() (planner.cc) is the pass order. Each step has its own file, so a
// reader can take one at a time:
//   planner.cc           the pass order, windows grouped by pool, teams and
//                        their quota profiles, the per-job context, stats
//   planner_segments.cc  the active segments: losses, notices, what they
//                        hold, and which of them a preemption may take
//   planner_order.cc     the order of the pending jobs (score: level, aging,
//                        guarantee, fair share, service class)
//   planner_backfill.cc  the walk over the queue: start now, reserve a
//                        later start, or ask for a shrink or a preemption
//   planner_fit.cc       where and when a job fits (single-window gangs,
//                        gangs spanning a pool's windows, non-gang jobs)
//   planner_shrink.cc    shrink before preempt: elastic segments give GPUs
//   planner_preempt.cc   priority / service-class preemption: the victims
//   planner_grow.cc      elastic segments grow into GPUs nothing is planned on
//   planner_migrate.cc   running segments move to a cheaper pool with room now
//   planner_storage.cc   the pools that reach a job's newest checkpoint, and
//                        what reading it from an object store costs there
//   planner_blocked.cc   why a job that does not start waits (BlockReason)
//   planner_prices.cc    the pools a job may use at its price rule and
//                        budget, what a pool costs per useful GPU-hour, and
//                        notices to the segments of a team out of budget
#ifndef STINT_TOOLS_STINTD_CORE_PLANNER_H_
#define STINT_TOOLS_STINTD_CORE_PLANNER_H_

#include <climits>
#include <limits>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "stintd/core/free_profile.h"
#include "stintd/core/model.h"
#include "stintd/core/policy.h"

namespace stint::stintd::internal {

// The time an active segment gives its GPUs back.
TimeMs ReleaseMs(const ClusterState& s, const Segment& seg);

// One pass of the policy. Holds the per-window free profiles while the
// queue is walked in order; everything it decides goes into plan_.
class Planner {
 public:
  Planner(const ClusterState& s, TimeMs now, const PolicyConfig& c) : s_(s), now_(now), c_(c) {}

  Plan Run();

 private:
  struct Slot {
    const Window* w;
    int group;  // index into groups_ (the window's pool)
  };
  struct TeamState {
    const Team* team = nullptr;  // null: not registered (no guarantee, no limit)
    int held_all = 0;            // active segments, for the guarantee bonus (as JobScore sees it)
    int profile = -1;            // index into Profiles::teams; -1: unlimited
    int limit = INT_MAX;         // guarantee + borrowing limit
    // What the team may still commit this pass: its budget left, less what
    // its active segments will cost at least (to their minimum segment's
    // end, or to checkpoint and stop), less the minimum segments of the
    // starts planned so far. +infinity without a budget.
    double budget_left = std::numeric_limits<double>::infinity();
  };
  // Free GPUs per window and quota room per limited team, both over time.
  // The quota is a profile too, not a count at `now`: otherwise a team's
  // small jobs could start now on the room its big job is reserved to get
  // later, and push that job back on every pass.
  struct Profiles {
    std::vector<FreeProfile> windows;  // per slot
    std::vector<FreeProfile> teams;    // per TeamState::profile
  };
  struct VictimPart {
    int slot;
    int gpus;
    TimeMs hold_end;  // when the segment would have released it
  };
  struct Victim {
    const Segment* seg;
    const Job* job;
    TimeMs deadline;  // if preempted now
    TimeMs release;   // when it would have ended
    int team;         // its TeamState::profile
    int service_class;
    double cost;  // GPU-seconds lost + spent restarting
    std::vector<VictimPart> parts;
    bool taken = false;
    bool starving;  // the starvation guard shields it from same-level preemption
    int workers;    // live workers of the segment
  };
  struct Part {
    int slot;
    int gpus;
  };
  struct Fit {
    TimeMs start = kNever;  // kNever: does not fit
    TimeMs end = kNever;
    int gpus = 0;
    std::vector<Part> parts;
  };
  struct JobCtx {
    const Job* job;
    PendingInfo* info;
    TeamState* team;
    int position;
    TimeMs len;  // what must fit: the minimum segment (or the rest of the work if shorter)
    TimeMs run;  // the whole segment it wants: restart + remaining + checkpoint + safety; kNever if
                 // unknown
    std::vector<int> groups;  // the pools it may use now, as groups_ indices
    // Set when its price rule or budget leaves it no pool with a window.
    BlockReason excluded = BlockReason::kNone;
    std::string excluded_detail;
    // Seconds its restart in a group spends reading its newest checkpoint
    // from an object store (groups absent: none).
    std::map<int, double> transfer_s;
    double TransferSeconds(int group) const {
      auto it = transfer_s.find(group);
      return it == transfer_s.end() ? 0 : it->second;
    }
  };

  // planner.cc
  void BuildWindows();
  int SlotOf(int64_t window_id) const;
  TeamState& TeamOf(const std::string& name);
  JobCtx MakeCtx(size_t index);  // of order_[index]
  // What a start of `job` is planned with: its minimum segment, whole run,
  // team and the pools it may use now.
  JobCtx ContextFor(const Job& job, PendingInfo* info, int position);
  void ComputeStats();

  // planner_segments.cc
  void ScanSegments();
  NoticeReason NoticeReasonFor(const Segment& seg, TimeMs release) const;

  // planner_order.cc
  void OrderPending();

  // planner_fit.cc
  Fit FitAt(const JobCtx& j, TimeMs t, const Profiles& profiles, int only_slot = -1) const;
  double SpanEffective(const Job& job, int gpus, size_t windows) const;
  TimeMs SpanRunMs(const JobCtx& j, size_t windows) const;
  Fit EarliestFit(const JobCtx& j, TimeMs from) const;
  void Reserve(const JobCtx& j, const Fit& fit);

  // planner_preempt.cc
  bool FitsAfterPreempting(const JobCtx& j, const std::vector<int>& chosen, int slot, Fit* fit);
  void ReleaseVictims(const std::vector<int>& chosen);
  bool MayPreempt(const Job& job, int job_class, const Victim& victim) const;
  bool VictimBefore(int a, int b) const;
  bool TryPreempt(const JobCtx& j, TimeMs unassisted, Fit* out, bool own_team = false);

  // planner_shrink.cc
  std::vector<VictimPart> Shrinkable(const Victim& v, int wanted) const;
  bool TryShrink(const JobCtx& j, TimeMs unassisted, Fit* out);

  // planner_grow.cc
  void Grow();

  // planner_migrate.cc
  void Migrate();

  // planner_storage.cc
  void FilterReachable(JobCtx* j);

  // planner_prices.cc
  void ScanBudgets();
  void FilterPools(JobCtx* j);
  double GroupCost(const JobCtx& j, int group) const;
  // GroupCost at `price` per GPU-hour instead of the pool's price now.
  double CostAt(const JobCtx& j, int group, double price) const;
  double MinSegmentCost(const JobCtx& j, int group, int gpus) const;
  // The most GPUs at `price` per GPU-hour whose minimum segment the team's
  // budget left pays (INT_MAX: unpriced, or no budget): what an elastic
  // job starts or grows with at most, or it would be told to stop for its
  // budget on the next pass, and start small and grow again.
  int BudgetGpus(const JobCtx& j, double price) const;
  void ChargeStart(const JobCtx& j, const Fit& fit);

  // planner_backfill.cc
  void Backfill();
  void PlanJob(size_t index);

  // planner_blocked.cc
  std::string StartPhrase(const Fit& fit) const;
  bool FitsNowOnBase(const JobCtx& j);
  bool FitsOnEmptyWindows(const JobCtx& j);
  void Classify(const JobCtx& j, bool preempting, const Fit& fit);

  const ClusterState& s_;
  const TimeMs now_;
  const PolicyConfig& c_;
  Plan plan_;

  std::vector<Slot> slots_;               // windows not yet closed, by id
  std::vector<std::vector<int>> groups_;  // slots by pool
  std::vector<int> all_groups_;
  std::map<std::string, int> group_by_pool_;
  std::map<int64_t, int> slot_of_;  // window id -> slot
  Profiles profiles_;               // after the active segments and the reservations so far
  Profiles base_;                   // after the active segments only
  std::map<std::pair<int, TimeMs>, int> base_group_free_;   // (group, length) -> free GPUs on base_
  std::map<std::pair<int, TimeMs>, int> empty_group_gpus_;  // (group, length) -> open window GPUs
  std::vector<int> group_capacity_;                         // GPUs of each group's windows
  std::vector<const Pool*> group_pool_;                     // null: a window of an unknown pool
  std::vector<double> group_revocations_per_hour_;          // of its spot windows so far
  int allocated_now_ = 0;

  std::map<std::string, TeamState> teams_;
  std::vector<Victim> victims_;
  std::map<int64_t, TimeMs> preempting_;  // job -> latest deadline of its victims
  bool preempted_ = false;                // one new preemption per pass
  std::vector<int64_t> migrating_;        // segments given a kMigrate notice this pass
  std::vector<const Job*> order_;         // pending jobs by position
};

}  // namespace stint::stintd::internal

#endif  // STINT_TOOLS_STINTD_CORE_PLANNER_H_
