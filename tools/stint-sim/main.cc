// stint-sim: replay a job trace and a capacity trace through stint's policy
// (tools/stintd/core, the code stintd runs) and through FIFO, FIFO + EASY
// backfill and a Slurm-like multifactor scheduler, under a virtual clock.
//
//   stint-sim --trace philly:/work/shared/traces/philly-gavel-msr-seed0/6214e9.trace
//             --capacity fixed:64 [--policies fifo,easy,slurm,stint] [--out DIR]
//
// Prints a Markdown table (absolute, then normalised to FIFO = 1.0). With
// --out writes table.md, results.json, utilisation.svg and one event log per
// policy. The same inputs and --seed give byte-identical event logs. See
// METHOD.md for the model, the adapters and the metric definitions.
#include <chrono>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "sim/engine.h"
#include "sim/report.h"
#include "sim/schedulers.h"
#include "sim/workload_spec.h"

namespace {

// Each team's jobs, mean queue delay, mean slowdown and guarantee (stint's).
// Also the GPUs it held: mean, peak and borrowed (above its guarantee),
// and its borrowing limit (-1: none).
nlohmann::json TeamsJson(const stint::sim::Metrics& m, const stint::sim::SimResult& r,
                         const stint::sim::SchedulerOptions& so) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [team, t] : m.teams) {
    auto b = so.team_borrow_limits.find(team);
    auto use = r.teams.find(team);
    const stint::sim::TeamUse u = use != r.teams.end() ? use->second : stint::sim::TeamUse();
    out[team] = {{"jobs", t.jobs},
                 {"queue_mean_s", t.queue_mean_s},
                 {"slowdown_mean", t.slowdown_mean},
                 {"guarantee_gpus", stint::sim::TeamGuarantee(so, team)},
                 {"borrow_limit_gpus", b != so.team_borrow_limits.end() ? b->second : -1},
                 {"gpus_mean", r.end_s > 0 ? u.gpu_s / r.end_s : 0.0},
                 {"gpus_peak", u.peak_gpus},
                 {"borrowed_gpus_mean", r.end_s > 0 ? u.borrowed_gpu_s / r.end_s : 0.0},
                 {"borrowed_gpu_h", u.borrowed_gpu_s / 3600}};
  }
  return out;
}

std::vector<std::string> SplitComma(const std::string& s) {
  std::vector<std::string> out;
  size_t from = 0;
  while (from <= s.size()) {
    const size_t at = s.find(',', from);
    const std::string part =
        s.substr(from, at == std::string::npos ? std::string::npos : at - from);
    if (!part.empty()) out.push_back(part);
    if (at == std::string::npos) break;
    from = at + 1;
  }
  return out;
}

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    std::fprintf(stderr, "stint-sim: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  return true;
}

// stint-sim's command line: the options fill the workload's, the
// schedulers' and the engine's options, and these.
struct Flags {
  std::string trace = "synthetic", capacity = "synthetic", policies = "all", out_dir;
  stint::sim::WorkloadOptions wo;
  stint::sim::SchedulerOptions so;
  stint::sim::EngineOptions eo;
  double max_work_h = 0, horizon_days = 0;
  bool no_gang = false;
  std::string start_at = "auto";
  std::string team_guarantees;
  double team_borrow_factor = -1;
};

void AddFlags(CLI::App& app, Flags* f) {
  stint::sim::WorkloadOptions& wo = f->wo;
  stint::sim::SchedulerOptions& so = f->so;
  stint::sim::EngineOptions& eo = f->eo;
  app.add_option("--trace", f->trace,
                 "philly:PATH | tiresias:PATH | helios:PATH | alibaba:PATH | synthetic");
  app.add_option("--capacity", f->capacity,
                 "parts joined by '+': fixed:GPUS | nodes:NODES[:GPUS_PER_NODE] | "
                 "helios:PATH[:COLUMN[:GPUS]] | bamboo-nodes:PATH[:GPUS_PER_NODE] "
                 "| bamboo-avail:PATH[:GPUS[:h]] | "
                 "spot-nodes:NODES[:GPUS_PER_NODE[:MEAN_LIFE_H[:MEAN_GAP_H]]] | synthetic; a part "
                 "may end in @spot, and begin with POOL= to put its windows in pool POOL (default "
                 "p0); spot-mix[:ONPREM[:ONDEMAND[:SPOT[:MEAN_LIFE_H]]]] (nodes of 8 GPUs, "
                 "default 2:4:4:6) = onprem=nodes:ONPREM:8+ondemand=nodes:ONDEMAND:8+"
                 "spot=spot-nodes:SPOT:8:MEAN_LIFE_H:1");
  app.add_option("--prices", wo.prices,
                 "price table, POOL=KIND:PRICE,...: KIND on_prem|on_demand|spot, PRICE per "
                 "GPU-hour or FRACTION*POOL (a pool listed before), e.g. "
                 "onprem=on_prem:0.8,ondemand=on_demand:3,spot=spot:0.35*ondemand; every pool of "
                 "the capacity needs one. Costs every policy; stint routes by it; "
                 "stint-first-fit tries the pools in this order");
  app.add_option("--spot-horizon-days", wo.spot_horizon_days,
                 "spot-nodes: revocations until the last arrival + this (days)");
  app.add_option("--policies", f->policies,
                 "comma-separated, or 'all' (fifo,easy,slurm,slurm-limits,stint,stint-*)");
  app.add_option("--out", f->out_dir,
                 "write table.md, results.json, utilisation.svg, events-<policy>.log here");
  app.add_option("--seed", wo.jobs.seed, "seed for synthetic parts");
  app.add_option("--max-jobs", wo.max_jobs, "replay only the first N jobs");
  app.add_option("--arrival-scale", wo.arrival_scale, "multiply submit times (< 1: more load)");
  app.add_option("--checkpoint-s", wo.jobs.checkpoint_s, "C: checkpoint cost, s");
  app.add_option("--restart-s", wo.jobs.restart_s, "R: restart cost, s");
  app.add_option("--interval-s", wo.jobs.interval_s, "I: periodic checkpoint interval, s");
  app.add_option("--philly-median-s", wo.jobs.philly_median_s,
                 "Philly: run time of each job type's median job");
  app.add_option("--max-work-h", f->max_work_h, "cap each job's work (hours; 0 = no cap)");
  app.add_option("--elastic-fraction", wo.jobs.elastic_fraction,
                 "share of multi-GPU jobs that may run on half");
  app.add_flag("--no-gang", f->no_gang, "jobs may be assembled from several windows of a pool");
  app.add_flag("--synthetic-priorities", wo.synthetic_priorities,
               "assign LOW/MEDIUM/HIGH (labelled synthetic)");
  app.add_option("--notice-lead-s", wo.notice_lead_s, "spot revocation notice, s");
  app.add_option(
      "--start-at", f->start_at,
      "real traces: start the replay where arrivals begin in earnest (auto, default), at the "
      "first arrival (first), or at SECONDS of the trace's clock");
  app.add_option("--synthetic-jobs", wo.synthetic_jobs.jobs, "synthetic: number of jobs");
  app.add_option("--synthetic-gap-s", wo.synthetic_jobs.mean_interarrival_s,
                 "synthetic: mean inter-arrival, s");
  app.add_option("--synthetic-teams", wo.synthetic_jobs.teams, "synthetic: teams");
  app.add_option("--estimate-factor", so.estimate_factor,
                 "runtime estimates / time limits = true x this");
  app.add_option("--team-guarantee", so.team_guarantee_gpus, "stint: every team's guaranteed GPUs");
  app.add_option("--team-guarantees", f->team_guarantees,
                 "stint: helios:PATH:GPUS: per-team guarantees from the Helios per-VC GPU counts "
                 "(largest VC to the team with most jobs), scaled to sum to GPUS");
  app.add_option(
      "--team-borrow-factor", f->team_borrow_factor,
      "stint: each team may borrow max(ceil(F x guarantee), its largest job's min_gpus - "
      "guarantee) GPUs above its guarantee (< 0: no limit)");
  app.add_option("--plan-depth", so.stint.plan_depth, "stint PolicyConfig.plan_depth");
  app.add_option("--aging-points", so.stint.aging_points_per_hour,
                 "stint PolicyConfig.aging_points_per_hour");
  app.add_option("--fair-share-points", so.stint.fair_share_points,
                 "stint PolicyConfig.fair_share_points");
  app.add_option("--service-class-points", so.stint.service_class_points,
                 "stint PolicyConfig.service_class_points");
  app.add_option("--service-class-gpu-hours", so.stint.service_class_gpu_hours,
                 "stint PolicyConfig.service_class_gpu_hours");
  app.add_option("--starvation-factor", so.stint.service_starvation_factor,
                 "stint PolicyConfig.service_starvation_factor");
  app.add_option("--queue-guard-factor", so.stint.service_queue_guard_factor,
                 "stint PolicyConfig.service_queue_guard_factor (0: off)");
  app.add_option("--min-run-s", so.stint.min_run_seconds,
                 "stint min_run_seconds (also Slurm PreemptExemptTime)");
  app.add_option("--safety-s", so.stint.safety_seconds,
                 "stint safety_seconds (also Slurm GraceTime margin)");
  app.add_option("--gang-span-slowdown", so.stint.gang_span_slowdown,
                 "a gang on k windows (nodes) runs 1 + this x (k - 1) times slower (every "
                 "policy; stint's planner sees it)");
  app.add_option("--tick-s", eo.tick_s, "schedule at least this often while jobs wait (virtual s)");
  app.add_option("--horizon-days", f->horizon_days,
                 "stop the replay here (0: when every job is done)");
}

// --team-guarantees helios:PATH:GPUS into so->team_guarantees. False, with
// a message on stderr, when the spec or the file is bad.
bool SetTeamGuarantees(const std::string& spec, const stint::sim::Workload& w,
                       stint::sim::SchedulerOptions* so) {
  using namespace stint::sim;
  // helios:PATH:GPUS (PATH may hold ':').
  const size_t colon = spec.rfind(':');
  const std::string prefix = "helios:";
  char* end = nullptr;
  const long total =
      colon == std::string::npos ? 0 : std::strtol(spec.c_str() + colon + 1, &end, 10);
  if (spec.rfind(prefix, 0) != 0 || colon < prefix.size() || end == nullptr || *end != '\0' ||
      total <= 0 || total > 1000000) {
    std::fprintf(stderr, "stint-sim: --team-guarantees expects helios:PATH:GPUS (got \"%s\")\n",
                 spec.c_str());
    return false;
  }
  const std::string path = spec.substr(prefix.size(), colon - prefix.size());
  auto g = HeliosTeamGuarantees(path, w.jobs, static_cast<int>(total));
  if (!g.ok()) {
    std::fprintf(stderr, "stint-sim: %s\n", g.status().message().c_str());
    return false;
  }
  so->team_guarantees = std::move(g).value();
  return true;
}

// GPU-hours held and cost, by pool.
nlohmann::json PoolsJson(const stint::sim::Metrics& m) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [pool, use] : m.pools)
    out[pool] = {{"gpu_h", use.gpu_s / 3600}, {"cost", use.cost}};
  return out;
}

// One policy's row of results.json.
nlohmann::json PolicyJson(const stint::sim::Metrics& m, const stint::sim::SimResult& r,
                          const stint::sim::SchedulerOptions& so, double wall) {
  return {{"jct_mean_s", m.jct_mean_s},
          {"jct_median_s", m.jct_median_s},
          {"jct_p99_s", m.jct_p99_s},
          {"queue_mean_s", m.queue_mean_s},
          {"queue_p99_s", m.queue_p99_s},
          {"gpu_util", m.gpu_util},
          {"window_util", m.window_util},
          {"fragmentation", m.fragmentation},
          {"goodput", m.goodput},
          {"lost_gpu_h", m.lost_gpu_h},
          {"interrupts_per_job", m.interrupts_per_job},
          {"preemptions_per_job", m.preemptions_per_job},
          {"resizes_per_job", m.resizes_per_job},
          {"fairness_jain", m.fairness_jain},
          {"teams", TeamsJson(m, r, so)},
          {"cost_total", m.cost_total},
          {"cost_per_job", m.cost_per_job},
          {"pools", PoolsJson(m)},
          {"coordinator_cost_gap", m.coordinator_cost_gap},
          {"finished", m.finished},
          {"jobs", m.jobs},
          {"violations", m.violations},
          {"log_hash", m.log_hash},
          {"wall_s", wall}};
}

// The lines above the report's table: the inputs and the job model.
std::vector<std::string> ReportHeader(const stint::sim::Workload& w,
                                      const stint::sim::WorkloadOptions& wo,
                                      const stint::sim::SchedulerOptions& so) {
  std::vector<std::string> header = {
      "# stint-sim report",
      "",
      std::string("- jobs: ") + w.job_source + " — " + std::to_string(w.jobs.size()) + " jobs" +
          (w.synthetic_jobs ? " **[SYNTHETIC]**" : ""),
      std::string("- capacity: ") + w.capacity_source + " — " + std::to_string(w.windows.size()) +
          " windows" + (w.synthetic_capacity ? " **[SYNTHETIC]**" : ""),
      std::string("- trace input: ") + (w.synthetic_jobs ? "synthetic" : w.load.Summary()),
      "- job model: C = " + std::to_string(wo.jobs.checkpoint_s) +
          " s, R = " + std::to_string(wo.jobs.restart_s) +
          " s, I = " + std::to_string(wo.jobs.interval_s) + " s; estimates x" +
          std::to_string(so.estimate_factor) + "; seed " + std::to_string(wo.jobs.seed),
  };
  if (!w.prices.empty()) {
    header.push_back("- prices per GPU-hour: " + w.prices.ToString() +
                     " (stint-first-fit tries the pools in this order)");
  }
  return header;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace stint::sim;
  CLI::App app{"stint-sim: replay cluster traces through stint's policy and baselines"};
  Flags f;
  AddFlags(app, &f);
  CLI11_PARSE(app, argc, argv);
  WorkloadOptions& wo = f.wo;
  SchedulerOptions& so = f.so;
  EngineOptions& eo = f.eo;
  const std::string& out_dir = f.out_dir;
  wo.jobs.gang = !f.no_gang;
  wo.jobs.max_work_s = f.max_work_h * 3600;
  wo.synthetic_windows.seed = wo.jobs.seed;
  eo.horizon_s = f.horizon_days * 86400;
  eo.keep_log = !out_dir.empty();
  eo.gang_span_slowdown = so.stint.gang_span_slowdown;

  auto start = ParseStartAt(f.start_at);
  if (!start.ok()) {
    std::fprintf(stderr, "stint-sim: %s\n", start.status().message().c_str());
    return 2;
  }
  wo.start_at = start.value();
  auto workload = BuildWorkload(f.trace, f.capacity, wo);
  if (!workload.ok()) {
    std::fprintf(stderr, "stint-sim: %s\n", workload.status().message().c_str());
    return 2;
  }
  std::vector<std::string> names = f.policies == "all" ? AllPolicyNames() : SplitComma(f.policies);
  std::vector<PolicySpec> specs;
  for (const std::string& n : names) {
    auto spec = ParsePolicy(n, so);
    if (!spec.ok()) {
      std::fprintf(stderr, "stint-sim: %s\n", spec.status().message().c_str());
      return 2;
    }
    specs.push_back(spec.value());
  }
  if (!out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    if (ec) {
      std::fprintf(stderr, "stint-sim: cannot create --out %s: %s\n", out_dir.c_str(),
                   ec.message().c_str());
      return 2;
    }
  }

  const Workload& w = workload.value();
  if (!f.team_guarantees.empty() && !SetTeamGuarantees(f.team_guarantees, w, &so)) return 2;
  if (f.team_borrow_factor >= 0)
    so.team_borrow_limits = TeamBorrowLimits(so, w.jobs, f.team_borrow_factor);
  eo.team_guarantees = so.team_guarantees;
  eo.team_guarantee_gpus = so.team_guarantee_gpus;
  if (!w.synthetic_jobs) std::fprintf(stderr, "stint-sim: trace: %s\n", w.load.Summary().c_str());
  std::vector<SimResult> results;
  std::vector<Metrics> rows;
  nlohmann::json js;
  js["jobs"] = w.job_source;
  // The mean JCT with zero queueing and no interruption: no policy's is lower.
  double work_sum = 0;
  for (const SimJob& j : w.jobs) work_sum += j.work_s;
  js["work_mean_s"] = w.jobs.empty() ? 0.0 : work_sum / w.jobs.size();
  // ... and with the capacity counted (pooled, shortest remaining first).
  js["jct_bound_s"] = MeanJctLowerBoundS(w);
  js["capacity"] = w.capacity_source;
  if (!w.prices.empty()) js["prices"] = w.prices.ToString();
  if (!w.synthetic_jobs) {
    js["input"] = {
        {"rows", w.load.rows},           {"skipped", w.load.skipped},
        {"censored", w.load.censored},   {"fractional_gpus_rounded_up", w.load.fractional},
        {"work_capped", w.load.capped},  {"start_s", w.load.start_s},
        {"trimmed_s", w.load.trimmed_s}, {"lead_in_joined", w.load.lead_in_joined},
        {"summary", w.load.Summary()}};
  }
  for (const PolicySpec& spec : specs) {
    EngineOptions e = eo;
    e.workers_ignore_notices = spec.workers_ignore_notices;
    auto sched = MakeScheduler(spec, so);
    const auto t0 = std::chrono::steady_clock::now();
    SimResult r = Simulate(w, *sched, e);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    Metrics m = ComputeMetrics(r);
    std::fprintf(stderr,
                 "stint-sim: %-20s %d/%d jobs done in %.1f s wall (%" PRId64 " schedule calls)\n",
                 spec.name.c_str(), m.finished, m.jobs, wall, r.schedule_calls);
    if (!out_dir.empty()) {
      if (!WriteFile(out_dir + "/events-" + spec.name + ".log", r.log)) return 1;
      r.log.clear();
    }
    js["policies"][spec.name] = PolicyJson(m, r, so, wall);
    rows.push_back(m);
    results.push_back(std::move(r));
  }
  const std::vector<std::string> header = ReportHeader(w, wo, so);
  std::string table =
      FormatTable(rows, rows.empty() ? "" : (names[0] == "fifo" ? "fifo" : rows[0].policy), header);
  if (!w.prices.empty() && !rows.empty()) {
    // Against first-fit, the routing the issue compares with, where it ran.
    std::string base = rows[0].policy;
    for (const Metrics& m : rows) {
      if (m.policy == "stint-first-fit") base = m.policy;
    }
    table += FormatCostTable(rows, base, w.prices);
  }
  std::fputs(table.c_str(), stdout);
  if (!out_dir.empty()) {
    if (!WriteFile(out_dir + "/table.md", table)) return 1;
    if (!WriteFile(out_dir + "/results.json", js.dump(2) + "\n")) return 1;
    if (!WriteFile(out_dir + "/utilisation.svg",
                   UtilisationSvg(results, "utilisation over time: " + w.job_source.substr(0, 60))))
      return 1;
  }
  int64_t violations = 0;
  for (const Metrics& m : rows) violations += m.violations;
  return violations == 0 ? 0 : 3;
}
