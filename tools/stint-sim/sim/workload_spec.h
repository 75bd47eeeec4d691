// Builds a Workload from the command line's --trace and --capacity
// strings (grammar in METHOD.md), labelling every synthetic part.
#ifndef STINT_TOOLS_STINT_SIM_SIM_WORKLOAD_SPEC_H_
#define STINT_TOOLS_STINT_SIM_SIM_WORKLOAD_SPEC_H_

#include <string>

#include "sim/trace.h"

namespace stint::sim {

struct WorkloadOptions {
  JobDefaults jobs;
  int max_jobs = 0;                   // > 0: only the first N jobs (by submit time)
  double arrival_scale = 1.0;         // submit times x this (< 1: more load)
  bool synthetic_priorities = false;  // LOW/MEDIUM/HIGH 30/55/15 % (seeded), labelled synthetic
  SyntheticJobs synthetic_jobs;
  SyntheticWindows synthetic_windows;
  double notice_lead_s = 120;  // spot capacity from step series / node traces
  StartAt start_at;            // real job traces: where the replay starts (TrimLeadIn)
  // spot-nodes: revocations are drawn until the last arrival + this; a
  // node open then stays.
  double spot_horizon_days = 60;
  // --prices (ParsePriceTable's grammar); empty: nothing is charged.
  std::string prices;
};

// The spot-mix preset's pools when its fields are left out (nodes of 8 GPUs).
struct SpotMixDefaults {
  int onprem_nodes = 2;
  int ondemand_nodes = 4;
  int spot_nodes = 4;
  int mean_life_h = 6;
};
inline constexpr SpotMixDefaults kSpotMixDefaults{};

// trace: philly:PATH | tiresias:PATH | helios:PATH | alibaba:PATH | synthetic
// capacity (parts joined by '+'): fixed:GPUS | nodes:NODES[:GPUS_PER_NODE] |
//   helios:PATH[:COLUMN[:GPUS]] | bamboo-nodes:PATH[:GPUS_PER_NODE] |
//   bamboo-avail:PATH[:GPUS_PER_INSTANCE[:h]] |
//   spot-nodes:NODES[:GPUS_PER_NODE[:MEAN_LIFE_H[:MEAN_GAP_H]]] | synthetic ;
//   each part may end in @spot to make its windows spot windows and begin
//   with POOL= to put them in pool POOL (default p0). spot-mix[:ONPREM[:
//   ONDEMAND[:SPOT[:MEAN_LIFE_H]]]] stands for onprem=nodes:ONPREM:8 +
//   ondemand=nodes:ONDEMAND:8 + spot=spot-nodes:SPOT:8:MEAN_LIFE_H:1.
Result<Workload> BuildWorkload(const std::string& trace, const std::string& capacity,
                               const WorkloadOptions& o);

}  // namespace stint::sim

#endif  // STINT_TOOLS_STINT_SIM_SIM_WORKLOAD_SPEC_H_
