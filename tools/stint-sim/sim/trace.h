// stint-sim's input: a job trace and a capacity trace, both in seconds from
// the start of the replay, plus the adapters that read the public trace
// formats into them and a seeded synthetic generator.
//
// Every adapter validates each line and fails with kInvalidArgument naming
// the file and the 1-based line ("philly.trace:17: ..."). Nothing here keeps
// state; the functions are thread-compatible. METHOD.md describes how each
// published format is mapped onto this model.
#ifndef STINT_TOOLS_STINT_SIM_SIM_TRACE_H_
#define STINT_TOOLS_STINT_SIM_SIM_TRACE_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

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

struct Workload {
  std::vector<SimJob> jobs;
  std::vector<SimWindow> windows;
  std::string job_source;       // e.g. "philly:/path (real)"
  std::string capacity_source;  // e.g. "fixed:64 GPUs (synthetic)"
  bool synthetic_jobs = false;
  bool synthetic_capacity = false;
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

// Gavel's per-VC Philly traces (7 tab-separated fields, see the traces
// README). `path` is one .trace file (team = its stem) or a directory of
// them (all files, one team per file, merged by arrival).
Result<std::vector<SimJob>> LoadPhilly(const std::string& path, const JobDefaults& d);

// Tiresias CSV: header job_id,num_gpu,submit_time,iterations,model_name,duration,interval (CRLF
// ok).
Result<std::vector<SimJob>> LoadTiresias(const std::string& path, const JobDefaults& d);

// Helios cluster_log.csv: header job_id,user,vc,gpu_num,cpu_num,node_num,state,
// submit_time,start_time,end_time,duration,queue. GPU jobs only; team = vc;
// submit_time may be "YYYY-MM-DD HH:MM:SS" or seconds.
Result<std::vector<SimJob>> LoadHeliosJobs(const std::string& path, const JobDefaults& d);

// Alibaba cluster-trace-gpu-v2023 pod list: header name,cpu_milli,memory_mib,
// num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,
// scheduled_time. Pods with num_gpu >= 1; work = deletion - scheduled;
// qos LS/Guaranteed -> HIGH, BE -> LOW, else MEDIUM.
Result<std::vector<SimJob>> LoadAlibabaPods(const std::string& path, const JobDefaults& d);

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

// Drops jobs that no window could ever hold (min_gpus above the largest
// window for a gang, above the largest pool total otherwise) and
// renumbers; returns how many were dropped.
int DropUnplaceable(std::vector<SimJob>* jobs, const std::vector<SimWindow>& windows);

// Sorts by submit time (stable) and renumbers ids 0..n-1.
void Normalize(std::vector<SimJob>* jobs);

}  // namespace stint::sim

#endif  // STINT_TOOLS_STINT_SIM_SIM_TRACE_H_
