#include "sim/workload_spec.h"

#include <algorithm>
#include <cstdlib>
#include <random>

namespace stint::sim {
namespace {

std::vector<std::string> SplitOn(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t from = 0;
  while (true) {
    const size_t at = s.find(sep, from);
    out.push_back(s.substr(from, at == std::string::npos ? std::string::npos : at - from));
    if (at == std::string::npos) break;
    from = at + 1;
  }
  return out;
}

Result<int> PositiveInt(const std::string& s, const std::string& what) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < 1 || v > 1'000'000) {
    return Status::InvalidArgument(what + " must be a positive integer (got \"" + s + "\")");
  }
  return static_cast<int>(v);
}

Result<std::vector<SimWindow>> CapacityPart(std::string part, const WorkloadOptions& o,
                                            std::string* label, bool* synthetic) {
  bool spot = false;
  if (part.size() > 5 && part.compare(part.size() - 5, 5, "@spot") == 0) {
    spot = true;
    part.resize(part.size() - 5);
  }
  const stintd::WindowKind kind = spot ? stintd::WindowKind::kSpot : stintd::WindowKind::kHard;
  const size_t colon = part.find(':');
  const std::string type = part.substr(0, colon);
  const std::string rest = colon == std::string::npos ? "" : part.substr(colon + 1);
  std::vector<SimWindow> out;
  if (type == "fixed") {
    STINT_ASSIGN_OR_RETURN(int gpus, PositiveInt(rest, "fixed:GPUS"));
    out = FixedCapacity(gpus);
    *label =
        "fixed " + std::to_string(gpus) + " GPUs (synthetic: one hard window for the whole replay)";
    *synthetic = true;
  } else if (type == "helios") {
    // PATH[:COLUMN[:GPUS]]; a path has no ':' in our use.
    const std::vector<std::string> f = SplitOn(rest, ':');
    const std::string column = f.size() > 1 ? f[1] : "total";
    STINT_ASSIGN_OR_RETURN(auto steps, LoadHeliosCapacity(f[0], column, 1.0));
    double scale = 1.0;
    if (f.size() > 2) {
      STINT_ASSIGN_OR_RETURN(int gpus, PositiveInt(f[2], "helios GPUS"));
      if (steps[0].second <= 0)
        return Status::InvalidArgument("helios column " + column + " starts at 0 GPUs");
      scale = static_cast<double>(gpus) / steps[0].second;
      STINT_ASSIGN_OR_RETURN(steps, LoadHeliosCapacity(f[0], column, scale));
    }
    const double last = steps.back().first + 86400.0;
    out = StepsToWindows(steps, std::max(last, kLongSeconds), kind, o.notice_lead_s, "p0");
    *label = "helios " + f[0] + " column " + column + " x" + std::to_string(scale) +
             " (real daily capacity series, last day extended)";
  } else if (type == "bamboo-nodes") {
    const std::vector<std::string> f = SplitOn(rest, ':');
    int per = 8;
    if (f.size() > 1) {
      STINT_ASSIGN_OR_RETURN(per, PositiveInt(f[1], "GPUS_PER_NODE"));
    }
    STINT_ASSIGN_OR_RETURN(out, LoadBambooNodes(f[0], per, o.notice_lead_s));
    for (SimWindow& w : out) w.pool = "p0";
    *label = "bamboo node events " + f[0] + " x" + std::to_string(per) +
             " GPUs/node (real spot add/remove)";
  } else if (type == "bamboo-avail") {
    const std::vector<std::string> f = SplitOn(rest, ':');
    int per = 8;
    if (f.size() > 1) {
      STINT_ASSIGN_OR_RETURN(per, PositiveInt(f[1], "GPUS_PER_INSTANCE"));
    }
    const bool hours = f.size() > 2 && f[2] == "h";
    STINT_ASSIGN_OR_RETURN(auto steps, LoadBambooAvailability(f[0], hours, per));
    out = StepsToWindows(steps, kLongSeconds, spot ? kind : stintd::WindowKind::kSpot,
                         o.notice_lead_s, "p0");
    *label =
        "bamboo availability " + f[0] + " x" + std::to_string(per) + " GPUs (real spot series)";
  } else if (type == "synthetic") {
    out = GenerateWindows(o.synthetic_windows);
    *label = "synthetic windows (base " + std::to_string(o.synthetic_windows.base_gpus) +
             " GPUs, " + std::to_string(o.synthetic_windows.fragments) + " hard fragments, " +
             std::to_string(o.synthetic_windows.spot) + " spot, seed " +
             std::to_string(o.synthetic_windows.seed) + ") (SYNTHETIC)";
    *synthetic = true;
  } else {
    return Status::InvalidArgument("unknown capacity \"" + type +
                                   "\" (fixed:, helios:, bamboo-nodes:, bamboo-avail:, synthetic)");
  }
  if (spot && type != "bamboo-nodes" && type != "bamboo-avail") {
    for (SimWindow& w : out) {
      if (w.kind == stintd::WindowKind::kHard) {
        w.kind = stintd::WindowKind::kSpot;
        w.notice_lead_s = o.notice_lead_s;
        w.revoke_s = w.end_s >= kLongSeconds ? kForever : w.end_s;
        w.end_s = kForever;
      }
    }
    *label += " as spot";
  }
  return out;
}

}  // namespace

Result<Workload> BuildWorkload(const std::string& trace, const std::string& capacity,
                               const WorkloadOptions& o) {
  Workload w;
  const size_t colon = trace.find(':');
  const std::string type = trace.substr(0, colon);
  const std::string path = colon == std::string::npos ? "" : trace.substr(colon + 1);
  if (type == "philly") {
    STINT_ASSIGN_OR_RETURN(w.jobs, LoadPhilly(path, o.jobs, &w.load));
    w.job_source = "philly " + path +
                   " (real arrivals and GPU counts; work = total_steps scaled so each job "
                   "type's median runs " +
                   std::to_string(static_cast<int>(o.jobs.philly_median_s)) + " s)";
  } else if (type == "tiresias") {
    STINT_ASSIGN_OR_RETURN(w.jobs, LoadTiresias(path, o.jobs, &w.load));
    w.job_source = "tiresias " + path + " (real arrivals, GPUs, durations)";
  } else if (type == "helios") {
    STINT_ASSIGN_OR_RETURN(w.jobs, LoadHeliosJobs(path, o.jobs, &w.load));
    w.job_source = "helios " + path + " (real)";
  } else if (type == "alibaba") {
    STINT_ASSIGN_OR_RETURN(w.jobs, LoadAlibabaPods(path, o.jobs, &w.load));
    w.job_source = "alibaba " + path +
                   " (real; fractional GPUs rounded up, censored pods run to the trace end)";
  } else if (type == "synthetic") {
    SyntheticJobs g = o.synthetic_jobs;
    g.seed = o.jobs.seed;
    w.jobs = GenerateJobs(g, o.jobs);
    w.job_source = "synthetic jobs (" + std::to_string(g.jobs) + " jobs, mean gap " +
                   std::to_string(static_cast<int>(g.mean_interarrival_s)) + " s, seed " +
                   std::to_string(g.seed) + ") (SYNTHETIC)";
    w.synthetic_jobs = true;
  } else {
    return Status::InvalidArgument("unknown trace \"" + type +
                                   "\" (philly:, tiresias:, helios:, alibaba:, synthetic)");
  }
  if (!w.synthetic_jobs) {
    TrimLeadIn(&w.jobs, o.start_at, &w.load);
    if (w.jobs.empty()) return Status::InvalidArgument("the trace has no jobs to replay");
  }
  if (o.max_jobs > 0 && static_cast<int>(w.jobs.size()) > o.max_jobs) w.jobs.resize(o.max_jobs);
  for (SimJob& j : w.jobs) j.submit_s *= o.arrival_scale;
  if (o.synthetic_priorities) {
    std::mt19937_64 rng(o.jobs.seed ^ 0x2545f4914f6cdd1dull);
    std::uniform_real_distribution<double> u(0, 1);
    for (SimJob& j : w.jobs) {
      const double p = u(rng);
      j.priority = p < 0.3    ? stintd::Priority::kLow
                   : p < 0.85 ? stintd::Priority::kMedium
                              : stintd::Priority::kHigh;
    }
    w.job_source += "; priorities SYNTHETIC (LOW/MEDIUM/HIGH 30/55/15 %)";
  }
  if (o.max_jobs > 0) w.job_source += "; first " + std::to_string(o.max_jobs) + " jobs";
  if (o.arrival_scale != 1.0) w.job_source += "; arrivals x" + std::to_string(o.arrival_scale);
  if (o.jobs.max_work_s > 0)
    w.job_source +=
        "; work capped at " + std::to_string(static_cast<int>(o.jobs.max_work_s)) + " s";
  std::vector<std::string> labels;
  for (const std::string& part : SplitOn(capacity, '+')) {
    std::string label;
    bool synthetic = false;
    STINT_ASSIGN_OR_RETURN(auto windows, CapacityPart(part, o, &label, &synthetic));
    w.windows.insert(w.windows.end(), windows.begin(), windows.end());
    labels.push_back(label);
    w.synthetic_capacity = w.synthetic_capacity || synthetic;
  }
  for (size_t i = 0; i < labels.size(); i++) w.capacity_source += (i ? " + " : "") + labels[i];
  std::stable_sort(w.windows.begin(), w.windows.end(),
                   [](const SimWindow& a, const SimWindow& b) { return a.start_s < b.start_s; });
  const int dropped = DropUnplaceable(&w.jobs, w.windows);
  if (dropped > 0) {
    w.job_source += "; " + std::to_string(dropped) + " jobs larger than any pool dropped";
    if (!w.synthetic_jobs) w.load.skipped["jobs larger than any pool"] += dropped;
  }
  if (w.jobs.empty()) return Status::InvalidArgument("the trace has no jobs that fit the capacity");
  return w;
}

}  // namespace stint::sim
