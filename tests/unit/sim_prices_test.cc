// stint-sim's prices: the --prices parser (refusals name the entry and what
// is wrong), the engine's charge (GPU-seconds held x the pool's price, on
// hand-made traces with known answers, the same for every policy and equal
// to stintd's own Job::cost under stint), and the two routing baselines
// (stint-first-fit takes the first pool in the table's order where the job
// fits soonest, stint-cheapest-only waits for the cheapest pool).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sim/engine.h"
#include "sim/prices.h"
#include "sim/report.h"
#include "sim/schedulers.h"
#include "sim/trace.h"
#include "sim/workload_spec.h"
#include "util/status_matchers.h"

namespace stint::sim {
namespace {

SimJob Job(int64_t id, double submit_s, int gpus, double work_s) {
  SimJob j;
  j.id = id;
  j.name = "j" + std::to_string(id);
  j.submit_s = submit_s;
  j.min_gpus = j.max_gpus = gpus;
  j.work_s = work_s;
  return j;
}

SimWindow Hard(const std::string& pool, int gpus, double start_s = 0) {
  SimWindow w;
  w.pool = pool;
  w.gpus = gpus;
  w.start_s = start_s;
  return w;
}

SimWindow Spot(const std::string& pool, int gpus, double start_s, double revoke_s) {
  SimWindow w = Hard(pool, gpus, start_s);
  w.kind = stintd::WindowKind::kSpot;
  w.end_s = kForever;
  w.revoke_s = revoke_s;
  w.notice_lead_s = 120;
  return w;
}

PriceTable Prices(const std::string& spec) {
  auto t = ParsePriceTable(spec);
  EXPECT_OK(t) << spec;
  return t.ok() ? t.value() : PriceTable();
}

SimResult RunPolicy(const Workload& w, const std::string& policy) {
  SchedulerOptions o;
  auto spec = ParsePolicy(policy, o);
  EXPECT_OK(spec) << policy;
  auto sched = MakeScheduler(spec.value(), o);
  return Simulate(w, *sched, EngineOptions());
}

// The pool a job's first segment ran in, from the engine's log.
std::string FirstPool(const Workload& w, const SimResult& r, int64_t job) {
  const std::string start = "start job=" + std::to_string(job) + " ";
  const size_t at = r.log.find(start);
  if (at == std::string::npos) return "";
  const size_t win = r.log.find(" w", at + start.size());
  return w.windows[std::stoi(r.log.substr(win + 2))].pool;
}

// ---------------------------------------------------------------- the price table

TEST(SimPrices, ParsesKindsPricesAndFractionsInOrder) {
  auto t = ParsePriceTable(
      "onprem=on_prem:0.8, ondemand=On-Demand:3.0,spot=spot:0.35*ondemand,free=on_prem:0");
  ASSERT_OK(t);
  const PriceTable& p = t.value();
  ASSERT_EQ(p.pools.size(), 4u);
  EXPECT_EQ(p.pools[0].pool, "onprem");
  EXPECT_EQ(p.pools[0].pricing, stintd::PoolPricing::kOnPrem);
  EXPECT_DOUBLE_EQ(p.pools[0].per_gpu_hour, 0.8);
  EXPECT_EQ(p.pools[1].pricing, stintd::PoolPricing::kOnDemand);
  EXPECT_EQ(p.pools[2].pool, "spot");
  EXPECT_EQ(p.pools[2].pricing, stintd::PoolPricing::kSpot);
  EXPECT_DOUBLE_EQ(p.pools[2].per_gpu_hour, 0.35 * 3.0);
  EXPECT_DOUBLE_EQ(p.PriceOf("free"), 0);
  EXPECT_DOUBLE_EQ(p.PriceOf("unknown"), 0);
  EXPECT_EQ(p.ToString(), "onprem=on_prem:0.8,ondemand=on_demand:3,spot=spot:1.05,free=on_prem:0");
  auto again = ParsePriceTable(p.ToString());
  ASSERT_OK(again);
  EXPECT_EQ(again.value().ToString(), p.ToString());
}

TEST(SimPrices, RefusesBadEntriesNamingWhichAndWhy) {
  struct Case {
    const char* spec;
    const char* message;
  };
  const Case cases[] = {
      {"", "--prices is empty"},
      {"a=spot:1,b:spot:2", "--prices entry 2 (\"b:spot:2\"): expected POOL=KIND:PRICE"},
      {"a=spot", "--prices entry 1 (\"a=spot\"): expected POOL=KIND:PRICE"},
      {"a=reserved:1",
       "--prices entry 1 (\"a=reserved:1\"): kind \"reserved\" is not one of "
       "on_prem, on_demand, spot"},
      {"a=spot:cheap",
       "--prices entry 1 (\"a=spot:cheap\"): price \"cheap\" is not a number >= 0 "
       "or FRACTION*POOL"},
      {"a=spot:-1", "price \"-1\" is not a number >= 0"},
      {"a=spot:inf", "price \"inf\" is not a number >= 0"},
      {"a=spot:1,a=on_demand:2",
       "--prices entry 2 (\"a=on_demand:2\"): pool \"a\" is priced twice"},
      {"s=spot:0.3*od,od=on_demand:3",
       "--prices entry 1 (\"s=spot:0.3*od\"): \"od\" in \"0.3*od\" is not a pool priced before it"},
      {"s=spot:x*od", "fraction in \"x*od\" is not a number >= 0"},
      {"a b=spot:1", "pool \"a b\" must match [A-Za-z0-9._-]{1,64}"},
      {"a=spot:1,", "--prices entry 2 (\"\"): expected POOL=KIND:PRICE"},
  };
  for (const Case& c : cases) {
    auto t = ParsePriceTable(c.spec);
    ASSERT_FALSE(t.ok()) << c.spec;
    EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << c.spec;
    EXPECT_NE(t.status().message().find(c.message), std::string::npos)
        << c.spec << " -> " << t.status().message();
  }
}

TEST(SimPrices, EveryPricedPoolHasCapacityAndEveryPoolAPrice) {
  const std::vector<SimWindow> windows = {Hard("onprem", 8), Hard("ondemand", 8)};
  EXPECT_OK(CheckPriceTable(PriceTable(), windows));
  EXPECT_OK(CheckPriceTable(Prices("ondemand=on_demand:3,onprem=on_prem:1"), windows));
  Status s = CheckPriceTable(Prices("onprem=on_prem:1,ondemnd=on_demand:3"), windows);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("pool \"ondemnd\" has no capacity (the capacity's pools: ondemand, "
                             "onprem)"),
            std::string::npos)
      << s.message();
  s = CheckPriceTable(Prices("onprem=on_prem:1"), windows);
  EXPECT_NE(s.message().find("the capacity's pool \"ondemand\" has no price"), std::string::npos)
      << s.message();
}

TEST(SimPrices, WorkloadSpecReadsPoolsSpotMixAndPrices) {
  WorkloadOptions o;
  o.synthetic_jobs.jobs = 20;
  o.prices = "onprem=on_prem:1,ondemand=on_demand:3,spot=spot:0.35*ondemand";
  auto w = BuildWorkload("synthetic", "spot-mix:1:2:3:4", o);
  ASSERT_OK(w);
  int onprem = 0, ondemand = 0, spot = 0, revoked = 0;
  for (const SimWindow& win : w.value().windows) {
    EXPECT_EQ(win.gpus, 8);
    if (win.pool == "onprem") onprem++;
    if (win.pool == "ondemand") ondemand++;
    if (win.pool == "spot") {
      spot++;
      EXPECT_EQ(win.kind, stintd::WindowKind::kSpot);
      revoked += win.revoke_s != kForever;
    }
  }
  EXPECT_EQ(onprem, 1);
  EXPECT_EQ(ondemand, 2);
  EXPECT_GT(spot, 3);  // three nodes, replaced after each revocation
  EXPECT_GT(revoked, 0);
  EXPECT_DOUBLE_EQ(w.value().prices.PriceOf("spot"), 1.05);
  EXPECT_NE(w.value().capacity_source.find("pool spot: 3 spot nodes x 8 GPUs"), std::string::npos)
      << w.value().capacity_source;

  // A pool of the capacity without a price, and a bad pool name.
  o.prices = "onprem=on_prem:1,ondemand=on_demand:3";
  auto bad = BuildWorkload("synthetic", "spot-mix", o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("pool \"spot\" has no price"), std::string::npos);
  o.prices.clear();
  bad = BuildWorkload("synthetic", "on prem=fixed:8", o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("capacity pool name \"on prem\""), std::string::npos);
  // POOL= before the first ':' only: a path may hold '='.
  auto plain = BuildWorkload("synthetic", "a=nodes:2:4+b=fixed:8", o);
  ASSERT_OK(plain);
  EXPECT_EQ(plain.value().windows.size(), 3u);
}

TEST(SimPrices, SpotNodesAreRevokedAtTheirRateAndStayAfterTheHorizon) {
  SyntheticSpotNodes g;
  g.nodes = 50;
  g.mean_life_s = 3 * 3600;
  g.mean_gap_s = 3600;
  g.horizon_s = 30 * 86400;
  g.seed = 5;
  const std::vector<SimWindow> w = GenerateSpotNodes(g);
  double life = 0;
  int revoked = 0, forever = 0;
  for (const SimWindow& win : w) {
    if (win.revoke_s == kForever) {
      forever++;
      continue;
    }
    revoked++;
    life += win.revoke_s - win.start_s;
    EXPECT_LT(win.revoke_s, g.horizon_s);
  }
  EXPECT_EQ(forever, g.nodes);
  // ~ 30 d x 24 / 4 h per cycle x 50 nodes = 9000 revocations, mean life ~3 h.
  EXPECT_NEAR(revoked, 9000, 500);
  EXPECT_NEAR(life / revoked / 3600, 3.0, 0.2);
  EXPECT_EQ(GenerateSpotNodes(g).size(), w.size());  // seeded
}

// ---------------------------------------------------------------- charges and routing

// Two pools of 4 GPUs: "cheap" at 1/GPU-h, "dear" at 4/GPU-h, listed dear
// first; two 4-GPU jobs of one hour submitted at once.
Workload TwoPools(const std::string& prices) {
  Workload w;
  w.windows = {Hard("cheap", 4), Hard("dear", 4)};
  w.jobs = {Job(0, 0, 4, 3600), Job(1, 0, 4, 3600)};
  w.prices = Prices(prices);
  return w;
}

TEST(SimPrices, EveryPolicyIsChargedGpuSecondsHeldTimesThePoolsPrice) {
  const Workload w = TwoPools("dear=on_demand:4,cheap=on_prem:1");
  // stint: both start now, the first in order on the cheap pool; first-fit:
  // on the first pool of the table, the dear one; FIFO places by window
  // (the tightest, then the first); cheapest-only: one after the other on
  // the cheap pool.
  struct Want {
    const char* policy;
    double cost0, cost1, finish1;
  };
  for (const Want& want : {Want{"stint", 4, 16, 3600}, Want{"stint-first-fit", 16, 4, 3600},
                           Want{"fifo", 4, 16, 3600}, Want{"stint-cheapest-only", 4, 4, 7200}}) {
    const SimResult r = RunPolicy(w, want.policy);
    ASSERT_EQ(r.conservation_violations, 0) << want.policy;
    EXPECT_NEAR(r.jobs[0].cost, want.cost0, 1e-9) << want.policy;
    EXPECT_NEAR(r.jobs[1].cost, want.cost1, 1e-9) << want.policy;
    EXPECT_DOUBLE_EQ(r.jobs[1].finish_s, want.finish1) << want.policy;
    EXPECT_NEAR(r.cost, want.cost0 + want.cost1, 1e-9) << want.policy;
    EXPECT_NEAR(r.pools.at("cheap").cost + r.pools.at("dear").cost, r.cost, 1e-9) << want.policy;
    EXPECT_NEAR(r.pools.at("cheap").gpu_s + r.pools.at("dear").gpu_s, 8 * 3600, 1e-6)
        << want.policy;
    const Metrics m = ComputeMetrics(r);
    EXPECT_NEAR(m.cost_total, r.cost, 1e-9);
    EXPECT_NEAR(m.cost_per_job, r.cost / 2, 1e-9);
  }
  // Without a price table nothing is charged.
  const SimResult free = RunPolicy(TwoPools("dear=on_demand:4,cheap=on_prem:1"), "stint");
  Workload unpriced = w;
  unpriced.prices = PriceTable();
  EXPECT_DOUBLE_EQ(RunPolicy(unpriced, "stint").cost, 0);
  EXPECT_GT(free.cost, 0);
}

TEST(SimPrices, FirstFitTakesTheFirstPoolInTheTablesOrderWhereTheJobFits) {
  // Listed cheap first, first-fit and stint agree.
  const Workload cheap_first = TwoPools("cheap=on_prem:1,dear=on_demand:4");
  const SimResult ff = RunPolicy(cheap_first, "stint-first-fit");
  EXPECT_EQ(FirstPool(cheap_first, ff, 0), "cheap");
  EXPECT_EQ(FirstPool(cheap_first, ff, 1), "dear");
  // A 4-GPU job where the first pool has only 2: the next pool in order,
  // now, not the first pool later.
  Workload w;
  w.windows = {Hard("small", 2), Hard("b", 4), Hard("c", 4)};
  w.jobs = {Job(0, 0, 4, 3600), Job(1, 10, 1, 3600)};
  w.prices = Prices("small=on_prem:5,c=on_demand:3,b=on_demand:1");
  const SimResult r = RunPolicy(w, "stint-first-fit");
  ASSERT_EQ(r.conservation_violations, 0);
  EXPECT_EQ(FirstPool(w, r, 0), "c");      // first in order that holds it, though b is cheaper
  EXPECT_EQ(FirstPool(w, r, 1), "small");  // the first pool, though the dearest
  EXPECT_DOUBLE_EQ(r.jobs[0].first_start_s, 0);
  EXPECT_NEAR(r.jobs[0].cost, 4 * 3, 1e-9);
  EXPECT_NEAR(r.jobs[1].cost, 1 * 5, 1e-9);
  // stint: the cheapest pool that holds each now.
  const SimResult s = RunPolicy(w, "stint");
  EXPECT_EQ(FirstPool(w, s, 0), "b");
  EXPECT_EQ(FirstPool(w, s, 1), "c");  // b's 4 GPUs are taken: the next cheapest now
}

TEST(SimPrices, CheapestOnlyWaitsForTheCheapestPoolThatCanHoldTheJob) {
  Workload w;
  w.windows = {Hard("cheap", 2), Hard("mid", 8), Hard("dear", 8)};
  // Two 2-GPU jobs and one 4-GPU job the cheap pool can never hold.
  w.jobs = {Job(0, 0, 2, 3600), Job(1, 1, 2, 3600), Job(2, 0, 4, 3600)};
  w.prices = Prices("dear=on_demand:4,mid=on_demand:2,cheap=on_prem:1");
  const SimResult r = RunPolicy(w, "stint-cheapest-only");
  ASSERT_EQ(r.conservation_violations, 0);
  EXPECT_EQ(FirstPool(w, r, 0), "cheap");
  EXPECT_EQ(FirstPool(w, r, 1), "cheap");
  EXPECT_EQ(FirstPool(w, r, 2), "mid");
  EXPECT_DOUBLE_EQ(r.jobs[1].first_start_s, 3600);  // waited for the cheap pool
  EXPECT_NEAR(r.cost, 2 * 1 + 2 * 1 + 4 * 2, 1e-9);
  EXPECT_DOUBLE_EQ(r.pools.at("dear").gpu_s, 0);
  // stint starts the second job at once on the next cheapest pool.
  const SimResult s = RunPolicy(w, "stint");
  EXPECT_EQ(FirstPool(w, s, 1), "mid");
  EXPECT_DOUBLE_EQ(s.jobs[1].first_start_s, 1);
}

// A spot window of 4 GPUs revoked at 1800 s (notice at 1680 s), a second
// one from 2000 s, and an on-demand pool: one 4-GPU job of one hour.
Workload Revoked() {
  Workload w;
  w.windows = {Spot("spot", 4, 0, 1800), Spot("spot", 4, 2000, kForever), Hard("ondemand", 4)};
  w.jobs = {Job(0, 0, 4, 3600)};
  w.prices = Prices("ondemand=on_demand:3,spot=spot:1");
  return w;
}

TEST(SimPrices, ARevokedSegmentPaysItsCheckpointAndTheNextOneItsRestart) {
  const Workload w = Revoked();
  // stint: spot first (cheaper); the notice at 1680 s stops it for its
  // checkpoint (C = 30 s), the ack at 1710 s frees the GPUs; it resumes at
  // once on demand with 1920 s of work left after R = 60 s: done at 3690 s.
  const SimResult s = RunPolicy(w, "stint");
  ASSERT_EQ(s.conservation_violations, 0);
  EXPECT_DOUBLE_EQ(s.lost_gpu_s, 0);
  EXPECT_DOUBLE_EQ(s.jobs[0].finish_s, 3690);
  EXPECT_NEAR(s.jobs[0].cost, 4 * 1710 / 3600.0 * 1 + 4 * (3690 - 1710) / 3600.0 * 3, 1e-9);
  EXPECT_NEAR(s.pools.at("spot").gpu_s, 4 * 1710, 1e-6);
  // cheapest-only waits for the next spot window: 2000 + 60 + 1920.
  const SimResult c = RunPolicy(w, "stint-cheapest-only");
  EXPECT_DOUBLE_EQ(c.jobs[0].finish_s, 3980);
  EXPECT_NEAR(c.jobs[0].cost, 4 * 1710 / 3600.0 + 4 * (3980 - 2000) / 3600.0, 1e-9);
  // first-fit, on-demand listed first: one uninterrupted hour there.
  const SimResult f = RunPolicy(w, "stint-first-fit");
  EXPECT_DOUBLE_EQ(f.jobs[0].finish_s, 3600);
  EXPECT_NEAR(f.jobs[0].cost, 4 * 3, 1e-9);
}

// The engine's charge and stintd's own (AccountTime -> Job::cost, at the
// price each segment started at) agree under every routing that gives the
// planner the real prices; first-fit's planner prices are ranks, no money.
TEST(SimPrices, TheEnginesCostIsStintdsOwnJobCost) {
  std::vector<Workload> workloads = {TwoPools("dear=on_demand:4,cheap=on_prem:1"), Revoked()};
  // A busier mix: synthetic jobs on spot nodes revoked every 2 h on
  // average, preemptions and requeues included.
  WorkloadOptions o;
  o.synthetic_jobs.jobs = 60;
  o.synthetic_jobs.mean_interarrival_s = 400;
  o.jobs.seed = 11;
  o.jobs.elastic_fraction = 0.5;  // shrinks and grows change a segment's GPUs
  o.prices = "onprem=on_prem:1,ondemand=on_demand:3,spot=spot:0.35*ondemand";
  auto mix = BuildWorkload("synthetic", "spot-mix:1:2:3:2", o);
  ASSERT_OK(mix);
  workloads.push_back(mix.value());
  for (size_t i = 0; i < workloads.size(); i++) {
    for (const char* policy : {"stint", "stint-cheapest-only"}) {
      const SimResult r = RunPolicy(workloads[i], policy);
      ASSERT_EQ(r.conservation_violations, 0) << policy << " workload " << i;
      int finished = 0;
      for (const JobResult& j : r.jobs) {
        if (j.finish_s < 0) continue;
        finished++;
        ASSERT_GE(j.coordinator_cost, 0) << policy << " job " << j.id;
        EXPECT_NEAR(j.coordinator_cost, j.cost, 1e-9 * std::max(1.0, j.cost))
            << policy << " workload " << i << " job " << j.id;
      }
      EXPECT_EQ(finished, static_cast<int>(r.jobs.size())) << policy << " workload " << i;
      const Metrics m = ComputeMetrics(r);
      EXPECT_GE(m.coordinator_cost_gap, 0);
      EXPECT_LT(m.coordinator_cost_gap, 1e-9);
    }
    const SimResult ff = RunPolicy(workloads[i], "stint-first-fit");
    for (const JobResult& j : ff.jobs) EXPECT_EQ(j.coordinator_cost, -1);
    EXPECT_EQ(ComputeMetrics(ff).coordinator_cost_gap, -1);
  }
}

TEST(SimPrices, TheCostTableComparesWithFirstFit) {
  const Workload w = TwoPools("dear=on_demand:4,cheap=on_prem:1");
  const std::vector<Metrics> rows = {ComputeMetrics(RunPolicy(w, "stint")),
                                     ComputeMetrics(RunPolicy(w, "stint-first-fit"))};
  const std::string t = FormatCostTable(rows, "stint-first-fit", w.prices);
  EXPECT_NE(t.find("| policy | done | cost total | cost/job | cost / stint-first-fit | JCT mean "
                   "(h) | / stint-first-fit | JCT p99 (h) | / stint-first-fit | GPU-h dear | GPU-h "
                   "cheap |"),
            std::string::npos)
      << t;
  // Both pay 20 here: the same two GPU-hours, routed the other way round.
  EXPECT_NE(t.find("| stint | 2/2 | 20.0 | 10.00 | 1.000 | 1.00 | 1.000 | 1.00 | 1.000 | 4 | 4 |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("stintd's Job::cost within"), std::string::npos) << t;
}

}  // namespace
}  // namespace stint::sim
