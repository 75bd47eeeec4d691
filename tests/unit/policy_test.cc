// MakePlan (tools/stintd/core/policy.h): ordering, quotas, gangs, segment
// fitting, conservative backfill, notices, priority preemption and losses.
// Every scenario is a ClusterState built by hand (Cluster below) and one or
// more plans at fixed instants; the multi-tick scenarios advance the state
// through ApplyPlan and the worker transitions, as stintd does.
#include "stintd/core/policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "stintd/core/model.h"
#include "stintd/core/transitions.h"
#include "util/policy_cluster.h"
#include "util/status_matchers.h"

namespace stint::stintd {
namespace {

std::vector<int64_t> Order(const Plan& plan) {
  std::vector<int64_t> ids;
  for (const PendingInfo& p : plan.pending) ids.push_back(p.job_id);
  return ids;
}

// Everything in a plan, as text: two plans are equal iff their texts are.
std::string Dump(const Plan& plan) {
  std::ostringstream o;
  for (const StartDecision& d : plan.starts) {
    o << "start " << d.job_id << " end " << d.planned_end_ms;
    for (const Allocation& a : d.allocs) o << " " << a.window_id << ":" << a.gpus;
    o << "\n";
  }
  for (const NoticeDecision& d : plan.notices) {
    o << "notice " << d.segment_id << " " << d.deadline_ms << " " << NoticeReasonName(d.reason)
      << " " << d.for_job_id << "\n";
  }
  for (const LostDecision& d : plan.lost) o << "lost " << d.segment_id << " " << d.reason << "\n";
  for (const PendingInfo& p : plan.pending) {
    o << "pending " << p.position << " " << p.job_id << " " << p.score << " "
      << BlockReasonName(p.reason) << " " << p.planned_start_ms << " " << p.planned_gpus << " "
      << p.detail << "\n";
  }
  const PlanStats& st = plan.stats;
  o << "stats " << st.open_window_gpus << " " << st.allocated_gpus << " " << st.free_gpus << " "
    << st.fragmented_gpus << " " << st.pending_jobs << " " << st.running_jobs << "\n";
  return o.str();
}

// ---------------------------------------------------------------- basics

TEST(Policy, MinimumSegmentIsRestartIntervalCheckpointAndSafety) {
  Job j;
  j.restart_seconds = 60;
  j.checkpoint_interval_seconds = 600;
  j.checkpoint_seconds = 30;
  PolicyConfig c;
  c.safety_seconds = 10;
  EXPECT_EQ(MinSegmentMs(j, c), Sec(700));
}

TEST(Policy, BlockReasonNames) {
  EXPECT_STREQ(BlockReasonName(BlockReason::kNone), "none");
  EXPECT_STREQ(BlockReasonName(BlockReason::kQuota), "quota");
  EXPECT_STREQ(BlockReasonName(BlockReason::kWindow), "window");
  EXPECT_STREQ(BlockReasonName(BlockReason::kGang), "gang");
  EXPECT_STREQ(BlockReasonName(BlockReason::kPriority), "priority");
  EXPECT_STREQ(BlockReasonName(BlockReason::kPreempting), "preempting");
  EXPECT_STREQ(BlockReasonName(BlockReason::kDepth), "depth");
}

TEST(Policy, EmptyStateGivesAnEmptyPlan) {
  const Plan plan = MakePlan(ClusterState(), kNow, PolicyConfig());
  EXPECT_TRUE(plan.starts.empty() && plan.notices.empty() && plan.lost.empty() &&
              plan.pending.empty());
  EXPECT_EQ(plan.stats.fragmented_gpus, 0);
}

TEST(Policy, StartsAJobThatFits) {
  Cluster c;
  const int64_t w = c.Window(8, kNow + Hours(2));
  const int64_t j = c.Pending(4).id;
  const Plan plan = PlanAt(c.s);
  const StartDecision* d = StartOf(plan, j);
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(d->allocs.size(), 1u);
  EXPECT_EQ(d->allocs[0].window_id, w);
  EXPECT_EQ(d->allocs[0].gpus, 4);
  EXPECT_EQ(d->planned_end_ms, kNow + Hours(2));  // unknown remaining work: until the window closes
  EXPECT_EQ(Info(plan, j).reason, BlockReason::kNone);
  EXPECT_EQ(Info(plan, j).planned_start_ms, kNow);
  EXPECT_EQ(Info(plan, j).planned_gpus, 4);
}

TEST(Policy, ElasticJobGetsWhatIsFreeUpToItsMaximum) {
  Cluster c;
  const int64_t w = c.Window(8);
  c.Running({{w, 2}});
  Job& j = c.Pending(2);
  j.max_gpus = 16;
  const Plan plan = PlanAt(c.s);
  const StartDecision* d = StartOf(plan, j.id);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->allocs[0].gpus, 6);
}

TEST(Policy, RemainingWorkBoundsThePlannedEnd) {
  Cluster c;
  c.Window(8);
  Job& j = c.Pending(1);
  j.remaining_seconds = 1000;
  const Plan plan = PlanAt(c.s);
  const StartDecision* d = StartOf(plan, j.id);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->planned_end_ms,
            kNow + Sec(60 + 1000 + 30 + 10));  // restart + work + checkpoint + safety
}

TEST(Policy, JobsUseOnlyTheirPool) {
  Cluster c;
  c.Window("a", 8, kNow - Hours(1), kNow + Hours(10));
  const int64_t b = c.Window("b", 8, kNow - Hours(1), kNow + Hours(10));
  Job& j = c.Pending(8);
  j.pools = {"b"};
  c.Running({{b, 8}}, Priority::kHigh);
  const Plan plan = PlanAt(c.s);
  EXPECT_EQ(StartOf(plan, j.id), nullptr);  // pool a is free, but not its pool
  EXPECT_EQ(Info(plan, j.id).reason, BlockReason::kPriority);
}

TEST(Policy, ClosedWindowHasNoCapacity) {
  Cluster c;
  c.Window("p", 8, kNow - Hours(2), kNow);  // closed exactly now
  const int64_t j = c.Pending(1).id;
  const Plan plan = PlanAt(c.s);
  EXPECT_EQ(StartOf(plan, j), nullptr);
  EXPECT_EQ(Info(plan, j).reason, BlockReason::kWindow);
  EXPECT_EQ(plan.stats.open_window_gpus, 0);
}

TEST(Policy, FutureWindowGivesPlannedStartAtItsOpening) {
  Cluster c;
  c.Window("p", 8, kNow + Hours(1), kNow + Hours(5));
  const int64_t j = c.Pending(8).id;
  const Plan plan = PlanAt(c.s);
  EXPECT_EQ(StartOf(plan, j), nullptr);
  EXPECT_EQ(Info(plan, j).reason, BlockReason::kWindow);
  EXPECT_EQ(Info(plan, j).planned_start_ms, kNow + Hours(1));
  EXPECT_NE(Info(plan, j).detail.find("opens in 3600 s"), std::string::npos)
      << Info(plan, j).detail;
}

// ---------------------------------------------------------------- ordering

TEST(PolicyOrder, ByLevel) {
  Cluster c;
  const int64_t low = c.Pending(1, Priority::kLow).id;
  const int64_t critical = c.Pending(1, Priority::kCritical).id;
  const int64_t medium = c.Pending(1, Priority::kMedium).id;
  const int64_t high = c.Pending(1, Priority::kHigh).id;
  const Plan plan = PlanAt(c.s);
  EXPECT_EQ(Order(plan), (std::vector<int64_t>{critical, high, medium, low}));
  EXPECT_EQ(Info(plan, high).position, 2);
  EXPECT_DOUBLE_EQ(Info(plan, high).score_level, 2000);
}

TEST(PolicyOrder, EqualScoresBySubmitTimeThenId) {
  Cluster c;
  Job& late = c.Pending(1);
  late.submit_ms = kNow - Sec(10);
  Job& early = c.Pending(1);
  early.submit_ms = kNow - Sec(20);
  Job& early_too = c.Pending(1);
  early_too.submit_ms = kNow - Sec(20);
  EXPECT_EQ(Order(PlanAt(c.s)), (std::vector<int64_t>{early.id, early_too.id, late.id}));
}

TEST(PolicyOrder, AgingLetsALongWaitingLowJobOvertakeFreshMediumOnes) {
  Cluster c;
  const int64_t fresh_medium = c.Pending(1, Priority::kMedium).id;
  const int64_t old_low = c.Pending(1, Priority::kLow, Hours(11)).id;   // 1100 points > 1000
  const int64_t young_low = c.Pending(1, Priority::kLow, Hours(9)).id;  // 900 points < 1000
  const Plan plan = PlanAt(c.s);
  EXPECT_EQ(Order(plan), (std::vector<int64_t>{old_low, fresh_medium, young_low}));
  EXPECT_NEAR(Info(plan, old_low).score_aging, 1100, 1e-6);
}

TEST(PolicyOrder, AgingCountsFromEligibleNotSubmit) {
  Cluster c;
  Job& requeued = c.Pending(1, Priority::kLow, Hours(100));
  requeued.eligible_ms = kNow - Hours(1);  // pending again an hour ago (after a segment)
  const Plan plan = PlanAt(c.s);
  EXPECT_NEAR(Info(plan, requeued.id).score_aging, 100, 1e-6);
}

TEST(PolicyOrder, AgingIsCappedBelowTheNextLevelsButOne) {
  Cluster c;
  const int64_t ancient_low = c.Pending(1, Priority::kLow, Hours(1000)).id;        // 0 + 1500
  const int64_t fresh_high = c.Pending(1, Priority::kHigh).id;                     // 2000
  const int64_t ancient_medium = c.Pending(1, Priority::kMedium, Hours(1000)).id;  // 1000 + 1500
  const int64_t fresh_critical = c.Pending(1, Priority::kCritical).id;             // 3000
  const Plan plan = PlanAt(c.s);
  EXPECT_DOUBLE_EQ(Info(plan, ancient_low).score_aging, 1500);
  EXPECT_EQ(Order(plan),
            (std::vector<int64_t>{fresh_critical, ancient_medium, fresh_high, ancient_low}));
}

TEST(PolicyOrder, TeamBelowItsGuaranteeGoesFirstAndGetsItsGpus) {
  Cluster c;
  c.Window(8);
  c.Team("a", 8);
  c.Team("b", 0);
  Job& b_job = c.Pending(8, Priority::kMedium, Hours(1));  // submitted earlier, same level
  b_job.team = "b";
  Job& a_job = c.Pending(8);
  a_job.team = "a";
  const Plan plan = PlanAt(c.s);
  EXPECT_EQ(Order(plan), (std::vector<int64_t>{a_job.id, b_job.id}));
  EXPECT_DOUBLE_EQ(Info(plan, a_job.id).score_guarantee, 500);
  EXPECT_NE(StartOf(plan, a_job.id), nullptr);
  EXPECT_EQ(StartOf(plan, b_job.id), nullptr);
  EXPECT_EQ(Info(plan, b_job.id).reason, BlockReason::kPriority);
}

TEST(PolicyOrder, TeamAtItsGuaranteeGetsNoBonus) {
  Cluster c;
  const int64_t w = c.Window(16);
  c.Team("a", 8);
  c.Team("b", 0);
  c.JobOf(c.Running({{w, 8}})).team = "a";  // a holds its guarantee already
  Job& b_job = c.Pending(8, Priority::kMedium, Hours(1));
  b_job.team = "b";
  Job& a_job = c.Pending(8);
  a_job.team = "a";
  const Plan plan = PlanAt(c.s);
  EXPECT_EQ(Order(plan), (std::vector<int64_t>{b_job.id, a_job.id}));
  EXPECT_DOUBLE_EQ(Info(plan, a_job.id).score_guarantee, 0);
}

TEST(PolicyOrder, FairShareOrdersTheLighterTeamFirst) {
  Cluster c;
  c.Team("heavy", 0, -1, 3000);
  c.Team("light", 0, -1, 1000);
  Job& heavy = c.Pending(1, Priority::kMedium, Sec(60));  // submitted first
  heavy.team = "heavy";
  Job& light = c.Pending(1);
  light.team = "light";
  const Plan plan = PlanAt(c.s);
  EXPECT_EQ(Order(plan), (std::vector<int64_t>{light.id, heavy.id}));
  EXPECT_NEAR(Info(plan, heavy.id).score_fair_share, -150, 1e-9);  // 200 x 3/4
  EXPECT_NEAR(Info(plan, light.id).score_fair_share, -50, 1e-9);
}

TEST(PolicyOrder, JobScoreMatchesThePlan) {
  Cluster c;
  c.Team("a", 4, -1, 10);
  c.Team("b", 0, -1, 30);
  Job& j = c.Pending(2, Priority::kHigh, Hours(3));
  j.team = "a";
  c.Pending(1).team = "b";
  PendingInfo info;
  const double score = JobScore(c.s, j, kNow, PolicyConfig(), &info);
  const Plan plan = PlanAt(c.s);
  const PendingInfo& planned = Info(plan, j.id);
  EXPECT_DOUBLE_EQ(score, planned.score);
  EXPECT_DOUBLE_EQ(score, 2000 + 300 + 500 - 50);
  EXPECT_DOUBLE_EQ(info.score_level, planned.score_level);
  EXPECT_DOUBLE_EQ(info.score_aging, planned.score_aging);
  EXPECT_DOUBLE_EQ(info.score_guarantee, planned.score_guarantee);
  EXPECT_DOUBLE_EQ(info.score_fair_share, planned.score_fair_share);
}

// ---------------------------------------------------------------- quota

TEST(PolicyQuota, BorrowingLimitBlocksWithReasonQuota) {
  Cluster c;
  const int64_t w = c.Window(16);
  c.Team("q", 4, 2);  // at most 6 GPUs
  c.JobOf(c.Running({{w, 4}}, Priority::kHigh)).team = "q";
  Job& big = c.Pending(4, Priority::kMedium, Hours(1));
  big.team = "q";
  Job& elastic = c.Pending(2);
  elastic.team = "q";
  elastic.max_gpus = 8;
  const Plan plan = PlanAt(c.s);
  EXPECT_EQ(StartOf(plan, big.id), nullptr);
  EXPECT_EQ(Info(plan, big.id).reason, BlockReason::kQuota);
  EXPECT_EQ(Info(plan, big.id).planned_start_ms, kNever);
  EXPECT_NE(Info(plan, big.id).detail.find("team q is at 4 of its 6 GPUs"), std::string::npos)
      << Info(plan, big.id).detail;
  // The quota-blocked job reserves nothing, and the room left caps the next one.
  const StartDecision* d = StartOf(plan, elastic.id);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->allocs[0].gpus, 2);
}

TEST(PolicyQuota, StartsOfThisPassCount) {
  Cluster c;
  c.Window(16);
  c.Team("q", 2, 0);
  Job& first = c.Pending(2, Priority::kMedium, Hours(1));
  first.team = "q";
  Job& second = c.Pending(2);
  second.team = "q";
  const Plan plan = PlanAt(c.s);
  EXPECT_NE(StartOf(plan, first.id), nullptr);
  EXPECT_EQ(Info(plan, second.id).reason, BlockReason::kQuota);
}

TEST(PolicyQuota, QuotaBlockedJobIsPlannedForWhenItsTeamHasRoom) {
  Cluster c;
  const int64_t w = c.Window(16);
  c.Team("q", 4, 0);
  c.JobOf(c.Running({{w, 4}}, Priority::kHigh, Hours(1), kNow + Hours(1))).team = "q";
  Job& big = c.Pending(4, Priority::kMedium, Hours(1));
  big.team = "q";
  // The team's own smaller job behind may not take the room the big one
  // is planned to get: it has none now either.
  Job& small = c.Pending(2);
  small.team = "q";
  const Plan plan = PlanAt(c.s);
  EXPECT_EQ(Info(plan, big.id).reason, BlockReason::kQuota);
  EXPECT_EQ(Info(plan, big.id).planned_start_ms, kNow + Hours(1));
  EXPECT_TRUE(plan.notices.empty());  // quota-blocked: never a preemption
  EXPECT_EQ(Info(plan, small.id).reason, BlockReason::kQuota);
  EXPECT_GE(Info(plan, small.id).planned_start_ms, kNow + Hours(1));
}

TEST(PolicyQuota, RoomIsPlannedOverTime) {
  Cluster c;
  c.Window(16);
  c.Team("q", 4, 0);
  Job& first = c.Pending(4, Priority::kMedium, Hours(4));  // aging 400 > its class 1 (3.3 GPU-h left)
  first.team = "q";
  first.remaining_seconds = 3000;  // starts now, ends at +3100 s
  Job& behind = c.Pending(2);
  behind.team = "q";
  Job& loose = c.Pending(2);  // a non-gang job is planned through another path
  loose.team = "q";
  loose.gang = false;
  const Plan plan = PlanAt(c.s);
  ASSERT_NE(StartOf(plan, first.id), nullptr);
  EXPECT_EQ(Info(plan, behind.id).reason, BlockReason::kQuota);
  EXPECT_EQ(Info(plan, behind.id).planned_start_ms, kNow + Sec(3100));
  EXPECT_EQ(Info(plan, loose.id).reason, BlockReason::kQuota);
  EXPECT_EQ(Info(plan, loose.id).planned_start_ms, kNow + Sec(3100));
}

TEST(PolicyQuota, UnlimitedBorrowing) {
  Cluster c;
  c.Window(64);
  c.Team("q", 0, -1);
  Job& j = c.Pending(64);
  j.team = "q";
  EXPECT_NE(StartOf(PlanAt(c.s), j.id), nullptr);
}

TEST(PolicyQuota, AnElasticSegmentGrowsOnlyUpToItsTeamsLimit) {
  Cluster c;
  const int64_t w = c.Window(8);
  c.Team("q", 4, 2);  // at most 6 GPUs
  Segment& elastic = c.Running({{w, 4}}, Priority::kLow, Hours(1));
  Job& job = c.JobOf(elastic);
  job.team = "q";
  job.min_gpus = 4;
  job.max_gpus = 8;
  job.remaining_seconds = 3 * 3600;
  PolicyConfig grow;
  grow.grow_elastic = true;
  const Plan plan = PlanAt(c.s, kNow, grow);
  ASSERT_EQ(plan.grows.size(), 1u) << Dump(plan);
  ASSERT_EQ(plan.grows[0].add.size(), 1u);
  EXPECT_EQ(plan.grows[0].add[0].gpus, 2) << "4 of 8 free GPUs would put q at 8 of its 6";
  c.Team("q", 4, 0);
  EXPECT_TRUE(PlanAt(c.s, kNow, grow).grows.empty());
}

// Random clusters (teams with limits, running and pending jobs of every
// shape, elastic ones, several windows): what a team holds after the plan
// (its active segments, less what shrinks give up, plus starts and grows)
// is never above its guarantee + borrowing limit.
TEST(PolicyQuota, NoTeamEverHoldsAboveItsGuaranteePlusBorrowingLimit) {
  std::mt19937_64 rng(21);
  auto pick = [&rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  PolicyConfig config;
  config.grow_elastic = true;
  config.shrink_min_workers = 1;
  const std::vector<std::string> teams = {"a", "b", "c"};
  int checked = 0;
  for (int round = 0; round < 300; round++) {
    Cluster c;
    std::vector<int64_t> windows;
    for (int i = pick(1, 3); i > 0; i--) windows.push_back(c.Window(pick(4, 16)));
    std::map<std::string, int> limit, held;
    for (const std::string& t : teams) {
      const int guarantee = pick(0, 6), borrow = pick(0, 6);
      c.Team(t, guarantee, borrow);
      limit[t] = guarantee + borrow;
    }
    // Running segments within their team's limit.
    for (int64_t w : windows) {
      int free = c.s.windows.at(w).gpus;
      for (int i = pick(0, 3); i > 0 && free > 0; i--) {
        const std::string& t = teams[pick(0, 2)];
        const int gpus = std::min({free, pick(1, 4), limit[t] - held[t]});
        if (gpus <= 0) continue;
        Segment& seg = c.Running({{w, gpus}}, pick(0, 1) ? Priority::kLow : Priority::kMedium,
                                 Hours(pick(1, 5)));
        Job& job = c.JobOf(seg);
        job.team = t;
        job.min_gpus = pick(1, gpus);
        job.max_gpus = gpus + pick(0, 4);
        job.remaining_seconds = pick(1, 20) * 1800;
        job.service_gpu_seconds = pick(0, 200) * 3600.0;  // 0 .. 200 GPU-h
        c.Workers(seg, gpus);
        held[t] += gpus;
        free -= gpus;
      }
    }
    for (int i = pick(1, 8); i > 0; i--) {
      Job& job = c.Pending(pick(1, 8), pick(0, 1) ? Priority::kHigh : Priority::kMedium,
                           Hours(pick(0, 3)));
      job.team = teams[pick(0, 2)];
      job.max_gpus = job.min_gpus + pick(0, 4);
      job.remaining_seconds = pick(1, 20) * 1800;
    }
    const Plan plan = PlanAt(c.s, kNow, config);
    std::map<std::string, int> after = held;
    auto team_of_segment = [&c](int64_t seg) { return c.s.jobs.at(c.s.segments.at(seg).job_id).team; };
    for (const ShrinkDecision& d : plan.shrinks)
      for (const Allocation& a : d.release) after[team_of_segment(d.segment_id)] -= a.gpus;
    for (const GrowDecision& d : plan.grows)
      for (const Allocation& a : d.add) after[team_of_segment(d.segment_id)] += a.gpus;
    for (const StartDecision& d : plan.starts)
      for (const Allocation& a : d.allocs) after[c.s.jobs.at(d.job_id).team] += a.gpus;
    for (const std::string& t : teams) {
      EXPECT_LE(after[t], limit[t]) << "round " << round << " team " << t << "\n" << Dump(plan);
      checked += after[t] > held[t];
    }
  }
  EXPECT_GT(checked, 50) << "too few rounds where a team took more GPUs to mean anything";
}

// ---------------------------------------------------------------- gangs

TEST(PolicyGang, SpansTheWindowsOfAPoolWhole) {
  Cluster c;
  const int64_t w1 = c.Window(4);
  const int64_t w2 = c.Window(4);
  const int64_t gang = c.Pending(8, Priority::kHigh).id;
  const Plan plan = PlanAt(c.s);
  const StartDecision* d = StartOf(plan, gang);
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(d->allocs.size(), 2u);
  EXPECT_EQ(d->allocs[0].window_id, w1);
  EXPECT_EQ(d->allocs[1].window_id, w2);
  EXPECT_EQ(d->allocs[0].gpus + d->allocs[1].gpus, 8);
}

TEST(PolicyGang, NeverPartialAcrossWindows) {
  Cluster c;
  const int64_t w1 = c.Window(4);
  c.Window(4);
  c.Running({{w1, 2}}, Priority::kCritical, Hours(1), kNow + Hours(3));  // 6 GPUs free for 3 h
  const int64_t gang = c.Pending(8, Priority::kHigh).id;
  const Plan plan = PlanAt(c.s);
  EXPECT_EQ(StartOf(plan, gang), nullptr);
  EXPECT_EQ(Info(plan, gang).planned_start_ms, kNow + Hours(3));
  EXPECT_EQ(Info(plan, gang).planned_gpus, 8);
}

TEST(PolicyGang, OneWindowBeatsSeveralWithAsManyGpus) {
  Cluster c;
  c.Window(4);
  c.Window(4);
  const int64_t big = c.Window(8);
  const int64_t gang = c.Pending(8).id;
  const Plan plan = PlanAt(c.s);
  const StartDecision* d = StartOf(plan, gang);
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(d->allocs.size(), 1u);
  EXPECT_EQ(d->allocs[0].window_id, big);
}

TEST(PolicyGang, SpanningSegmentIsSizedWithTheSlowdown) {
  Cluster c;
  c.Window(4);
  c.Window(4);
  Job& gang = c.Pending(8);
  gang.remaining_seconds = 10000;
  PolicyConfig config;
  config.gang_span_slowdown = 0.5;  // two windows: 1.5x the run time
  const Plan plan = PlanAt(c.s, kNow, config);
  const StartDecision* d = StartOf(plan, gang.id);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->planned_end_ms, kNow + Sec(60 + 15000 + 30 + 10));  // R + 1.5 W + C + safety
}

TEST(PolicyGang, NeverAcrossPools) {
  Cluster c;
  c.Window("a", 4, kNow - Hours(1), kNow + Hours(100));
  c.Window("b", 4, kNow - Hours(1), kNow + Hours(100));
  const int64_t gang = c.Pending(8, Priority::kCritical).id;
  const int64_t small = c.Pending(4, Priority::kLow).id;
  const Plan plan = PlanAt(c.s);
  EXPECT_EQ(StartOf(plan, gang), nullptr);
  EXPECT_EQ(Info(plan, gang).reason, BlockReason::kGang);
  EXPECT_EQ(Info(plan, gang).planned_start_ms, kNever);
  const StartDecision* d = StartOf(plan, small);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->planned_end_ms, kNow + Hours(100));  // not cut: nothing is reserved after it
}

TEST(PolicyGang, NonGangSegmentEndsWithItsShortestPart) {
  Cluster c;
  c.Window(4, kNow + Hours(2));
  c.Window(4, kNow + Hours(5));
  Job& loose = c.Pending(8);
  loose.gang = false;
  const Plan plan = PlanAt(c.s);
  const StartDecision* d = StartOf(plan, loose.id);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->planned_end_ms, kNow + Hours(2));
}

TEST(PolicyGang, NonGangNeverMixesPools) {
  Cluster c;
  c.Window("a", 4, kNow - Hours(1), kNow + Hours(10));
  c.Window("b", 4, kNow - Hours(1), kNow + Hours(10));
  Job& loose = c.Pending(8);
  loose.gang = false;
  const Plan plan = PlanAt(c.s);
  EXPECT_EQ(StartOf(plan, loose.id), nullptr);
  EXPECT_EQ(Info(plan, loose.id).reason, BlockReason::kWindow);
}

// ---------------------------------------------------------------- segment fitting and backfill

TEST(PolicyBackfill, BackfilledSegmentEndsBeforeTheReservation) {
  Cluster c;
  const int64_t w = c.Window(8);
  c.Running({{w, 4}}, Priority::kHigh, Hours(1), kNow + Hours(2));  // 4 GPUs back in 2 h
  const int64_t gang = c.Pending(8, Priority::kHigh).id;
  const int64_t small = c.Pending(4, Priority::kLow).id;
  Job& long_min = c.Pending(4, Priority::kLow);
  long_min.checkpoint_interval_seconds = 3 * 3600;  // its minimum segment needs > 2 h
  const Plan plan = PlanAt(c.s);
  EXPECT_EQ(Info(plan, gang).reason, BlockReason::kPriority);
  EXPECT_EQ(Info(plan, gang).planned_start_ms, kNow + Hours(2));
  const StartDecision* d = StartOf(plan, small);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->planned_end_ms, kNow + Hours(2));  // cut to end where the gang's reservation begins
  EXPECT_EQ(StartOf(plan, long_min.id), nullptr);
  EXPECT_EQ(Info(plan, long_min.id).reason, BlockReason::kPriority);
  EXPECT_EQ(Info(plan, long_min.id).planned_start_ms,
            kNever);  // the gang holds the window to its end
}

TEST(PolicyBackfill, MinimumSegmentMustFitBeforeTheWindowCloses) {
  Cluster c;
  const int64_t w = c.Window(8, kNow + Sec(500));
  const int64_t j = c.Pending(1).id;  // needs 700 s
  Job& short_min = c.Pending(1, Priority::kLow);
  short_min.checkpoint_interval_seconds = 300;  // needs 400 s
  const Plan plan = PlanAt(c.s);
  EXPECT_EQ(StartOf(plan, j), nullptr);
  EXPECT_EQ(Info(plan, j).reason, BlockReason::kWindow);
  EXPECT_EQ(Info(plan, j).detail, "window " + std::to_string(w) + " closes in 500 s; needs 700 s");
  const StartDecision* d = StartOf(plan, short_min.id);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->planned_end_ms, kNow + Sec(500));
}

TEST(PolicyBackfill, SmallRemainderNeedsOnlyItsOwnLength) {
  Cluster c;
  c.Window(8, kNow + Sec(500));
  Job& j = c.Pending(1);
  j.remaining_seconds = 200;  // 60 + 200 + 30 + 10 = 300 s < 700 s minimum segment
  const Plan plan = PlanAt(c.s);
  const StartDecision* d = StartOf(plan, j.id);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->planned_end_ms, kNow + Sec(300));
}

TEST(PolicyBackfill, PlanDepthBoundsThePlannedJobs) {
  Cluster c;
  c.Window(8);
  std::vector<int64_t> ids;
  for (int i = 0; i < 4; i++) ids.push_back(c.Pending(1, Priority::kMedium, Sec(10 - i)).id);
  PolicyConfig config;
  config.plan_depth = 2;
  const Plan plan = PlanAt(c.s, kNow, config);
  EXPECT_EQ(plan.starts.size(), 2u);
  EXPECT_EQ(Info(plan, ids[2]).reason, BlockReason::kDepth);
  EXPECT_EQ(Info(plan, ids[3]).reason, BlockReason::kDepth);
  EXPECT_EQ(Info(plan, ids[3]).planned_start_ms, kNever);
  EXPECT_EQ(Info(plan, ids[3]).position, 4);
}

// A random small cluster: a few windows (some future, some closing), a few
// running segments, a few pending jobs of every kind.
// `plain`: no preemptible segments and no guarantees, so applying a plan's
// starts cannot reorder the queue (a team reaching its guarantee loses its
// bonus; a preempting job is planned first).
ClusterState RandomCluster(uint32_t seed, bool plain = false) {
  std::mt19937 rng(seed);
  auto pick = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Cluster c;
  std::vector<int64_t> windows;
  const int n_windows = pick(1, 4);
  for (int i = 0; i < n_windows; i++) {
    const TimeMs start = pick(0, 3) == 0 ? kNow + Sec(600 * pick(1, 12)) : kNow - Hours(1);
    const TimeMs end = pick(0, 3) == 0 ? kNever : std::max(kNow, start) + Sec(600 * pick(1, 30));
    windows.push_back(c.Window(pick(0, 1) ? "p" : "q", 4 * pick(1, 4), start, end));
  }
  std::vector<int> used(windows.size(), 0);
  for (int i = pick(0, 3); i > 0; i--) {
    const size_t w = static_cast<size_t>(pick(0, n_windows - 1));
    const Window& win = c.s.windows[windows[w]];
    const int gpus = std::min(win.gpus - used[w], 4 * pick(1, 2));
    if (!win.open_at(kNow) || gpus <= 0) continue;
    used[w] += gpus;
    const TimeMs end = pick(0, 1) ? kNever : kNow + Sec(600 * pick(1, 12));
    Segment& seg = c.Running({{windows[w], gpus}}, static_cast<Priority>(pick(0, 3)),
                             Sec(60 * pick(1, 120)), end);
    c.JobOf(seg).preemptible = !plain && pick(0, 1);
  }
  for (int i = pick(2, 8); i > 0; i--) {
    Job& j = c.Pending(pick(1, 12), static_cast<Priority>(pick(0, 3)), Sec(600 * pick(0, 100)));
    j.max_gpus = j.min_gpus + (pick(0, 2) == 0 ? pick(1, 8) : 0);
    j.gang = pick(0, 2) != 0;
    if (pick(0, 2) != 0) j.pools = {pick(0, 1) ? "p" : "q"};
    j.remaining_seconds = pick(0, 1) ? 600.0 * pick(1, 20) : 0;
    j.checkpoint_interval_seconds = 300.0 * pick(1, 6);
    j.team = pick(0, 1) ? "x" : "y";
  }
  c.Team("x", plain ? 0 : pick(0, 8), pick(-1, 16));
  c.Team("y", 0, -1, pick(0, 100));
  return c.s;
}

TEST(PolicyBackfill, JobsBehindNeverDelayAJobAhead) {
  // Conservative backfill: a job's reservation depends only on the jobs
  // ahead of it. Remove everything behind position k and its planned start
  // (and so the head's) must not move, in any of many random clusters.
  int checked_later = 0;
  for (uint32_t seed = 1; seed <= 300; seed++) {
    const ClusterState full = RandomCluster(seed);
    const Plan plan = PlanAt(full);
    for (size_t k = 0; k < plan.pending.size(); k++) {
      ClusterState cut = full;
      for (size_t behind = k + 1; behind < plan.pending.size(); behind++) {
        cut.jobs[plan.pending[behind].job_id].state = JobState::kCancelled;
      }
      const Plan alone = PlanAt(cut);
      const PendingInfo& with_queue = plan.pending[k];
      const PendingInfo& without = Info(alone, with_queue.job_id);
      ASSERT_EQ(with_queue.planned_start_ms, without.planned_start_ms)
          << "seed " << seed << " position " << k + 1 << "\nfull:\n"
          << Dump(plan) << "cut:\n"
          << Dump(alone);
      ASSERT_EQ(with_queue.planned_gpus, without.planned_gpus) << "seed " << seed;
      if (with_queue.planned_start_ms != kNever && with_queue.planned_start_ms > kNow)
        checked_later++;
    }
  }
  EXPECT_GT(checked_later, 50);  // the scenarios do exercise future reservations
}

TEST(PolicyBackfill, StartsNowNeverDelayTheReservations) {
  // Apply a plan's starts and plan again at the same instant: the started
  // segments now hold exactly what was reserved for them, so every job
  // still pending keeps its planned start. A backfilled segment not cut
  // before a reservation, or a reservation not recorded, moves one later.
  int reserved = 0;
  for (uint32_t seed = 1; seed <= 300; seed++) {
    ClusterState s = RandomCluster(seed, /*plain=*/true);
    const Plan before = PlanAt(s);
    Changes ch;
    ApplyPlan(s, before, kNow, &ch);
    const Plan after = PlanAt(s);
    for (const PendingInfo& p : after.pending) {
      ASSERT_EQ(p.planned_start_ms, Info(before, p.job_id).planned_start_ms)
          << "seed " << seed << " job " << p.job_id << "\nbefore:\n"
          << Dump(before) << "after:\n"
          << Dump(after);
      reserved +=
          p.planned_start_ms != kNever && p.planned_start_ms > kNow && !before.starts.empty();
    }
  }
  EXPECT_GT(reserved, 50);
}

// A small simulator: each tick, segments whose planned end has come finish
// (their work estimate was right), the others heartbeat, then the plan is
// made and applied. Returns each job's first start.
std::map<int64_t, TimeMs> Simulate(ClusterState& s, TimeMs from, TimeMs until, TimeMs tick) {
  const PolicyConfig config;
  std::map<int64_t, int64_t> worker_of;  // segment -> worker
  std::map<int64_t, TimeMs> started;
  for (TimeMs now = from; now <= until; now += tick) {
    for (auto& [id, seg] : s.segments) {
      if (!SegmentActive(seg.state) || !worker_of.count(id)) continue;
      Changes ch;
      if (now >= seg.planned_end_ms) {
        EXPECT_OK(FinishJob(s, worker_of[id], now, &ch));
      } else {
        EXPECT_OK(Heartbeat(s, worker_of[id], {}, now));
      }
    }
    const Plan plan = MakePlan(s, now, config);
    EXPECT_TRUE(plan.lost.empty()) << "at +" << (now - from) / 1000 << " s";
    Changes ch;
    ApplyPlan(s, plan, now, &ch);
    for (const StartDecision& d : plan.starts) {
      started.emplace(d.job_id, now);
      const int64_t seg = s.jobs[d.job_id].segment_id;
      Result<Worker> w = RegisterWorker(s, d.job_id, "w" + std::to_string(seg), now, &ch);
      EXPECT_OK(w);
      if (w.ok()) worker_of[seg] = w->id;
    }
  }
  return started;
}

TEST(PolicyBackfill, PlannedStartIsTheActualStartWhenNothingChanges) {
  Cluster c;
  c.Window("p", 8, kNow, kNow + Hours(10));
  c.Window("p", 8, kNow + Hours(2), kNow + Hours(10));
  // Known remaining work (multiples of 10 s, like the ticks), mixed sizes.
  struct Spec {
    int gpus;
    Priority priority;
    double remaining;
    bool gang;
  };
  const std::vector<Spec> specs = {
      {8, Priority::kHigh, 3000, true},   {8, Priority::kMedium, 2000, true},
      {4, Priority::kMedium, 1200, true}, {8, Priority::kLow, 5000, true},
      {4, Priority::kLow, 600, true},     {12, Priority::kLow, 900, false},
      {2, Priority::kLow, 4000, true}};
  std::vector<int64_t> ids;
  for (const Spec& spec : specs) {
    Job& j = c.Pending(spec.gpus, spec.priority);
    j.remaining_seconds = spec.remaining;
    j.gang = spec.gang;
    ids.push_back(j.id);
  }
  const Plan first = MakePlan(c.s, kNow, PolicyConfig());
  const std::map<int64_t, TimeMs> started = Simulate(c.s, kNow, kNow + Hours(10), Sec(10));
  int later = 0;
  for (int64_t id : ids) {
    const TimeMs planned = Info(first, id).planned_start_ms;
    ASSERT_NE(planned, kNever) << "job " << id;
    ASSERT_TRUE(started.count(id)) << "job " << id << " never started";
    EXPECT_EQ(started.at(id), planned)
        << "job " << id << " planned at +" << (planned - kNow) / 1000 << " s";
    later += planned > kNow ? 1 : 0;
  }
  EXPECT_GE(later, 4);
}

// ---------------------------------------------------------------- notices

TEST(PolicyNotice, ExactlyCheckpointPlusSafetyBeforeTheWindowCloses) {
  Cluster c;
  const TimeMs close = kNow + Hours(1);
  const int64_t w = c.Window(8, close);
  const int64_t seg = c.Running({{w, 8}}).id;  // checkpoint 30 s + safety 10 s
  EXPECT_EQ(NoticeOf(PlanAt(c.s, close - Sec(41)), seg), nullptr);
  const Plan plan = PlanAt(c.s, close - Sec(40));
  const NoticeDecision* n = NoticeOf(plan, seg);
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->deadline_ms, close);
  EXPECT_EQ(n->reason, NoticeReason::kWindowClose);
  EXPECT_EQ(n->for_job_id, 0);
}

TEST(PolicyNotice, UsesTheJobsMeasuredCheckpointCost) {
  Cluster c;
  const TimeMs close = kNow + Hours(1);
  const int64_t w = c.Window(8, close);
  Segment& seg = c.Running({{w, 8}});
  c.JobOf(seg).checkpoint_seconds = 100;
  EXPECT_EQ(NoticeOf(PlanAt(c.s, close - Sec(111)), seg.id), nullptr);
  EXPECT_NE(NoticeOf(PlanAt(c.s, close - Sec(110)), seg.id), nullptr);
}

TEST(PolicyNotice, PlannedEndBeforeTheCloseGivesTheNoticeThere) {
  Cluster c;
  const int64_t w = c.Window(8);
  const int64_t seg = c.Running({{w, 8}}, Priority::kLow, Hours(1), kNow + Hours(2)).id;
  EXPECT_EQ(NoticeOf(PlanAt(c.s, kNow + Hours(2) - Sec(41)), seg), nullptr);
  const Plan plan = PlanAt(c.s, kNow + Hours(2) - Sec(40));
  const NoticeDecision* n = NoticeOf(plan, seg);
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->deadline_ms, kNow + Hours(2));
  EXPECT_EQ(n->reason, NoticeReason::kWindowClose);
}

TEST(PolicyNotice, RevokedWindowGivesAnImmediateNoticeWithTheNewDeadline) {
  Cluster c;
  const int64_t w = c.Window(8, kNow + Hours(10));
  const int64_t seg = c.Running({{w, 8}}).id;
  EXPECT_TRUE(PlanAt(c.s).notices.empty());
  Changes ch;
  ASSERT_OK(CloseWindow(c.s, w, Sec(20), kNow, &ch));  // end = now + 20 s
  const Plan plan = PlanAt(c.s);
  const NoticeDecision* n = NoticeOf(plan, seg);
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->deadline_ms, kNow + Sec(20));
  EXPECT_EQ(n->reason, NoticeReason::kRevoked);
}

TEST(PolicyNotice, NotifiedSegmentsGetNoSecondNotice) {
  Cluster c;
  const int64_t w = c.Window(8, kNow + Sec(30));
  Segment& seg = c.Running({{w, 8}});
  seg.state = SegmentState::kNotified;
  seg.notice_reason = NoticeReason::kWindowClose;
  seg.deadline_ms = kNow + Sec(30);
  EXPECT_TRUE(PlanAt(c.s).notices.empty());
}

// ---------------------------------------------------------------- preemption

// One 8-GPU window full with a LOW segment running for an hour; returns it.
Segment& FullWindow(Cluster& c, Priority running = Priority::kLow) {
  const int64_t w = c.Window(8);
  return c.Running({{w, 8}}, running, Hours(1));
}

TEST(PolicyPreempt, HigherLevelPreemptsWithACheckpointGrace) {
  Cluster c;
  const int64_t victim = FullWindow(c).id;
  const int64_t high = c.Pending(8, Priority::kHigh).id;
  const Plan plan = PlanAt(c.s);
  ASSERT_EQ(plan.notices.size(), 1u);
  EXPECT_EQ(plan.notices[0].segment_id, victim);
  EXPECT_EQ(plan.notices[0].reason, NoticeReason::kPreempted);
  EXPECT_EQ(plan.notices[0].for_job_id, high);
  EXPECT_EQ(plan.notices[0].deadline_ms, kNow + Sec(40));  // checkpoint 30 s + safety 10 s
  EXPECT_EQ(StartOf(plan, high), nullptr);
  EXPECT_EQ(Info(plan, high).reason, BlockReason::kPreempting);
  EXPECT_EQ(Info(plan, high).planned_start_ms, kNow + Sec(40));
}

TEST(PolicyPreempt, GraceIsBounded) {
  Cluster c;
  Segment& victim = FullWindow(c);
  c.JobOf(victim).checkpoint_seconds = 5000;
  c.Pending(8, Priority::kHigh);
  const Plan plan = PlanAt(c.s);
  ASSERT_EQ(plan.notices.size(), 1u);
  EXPECT_EQ(plan.notices[0].deadline_ms, kNow + Sec(600));  // max_grace_seconds
}

TEST(PolicyPreempt, CriticalIsNeverPreempted) {
  Cluster c;
  FullWindow(c, Priority::kCritical);
  const int64_t j = c.Pending(8, Priority::kCritical).id;
  const Plan plan = PlanAt(c.s);
  EXPECT_TRUE(plan.notices.empty());
  EXPECT_EQ(Info(plan, j).reason, BlockReason::kPriority);
}

TEST(PolicyPreempt, EqualLevelInTheSameServiceClassIsNeverPreempted) {
  Cluster c;
  Segment& seg = FullWindow(c, Priority::kHigh);
  c.JobOf(seg).service_gpu_seconds = Hours(0.9) / 1000.0;  // still class 0
  c.Pending(8, Priority::kHigh);
  EXPECT_TRUE(PlanAt(c.s).notices.empty());
}

TEST(PolicyPreempt, AgingGivesNoPreemptionRights) {
  Cluster c;
  FullWindow(c, Priority::kLow);
  const int64_t aged_low =
      c.Pending(8, Priority::kLow, Hours(20)).id;  // scores 1500, above a fresh MEDIUM
  EXPECT_TRUE(PlanAt(c.s).notices.empty());
  // A fresh MEDIUM job, ordered behind the aged LOW one, may preempt.
  const int64_t medium = c.Pending(8, Priority::kMedium).id;
  const Plan plan = PlanAt(c.s);
  EXPECT_EQ(Order(plan), (std::vector<int64_t>{aged_low, medium}));
  ASSERT_EQ(plan.notices.size(), 1u);
  EXPECT_EQ(plan.notices[0].for_job_id, medium);
}

TEST(PolicyPreempt, MinimumRunTimeIsRespected) {
  Cluster c;
  const int64_t w = c.Window(8);
  Segment& young = c.Running({{w, 8}}, Priority::kLow, Sec(599));
  c.Pending(8, Priority::kHigh);
  EXPECT_TRUE(PlanAt(c.s).notices.empty());
  young.start_ms = kNow - Sec(600);
  EXPECT_EQ(PlanAt(c.s).notices.size(), 1u);
}

TEST(PolicyPreempt, NonPreemptibleIsRespected) {
  Cluster c;
  Segment& seg = FullWindow(c);
  c.JobOf(seg).preemptible = false;
  c.Pending(8, Priority::kHigh);
  EXPECT_TRUE(PlanAt(c.s).notices.empty());
}

TEST(PolicyPreempt, VictimsAreMinimal) {
  // The cheap 2-GPU segment is tried first but turns out unnecessary once
  // the 8-GPU one is taken: the reverse pass drops it.
  Cluster c;
  const int64_t w = c.Window(12);
  Segment& cheap = c.Running({{w, 2}}, Priority::kLow, Hours(1));
  c.JobOf(cheap).checkpoint_ms = kNow - Sec(10);
  const int64_t big = c.Running({{w, 8}}, Priority::kLow, Hours(1)).id;
  c.Pending(8, Priority::kHigh);
  const Plan plan = PlanAt(c.s);
  ASSERT_EQ(plan.notices.size(), 1u);
  EXPECT_EQ(plan.notices[0].segment_id, big);
}

TEST(PolicyPreempt, ASpanningGangTakesVictimsOnSeveralWindowsOrNone) {
  Cluster c;
  const int64_t w1 = c.Window(4);
  const int64_t w2 = c.Window(4);
  const int64_t low1 = c.Running({{w1, 4}}, Priority::kLow, Hours(1)).id;
  const int64_t low2 = c.Running({{w2, 4}}, Priority::kLow, Hours(1)).id;
  c.Pending(8, Priority::kHigh);
  const Plan plan = PlanAt(c.s);
  EXPECT_NE(NoticeOf(plan, low1), nullptr);
  EXPECT_NE(NoticeOf(plan, low2), nullptr);
  // With one of the two windows held by a CRITICAL job the gang can never
  // be whole: nobody is preempted for half of it.
  c.s.jobs.at(c.s.segments.at(low2).job_id).priority = Priority::kCritical;
  EXPECT_TRUE(PlanAt(c.s).notices.empty());
}

TEST(PolicyPreempt, TakesWholeSegments) {
  // A non-gang victim spread over two windows is noticed as one segment,
  // and its GPUs in the other window come free too.
  Cluster c;
  const int64_t w1 = c.Window(8);
  const int64_t w2 = c.Window(8);
  const int64_t spread = c.Running({{w1, 4}, {w2, 4}}, Priority::kLow, Hours(1)).id;
  c.Running({{w1, 4}}, Priority::kCritical, Hours(1));
  c.Running({{w2, 4}}, Priority::kCritical, Hours(1));
  const int64_t high = c.Pending(4, Priority::kHigh).id;
  const int64_t other = c.Pending(4, Priority::kMedium).id;
  const Plan plan = PlanAt(c.s);
  ASSERT_EQ(plan.notices.size(), 1u);
  EXPECT_EQ(plan.notices[0].segment_id, spread);
  EXPECT_EQ(Info(plan, high).planned_start_ms, kNow + Sec(40));
  EXPECT_EQ(Info(plan, other).planned_start_ms, kNow + Sec(40));  // the victim's other half
}

TEST(PolicyPreempt, PrefersTheVictimWithTheRecentCheckpoint) {
  for (bool recent_first : {true, false}) {
    Cluster c;
    const int64_t w = c.Window(16);
    Segment& a = c.Running({{w, 8}}, Priority::kLow, Hours(3));
    Segment& b = c.Running({{w, 8}}, Priority::kLow, Hours(3));
    Segment& recent = recent_first ? a : b;
    Segment& old = recent_first ? b : a;
    c.JobOf(recent).checkpoint_ms = kNow - Sec(60);
    c.JobOf(old).checkpoint_ms = kNow - Hours(2);
    c.Pending(8, Priority::kHigh);
    const Plan plan = PlanAt(c.s);
    ASSERT_EQ(plan.notices.size(), 1u);
    EXPECT_EQ(plan.notices[0].segment_id, recent.id) << "recent_first " << recent_first;
  }
}

TEST(PolicyPreempt, LowerLevelVictimsFirst) {
  Cluster c;
  const int64_t w = c.Window(16);
  Segment& medium = c.Running({{w, 8}}, Priority::kMedium, Hours(3));
  c.JobOf(medium).checkpoint_ms = kNow - Sec(1);  // cheaper, but a higher level
  const int64_t low = c.Running({{w, 8}}, Priority::kLow, Hours(3)).id;
  c.Pending(8, Priority::kHigh);
  const Plan plan = PlanAt(c.s);
  ASSERT_EQ(plan.notices.size(), 1u);
  EXPECT_EQ(plan.notices[0].segment_id, low);
}

TEST(PolicyPreempt, ChoosesTheCheapestWindow) {
  Cluster c;
  const int64_t w1 = c.Window(8);
  const int64_t w2 = c.Window(8);
  c.Running({{w1, 8}}, Priority::kLow, Hours(3));
  Segment& cheap = c.Running({{w2, 8}}, Priority::kLow, Hours(3));
  c.JobOf(cheap).checkpoint_ms = kNow - Sec(30);
  c.Pending(8, Priority::kHigh);
  const Plan plan = PlanAt(c.s);
  ASSERT_EQ(plan.notices.size(), 1u);
  EXPECT_EQ(plan.notices[0].segment_id, cheap.id);
}

TEST(PolicyPreempt, NotWhenTheJobStartsAsSoonWithout) {
  Cluster c;
  FullWindow(c);
  c.Window("p", 8, kNow + Sec(30), kNow + Hours(10));  // opens before a victim's 40 s grace ends
  const int64_t high = c.Pending(8, Priority::kHigh).id;
  const Plan plan = PlanAt(c.s);
  EXPECT_TRUE(plan.notices.empty());
  EXPECT_EQ(Info(plan, high).planned_start_ms, kNow + Sec(30));
}

// A job its quota blocks may take back only its own team's GPUs: here
// its team's 4 would not make room for 8, and another team's may not.
TEST(PolicyPreempt, NeverAnotherTeamsForAJobItsQuotaBlocks) {
  Cluster c;
  const int64_t w = c.Window(16);
  c.Team("q", 0, 8);
  c.JobOf(c.Running({{w, 4}}, Priority::kLow, Hours(1))).team = "q";
  c.Running({{w, 12}}, Priority::kLow, Hours(1));  // team "t"
  Job& j = c.Pending(8, Priority::kHigh);
  j.team = "q";
  const Plan plan = PlanAt(c.s);
  EXPECT_TRUE(plan.notices.empty());
  EXPECT_EQ(Info(plan, j.id).reason, BlockReason::kQuota);
}

// A team at its cap: its urgent job preempts the team's own lower-level
// job (never the other team's, which would take it above its cap) and
// starts at that segment's deadline on the GPUs it gives back.
TEST(PolicyPreempt, OwnTeamsLowerJobForAJobItsQuotaBlocks) {
  Cluster c;
  const int64_t w = c.Window(16);
  c.Team("q", 0, 8);
  Segment& own = c.Running({{w, 8}}, Priority::kLow, Hours(1));
  c.JobOf(own).team = "q";
  c.Running({{w, 8}}, Priority::kLow, Hours(1));  // team "t", as cheap to preempt
  Job& j = c.Pending(8, Priority::kHigh);
  j.team = "q";
  const Plan plan = PlanAt(c.s);
  ASSERT_EQ(plan.notices.size(), 1u);
  EXPECT_EQ(plan.notices[0].segment_id, own.id);
  EXPECT_EQ(plan.notices[0].reason, NoticeReason::kPreempted);
  EXPECT_EQ(plan.notices[0].for_job_id, j.id);
  EXPECT_EQ(Info(plan, j.id).reason, BlockReason::kPreempting);
  EXPECT_EQ(Info(plan, j.id).planned_start_ms, plan.notices[0].deadline_ms);
  EXPECT_EQ(Info(plan, j.id).planned_gpus, 8);
}

// The usual rules hold: a job of the same level does not preempt its own
// team's running job for its quota, nor does one its min-run time shields.
TEST(PolicyPreempt, OwnTeamsOnlyByTheUsualRulesForAJobItsQuotaBlocks) {
  Cluster c;
  const int64_t w = c.Window(16);
  c.Team("q", 0, 8);
  c.JobOf(c.Running({{w, 4}}, Priority::kHigh, Hours(1))).team = "q";
  c.JobOf(c.Running({{w, 4}}, Priority::kLow, Sec(10))).team = "q";  // below min-run
  Job& j = c.Pending(8, Priority::kHigh);
  j.team = "q";
  const Plan plan = PlanAt(c.s);
  EXPECT_TRUE(plan.notices.empty());
  EXPECT_EQ(Info(plan, j.id).reason, BlockReason::kQuota);
}

TEST(PolicyPreempt, OneJobsPreemptionPerPass) {
  Cluster c;
  FullWindow(c);
  FullWindow(c);
  c.Pending(8, Priority::kHigh);
  c.Pending(8, Priority::kHigh);
  const Plan plan = PlanAt(c.s);
  ASSERT_EQ(plan.notices.size(), 1u);
}

TEST(PolicyPreempt, PreemptingJobStartsAtTheDeadlineAndKeepsItsReason) {
  Cluster c;
  const int64_t victim = FullWindow(c).id;
  const int64_t high = c.Pending(8, Priority::kHigh).id;
  Changes ch;
  const Plan first = PlanAt(c.s);
  ASSERT_EQ(first.notices.size(), 1u);
  ASSERT_EQ(first.notices[0].for_job_id, high);
  ApplyPlan(c.s, first, kNow, &ch);

  const Plan waiting = PlanAt(c.s, kNow + Sec(10));
  EXPECT_TRUE(waiting.notices.empty());
  EXPECT_EQ(Info(waiting, high).reason, BlockReason::kPreempting);
  EXPECT_EQ(Info(waiting, high).planned_start_ms, kNow + Sec(40));

  // The victim never acks: at the deadline it is lost and the GPUs go to
  // the job they were taken for, in the same plan.
  const Plan at_deadline = PlanAt(c.s, kNow + Sec(40));
  ASSERT_EQ(at_deadline.lost.size(), 1u);
  EXPECT_EQ(at_deadline.lost[0].segment_id, victim);
  EXPECT_NE(StartOf(at_deadline, high), nullptr);
}

TEST(PolicyPreempt, FreedGpusAreReservedForThePreemptingJob) {
  Cluster c;
  const int64_t w = c.Window(8);
  Segment& victim = c.Running({{w, 8}}, Priority::kLow, Hours(1));
  victim.state = SegmentState::kNotified;
  victim.notice_reason = NoticeReason::kPreempted;
  victim.deadline_ms = kNow + Sec(40);
  const int64_t medium = c.Pending(8, Priority::kMedium).id;  // the job it was preempted for
  victim.preempted_for = medium;
  const int64_t high = c.Pending(8, Priority::kHigh).id;  // ordered ahead, arrived since
  const Plan plan = PlanAt(c.s);
  EXPECT_EQ(Info(plan, medium).reason, BlockReason::kPreempting);
  EXPECT_EQ(Info(plan, medium).planned_start_ms, kNow + Sec(40));
  EXPECT_GT(Info(plan, high).planned_start_ms, kNow + Sec(40));
}

// ---------------------------------------------------------------- losses

TEST(PolicyLost, NoAckByTheDeadline) {
  Cluster c;
  const int64_t w = c.Window(8);
  Segment& seg = c.Running({{w, 8}});
  seg.state = SegmentState::kNotified;
  seg.notice_reason = NoticeReason::kWindowClose;
  seg.deadline_ms = kNow + Sec(1);
  EXPECT_TRUE(PlanAt(c.s).lost.empty());
  const Plan plan = PlanAt(c.s, kNow + Sec(1));
  ASSERT_EQ(plan.lost.size(), 1u);
  EXPECT_EQ(plan.lost[0].segment_id, seg.id);
  EXPECT_EQ(plan.lost[0].reason, "no ack by the deadline");
}

TEST(PolicyLost, AllWorkerLeasesExpired) {
  Cluster c;
  const int64_t w = c.Window(8);
  Segment& seg = c.Running({{w, 8}}, Priority::kLow, Sec(600));
  seg.last_heartbeat_ms = kNow - Sec(30);  // lease_ttl 30 s: still valid
  EXPECT_TRUE(MakePlan(c.s, kNow, PolicyConfig()).lost.empty());
  seg.last_heartbeat_ms = kNow - Sec(31);
  const Plan plan = MakePlan(c.s, kNow, PolicyConfig());
  ASSERT_EQ(plan.lost.size(), 1u);
  EXPECT_EQ(plan.lost[0].reason, "all worker leases expired");
}

TEST(PolicyLost, NewSegmentHasAStartGrace) {
  Cluster c;
  const int64_t w = c.Window(8);
  Segment& seg = c.Running({{w, 8}}, Priority::kLow, Sec(120));  // start_grace 120 s
  seg.last_heartbeat_ms = 0;                                     // no worker registered yet
  EXPECT_TRUE(MakePlan(c.s, kNow, PolicyConfig()).lost.empty());
  const Plan plan = MakePlan(c.s, kNow + Sec(1), PolicyConfig());
  ASSERT_EQ(plan.lost.size(), 1u);
  EXPECT_EQ(plan.lost[0].reason, "all worker leases expired");
}

TEST(PolicyLost, LostSegmentFreesItsGpusInTheSamePlan) {
  Cluster c;
  const int64_t w = c.Window(8);
  Segment& seg = c.Running({{w, 8}}, Priority::kCritical, Hours(1));
  seg.last_heartbeat_ms = kNow - Sec(300);
  const int64_t j = c.Pending(8, Priority::kLow).id;
  const Plan plan = MakePlan(c.s, kNow, PolicyConfig());
  ASSERT_EQ(plan.lost.size(), 1u);
  EXPECT_NE(StartOf(plan, j), nullptr);
  EXPECT_TRUE(plan.notices.empty());
}

// ---------------------------------------------------------------- stats, determinism

TEST(PolicyStats, CountsAndFragmentation) {
  Cluster c;
  const int64_t a = c.Window("a", 8, kNow - Hours(1), kNow + Hours(10));
  c.Window("b", 4, kNow - Hours(1), kNow + Hours(10));
  c.Window("a", 16, kNow + Hours(1), kNow + Hours(10));  // not open: not counted
  c.Running({{a, 4}}, Priority::kCritical);
  Job& head = c.Pending(4, Priority::kHigh);
  head.pools = {"a"};
  head.max_gpus = 4;
  c.Pending(1, Priority::kLow);
  const Plan plan = PlanAt(c.s);
  EXPECT_EQ(plan.stats.open_window_gpus, 12);
  EXPECT_EQ(plan.stats.allocated_gpus, 4);
  EXPECT_EQ(plan.stats.free_gpus, 8);
  EXPECT_EQ(plan.stats.fragmented_gpus, 4);  // window b is free but of no use to the head
  EXPECT_EQ(plan.stats.pending_jobs, 2);
  EXPECT_EQ(plan.stats.running_jobs, 1);
}

TEST(PolicyStats, HeadThatFitsNowhereFragmentsEverything) {
  Cluster c;
  c.Window("a", 4, kNow - Hours(1), kNow + Hours(100));
  c.Window("b", 4, kNow - Hours(1), kNow + Hours(100));
  c.Pending(8);
  EXPECT_EQ(PlanAt(c.s).stats.fragmented_gpus, 8);
}

// ---------------------------------------------------------------- shrink before preempt

TEST(PolicyShrink, AnElasticJobShrinksToItsMinimumBeforeAnyPreemption) {
  Cluster c;
  const int64_t w = c.Window(8);
  Segment& elastic = c.Running({{w, 8}}, Priority::kLow, Hours(1));
  c.JobOf(elastic).min_gpus = 4;
  c.Workers(elastic, 4);
  const int64_t elastic_id = elastic.id;
  const int64_t high = c.Pending(4, Priority::kHigh).id;
  const Plan plan = PlanAt(c.s);
  EXPECT_TRUE(plan.notices.empty()) << "nobody is preempted whole";
  // One process on all 8 GPUs cannot give 4 back: it is preempted whole.
  Cluster one = c;
  const int64_t first = one.s.workers.begin()->first;
  for (auto& [id, worker] : one.s.workers) worker.released = id != first;
  EXPECT_TRUE(PlanAt(one.s).shrinks.empty());
  EXPECT_NE(NoticeOf(PlanAt(one.s), elastic_id), nullptr);
  ASSERT_EQ(plan.shrinks.size(), 1u);
  EXPECT_EQ(plan.shrinks[0].segment_id, elastic_id);
  EXPECT_EQ(plan.shrinks[0].for_job_id, high);
  ASSERT_EQ(plan.shrinks[0].release.size(), 1u);
  EXPECT_EQ(plan.shrinks[0].release[0].gpus, 4);
  EXPECT_EQ(plan.shrinks[0].deadline_ms, kNow + Sec(30 + 10));  // C + safety
  EXPECT_EQ(Info(plan, high).reason, BlockReason::kPreempting);
  EXPECT_EQ(Info(plan, high).planned_start_ms, kNow + Sec(40));
}

TEST(PolicyShrink, NeverBelowMinGpusAPreemptionWhenAShrinkCannotFreeEnough) {
  Cluster c;
  const int64_t w = c.Window(8);
  Segment& elastic = c.Running({{w, 8}}, Priority::kLow, Hours(1));
  c.JobOf(elastic).min_gpus = 6;  // can give up 2, the job needs 4
  c.Workers(elastic, 4);
  const int64_t elastic_id = elastic.id;
  c.Pending(4, Priority::kHigh);
  const Plan plan = PlanAt(c.s);
  EXPECT_TRUE(plan.shrinks.empty());
  ASSERT_NE(NoticeOf(plan, elastic_id), nullptr);
  EXPECT_EQ(NoticeOf(plan, elastic_id)->reason, NoticeReason::kPreempted);
}

TEST(PolicyShrink, AShrinkingSegmentsGpusAreFreeAtItsDeadline) {
  Cluster c;
  const int64_t w = c.Window(8);
  Segment& elastic = c.Running({{w, 8}}, Priority::kLow, Hours(1));
  c.JobOf(elastic).min_gpus = 4;
  Job& high = c.Pending(4, Priority::kHigh);
  elastic.shrink_release = {{w, 4}};
  elastic.shrink_deadline_ms = kNow + Sec(40);
  elastic.shrink_for = high.id;
  const Plan before = PlanAt(c.s);
  EXPECT_TRUE(before.shrinks.empty() && before.notices.empty()) << "one shrink is enough";
  EXPECT_EQ(Info(before, high.id).planned_start_ms, kNow + Sec(40));
  const Plan at = PlanAt(c.s, kNow + Sec(40));
  EXPECT_NE(StartOf(at, high.id), nullptr);
}

TEST(PolicyShrink, GrowsBackIntoGpusNobodyIsPlannedOn) {
  Cluster c;
  const int64_t w = c.Window(8);
  Segment& elastic = c.Running({{w, 4}}, Priority::kLow, Hours(1));
  Job& job = c.JobOf(elastic);
  job.min_gpus = 4;
  job.max_gpus = 8;
  job.remaining_seconds = 3 * 3600;
  const int64_t elastic_id = elastic.id;
  EXPECT_TRUE(PlanAt(c.s).grows.empty()) << "off by default: stintd has no launcher for new ranks";
  PolicyConfig grow;
  grow.grow_elastic = true;
  const Plan plan = PlanAt(c.s, kNow, grow);
  ASSERT_EQ(plan.grows.size(), 1u);
  EXPECT_EQ(plan.grows[0].segment_id, elastic_id);
  ASSERT_EQ(plan.grows[0].add.size(), 1u);
  EXPECT_EQ(plan.grows[0].add[0].gpus, 4);
  // Not into GPUs a pending job is planned on, and not with little work left.
  Cluster busy = c;
  busy.Pending(2, Priority::kLow);
  EXPECT_EQ(PlanAt(busy.s, kNow, grow).grows.at(0).add.at(0).gpus, 2);
  job.remaining_seconds = 600;
  EXPECT_TRUE(PlanAt(c.s, kNow, grow).grows.empty());
}

// ---------------------------------------------------------------- attained service

constexpr double GpuHours(double h) { return h * 3600; }

TEST(PolicyService, ClassesStepAtOneTenAndAHundredGpuHours) {
  const PolicyConfig config;
  Job j;
  const std::vector<std::pair<double, int>> steps = {
      {0, 0},
      {GpuHours(0.99), 0},
      {GpuHours(1), 1},
      {GpuHours(9.9), 1},
      {GpuHours(10), 2},
      {GpuHours(100), 3},
      {GpuHours(1e6), 3}};  // the deepest class is service_classes - 1
  for (const auto& [service, expected] : steps) {
    j.service_gpu_seconds = service;
    EXPECT_EQ(ServiceClass(j, config), expected) << service;
  }
  PolicyConfig two = config;
  two.service_classes = 2;
  EXPECT_EQ(ServiceClass(j, two), 1);
  PolicyConfig coarse = config;
  coarse.service_class_gpu_hours = 50;
  j.service_gpu_seconds = GpuHours(49);
  EXPECT_EQ(ServiceClass(j, coarse), 0);
}

TEST(PolicyService, AJobStarvesOnceItWaitedFourTimesWhatItRan) {
  PolicyConfig config;
  Job j;
  j.max_gpus = 2;
  j.service_gpu_seconds = GpuHours(20);  // 10 h run at 2 GPUs
  j.submit_ms = kNow;
  EXPECT_FALSE(Starving(j, kNow + Hours(50), config));  // waited 40 h
  EXPECT_TRUE(Starving(j, kNow + Hours(51), config));   // waited 41 h
  config.service_starvation_factor = 1;
  EXPECT_TRUE(Starving(j, kNow + Hours(21), config));
  config.service_starvation_guard = false;
  EXPECT_FALSE(Starving(j, kNow + Hours(1000), config));
  j.service_gpu_seconds = 0;  // never ran: not starved of service, just queued
  EXPECT_FALSE(Starving(j, kNow + Hours(1000), PolicyConfig()));
}

TEST(PolicyService, WithItsWorkLeftKnownTheGuardBoundsTheSlowdownOfTheWholeJob) {
  const PolicyConfig config;  // factor 4: projected JCT > 5 x (run + left)
  Job j;
  j.max_gpus = 2;
  j.service_gpu_seconds = GpuHours(20);  // 10 h run at 2 GPUs
  j.remaining_seconds = 10 * 3600;       // 10 h left: 20 h of work in all
  j.submit_ms = kNow;
  EXPECT_FALSE(Starving(j, kNow + Hours(90), config));  // 90 + 10 h projected, 5 x 20 h = 100
  EXPECT_TRUE(Starving(j, kNow + Hours(91), config));
  // Near its end the bound is the same as without an estimate.
  j.remaining_seconds = 1;
  EXPECT_TRUE(Starving(j, kNow + Hours(51), config));
  EXPECT_FALSE(Starving(j, kNow + Hours(49), config));
}

TEST(PolicyService, AStarvingJobIsNotPreemptedForServiceClass) {
  Cluster c;
  const int64_t w = c.Window(1);
  Segment& seg = c.Running({{w, 1}}, Priority::kMedium, Hours(1));
  Job& old_job = c.JobOf(seg);
  old_job.service_gpu_seconds = GpuHours(1);  // class 1, ran 1 h ...
  old_job.submit_ms = kNow - Hours(6);         // ... of 6 h since submit: waited 5 h > 4 x 1 h
  const int64_t seg_id = seg.id;
  c.Pending(1, Priority::kMedium);  // class 0
  EXPECT_EQ(NoticeOf(PlanAt(c.s), seg_id), nullptr);
  PolicyConfig las_only;
  las_only.service_starvation_guard = false;
  EXPECT_NE(NoticeOf(PlanAt(c.s, kNow, las_only), seg_id), nullptr);
}

TEST(PolicyService, LessAttainedServiceGoesFirstWithinALevelButNeverAcrossOne) {
  Cluster c;
  Job& served = c.Pending(1, Priority::kMedium, Hours(1));  // waited longer, but had 20 GPU-h
  served.service_gpu_seconds = GpuHours(20);
  const int64_t fresh = c.Pending(1, Priority::kMedium).id;
  Job& high = c.Pending(1, Priority::kHigh);  // the deepest class still beats a fresh MEDIUM
  high.service_gpu_seconds = GpuHours(1e4);
  const Plan plan = PlanAt(c.s);
  EXPECT_EQ(Order(plan), (std::vector<int64_t>{high.id, fresh, served.id}));
  EXPECT_EQ(Info(plan, served.id).service_class, 2);
  EXPECT_DOUBLE_EQ(Info(plan, served.id).score_service, -600);
  EXPECT_DOUBLE_EQ(Info(plan, fresh).score_service, 0);
  EXPECT_DOUBLE_EQ(Info(plan, high.id).score, 2000 - 900);
  // Aging lifts the served job back after long enough (600 points: 6 h).
  served.eligible_ms = kNow - Hours(6.5);
  EXPECT_EQ(Order(PlanAt(c.s)), (std::vector<int64_t>{high.id, served.id, fresh}));
  // Off: the older job first again.
  PolicyConfig off;
  off.service_class_points = 0;
  served.eligible_ms = kNow - Hours(1);
  EXPECT_EQ(Order(PlanAt(c.s, kNow, off)), (std::vector<int64_t>{high.id, served.id, fresh}));
}

TEST(PolicyService, NewJobPreemptsItsLevelsJobThatHadAClassMore) {
  Cluster c;
  Segment& victim = FullWindow(c, Priority::kMedium);
  c.JobOf(victim).service_gpu_seconds = GpuHours(8);  // class 1
  const int64_t fresh = c.Pending(8, Priority::kMedium).id;
  const Plan plan = PlanAt(c.s);
  ASSERT_EQ(plan.notices.size(), 1u) << Dump(plan);
  EXPECT_EQ(plan.notices[0].segment_id, victim.id);
  EXPECT_EQ(plan.notices[0].reason, NoticeReason::kPreempted);
  EXPECT_EQ(plan.notices[0].for_job_id, fresh);
  EXPECT_EQ(plan.notices[0].deadline_ms, kNow + Sec(40));
  EXPECT_EQ(Info(plan, fresh).reason, BlockReason::kPreempting);
  EXPECT_NE(Info(plan, fresh).detail.find("service class"), std::string::npos)
      << Info(plan, fresh).detail;
  // LOW jobs too: the rule is per level.
  c.JobOf(victim).priority = Priority::kLow;
  c.s.jobs.at(fresh).priority = Priority::kLow;
  EXPECT_EQ(PlanAt(c.s).notices.size(), 1u);
}

TEST(PolicyService, NoSameLevelPreemptionWithoutTheClassGapOrTheMinimumRun) {
  Cluster c;
  Segment& victim = FullWindow(c, Priority::kMedium);
  Job& running = c.JobOf(victim);
  running.service_gpu_seconds = GpuHours(8);  // class 1
  Job& pending = c.Pending(8, Priority::kMedium);
  pending.service_gpu_seconds = GpuHours(2);  // class 1 too
  EXPECT_TRUE(PlanAt(c.s).notices.empty());
  PolicyConfig gap2;
  gap2.service_preempt_classes = 2;
  pending.service_gpu_seconds = 0;
  EXPECT_TRUE(PlanAt(c.s, kNow, gap2).notices.empty());  // one class apart, two needed
  running.service_gpu_seconds = GpuHours(10);
  EXPECT_EQ(PlanAt(c.s, kNow, gap2).notices.size(), 1u);
  PolicyConfig off;
  off.service_preempt_classes = 0;
  EXPECT_TRUE(PlanAt(c.s, kNow, off).notices.empty());
  victim.start_ms = kNow - Sec(599);  // younger than min_run
  EXPECT_TRUE(PlanAt(c.s).notices.empty());
  victim.start_ms = kNow - Sec(600);
  running.priority = Priority::kCritical;  // never preempted, whatever its service
  pending.priority = Priority::kCritical;
  EXPECT_TRUE(PlanAt(c.s).notices.empty());
}

TEST(PolicyService, NoSameLevelPreemptionOfAJobWithLessWorkLeft) {
  Cluster c;
  Segment& victim = FullWindow(c, Priority::kMedium);
  Job& running = c.JobOf(victim);
  running.service_gpu_seconds = GpuHours(8);  // class 1
  running.remaining_seconds = 600;            // 8 GPUs x 600 s left
  Job& pending = c.Pending(8, Priority::kMedium);
  pending.remaining_seconds = 3600;
  PolicyConfig las;  // classes by attained service, the work left only compared
  las.service_class_by_remaining = false;
  EXPECT_TRUE(PlanAt(c.s, kNow, las).notices.empty());
  pending.remaining_seconds = 599;
  EXPECT_EQ(PlanAt(c.s, kNow, las).notices.size(), 1u);
  pending.remaining_seconds = 0;  // unknown: the classes alone decide
  EXPECT_EQ(PlanAt(c.s, kNow, las).notices.size(), 1u);
  // Between levels the work left does not matter.
  pending.remaining_seconds = 3600;
  pending.priority = Priority::kHigh;
  EXPECT_EQ(PlanAt(c.s, kNow, las).notices.size(), 1u);
}

TEST(PolicyService, WithTheWorkLeftKnownTheClassCountsItNotTheServiceAttained) {
  PolicyConfig unbounded;  // the work left may lower the class all the way
  unbounded.service_class_remaining_max_drop = unbounded.service_classes;
  PolicyConfig config = unbounded;
  Job j;
  j.max_gpus = 4;
  j.service_gpu_seconds = GpuHours(200);
  EXPECT_EQ(ServiceClass(j, config), 3) << "no estimate: attained service";
  j.remaining_seconds = 600;  // 4 x 600 s = 0.67 GPU-h left
  EXPECT_EQ(ServiceClass(j, config), 0);
  j.remaining_seconds = 3 * 3600;  // 12 GPU-h left
  EXPECT_EQ(ServiceClass(j, config), 2);
  config.service_class_by_remaining = false;
  EXPECT_EQ(ServiceClass(j, config), 3);

  // A long job near its end is neither preempted for a new one nor queued
  // behind it; one with much left yields to a short new one.
  Cluster c;
  Segment& old_seg = FullWindow(c, Priority::kMedium);
  Job& old_job = c.JobOf(old_seg);
  old_job.service_gpu_seconds = GpuHours(300);  // class 3 by attained service
  old_job.remaining_seconds = 400;              // 8 x 400 s = 0.9 GPU-h left: class 0
  Job& fresh = c.Pending(8, Priority::kMedium);
  fresh.remaining_seconds = 3600;  // 8 GPU-h: class 1
  EXPECT_TRUE(PlanAt(c.s, kNow, unbounded).notices.empty());
  PolicyConfig las;
  las.service_class_by_remaining = false;
  fresh.remaining_seconds = 300;  // the attained-service rules need it shorter
  EXPECT_EQ(PlanAt(c.s, kNow, las).notices.size(), 1u);
  old_job.remaining_seconds = 20 * 3600;  // 160 GPU-h left: class 3
  const Plan plan = PlanAt(c.s, kNow, unbounded);
  ASSERT_EQ(plan.notices.size(), 1u) << Dump(plan);
  EXPECT_EQ(plan.notices[0].segment_id, old_seg.id);
  Job& waiting = c.Pending(8, Priority::kMedium, Hours(1));  // preempted earlier, near its end
  waiting.service_gpu_seconds = GpuHours(300);
  waiting.remaining_seconds = 400;
  EXPECT_EQ(Order(PlanAt(c.s, kNow, unbounded)).front(), waiting.id);
  EXPECT_EQ(Order(PlanAt(c.s, kNow, las)).front(), fresh.id);
}

// The work left is the job's own word: it lowers the class at most
// service_class_remaining_max_drop below the attained class (default 1), so
// a long-running job that reports almost nothing left cannot preempt a peer
// of its own attained class, as it could unbounded.
TEST(PolicyService, ReportedWorkLeftLowersTheClassOnlyWithinTheAdminsBound) {
  PolicyConfig config;
  EXPECT_EQ(config.service_class_remaining_max_drop, 1);
  Job j;
  j.max_gpus = 4;
  j.service_gpu_seconds = GpuHours(200);  // class 3 by attained service
  j.remaining_seconds = 1;
  EXPECT_EQ(ServiceClass(j, config), 2);
  config.service_class_remaining_max_drop = 0;
  EXPECT_EQ(ServiceClass(j, config), 3);
  config.service_class_remaining_max_drop = 2;
  EXPECT_EQ(ServiceClass(j, config), 1);
  j.remaining_seconds = 100 * 3600;  // 400 GPU-h left: a report may raise it freely
  EXPECT_EQ(ServiceClass(j, config), 3);
  j.service_gpu_seconds = 0;
  EXPECT_EQ(ServiceClass(j, config), 3);

  Cluster c;
  Segment& victim = FullWindow(c, Priority::kMedium);
  Job& running = c.JobOf(victim);
  running.service_gpu_seconds = GpuHours(20);  // class 2
  running.remaining_seconds = 3600;            // 8 GPU-h left: class 1
  Job& liar = c.Pending(8, Priority::kMedium);
  liar.service_gpu_seconds = GpuHours(300);  // class 3
  liar.remaining_seconds = 1;                // "almost done": class 0 unbounded
  PolicyConfig unbounded;
  unbounded.service_class_remaining_max_drop = unbounded.service_classes;
  EXPECT_EQ(PlanAt(c.s, kNow, unbounded).notices.size(), 1u);
  EXPECT_TRUE(PlanAt(c.s).notices.empty()) << Dump(PlanAt(c.s));
}

TEST(PolicyService, JobsSubmittedTogetherGoShortestFirst) {
  Cluster c;
  c.Window(1);
  Job& unknown = c.Pending(1);
  Job& longer = c.Pending(1);
  longer.remaining_seconds = 1800;
  Job& shorter = c.Pending(1);
  shorter.remaining_seconds = 900;
  EXPECT_EQ(Order(PlanAt(c.s)), (std::vector<int64_t>{shorter.id, longer.id, unknown.id}));
}

// The queue guard: counting the work left, a long job that never ran is
// in a deep class; once it has waited 0.4 x its length it is ordered in
// class 0, as a new job is, and goes before the shorter jobs that came
// after it.
TEST(PolicyService, ALongJobThatNeverRanRisesToClassZeroAfterWaitingPartOfItsLength) {
  const PolicyConfig config;  // service_queue_guard_factor 0.4
  Job j;
  j.max_gpus = 4;
  j.remaining_seconds = 10 * 3600;  // 40 GPU-h left: class 2
  j.submit_ms = kNow;
  EXPECT_EQ(ServiceClass(j, config), 2);
  EXPECT_FALSE(QueueGuarded(j, kNow + Hours(3.9), config));
  EXPECT_TRUE(QueueGuarded(j, kNow + Hours(4.1), config));
  j.service_gpu_seconds = 1;  // it has run: the classes alone (and the starvation guard)
  EXPECT_FALSE(QueueGuarded(j, kNow + Hours(100), config));
  j.service_gpu_seconds = 0;
  j.remaining_seconds = 0;  // no estimate: attained service already gives class 0
  EXPECT_FALSE(QueueGuarded(j, kNow + Hours(100), config));
  j.remaining_seconds = 10 * 3600;
  PolicyConfig off;
  off.service_queue_guard_factor = 0;
  EXPECT_FALSE(QueueGuarded(j, kNow + Hours(100), off));
  PolicyConfig las;
  las.service_class_by_remaining = false;
  EXPECT_FALSE(QueueGuarded(j, kNow + Hours(100), las));

  // In the plan: the long job, submitted 4.1 h ago, against a short one
  // submitted 4 h ago (same level, 0.1 h less aging, class 0).
  Cluster c;
  c.Window(4);
  Job& long_job = c.Pending(4, Priority::kMedium, Hours(4.1));
  long_job.remaining_seconds = 10 * 3600;
  Job& short_job = c.Pending(4, Priority::kMedium, Hours(4));
  short_job.remaining_seconds = 1800;  // 2 GPU-h: class 1
  const Plan guarded = PlanAt(c.s, kNow, config);
  EXPECT_EQ(Info(guarded, long_job.id).service_class, 0);
  EXPECT_EQ(Order(guarded), (std::vector<int64_t>{long_job.id, short_job.id}));
  const Plan unguarded = PlanAt(c.s, kNow, off);
  EXPECT_EQ(Info(unguarded, long_job.id).service_class, 2);
  EXPECT_EQ(Order(unguarded), (std::vector<int64_t>{short_job.id, long_job.id}));
}

TEST(PolicyService, TakesTheMostServedVictimOfTheLevel) {
  Cluster c;
  const int64_t w = c.Window(8);
  Segment& less = c.Running({{w, 4}}, Priority::kMedium, Hours(3));
  c.JobOf(less).service_gpu_seconds = GpuHours(12);  // class 2, and cheaper: checkpointed just now
  c.JobOf(less).checkpoint_ms = kNow - Sec(1);
  Segment& more = c.Running({{w, 4}}, Priority::kMedium, Hours(3));
  c.JobOf(more).service_gpu_seconds = GpuHours(120);  // class 3
  c.Pending(4, Priority::kMedium);
  const Plan plan = PlanAt(c.s);
  ASSERT_EQ(plan.notices.size(), 1u);
  EXPECT_EQ(plan.notices[0].segment_id, more.id);
}

TEST(Policy, SameInputGivesTheSamePlan) {
  for (uint32_t seed = 1; seed <= 50; seed++) {
    const ClusterState s = RandomCluster(seed);
    const std::string first = Dump(PlanAt(s));
    ClusterState copy = s;
    EXPECT_EQ(first, Dump(PlanAt(copy))) << "seed " << seed;
    EXPECT_EQ(first, Dump(PlanAt(s))) << "seed " << seed;
  }
}

// --- prices, price rules and budgets (planner_prices.cc) ---

TEST(PolicyPrices, AmongEqualStartsTheCheapestPoolWins) {
  Cluster c;
  c.Window("a", 8, kNow - Hours(1), kNow + Hours(10));
  const int64_t b = c.Window("b", 8, kNow - Hours(1), kNow + Hours(10));
  c.Window("z", 8, kNow - Hours(1), kNow + Hours(10));
  c.Price("a", 3);
  c.Price("b", 1);
  c.Price("z", 2);
  const int64_t j = c.Pending(4).id;
  const Plan plan = PlanAt(c.s);
  const StartDecision* d = StartOf(plan, j);
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(d->allocs.size(), 1u);
  EXPECT_EQ(d->allocs[0].window_id, b);
}

TEST(PolicyPrices, TheSoonestFitWinsOverACheaperLaterOne) {
  Cluster c;
  const int64_t a = c.Window("a", 8, kNow - Hours(1), kNow + Hours(10));
  const int64_t b = c.Window("b", 8, kNow - Hours(1), kNow + Hours(10));
  c.Price("a", 3);
  c.Price("b", 1);
  c.Running({{b, 8}}, Priority::kHigh, Hours(1), kNow + Hours(2));
  const int64_t j = c.Pending(4).id;
  const Plan plan = PlanAt(c.s);
  const StartDecision* d = StartOf(plan, j);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->allocs[0].window_id, a);
}

TEST(PolicyPrices, ASpotPoolCostsWhatItsRevocationsLose) {
  Cluster c;
  const int64_t a = c.Window("a", 8, kNow - Hours(1), kNow + Hours(10));
  const int64_t b = c.Window("b", 8, kNow - Hours(1), kNow + Hours(10));
  c.s.windows.at(b).kind = WindowKind::kSpot;
  // Three earlier spot hours of pool b, each revoked: one revocation per hour.
  for (int i = 0; i < 3; i++) {
    const int64_t old = c.Window("b", 8, kNow - Hours(5 + i), kNow - Hours(4 + i));
    c.s.windows.at(old).kind = WindowKind::kSpot;
    c.s.windows.at(old).closed_early = true;
  }
  c.Price("a", 1.2);
  c.Price("b", 1, PoolPricing::kSpot);
  // Each revocation costs this job 600 + 60 + 1200 / 2 s: a third of every
  // spot hour, so pool b costs 1 / (1 - 0.35) = 1.54 per useful GPU-hour.
  Job& slow = c.Pending(4);
  slow.restart_seconds = 600;
  slow.checkpoint_seconds = 60;
  slow.checkpoint_interval_seconds = 1200;
  // A job that restarts at once loses little there: b stays the cheaper.
  Job& quick = c.Pending(4);
  quick.restart_seconds = 1;
  quick.checkpoint_seconds = 1;
  quick.checkpoint_interval_seconds = 60;
  const Plan plan = PlanAt(c.s);
  ASSERT_NE(StartOf(plan, slow.id), nullptr);
  ASSERT_NE(StartOf(plan, quick.id), nullptr);
  EXPECT_EQ(StartOf(plan, slow.id)->allocs[0].window_id, a);
  EXPECT_EQ(StartOf(plan, quick.id)->allocs[0].window_id, b);
}

TEST(PolicyPrices, APriceCapKeepsALevelOutOfDearPools) {
  Cluster c;
  const int64_t cheap = c.Window("cheap", 4, kNow - Hours(1), kNow + Hours(10));
  c.Window("dear", 8, kNow - Hours(1), kNow + Hours(10));
  c.Price("cheap", 1);
  c.Price("dear", 3);
  c.s.price_rules[static_cast<size_t>(Priority::kLow)].max_price_per_gpu_hour = 2;
  c.Running({{cheap, 4}}, Priority::kHigh);
  const int64_t low = c.Pending(4, Priority::kLow).id;
  const int64_t medium = c.Pending(4, Priority::kMedium).id;
  const Plan plan = PlanAt(c.s);
  EXPECT_NE(StartOf(plan, medium), nullptr);  // no cap for MEDIUM
  EXPECT_EQ(StartOf(plan, low), nullptr);     // dear is free, but above its cap
  EXPECT_EQ(Info(plan, low).reason, BlockReason::kPriority);
  // Its only pool priced above the cap: it waits for a price change.
  Job& only_dear = c.Pending(2, Priority::kLow);
  only_dear.pools = {"dear"};
  const Plan capped = PlanAt(c.s);
  EXPECT_EQ(StartOf(capped, only_dear.id), nullptr);
  EXPECT_EQ(Info(capped, only_dear.id).reason, BlockReason::kPrice);
  EXPECT_NE(Info(capped, only_dear.id).detail.find("LOW cap of 2.00/GPU-hour"), std::string::npos)
      << Info(capped, only_dear.id).detail;
}

TEST(PolicyPrices, AJobRevokedTooOftenFallsBackFromSpot) {
  Cluster c;
  c.Window("spot", 8, kNow - Hours(1), kNow + Hours(10));
  const int64_t demand = c.Window("demand", 8, kNow - Hours(1), kNow + Hours(10));
  c.Price("spot", 0.5, PoolPricing::kSpot);
  c.Price("demand", 2);
  PriceRule& rule = c.s.price_rules[static_cast<size_t>(Priority::kMedium)];
  rule.spot_fallback_revocations = 2;
  rule.spot_fallback_window_seconds = 3600;
  Job& twice = c.Pending(4);
  twice.revoked_ms = {kNow - Sec(600), kNow - Sec(60)};
  Job& once = c.Pending(4);
  once.revoked_ms = {kNow - Hours(2), kNow - Sec(60)};  // the first is outside the window
  const Plan plan = PlanAt(c.s);
  ASSERT_NE(StartOf(plan, twice.id), nullptr);
  ASSERT_NE(StartOf(plan, once.id), nullptr);
  EXPECT_EQ(StartOf(plan, twice.id)->allocs[0].window_id, demand);
  EXPECT_NE(StartOf(plan, once.id)->allocs[0].window_id, demand);
}

TEST(PolicyBudget, StartsOnlyWhatTheBudgetPays) {
  Cluster c;
  c.Window("p", 64, kNow - Hours(1), kNow + Hours(10));
  c.Price("p", 2);
  c.Team("t", 0);
  c.s.teams.at("t").budget = 4;
  // A minimum segment (700 s) of 4 GPUs at 2 per GPU-hour costs 1.56: the
  // budget of 4 pays two in this pass, not three.
  std::vector<int64_t> jobs;
  for (int i = 0; i < 4; i++) jobs.push_back(c.Pending(4).id);
  const Plan plan = PlanAt(c.s);
  EXPECT_EQ(plan.starts.size(), 2u);
  for (size_t i = 2; i < jobs.size(); i++) {
    EXPECT_EQ(Info(plan, jobs[i]).reason, BlockReason::kBudget);
    EXPECT_NE(Info(plan, jobs[i]).detail.find("costs 1.56"), std::string::npos)
        << Info(plan, jobs[i]).detail;
    EXPECT_NE(Info(plan, jobs[i]).detail.find("of its budget 4.00"), std::string::npos)
        << Info(plan, jobs[i]).detail;
  }
  // What it spent counts: with 3 of 4 spent, none starts.
  c.s.teams.at("t").spent = 3;
  EXPECT_TRUE(PlanAt(c.s).starts.empty());
  // A pool that costs nothing is still open to it.
  c.Window("free", 8, kNow - Hours(1), kNow + Hours(10));
  EXPECT_EQ(PlanAt(c.s).starts.size(), 2u);
}

TEST(PolicyBudget, ATeamOutOfBudgetCheckpointsAndStops) {
  Cluster c;
  const int64_t w = c.Window("p", 16, kNow - Hours(2), kNow + Hours(10));
  c.Price("p", 2);
  c.Team("t", 0);
  c.Team("other", 0);
  Segment& mine = c.Running({{w, 4}}, Priority::kMedium, Hours(1));
  mine.price_per_gpu_hour = 2;
  Segment& theirs = c.Running({{w, 4}}, Priority::kMedium, Hours(1));
  theirs.price_per_gpu_hour = 2;
  c.JobOf(theirs).team = "other";
  // Stopping costs 4 GPUs x (30 + 10) s x 2 / h = 0.09: a team with less
  // than that left is told to stop now.
  c.s.teams.at("t").budget = 10;
  c.s.teams.at("t").spent = 9.95;
  const Plan plan = PlanAt(c.s);
  const NoticeDecision* n = NoticeOf(plan, mine.id);
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->reason, NoticeReason::kBudget);
  EXPECT_EQ(n->deadline_ms, kNow + Sec(30 + 10));
  EXPECT_EQ(NoticeOf(plan, theirs.id), nullptr);
  c.s.teams.at("t").spent = 9.5;  // enough left to stop later
  EXPECT_EQ(NoticeOf(PlanAt(c.s), mine.id), nullptr);
}

// Many jobs of a team queued at once, run tick by tick as stintd does
// (plan, apply, charge; workers ack a notice at once): what the team is
// charged stays within its budget, and the budget was used.
TEST(PolicyBudget, HoldsWhileManyJobsRun) {
  Cluster c;
  c.Window("p", 64, kNow - Hours(1), kNow + Hours(10));
  c.Price("p", 2);
  c.Team("t", 0);
  c.s.teams.at("t").budget = 12;
  c.s.teams.at("t").period_start_ms = kNow;
  for (int i = 0; i < 10; i++) c.Pending(4).remaining_seconds = 3 * 3600;
  PolicyConfig config;
  Changes ch;
  c.s.counters.accounted_ms = kNow;
  int budget_notices = 0;
  for (TimeMs now = kNow; now < kNow + Hours(3); now += Sec(5)) {
    AccountTime(c.s, now, config, &ch);
    for (auto& [id, seg] : c.s.segments) seg.last_heartbeat_ms = now;
    const Plan plan = MakePlan(c.s, now, config);
    for (const NoticeDecision& d : plan.notices)
      budget_notices += d.reason == NoticeReason::kBudget;
    ApplyPlan(c.s, plan, now, &ch);
    // Workers: register once, ack a notice at once.
    for (auto& [id, seg] : c.s.segments) {
      if (seg.state != SegmentState::kNotified) continue;
      const Worker w = RegisterWorker(c.s, seg.job_id, "w", now, &ch).value();
      ASSERT_OK(AckSegment(c.s, w.id, 0, now, &ch));
    }
  }
  const Team& t = c.s.teams.at("t");
  EXPECT_GT(budget_notices, 0);
  EXPECT_LE(t.spent, t.budget + 4 * 2 * 5 / 3600.0 + 1e-9);  // at most one tick's charge over
  EXPECT_GT(t.spent, t.budget * 0.9);
  double charged = 0;
  for (const auto& [id, j] : c.s.jobs) charged += j.cost;
  EXPECT_NEAR(charged, t.spent, 1e-9);
}

// Price migration: an 8-GPU job running for an hour on demand (3.00 per
// GPU-hour) with 4 h of work left, and an on-prem pool (1.00) of 8 GPUs.
struct Migration {
  Cluster c;
  int64_t seg = 0;
  PolicyConfig config;
};
Migration MigrationCase() {
  Migration m;
  const int64_t w = m.c.Window("ondemand", 8, kNow - Hours(2), kNow + Hours(100));
  m.c.Window("onprem", 8, kNow - Hours(2), kNow + Hours(100));
  m.c.Price("ondemand", 3);
  m.c.Price("onprem", 1, PoolPricing::kOnPrem);
  Segment& seg = m.c.Running({{w, 8}}, Priority::kLow, Hours(1));
  seg.price_per_gpu_hour = 3;  // charged what on demand cost when it started
  m.c.JobOf(seg).remaining_seconds = 4 * 3600;
  m.seg = seg.id;
  m.config.price_migration = true;
  return m;
}

// The saving (8 GPUs x 4 h x 2.00) pays the move: a notice to checkpoint
// (deadline C + safety), reason migrate.
TEST(PolicyMigration, MovesToACheaperPoolWithRoom) {
  Migration m = MigrationCase();
  const Plan plan = PlanAt(m.c.s, kNow, m.config);
  const NoticeDecision* n = NoticeOf(plan, m.seg);
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->reason, NoticeReason::kMigrate);
  EXPECT_EQ(n->deadline_ms, kNow + Sec(30 + 10));
  EXPECT_EQ(n->for_job_id, 0);
  EXPECT_STREQ(NoticeReasonName(n->reason), "migrate");
}

TEST(PolicyMigration, NotWithLittleWorkLeft) {
  Migration m = MigrationCase();
  m.c.JobOf(m.c.s.segments.at(m.seg)).remaining_seconds = 1800;
  EXPECT_EQ(NoticeOf(PlanAt(m.c.s, kNow, m.config), m.seg), nullptr);
}

TEST(PolicyMigration, NotWithoutAnEstimate) {
  Migration m = MigrationCase();
  m.c.JobOf(m.c.s.segments.at(m.seg)).remaining_seconds = 0;
  EXPECT_EQ(NoticeOf(PlanAt(m.c.s, kNow, m.config), m.seg), nullptr);
}

TEST(PolicyMigration, OffByDefault) {
  Migration m = MigrationCase();
  EXPECT_EQ(NoticeOf(PlanAt(m.c.s, kNow), m.seg), nullptr);
  m.config.price_migration = false;
  EXPECT_EQ(NoticeOf(PlanAt(m.c.s, kNow, m.config), m.seg), nullptr);
}

TEST(PolicyMigration, NotWhenTheCheapPoolIsBusy) {
  Migration m = MigrationCase();
  const int64_t onprem = m.c.s.windows.rbegin()->first;
  m.c.Running({{onprem, 4}}, Priority::kLow, Hours(1));
  EXPECT_EQ(NoticeOf(PlanAt(m.c.s, kNow, m.config), m.seg), nullptr);
}

// On-prem has 16 GPUs, half of them held for 30 more minutes; a pending
// 16-GPU job that may only run on-prem is planned on all of them then. The
// 8 free now are not the migrant's: they last 30 min, not the hour of work
// a move needs.
TEST(PolicyMigration, NotOntoGpusReservedForAPendingJob) {
  Migration m = MigrationCase();
  const int64_t onprem = m.c.s.windows.rbegin()->first;
  m.c.s.windows.at(onprem).gpus = 16;
  Segment& busy = m.c.Running({{onprem, 8}}, Priority::kMedium, Hours(1), kNow + Hours(0.5));
  m.c.JobOf(busy).preemptible = false;
  {
    const Plan free_plan = PlanAt(m.c.s, kNow, m.config);
    const NoticeDecision* n = NoticeOf(free_plan, m.seg);
    ASSERT_NE(n, nullptr);  // without the pending job the 8 free now stay free
    EXPECT_EQ(n->reason, NoticeReason::kMigrate);
  }
  Job& pending = m.c.Pending(16);
  pending.pools = {"onprem"};
  pending.remaining_seconds = 4 * 3600;
  const Plan plan = PlanAt(m.c.s, kNow, m.config);
  EXPECT_EQ(NoticeOf(plan, m.seg), nullptr);
  ASSERT_EQ(plan.pending.size(), 1u);
  EXPECT_EQ(plan.pending[0].planned_start_ms, kNow + Hours(0.5));
}

// Tick by tick as stintd runs it (plan, apply, workers ack a notice at
// once): on-prem opens an hour in; the job moves there once, and the move
// is not counted as a preemption.
TEST(PolicyMigration, EndsRunningInTheCheapPool) {
  Migration m = MigrationCase();
  const int64_t onprem = m.c.s.windows.rbegin()->first;
  m.c.s.windows.at(onprem).start_ms = kNow + Hours(1);
  const int64_t job_id = m.c.s.segments.at(m.seg).job_id;
  Changes ch;
  int migrations = 0;
  for (TimeMs now = kNow; now < kNow + Hours(3); now += Sec(5)) {
    for (auto& [id, seg] : m.c.s.segments) seg.last_heartbeat_ms = now;
    const Plan plan = MakePlan(m.c.s, now, m.config);
    for (const NoticeDecision& d : plan.notices) {
      ASSERT_EQ(d.reason, NoticeReason::kMigrate);
      EXPECT_GE(now, kNow + Hours(1));
      migrations++;
    }
    ApplyPlan(m.c.s, plan, now, &ch);
    for (auto& [id, seg] : m.c.s.segments) {
      if (seg.state != SegmentState::kNotified) continue;
      const Worker w = RegisterWorker(m.c.s, seg.job_id, "w", now, &ch).value();
      ASSERT_OK(AckSegment(m.c.s, w.id, 0, now, &ch));
    }
  }
  EXPECT_EQ(migrations, 1);
  const Job& job = m.c.s.jobs.at(job_id);
  EXPECT_EQ(job.state, JobState::kRunning);
  EXPECT_EQ(job.preemptions, 0);
  const Segment& seg = m.c.s.segments.at(job.segment_id);
  EXPECT_EQ(seg.state, SegmentState::kRunning);
  ASSERT_EQ(seg.allocs.size(), 1u);
  EXPECT_EQ(seg.allocs[0].window_id, onprem);
  EXPECT_EQ(seg.allocs[0].gpus, 8);
  EXPECT_EQ(m.c.s.counters.preemptions, 0);
}

}  // namespace
}  // namespace stint::stintd
