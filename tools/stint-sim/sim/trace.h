// stint-sim's input: a job trace and a capacity trace, both in seconds from
// the start of the replay, plus the adapters that read the public trace
// formats into them and a seeded synthetic generator.
//
// Every adapter reads the files as published: rows it cannot replay (a pod
// never scheduled, a CPU-only job, ...) are skipped and counted by reason
// in a LoadReport. Only a malformed file is an error: kInvalidArgument
// naming the file, the 1-based line and the column ("pods.csv:17:
// scheduled_time (column 11) is not a number (got \"x\")"). Nothing here
// keeps state; the functions are thread-compatible. METHOD.md describes how
// each published format is mapped onto this model.
#ifndef STINT_TOOLS_STINT_SIM_SIM_TRACE_H_
#define STINT_TOOLS_STINT_SIM_SIM_TRACE_H_

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "sim/prices.h"
#include "stintd/core/model.h"
#include "stint/status.h"

namespace stint::sim {

constexpr double kForever = std::numeric_limits<double>::infinity();
// A hard window with no end in the trace lasts this long (10 years).
constexpr double kLongSeconds = 10 * 365 * 86400.0;

struct SimJob {
  int64_t id = 0;  // dense, 0-based, in submit order
  std::string name;
  std::string team = "default";
  stintd::Priority priority = stintd::Priority::kMedium;
  double submit_s = 0;
  int min_gpus = 1;
  int max_gpus = 1;          // progress rate is gpus / max_gpus (linear scaling)
  double work_s = 0;         // run time at max_gpus without interruptions, > 0
  double checkpoint_s = 30;  // C: time for a checkpoint to become durable
  double restart_s = 60;     // R: time from segment start to the first training step
  double interval_s = 600;   // I: compute seconds between periodic checkpoints
  bool gang = true;          // all GPUs of a segment from one window
  bool preemptible = true;
};

// Capacity lent for [start_s, end_s). A spot window's end is unknown to
// the scheduler (end_s = kForever) until the provider revokes it: a notice
// at revoke_s - notice_lead_s, GPUs gone at revoke_s.
struct SimWindow {
  std::string pool = "p0";
  int gpus = 0;
  double start_s = 0;
  double end_s = kLongSeconds;
  stintd::WindowKind kind = stintd::WindowKind::kHard;
  double notice_lead_s = 0;
  double revoke_s = kForever;
  double gone_s() const { return kind == stintd::WindowKind::kSpot ? revoke_s : end_s; }
};

// What a job reader did not replay as written, for the run's report.
struct LoadReport {
  int64_t rows = 0;                        // data rows read
  std::map<std::string, int64_t> skipped;  // reason ("never-scheduled pods") -> rows
  int64_t censored = 0;    // still running at the trace end: replayed with the duration up to it
  int64_t fractional = 0;  // a share of a GPU (gpu_milli < 1000): rounded up to whole GPUs
  int64_t capped = 0;      // work above JobDefaults::max_work_s, cut to it
  // Set by TrimLeadIn: the trace time the replay starts at, how much of the
  // trace before it was cut, and the lead-in jobs still running there.
  double start_s = 0;
  double trimmed_s = 0;
  int64_t lead_in_joined = 0;

  int64_t skipped_total() const;
  // One line: "8152 rows; skipped 897 never-scheduled pods, 12 CPU-only
  // pods; 40 censored ...; trimmed 9437497 s of lead-in".
  std::string Summary() const;
};

struct Workload {
  std::vector<SimJob> jobs;
  std::vector<SimWindow> windows;
  std::string job_source;       // e.g. "philly:/path (real)"
  std::string capacity_source;  // e.g. "fixed:64 GPUs (synthetic)"
  bool synthetic_jobs = false;
  bool synthetic_capacity = false;
  LoadReport load;  // what the job reader skipped, censored, rounded and trimmed (real traces)
  // What each pool's GPUs cost (--prices); empty: nothing is charged.
  PriceTable prices;
};

// Job-side defaults applied by every adapter (a trace gives arrivals, GPU
// counts and work; the checkpoint model comes from here).
struct JobDefaults {
  double checkpoint_s = 30;
  double restart_s = 60;
  double interval_s = 600;
  bool gang = true;
  double max_work_s = 0;          // > 0: cap each job's work (reported in the source label)
  double philly_median_s = 3600;  // Philly: each job type's median total_steps maps to this
  double elastic_fraction = 0;    // this share of multi-GPU jobs gets min_gpus = max_gpus / 2
  uint64_t seed = 1;
};

// ---- Job traces ----
//
// Every reader returns jobs with submit times on the trace's own clock (the
// file's seconds; Helios dates as Unix seconds); TrimLeadIn moves the start
// of the replay to 0. `report` (optional) receives the counts.

// Gavel's per-VC Philly traces (7 tab-separated fields, see the traces
// README). `path` is one .trace file (team = its stem) or a directory of
// them (all files, one team per file, merged by arrival).
Result<std::vector<SimJob>> LoadPhilly(const std::string& path, const JobDefaults& d,
                                       LoadReport* report = nullptr);

// Tiresias CSV: header job_id,num_gpu,submit_time,iterations,model_name,duration,interval (CRLF
// ok). Skips num_gpu 0 ("CPU-only jobs") and duration 0 ("zero-length jobs").
Result<std::vector<SimJob>> LoadTiresias(const std::string& path, const JobDefaults& d,
                                         LoadReport* report = nullptr);

// Helios cluster_log.csv: header job_id,user,vc,gpu_num,cpu_num,node_num,state,
// submit_time,start_time,end_time,duration,queue. Team = vc; submit_time may
// be "YYYY-MM-DD HH:MM:SS" (UTC) or seconds. Skips gpu_num 0 ("CPU-only
// jobs") and an empty or 0 duration ("never-started jobs").
Result<std::vector<SimJob>> LoadHeliosJobs(const std::string& path, const JobDefaults& d,
                                           LoadReport* report = nullptr);

// Alibaba cluster-trace-gpu-v2023 pod list: header name,cpu_milli,memory_mib,
// num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,
// scheduled_time. work = deletion - scheduled; qos LS/Guaranteed -> HIGH,
// BE -> LOW, else MEDIUM. Skips num_gpu 0 ("CPU-only pods"), an empty
// scheduled_time ("never-scheduled pods"), deletion <= scheduled
// ("zero-length pods"). A pod still running at the trace end (deletion_time
// empty, or pod_phase Running with the file's largest deletion_time, the
// collection's end) is censored: replayed with the duration up to that end.
// gpu_milli < 1000 (a share of one GPU) is rounded up to a whole GPU.
Result<std::vector<SimJob>> LoadAlibabaPods(const std::string& path, const JobDefaults& d,
                                            LoadReport* report = nullptr);

// Where the replay starts, on the trace's clock.
struct StartAt {
  enum class Mode { kFirst, kAuto, kSeconds };
  Mode mode = Mode::kFirst;
  double seconds = 0;  // kSeconds
};
// "first" | "auto" | SECONDS (>= 0).
Result<StartAt> ParseStartAt(const std::string& s);

// The start of arrivals in earnest: the first arrival a_i (submit order)
// from which the next k = ceil(N / 20) arrivals come at least half as fast
// as the trace's mean rate, a_{i+k} - a_i <= 2 k (a_{N-1} - a_0) / (N - 1);
// the first arrival when none does.
double EarnestStart(const std::vector<SimJob>& jobs);

// Starts the replay at `at` (first arrival, EarnestStart, or seconds): a job
// submitted before the start that would have ended by then (submit + work
// <= start, run on arrival) is skipped ("lead-in jobs ended before the
// start"); one still running joins at the start with the work left
// (submit + work - start); then every submit time is shifted by -start.
// Records start_s, trimmed_s and lead_in_joined in `report`; renumbers.
void TrimLeadIn(std::vector<SimJob>* jobs, const StartAt& at, LoadReport* report);

// ---- Capacity traces ----

// One hard window of `gpus` for the whole replay.
std::vector<SimWindow> FixedCapacity(int gpus);

// Turns a capacity step function (time_s, gpus) into windows with a stack:
// a rise opens a window of the added GPUs, a fall closes the newest
// windows (a partly closed one is replaced by a smaller one). The last
// level lasts until `last_end_s`. Windows are hard (known close) or spot
// (closed by revocation with `notice_lead_s`).
std::vector<SimWindow> StepsToWindows(const std::vector<std::pair<double, int>>& steps,
                                      double last_end_s, stintd::WindowKind kind,
                                      double notice_lead_s, const std::string& pool);

// Helios cluster_gpu_number.csv (header date,vc...,total): one step per
// day for `column` ("total" or a VC name), multiplied by `scale` and
// rounded; day 0 is the first row.
Result<std::vector<std::pair<double, int>>> LoadHeliosCapacity(const std::string& path,
                                                               const std::string& column,
                                                               double scale);

// Per-team guarantees from a Helios cluster_gpu_number.csv: the first
// day's GPUs of each VC column (not date or total; VCs with 0 left out),
// largest first, go to `jobs`' teams ordered by job count (largest first,
// then name), scaled so they sum to at most `total_gpus` (rounded down).
// Teams beyond the VCs get 0. Errors name the file and line.
Result<std::map<std::string, int>> HeliosTeamGuarantees(const std::string& path,
                                                        const std::vector<SimJob>& jobs,
                                                        int total_gpus);

// Bamboo node events (ms,add|remove,nodeN): one spot window per node of
// `gpus_per_node`, revoked at its remove event with `notice_lead_s`.
Result<std::vector<SimWindow>> LoadBambooNodes(const std::string& path, int gpus_per_node,
                                               double notice_lead_s);

// Bamboo availability step function (time,count): `hours` says the unit.
Result<std::vector<std::pair<double, int>>> LoadBambooAvailability(const std::string& path,
                                                                   bool hours,
                                                                   int gpus_per_instance);

// ---- Synthetic (labelled synthetic in every report) ----

struct SyntheticJobs {
  int jobs = 200;
  double mean_interarrival_s = 300;
  int teams = 4;
  uint64_t seed = 1;
};
// Arrivals Poisson; GPUs from {1:50%, 2:15%, 4:15%, 8:15%, 16:5%}; work
// log-uniform in [5 min, 24 h]; priority LOW 30% / MEDIUM 55% / HIGH 15%;
// team uniform over team0..team{teams-1}.
std::vector<SimJob> GenerateJobs(const SyntheticJobs& g, const JobDefaults& d);

struct SyntheticWindows {
  int base_gpus = 32;  // a hard window for the whole replay
  int fragments = 40;  // hard fragment windows of 4/8/16 GPUs, 30 min to 8 h
  int spot = 10;       // spot windows of 8 GPUs revoked after 1 to 12 h
  double horizon_s = 7 * 86400.0;
  double spot_notice_s = 120;
  uint64_t seed = 1;
};
std::vector<SimWindow> GenerateWindows(const SyntheticWindows& g);

// `nodes` hard windows of `gpus_per_node` each for the whole replay: a
// pool of nodes, so that a gang larger than a node spans nodes (and pays
// the span slowdown) as it does on spot nodes.
std::vector<SimWindow> NodeCapacity(int nodes, int gpus_per_node);

// Spot nodes revoked at a rate: each of `nodes` slots holds a node for an
// exponential time of mean `mean_life_s` (revoked with `notice_s` of
// notice), then stays empty for an exponential time of mean `mean_gap_s`
// before a new node opens in it. Revocations are drawn up to `horizon_s`;
// a node open then is never revoked. Seeded; labelled synthetic.
struct SyntheticSpotNodes {
  int nodes = 4;
  int gpus_per_node = 8;
  double mean_life_s = 6 * 3600.0;
  double mean_gap_s = 3600.0;
  double horizon_s = 60 * 86400.0;
  double notice_s = 120;
  uint64_t seed = 1;
};
std::vector<SimWindow> GenerateSpotNodes(const SyntheticSpotNodes& g);

// Drops jobs that no pool could ever hold (min_gpus above the most GPUs a
// pool has open at once: a gang may span a pool's windows) and renumbers;
// returns how many were dropped.
int DropUnplaceable(std::vector<SimJob>* jobs, const std::vector<SimWindow>& windows);

// Sorts by submit time (stable) and renumbers ids 0..n-1.
void Normalize(std::vector<SimJob>* jobs);

}  // namespace stint::sim

#endif  // STINT_TOOLS_STINT_SIM_SIM_TRACE_H_
