#include "sim/report.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <utility>

namespace stint::sim {
namespace {

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / v.size();
}

// Nearest-rank percentile.
double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * v.size()));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

}  // namespace

double MeanJctLowerBoundS(const Workload& w) {
  if (w.jobs.empty()) return 0;
  // Capacity steps: (time, +gpus / -gpus).
  std::vector<std::pair<double, int>> steps;
  for (const SimWindow& win : w.windows) {
    if (win.gpus <= 0 || win.gone_s() <= win.start_s) continue;
    steps.emplace_back(win.start_s, win.gpus);
    steps.emplace_back(win.gone_s(), -win.gpus);
  }
  std::sort(steps.begin(), steps.end());
  std::vector<std::pair<double, double>> arrivals;  // (submit, volume)
  double work_sum = 0;
  for (const SimJob& j : w.jobs) {
    arrivals.emplace_back(j.submit_s, j.work_s * std::max(1, j.max_gpus));
    work_sum += j.work_s;
  }
  std::sort(arrivals.begin(), arrivals.end());
  // Remaining volume and submit time of the jobs in the system, smallest first.
  std::priority_queue<std::pair<double, double>, std::vector<std::pair<double, double>>,
                      std::greater<>>
      queue;
  size_t next_arrival = 0, next_step = 0;
  double t = std::min(arrivals[0].first, steps.empty() ? arrivals[0].first : steps[0].first);
  double capacity = 0, flow_sum = 0;
  size_t done = 0;
  while (next_arrival < arrivals.size() || (!queue.empty() && next_step < steps.size()) ||
         (!queue.empty() && capacity > 0)) {
    while (next_step < steps.size() && steps[next_step].first <= t)
      capacity += steps[next_step++].second;
    while (next_arrival < arrivals.size() && arrivals[next_arrival].first <= t) {
      queue.emplace(arrivals[next_arrival].second, arrivals[next_arrival].first);
      next_arrival++;
    }
    double next_event = std::numeric_limits<double>::infinity();
    if (next_step < steps.size()) next_event = steps[next_step].first;
    if (next_arrival < arrivals.size())
      next_event = std::min(next_event, arrivals[next_arrival].first);
    // Serve the smallest until it ends or the next event.
    while (!queue.empty() && capacity > 0) {
      const auto [left, submit] = queue.top();
      const double end = t + left / capacity;
      if (end > next_event) {
        queue.pop();
        queue.emplace(left - capacity * (next_event - t), submit);
        break;
      }
      queue.pop();
      flow_sum += end - submit;
      done++;
      t = end;
    }
    if (next_event == std::numeric_limits<double>::infinity()) break;
    t = next_event;
  }
  const double fluid = done > 0 ? flow_sum / done : 0;
  return std::max(fluid, work_sum / w.jobs.size());
}

Metrics ComputeMetrics(const SimResult& r) {
  Metrics m;
  m.policy = r.policy;
  m.jobs = static_cast<int>(r.jobs.size());
  std::vector<double> jct, queue;
  std::map<std::string, std::vector<double>> slowdown, team_queue;
  int interrupts = 0, preempts = 0, resizes = 0;
  for (const JobResult& j : r.jobs) {
    interrupts += j.interruptions;
    preempts += j.preemptions;
    resizes += j.resizes;
    m.teams[j.team].jobs++;
    if (j.first_start_s >= 0) {
      queue.push_back(j.first_start_s - j.submit_s);
      team_queue[j.team].push_back(j.first_start_s - j.submit_s);
    }
    if (j.finish_s < 0) continue;
    m.finished++;
    jct.push_back(j.finish_s - j.submit_s);
    slowdown[j.team].push_back((j.finish_s - j.submit_s) / std::max(1.0, j.work_s));
    m.makespan_s = std::max(m.makespan_s, j.finish_s);
  }
  m.jct_mean_s = Mean(jct);
  m.jct_median_s = Pct(jct, 50);
  m.jct_p99_s = Pct(jct, 99);
  m.queue_mean_s = Mean(queue);
  m.queue_p99_s = Pct(queue, 99);
  m.gpu_util = r.offered_gpu_s > 0 ? r.allocated_gpu_s / r.offered_gpu_s : 0;
  m.window_util = r.demand_capped_gpu_s > 0 ? r.allocated_gpu_s / r.demand_capped_gpu_s : 0;
  m.fragmentation = r.offered_gpu_s > 0 ? r.idle_while_waiting_gpu_s / r.offered_gpu_s : 0;
  m.goodput = r.allocated_gpu_s > 0 ? r.useful_gpu_s / r.allocated_gpu_s : 0;
  m.lost_gpu_h = r.lost_gpu_s / 3600.0;
  m.interrupts_per_job = m.jobs > 0 ? static_cast<double>(interrupts) / m.jobs : 0;
  m.preemptions_per_job = m.jobs > 0 ? static_cast<double>(preempts) / m.jobs : 0;
  m.resizes_per_job = m.jobs > 0 ? static_cast<double>(resizes) / m.jobs : 0;
  for (auto& [team, t] : m.teams) {
    t.queue_mean_s = Mean(team_queue[team]);
    t.slowdown_mean = Mean(slowdown[team]);
  }
  double sum = 0, sq = 0;
  int n = 0;
  for (const auto& [team, v] : slowdown) {
    const double x = Mean(v);
    sum += x;
    sq += x * x;
    n++;
  }
  m.fairness_jain = n > 0 && sq > 0 ? sum * sum / (n * sq) : 1.0;
  m.violations = r.conservation_violations;
  m.log_hash = r.log_hash;
  m.cost_total = r.cost;
  m.cost_per_job = m.jobs > 0 ? r.cost / m.jobs : 0;
  m.pools = r.pools;
  for (const JobResult& j : r.jobs) {
    if (j.finish_s < 0 || j.coordinator_cost < 0) continue;
    const double gap = std::abs(j.cost - j.coordinator_cost) / std::max(j.cost, 1e-9);
    m.coordinator_cost_gap = std::max(m.coordinator_cost_gap, gap);
  }
  return m;
}

std::string FormatCostTable(const std::vector<Metrics>& rows, const std::string& baseline,
                            const PriceTable& prices) {
  const Metrics* base = nullptr;
  for (const Metrics& m : rows) {
    if (m.policy == baseline) base = &m;
  }
  std::vector<std::string> pools;
  for (const PoolPrice& p : prices.pools) pools.push_back(p.pool);
  auto ratio = [](double v, double b) { return b > 0 ? Fmt("%.3f", v / b) : std::string("-"); };
  std::string out =
      "\nCost at " + prices.ToString() + " (per GPU-hour held), against " + baseline + ":\n\n";
  out += "| policy | done | cost total | cost/job | cost / " + baseline + " | JCT mean (h) | / " +
         baseline + " | JCT p99 (h) | / " + baseline + " |";
  for (const std::string& p : pools) out += " GPU-h " + p + " |";
  out += " interrupts/job | cost check |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|";
  for (size_t i = 0; i < pools.size(); i++) out += "---:|";
  out += "---:|---|\n";
  for (const Metrics& m : rows) {
    out += "| " + m.policy + " | " + std::to_string(m.finished) + "/" + std::to_string(m.jobs) +
           " | " + Fmt("%.1f", m.cost_total) + " | " + Fmt("%.2f", m.cost_per_job) + " | " +
           (base ? ratio(m.cost_total, base->cost_total) : "-") + " | " +
           Fmt("%.2f", m.jct_mean_s / 3600) + " | " +
           (base ? ratio(m.jct_mean_s, base->jct_mean_s) : "-") + " | " +
           Fmt("%.2f", m.jct_p99_s / 3600) + " | " +
           (base ? ratio(m.jct_p99_s, base->jct_p99_s) : "-") + " |";
    for (const std::string& p : pools) {
      auto use = m.pools.find(p);
      out += " " + Fmt("%.0f", use != m.pools.end() ? use->second.gpu_s / 3600 : 0.0) + " |";
    }
    out += " " + Fmt("%.3f", m.interrupts_per_job) + " | " +
           (m.coordinator_cost_gap < 0
                ? std::string("-")
                : "stintd's Job::cost within " + Fmt("%.1e", m.coordinator_cost_gap)) +
           " |\n";
  }
  return out;
}

std::string FormatTable(const std::vector<Metrics>& rows, const std::string& baseline,
                        const std::vector<std::string>& header) {
  std::string out;
  for (const std::string& h : header) out += h + "\n";
  out += "\n";
  struct Col {
    const char* name;
    double Metrics::*field;
    const char* fmt;
  };
  const std::vector<Col> cols = {
      {"JCT mean (h)", &Metrics::jct_mean_s, "%.2f"},
      {"JCT median (h)", &Metrics::jct_median_s, "%.2f"},
      {"JCT p99 (h)", &Metrics::jct_p99_s, "%.2f"},
      {"queue mean (h)", &Metrics::queue_mean_s, "%.2f"},
      {"queue p99 (h)", &Metrics::queue_p99_s, "%.2f"},
      {"GPU util", &Metrics::gpu_util, "%.3f"},
      {"window util", &Metrics::window_util, "%.3f"},
      {"frag", &Metrics::fragmentation, "%.3f"},
      {"goodput", &Metrics::goodput, "%.3f"},
      {"lost GPU-h", &Metrics::lost_gpu_h, "%.1f"},
      {"interrupts/job", &Metrics::interrupts_per_job, "%.3f"},
      {"preempt/job", &Metrics::preemptions_per_job, "%.3f"},
      {"Jain (teams)", &Metrics::fairness_jain, "%.3f"},
  };
  auto is_hours = [](const Col& c) { return std::string(c.name).find("(h)") != std::string::npos; };
  auto line = [&](bool normalised) {
    std::string s = "| policy | done |";
    for (const Col& c : cols) s += std::string(" ") + c.name + " |";
    s += normalised ? "\n" : " violations | log hash |\n";
    s += "|---|---:|";
    for (size_t i = 0; i < cols.size(); i++) s += "---:|";
    s += normalised ? "\n" : "---:|---|\n";
    return s;
  };
  const Metrics* base = nullptr;
  for (const Metrics& m : rows) {
    if (m.policy == baseline) base = &m;
  }
  out += "Absolute values (times in hours):\n\n" + line(false);
  for (const Metrics& m : rows) {
    out +=
        "| " + m.policy + " | " + std::to_string(m.finished) + "/" + std::to_string(m.jobs) + " |";
    for (const Col& c : cols) {
      const double v = m.*c.field / (is_hours(c) ? 3600.0 : 1.0);
      out += " " + Fmt(c.fmt, v) + " |";
    }
    char hash[32];
    std::snprintf(hash, sizeof(hash), "%016" PRIx64, m.log_hash);
    out += " " + std::to_string(m.violations) + " | " + hash + " |\n";
  }
  if (base != nullptr) {
    out +=
        "\nNormalised to " + baseline + " = 1.0 (\"-\": " + baseline + " is 0):\n\n" + line(true);
    for (const Metrics& m : rows) {
      out += "| " + m.policy + " | " + std::to_string(m.finished) + "/" + std::to_string(m.jobs) +
             " |";
      for (const Col& c : cols) {
        const double b = base->*c.field;
        out += " " + (b == 0 ? std::string("-") : Fmt("%.3f", m.*c.field / b)) + " |";
      }
      out += "\n";
    }
  }
  return out;
}

std::string UtilisationSvg(const std::vector<SimResult>& results, const std::string& title) {
  const int kW = 960, kH = 420, kLeft = 60, kRight = 180, kTop = 40, kBottom = 50, kBins = 240;
  double end = 0;
  for (const SimResult& r : results) end = std::max(end, r.end_s);
  if (end <= 0) end = 1;
  const bool days = end > 3 * 86400;
  const double unit = days ? 86400 : 3600;
  static const char* kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  std::string s;
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(kW) + "\" height=\"" +
       std::to_string(kH) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + std::to_string(kLeft) + "\" y=\"22\" font-size=\"14\">" + title + "</text>\n";
  for (int i = 0; i <= 4; i++) {
    const double y = kTop + ph * (1 - i / 4.0);
    s += "<line x1=\"" + std::to_string(kLeft) + "\" x2=\"" + Fmt("%.1f", kLeft + pw) + "\" y1=\"" +
         Fmt("%.1f", y) + "\" y2=\"" + Fmt("%.1f", y) + "\" stroke=\"#ddd\"/>\n";
    s += "<text x=\"" + std::to_string(kLeft - 8) + "\" y=\"" + Fmt("%.1f", y + 4) +
         "\" text-anchor=\"end\">" + Fmt("%.2f", i / 4.0) + "</text>\n";
  }
  for (int i = 0; i <= 5; i++) {
    const double x = kLeft + pw * i / 5.0;
    s += "<text x=\"" + Fmt("%.1f", x) + "\" y=\"" + std::to_string(kH - kBottom + 18) +
         "\" text-anchor=\"middle\">" + Fmt("%.1f", end * i / 5.0 / unit) + "</text>\n";
  }
  s += "<text x=\"" + Fmt("%.1f", kLeft + pw / 2) + "\" y=\"" + std::to_string(kH - 10) +
       "\" text-anchor=\"middle\">time (" + (days ? "days" : "hours") + ")</text>\n";
  s += "<text x=\"16\" y=\"" + Fmt("%.1f", kTop + ph / 2) + "\" transform=\"rotate(-90 16 " +
       Fmt("%.1f", kTop + ph / 2) + ")\" text-anchor=\"middle\">allocated / offered GPUs</text>\n";
  for (size_t k = 0; k < results.size(); k++) {
    const SimResult& r = results[k];
    // Time-weighted mean of allocated/offered per bin from the step function.
    std::vector<double> alloc(kBins, 0), offer(kBins, 0);
    for (size_t i = 0; i < r.util.size(); i++) {
      const double a = r.util[i].t_s;
      const double b = i + 1 < r.util.size() ? r.util[i + 1].t_s : r.end_s;
      for (int bin = std::max(0, static_cast<int>(a / end * kBins)); bin < kBins; bin++) {
        const double lo = std::max(a, end * bin / kBins), hi = std::min(b, end * (bin + 1) / kBins);
        if (hi <= lo) {
          if (end * bin / kBins >= b) break;
          continue;
        }
        alloc[bin] += r.util[i].allocated * (hi - lo);
        offer[bin] += r.util[i].offered * (hi - lo);
      }
    }
    std::string pts;
    for (int bin = 0; bin < kBins; bin++) {
      const double u = offer[bin] > 0 ? alloc[bin] / offer[bin] : 0;
      pts += Fmt("%.1f", kLeft + pw * (bin + 0.5) / kBins) + "," +
             Fmt("%.1f", kTop + ph * (1 - std::min(1.0, u))) + " ";
    }
    const char* colour = kColours[k % 10];
    s += "<polyline fill=\"none\" stroke=\"" + std::string(colour) +
         "\" stroke-width=\"1.5\" points=\"" + pts + "\"/>\n";
    const double ly = kTop + 14 + 18 * k;
    s += "<line x1=\"" + Fmt("%.1f", kLeft + pw + 12) + "\" x2=\"" + Fmt("%.1f", kLeft + pw + 32) +
         "\" y1=\"" + Fmt("%.1f", ly - 4) + "\" y2=\"" + Fmt("%.1f", ly - 4) + "\" stroke=\"" +
         colour + "\" stroke-width=\"2\"/>\n";
    s += "<text x=\"" + Fmt("%.1f", kLeft + pw + 38) + "\" y=\"" + Fmt("%.1f", ly) + "\">" +
         r.policy + "</text>\n";
  }
  s += "</svg>\n";
  return s;
}

}  // namespace stint::sim
