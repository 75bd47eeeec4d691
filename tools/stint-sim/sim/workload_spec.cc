#include "sim/workload_spec.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
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

Result<double> PositiveNumber(const std::string& s, const std::string& what) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(v > 0) || v > 1e9) {
    return Status::InvalidArgument(what + " must be a number > 0 (got \"" + s + "\")");
  }
  return v;
}

// What a capacity part needs besides its text: the seed of a synthetic
// part (each part its own stream) and where spot revocations stop.
struct PartContext {
  uint64_t seed = 1;
  double spot_horizon_s = 0;
};

// spot-nodes:NODES[:GPUS_PER_NODE[:MEAN_LIFE_H[:MEAN_GAP_H]]]
Result<std::vector<SimWindow>> SpotNodesPart(const std::string& rest, const WorkloadOptions& o,
                                             const PartContext& ctx, std::string* label) {
  const std::vector<std::string> f = SplitOn(rest, ':');
  SyntheticSpotNodes g;
  if (f.size() > 4) {
    return Status::InvalidArgument(
        "spot-nodes expects NODES[:GPUS_PER_NODE[:MEAN_LIFE_H[:MEAN_GAP_H]]] (got \"" + rest +
        "\")");
  }
  STINT_ASSIGN_OR_RETURN(g.nodes, PositiveInt(f[0], "spot-nodes NODES"));
  if (f.size() > 1) {
    STINT_ASSIGN_OR_RETURN(g.gpus_per_node, PositiveInt(f[1], "spot-nodes GPUS_PER_NODE"));
  }
  if (f.size() > 2) {
    STINT_ASSIGN_OR_RETURN(double h, PositiveNumber(f[2], "spot-nodes MEAN_LIFE_H"));
    g.mean_life_s = h * 3600;
  }
  if (f.size() > 3) {
    STINT_ASSIGN_OR_RETURN(double h, PositiveNumber(f[3], "spot-nodes MEAN_GAP_H"));
    g.mean_gap_s = h * 3600;
  }
  g.horizon_s = ctx.spot_horizon_s;
  g.notice_s = o.notice_lead_s;
  g.seed = ctx.seed;
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "%d spot nodes x %d GPUs, each revoked after %.1f h on average (exponential), "
                "replaced after %.1f h, %.0f s notice, revocations until %.0f d, seed %llu "
                "(SYNTHETIC)",
                g.nodes, g.gpus_per_node, g.mean_life_s / 3600, g.mean_gap_s / 3600, g.notice_s,
                g.horizon_s / 86400, static_cast<unsigned long long>(g.seed));
  *label = buf;
  return GenerateSpotNodes(g);
}

Result<std::vector<SimWindow>> CapacityWindows(std::string part, const WorkloadOptions& o,
                                               const PartContext& ctx, std::string* label,
                                               bool* synthetic);

Result<std::vector<SimWindow>> CapacityPart(std::string part, const WorkloadOptions& o,
                                            const PartContext& ctx, std::string* label,
                                            bool* synthetic) {
  // POOL=PART: the part's windows are in pool POOL (default p0). Only
  // before the part's first ':', so that a path may hold '='.
  std::string pool;
  const size_t eq = part.find('=');
  if (eq != std::string::npos && eq < part.find(':')) {
    pool = part.substr(0, eq);
    part = part.substr(eq + 1);
    const bool valid =
        !pool.empty() && pool.size() <= 64 && std::all_of(pool.begin(), pool.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
        });
    if (!valid) {
      return Status::InvalidArgument("capacity pool name \"" + pool +
                                     "\" must match [A-Za-z0-9._-]{1,64}");
    }
  }
  STINT_ASSIGN_OR_RETURN(std::vector<SimWindow> out,
                         CapacityWindows(part, o, ctx, label, synthetic));
  if (!pool.empty()) {
    for (SimWindow& w : out) w.pool = pool;
    *label = "pool " + pool + ": " + *label;
  }
  return out;
}

Result<std::vector<SimWindow>> CapacityWindows(std::string part, const WorkloadOptions& o,
                                               const PartContext& ctx, std::string* label,
                                               bool* synthetic) {
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
  } else if (type == "nodes") {
    const std::vector<std::string> f = SplitOn(rest, ':');
    if (f.size() > 2)
      return Status::InvalidArgument("nodes expects NODES[:GPUS_PER_NODE] (got \"" + rest + "\")");
    STINT_ASSIGN_OR_RETURN(int nodes, PositiveInt(f[0], "nodes NODES"));
    int per = 8;
    if (f.size() > 1) {
      STINT_ASSIGN_OR_RETURN(per, PositiveInt(f[1], "nodes GPUS_PER_NODE"));
    }
    out = NodeCapacity(nodes, per);
    *label = std::to_string(nodes) + " nodes x " + std::to_string(per) +
             " GPUs (synthetic: hard windows for the whole replay)";
    *synthetic = true;
  } else if (type == "spot-nodes") {
    STINT_ASSIGN_OR_RETURN(out, SpotNodesPart(rest, o, ctx, label));
    *synthetic = true;
  } else if (type == "synthetic") {
    out = GenerateWindows(o.synthetic_windows);
    *label = "synthetic windows (base " + std::to_string(o.synthetic_windows.base_gpus) +
             " GPUs, " + std::to_string(o.synthetic_windows.fragments) + " hard fragments, " +
             std::to_string(o.synthetic_windows.spot) + " spot, seed " +
             std::to_string(o.synthetic_windows.seed) + ") (SYNTHETIC)";
    *synthetic = true;
  } else {
    return Status::InvalidArgument("unknown capacity \"" + type +
                                   "\" (fixed:, nodes:, helios:, bamboo-nodes:, bamboo-avail:, "
                                   "spot-nodes:, spot-mix, synthetic)");
  }
  if (spot && type != "bamboo-nodes" && type != "bamboo-avail" && type != "spot-nodes") {
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

// The capacity's parts, a spot-mix[:ONPREM[:ONDEMAND[:SPOT[:MEAN_LIFE_H]]]]
// part replaced by the three pools it stands for (nodes of 8 GPUs).
Result<std::vector<std::string>> ExpandSpotMix(const std::string& capacity) {
  std::vector<std::string> out;
  for (const std::string& part : SplitOn(capacity, '+')) {
    if (part != "spot-mix" && part.rfind("spot-mix:", 0) != 0) {
      out.push_back(part);
      continue;
    }
    const std::vector<std::string> f =
        part == "spot-mix" ? std::vector<std::string>() : SplitOn(part.substr(9), ':');
    if (f.size() > 4) {
      return Status::InvalidArgument(
          "spot-mix expects [:ONPREM_NODES[:ONDEMAND_NODES[:SPOT_NODES[:MEAN_LIFE_H]]]] (got \"" +
          part + "\")");
    }
    const std::vector<std::string> defaults = {std::to_string(kSpotMixDefaults.onprem_nodes),
                                               std::to_string(kSpotMixDefaults.ondemand_nodes),
                                               std::to_string(kSpotMixDefaults.spot_nodes),
                                               std::to_string(kSpotMixDefaults.mean_life_h)};
    auto field = [&](size_t i) { return i < f.size() && !f[i].empty() ? f[i] : defaults[i]; };
    out.push_back("onprem=nodes:" + field(0) + ":8");
    out.push_back("ondemand=nodes:" + field(1) + ":8");
    out.push_back("spot=spot-nodes:" + field(2) + ":8:" + field(3) + ":1");
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
  STINT_ASSIGN_OR_RETURN(const std::vector<std::string> parts, ExpandSpotMix(capacity));
  PartContext ctx;
  double last_submit = 0;
  for (const SimJob& j : w.jobs) last_submit = std::max(last_submit, j.submit_s);
  ctx.spot_horizon_s = last_submit + o.spot_horizon_days * 86400;
  for (size_t i = 0; i < parts.size(); i++) {
    const std::string& part = parts[i];
    std::string label;
    bool synthetic = false;
    ctx.seed = o.jobs.seed + 0x1000193ull * i;
    STINT_ASSIGN_OR_RETURN(auto windows, CapacityPart(part, o, ctx, &label, &synthetic));
    w.windows.insert(w.windows.end(), windows.begin(), windows.end());
    labels.push_back(label);
    w.synthetic_capacity = w.synthetic_capacity || synthetic;
  }
  for (size_t i = 0; i < labels.size(); i++) w.capacity_source += (i ? " + " : "") + labels[i];
  std::stable_sort(w.windows.begin(), w.windows.end(),
                   [](const SimWindow& a, const SimWindow& b) { return a.start_s < b.start_s; });
  if (!o.prices.empty()) {
    STINT_ASSIGN_OR_RETURN(w.prices, ParsePriceTable(o.prices));
    STINT_RETURN_IF_ERROR(CheckPriceTable(w.prices, w.windows));
  }
  const int dropped = DropUnplaceable(&w.jobs, w.windows);
  if (dropped > 0) {
    w.job_source += "; " + std::to_string(dropped) + " jobs larger than any pool dropped";
    if (!w.synthetic_jobs) w.load.skipped["jobs larger than any pool"] += dropped;
  }
  if (w.jobs.empty()) return Status::InvalidArgument("the trace has no jobs that fit the capacity");
  return w;
}

}  // namespace stint::sim
