// stint-sim's engine and schedulers on tiny hand-made traces: determinism,
// conservation, and each baseline's known behaviour (FIFO head-of-line
// blocking, EASY backfill that never delays the head's reservation, QOS
// preemption with GraceTime), and stint's policy driven through
// tools/stintd/core (graceful segment ends at a window's close, a short job
// preempting a long one of its level by attained service).
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sim/engine.h"
#include "sim/report.h"
#include "sim/schedulers.h"
#include "sim/trace.h"
#include "util/status_matchers.h"

namespace stint::sim {
namespace {

SimJob Job(int64_t id, double submit_s, int gpus, double work_s,
           stintd::Priority priority = stintd::Priority::kMedium) {
  SimJob j;
  j.id = id;
  j.name = "j" + std::to_string(id);
  j.submit_s = submit_s;
  j.min_gpus = j.max_gpus = gpus;
  j.work_s = work_s;
  j.priority = priority;
  return j;
}

SimResult RunPolicy(const Workload& w, const std::string& policy) {
  SchedulerOptions o;
  auto spec = ParsePolicy(policy, o);
  EXPECT_OK(spec) << policy;
  auto sched = MakeScheduler(spec.value(), o);
  EngineOptions e;
  e.workers_ignore_notices = spec.value().workers_ignore_notices;
  return Simulate(w, *sched, e);
}

// A: 4 GPUs for 1000 s; B: the whole 8-GPU window; C: 1 GPU for 100 s.
Workload HeadOfLine(double c_work_s) {
  Workload w;
  w.windows = FixedCapacity(8);
  w.jobs = {Job(0, 0, 4, 1000), Job(1, 1, 8, 500), Job(2, 2, 1, c_work_s)};
  return w;
}

TEST(SimBaselines, FifoBlocksBehindTheHead) {
  const SimResult r = RunPolicy(HeadOfLine(100), "fifo");
  ASSERT_EQ(r.conservation_violations, 0);
  EXPECT_DOUBLE_EQ(r.jobs[1].first_start_s, 1000);  // B waits for A
  EXPECT_GE(r.jobs[2].first_start_s, 1500);         // C waits for B although 4 GPUs were free
}

TEST(SimBaselines, EasyBackfillsShortJobsIntoTheHole) {
  const SimResult r = RunPolicy(HeadOfLine(100), "easy");
  ASSERT_EQ(r.conservation_violations, 0);
  EXPECT_DOUBLE_EQ(r.jobs[2].first_start_s, 2);     // ends at 102 < shadow 1000
  EXPECT_DOUBLE_EQ(r.jobs[1].first_start_s, 1000);  // the head is not delayed
}

TEST(SimBaselines, BackfillNeverDelaysTheHeadReservation) {
  // C would run past the head's shadow time on the GPUs the head needs.
  for (const char* policy : {"easy", "slurm"}) {
    const SimResult r = RunPolicy(HeadOfLine(5000), policy);
    ASSERT_EQ(r.conservation_violations, 0) << policy;
    EXPECT_LE(r.jobs[1].first_start_s, 1000 + 1) << policy;
    EXPECT_GE(r.jobs[2].first_start_s, r.jobs[1].first_start_s) << policy;
  }
  // stint reserves B from A's planned end (start + R + work + C + safety =
  // 1100 s) and may backfill C only as a segment that yields before it:
  // C starts at once, checkpoints and gives the GPUs back in time.
  const SimResult r = RunPolicy(HeadOfLine(5000), "stint");
  ASSERT_EQ(r.conservation_violations, 0);
  EXPECT_LE(r.jobs[1].first_start_s, 1100);
  EXPECT_DOUBLE_EQ(r.jobs[2].first_start_s, 2);
  EXPECT_GE(r.jobs[2].interruptions, 1);
  EXPECT_DOUBLE_EQ(r.lost_gpu_s, 0);
}

TEST(SimBaselines, SlurmPreemptsLowerQosWithGraceTimeAndLosesNothing) {
  Workload w;
  w.windows = FixedCapacity(8);
  w.jobs = {Job(0, 0, 8, 20000, stintd::Priority::kLow),
            Job(1, 1000, 8, 1000, stintd::Priority::kHigh)};
  for (const char* policy : {"slurm", "stint"}) {
    const SimResult r = RunPolicy(w, policy);
    ASSERT_EQ(r.conservation_violations, 0) << policy;
    EXPECT_EQ(r.jobs[0].preemptions, 1) << policy;
    EXPECT_DOUBLE_EQ(r.lost_gpu_s, 0) << policy;  // grace C + safety >= C
    EXPECT_LT(r.jobs[1].first_start_s, 1000 + 60) << policy;
    EXPECT_GT(r.jobs[0].finish_s, r.jobs[1].finish_s) << policy;
  }
  const SimResult fifo = RunPolicy(w, "fifo");
  EXPECT_EQ(fifo.jobs[0].preemptions, 0);
  EXPECT_GE(fifo.jobs[1].first_start_s, 20000);
}

TEST(SimStint, WindowCloseEndsTheSegmentGracefullyWhereFifoLosesWork) {
  Workload w;
  SimWindow a;
  a.gpus = 4;
  a.start_s = 0;
  a.end_s = 3600;  // closes under the job
  SimWindow b = a;
  b.start_s = 4000;
  b.end_s = kLongSeconds;
  w.windows = {a, b};
  w.jobs = {Job(0, 0, 4, 5000)};
  const SimResult stint = RunPolicy(w, "stint");
  ASSERT_EQ(stint.conservation_violations, 0);
  EXPECT_DOUBLE_EQ(stint.lost_gpu_s, 0);
  EXPECT_EQ(stint.jobs[0].interruptions, 1);
  ASSERT_GT(stint.jobs[0].finish_s, 0);
  const SimResult fifo = RunPolicy(w, "fifo");
  ASSERT_EQ(fifo.conservation_violations, 0);
  EXPECT_GT(fifo.lost_gpu_s, 0);  // killed at the close: work since the last checkpoint is gone
  EXPECT_GT(fifo.jobs[0].finish_s, stint.jobs[0].finish_s);
  const SimResult ignore = RunPolicy(w, "stint-no-notices");
  EXPECT_GT(ignore.lost_gpu_s, 0);
}

// A 10-hour job holds the only GPU; a 30-minute one arrives after 2 hours.
// Once the long job has had 1 GPU-hour it is a service class above the
// newcomer, which preempts it (checkpointed: nothing lost) instead of
// queueing for 8 more hours; without the classes it waits.
TEST(SimStint, AttainedServiceLetsAShortJobPreemptALongOneOfItsLevel) {
  Workload w;
  w.windows = FixedCapacity(1);
  w.jobs = {Job(0, 0, 1, 36000), Job(1, 7200, 1, 1800)};
  const SimResult las = RunPolicy(w, "stint");
  ASSERT_EQ(las.conservation_violations, 0);
  EXPECT_EQ(las.jobs[0].preemptions, 1);
  EXPECT_DOUBLE_EQ(las.lost_gpu_s, 0);
  EXPECT_LT(las.jobs[1].first_start_s, 7200 + 60);  // the victim's grace: C + safety
  EXPECT_LT(las.jobs[1].finish_s, las.jobs[0].finish_s);
  for (const char* policy : {"stint-no-service", "stint-no-service-preemption", "fifo"}) {
    const SimResult r = RunPolicy(w, policy);
    ASSERT_EQ(r.conservation_violations, 0) << policy;
    EXPECT_EQ(r.jobs[0].preemptions, 0) << policy;
    EXPECT_GE(r.jobs[1].first_start_s, r.jobs[0].finish_s - 1) << policy;
  }
}

Workload Mixed(uint64_t seed) {
  JobDefaults d;
  d.seed = seed;
  SyntheticJobs g;
  g.jobs = 60;
  g.mean_interarrival_s = 200;
  g.seed = seed;
  SyntheticWindows sw;
  sw.base_gpus = 16;
  sw.fragments = 12;
  sw.spot = 4;
  sw.horizon_s = 86400;
  sw.seed = seed;
  Workload w;
  w.jobs = GenerateJobs(g, d);
  w.windows = GenerateWindows(sw);
  DropUnplaceable(&w.jobs, w.windows);
  return w;
}

TEST(SimEngine, SameSeedGivesAnIdenticalEventLog) {
  for (const char* policy : {"fifo", "easy", "slurm", "stint"}) {
    const SimResult a = RunPolicy(Mixed(7), policy);
    const SimResult b = RunPolicy(Mixed(7), policy);
    EXPECT_EQ(a.log, b.log) << policy;
    EXPECT_EQ(a.log_hash, b.log_hash) << policy;
    EXPECT_FALSE(a.log.empty());
  }
  EXPECT_NE(RunPolicy(Mixed(7), "stint").log_hash, RunPolicy(Mixed(8), "stint").log_hash);
}

TEST(SimEngine, GpuSecondsUsedNeverExceedCapacity) {
  for (const std::string& policy : AllPolicyNames()) {
    const SimResult r = RunPolicy(Mixed(3), policy);
    EXPECT_EQ(r.conservation_violations, 0) << policy;
    EXPECT_LE(r.allocated_gpu_s, r.offered_gpu_s + 1e-6) << policy;
    for (const UtilPoint& p : r.util)
      ASSERT_LE(p.allocated, p.offered) << policy << " at " << p.t_s;
    int finished = 0;
    for (const JobResult& j : r.jobs) finished += j.finish_s >= 0;
    EXPECT_EQ(finished, static_cast<int>(r.jobs.size())) << policy;
    const Metrics m = ComputeMetrics(r);
    EXPECT_LE(m.goodput, 1.0 + 1e-9) << policy;
  }
}

TEST(SimReport, TableIsNormalisedToFifo) {
  const Workload w = HeadOfLine(100);
  std::vector<Metrics> rows = {ComputeMetrics(RunPolicy(w, "fifo")),
                               ComputeMetrics(RunPolicy(w, "easy"))};
  const std::string t = FormatTable(rows, "fifo", {"# test"});
  EXPECT_NE(t.find("Normalised to fifo = 1.0"), std::string::npos);
  EXPECT_NE(t.find("| fifo | 3/3 | 1.000 |"), std::string::npos) << t;
  std::vector<SimResult> rs = {RunPolicy(w, "fifo")};
  EXPECT_NE(UtilisationSvg(rs, "t").find("<polyline"), std::string::npos);
}

// ---------------------------------------------------------------- gangs across nodes, shrink, tail

// Three nodes of 4 GPUs in one pool.
std::vector<SimWindow> Nodes(int n, int gpus) {
  std::vector<SimWindow> out(n, FixedCapacity(gpus)[0]);
  return out;
}

TEST(SimGang, AGangSpansNodesWholeUnderEveryPolicy) {
  Workload w;
  w.windows = Nodes(3, 4);
  w.jobs = {Job(0, 0, 8, 3600), Job(1, 10, 4, 3600)};
  for (const char* policy : {"fifo", "easy", "slurm", "stint"}) {
    const SimResult r = RunPolicy(w, policy);
    // The engine counts a start below min_gpus or across pools as a violation.
    EXPECT_EQ(r.conservation_violations, 0) << policy;
    EXPECT_DOUBLE_EQ(r.jobs[0].first_start_s, 0) << policy;
    // Two nodes: 1 + 0.05 slower than on one.
    EXPECT_NEAR(r.jobs[0].finish_s, 3600 * 1.05, 60) << policy;
    EXPECT_DOUBLE_EQ(r.jobs[1].first_start_s, 10) << policy;  // the third node
  }
}

TEST(SimShrink, AnElasticJobShrinksForAHigherOneAndGrowsBack) {
  Workload w;
  w.windows = FixedCapacity(8);
  SimJob elastic = Job(0, 0, 8, 10 * 3600, stintd::Priority::kLow);
  elastic.min_gpus = 4;
  w.jobs = {elastic, Job(1, 3600, 4, 3600, stintd::Priority::kHigh)};
  const SimResult r = RunPolicy(w, "stint");
  ASSERT_EQ(r.conservation_violations, 0);
  EXPECT_EQ(r.jobs[0].preemptions, 0) << "shrunk, never preempted whole";
  EXPECT_EQ(r.jobs[0].resizes, 2) << "a shrink, then a grow once the high job is done";
  EXPECT_LE(r.jobs[1].first_start_s, 3600 + 30 + 10 + 1);  // the shrink's deadline: C + safety
  EXPECT_EQ(r.lost_gpu_s, 0);
  const SimResult preempt = RunPolicy(w, "stint-no-shrink");
  EXPECT_EQ(preempt.jobs[0].preemptions, 1);
  EXPECT_LT(r.jobs[0].finish_s, preempt.jobs[0].finish_s);
}

// Plays a coordinator that shrinks job 0 (8 -> 4 GPUs at t = 150 s) after
// noticing it whole at t = 100 s, and gives the 4 GPUs to job 1 at 150 s.
class ShrinkWhileStopping : public Scheduler {
 public:
  std::string Name() const override { return "shrink-while-stopping"; }
  void Init(const Workload&) override {}
  void Submit(const SimJob&, TimeMs) override {}
  void WindowKnown(int, TimeMs) override {}
  void WindowRevoked(int, TimeMs, TimeMs) override {}
  void CheckpointDurable(int64_t, double, double, TimeMs) override {}
  void SegmentEnded(int64_t, EndKind, double, TimeMs) override {}
  // Called again at one instant until it has nothing to say: each step once.
  Decisions Schedule(TimeMs now) override {
    Decisions d;
    if (now >= step_ms_[step_]) {
      if (step_ == 0) d.starts.push_back(StartCmd{0, {SimAlloc{0, 8}}});
      if (step_ == 1) {
        d.notices.push_back(NoticeCmd{0, 300000, false});
        d.resizes.push_back(ResizeCmd{0, {SimAlloc{0, 4}}, 150000});
      }
      if (step_ == 2) d.starts.push_back(StartCmd{1, {SimAlloc{0, 4}}});
      step_++;
    }
    return d;
  }
  TimeMs NextWake(TimeMs) const override { return step_ms_[step_]; }

 private:
  const TimeMs step_ms_[4] = {0, 100000, 150000, kNever};
  int step_ = 0;
};

TEST(SimShrink, TheLeavingRanksGoAtTheDeadlineEvenWhileTheSegmentCheckpoints) {
  Workload w;
  w.windows = FixedCapacity(8);
  SimJob elastic = Job(0, 0, 8, 3600);
  elastic.min_gpus = 4;
  elastic.checkpoint_s = 100;  // noticed at 100 s, acks at 200 s
  w.jobs = {elastic, Job(1, 0, 4, 600)};
  ShrinkWhileStopping sched;
  EngineOptions o;
  o.horizon_s = 1000;  // this coordinator never restarts job 0
  const SimResult r = Simulate(w, sched, o);
  EXPECT_EQ(r.conservation_violations, 0) << r.log;
  EXPECT_EQ(r.jobs[0].resizes, 1);
  EXPECT_DOUBLE_EQ(r.jobs[1].first_start_s, 150);
}

// One GPU; a 4 h job, then 30-minute jobs arriving as fast as the GPU
// serves them for 60 h. Least attained service alone keeps the long job
// (class 1 after its first GPU-hour) behind every new one until the
// stream ends: aging restarts it, the next new job preempts it after
// min_run. The starvation guard shields it from that preemption once it
// has waited 4 times what it ran.
TEST(SimService, TheStarvationGuardFinishesALongJobLasAloneStarves) {
  Workload w;
  w.windows = FixedCapacity(1);
  w.jobs.push_back(Job(0, 0, 1, 4 * 3600));
  for (int i = 1; i <= 120; i++) w.jobs.push_back(Job(i, 60 + 1800.0 * (i - 1), 1, 1800));
  const SimResult las = RunPolicy(w, "stint-no-starvation-guard");
  const SimResult guarded = RunPolicy(w, "stint");
  ASSERT_EQ(las.conservation_violations + guarded.conservation_violations, 0);
  EXPECT_GT(las.jobs[0].finish_s, 55 * 3600.0) << "starved until the stream ends";  // 64 h
  EXPECT_LT(guarded.jobs[0].finish_s, 40 * 3600.0) << guarded.jobs[0].finish_s;  // 26 h
}

// The tail of attained-service classes: a 20 h job on one GPU has 5 h
// left when 2 h jobs start arriving every 2.5 h. By attained service it is
// the deepest class and every new job preempts it (it has more left than
// each), so it crawls through the gaps; counting the work left, it and the
// new jobs are one class and it runs to its end at about 20 h.
TEST(SimService, ALongJobNearItsEndIsNotOvertakenByEveryShorterNewJob) {
  Workload w;
  w.windows = FixedCapacity(1);
  w.jobs.push_back(Job(0, 0, 1, 20 * 3600));
  for (int i = 1; i <= 20; i++) w.jobs.push_back(Job(i, 15 * 3600 + 9000.0 * (i - 1), 1, 2 * 3600));
  const SimResult las = RunPolicy(w, "stint-las");
  const SimResult stint = RunPolicy(w, "stint-no-queue-guard");
  const SimResult guarded = RunPolicy(w, "stint");
  ASSERT_EQ(las.conservation_violations + stint.conservation_violations, 0);
  EXPECT_GT(las.jobs[0].finish_s, 30 * 3600.0) << "preempted by every new job";
  EXPECT_LT(stint.jobs[0].finish_s, 21 * 3600.0) << stint.jobs[0].finish_s;
  // The price: the 2 h jobs arriving meanwhile wait for its end (here the
  // mean JCT is 7 % higher).
  EXPECT_GT(stint.jobs[1].first_start_s, las.jobs[1].first_start_s);
  // The queue guard (on by default) undoes this here: a 2 h job that has
  // waited 0.4 x 2 h is class 0 and preempts the long one (it has more
  // left), so the new jobs wait at most about 0.8 h and the long job ends
  // after the stream, as by attained service (METHOD.md).
  ASSERT_EQ(guarded.conservation_violations, 0);
  EXPECT_GT(guarded.jobs[0].finish_s, 30 * 3600.0) << guarded.jobs[0].finish_s;
  EXPECT_LT(guarded.jobs[1].first_start_s - w.jobs[1].submit_s, 3600.0);
}

// The queue guard: on one GPU a 10 h job arrives just before a backlog
// of forty 54-minute jobs. Counting the work left it is class 2 and they
// are class 0, and as all of them age alike it first starts after the
// whole backlog (about 36 h). Once it has waited 0.4 x its length (4 h)
// it is ordered as a new job and starts at the next free GPU.
TEST(SimService, TheQueueGuardStartsALongJobBehindABacklogOfShortOnes) {
  Workload w;
  w.windows = FixedCapacity(1);
  w.jobs.push_back(Job(0, 0, 1, 2 * 3600));    // holds the GPU first
  w.jobs.push_back(Job(1, 10, 1, 10 * 3600));  // the long job
  for (int i = 2; i < 42; i++) w.jobs.push_back(Job(i, 20, 1, 0.9 * 3600));
  const SimResult guarded = RunPolicy(w, "stint");
  const SimResult unguarded = RunPolicy(w, "stint-no-queue-guard");
  ASSERT_EQ(guarded.conservation_violations + unguarded.conservation_violations, 0);
  EXPECT_GT(unguarded.jobs[1].first_start_s, 30 * 3600.0) << "behind the whole backlog";
  EXPECT_LT(guarded.jobs[1].first_start_s, 8 * 3600.0) << guarded.jobs[1].first_start_s;
}

// Two teams on 16 GPUs: team a submits twelve one-GPU jobs of an hour at
// once, team b one a minute later.
Workload TeamBurstBesideOneJob() {
  Workload w;
  w.windows = FixedCapacity(16);
  for (int i = 0; i < 12; i++) {
    w.jobs.push_back(Job(i, 0, 1, 3600));
    w.jobs.back().team = "a";
  }
  w.jobs.push_back(Job(12, 60, 1, 3600));
  w.jobs.back().team = "b";
  return w;
}

// Slurm-like with the teams' borrowing limits as GrpTRES caps
// (slurm-limits): a team at its cap has its jobs held, neither started nor
// reserved for, so the other team's jobs behind them start at once.
TEST(SimTeams, SlurmLimitsHoldsATeamAtItsCapWithoutBlockingOthers) {
  Workload w = TeamBurstBesideOneJob();
  SchedulerOptions o;
  o.team_guarantee_gpus = 2;
  o.team_borrow_limits = TeamBorrowLimits(o, w.jobs, 1);  // cap: 2 + 2 GPUs
  auto run = [&](const std::string& policy) {
    auto spec = ParsePolicy(policy, o);
    EXPECT_OK(spec);
    auto sched = MakeScheduler(spec.value(), o);
    EngineOptions e;
    e.team_guarantee_gpus = 2;
    return Simulate(w, *sched, e);
  };
  const SimResult free = run("slurm");
  const SimResult limited = run("slurm-limits");
  ASSERT_EQ(free.conservation_violations + limited.conservation_violations, 0);
  EXPECT_EQ(free.teams.at("a").peak_gpus, 12);
  EXPECT_EQ(limited.teams.at("a").peak_gpus, 4);
  EXPECT_GE(limited.jobs[11].first_start_s, 2 * 3600.0)
      << "the last wave waits for the team's room";
  EXPECT_LE(limited.jobs[12].first_start_s, 60) << "team b is not held back by a's cap";
}

// The capacity-aware lower bound on mean JCT: one GPU, jobs of 1 h and 2 h
// at 0 end at best at 1 h and 3 h (mean 2 h, above the mean work 1.5 h);
// no policy's mean is below it, on a busier trace too.
TEST(SimBound, MeanJctLowerBoundCountsCapacityAndHoldsForEveryPolicy) {
  Workload two;
  two.windows = FixedCapacity(1);
  two.jobs = {Job(0, 0, 1, 2 * 3600), Job(1, 0, 1, 3600)};
  EXPECT_NEAR(MeanJctLowerBoundS(two), 2 * 3600, 1e-6);
  Workload busy = HeadOfLine(100);
  for (int i = 3; i < 40; i++)
    busy.jobs.push_back(Job(i, 100.0 * i, 1 + i % 8, 300.0 * (1 + i % 5)));
  const double bound = MeanJctLowerBoundS(busy);
  for (const std::string policy : {"fifo", "easy", "slurm", "stint"}) {
    const Metrics m = ComputeMetrics(RunPolicy(busy, policy));
    ASSERT_EQ(m.finished, static_cast<int>(busy.jobs.size())) << policy;
    EXPECT_GE(m.jct_mean_s, bound) << policy;
  }
}

// Two teams on 16 GPUs, guarantee 2 each; team a submits 12 one-GPU jobs
// at once, b one later. Without a limit a takes every free GPU; with
// --team-borrow-factor 1 (limit = its guarantee) it never holds more than
// 4 and its jobs queue, while b's starts at once.
TEST(SimTeams, ATeamsBorrowingLimitHoldsThroughTheReplay) {
  Workload w = TeamBurstBesideOneJob();
  auto run = [&w](double factor) {
    SchedulerOptions o;
    o.team_guarantee_gpus = 2;
    if (factor >= 0) o.team_borrow_limits = TeamBorrowLimits(o, w.jobs, factor);
    auto spec = ParsePolicy("stint", o);
    EXPECT_OK(spec);
    auto sched = MakeScheduler(spec.value(), o);
    EngineOptions e;
    e.team_guarantee_gpus = 2;
    return Simulate(w, *sched, e);
  };
  const SimResult free = run(-1);
  const SimResult limited = run(1);
  ASSERT_EQ(free.conservation_violations + limited.conservation_violations, 0);
  EXPECT_EQ(free.teams.at("a").peak_gpus, 12);
  EXPECT_GT(free.teams.at("a").borrowed_gpu_s, 0);
  EXPECT_EQ(limited.teams.at("a").peak_gpus, 4);
  EXPECT_NEAR(limited.teams.at("a").borrowed_gpu_s, 2 * 3 * 3600, 2 * 3600)
      << "2 GPUs borrowed while its 12 jobs run 4 at a time";
  EXPECT_GE(limited.jobs[11].first_start_s, 2 * 3600.0) << "the last wave waits for the team's room";
  EXPECT_LE(limited.jobs[12].first_start_s, 60) << "team b is not held back by a's limit";
  EXPECT_EQ(TeamBorrowLimits(SchedulerOptions(), w.jobs, 1).at("a"), 1)
      << "no guarantee: the limit still lets its largest job start";
}

}  // namespace
}  // namespace stint::sim
