#include "stintctl/render.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include "base/json_fields.h"
#include "stintctl/format.h"

namespace stint {
namespace ctl {
namespace {

// Tables show what they can: a field that is missing, null or of another
// type is "-", never an error; a float where an integer belongs is rounded.
constexpr internal::JsonFieldPolicy kShowFields{/*null_is_absent=*/true,
                                                internal::JsonFieldPolicy::Floats::kRound,
                                                internal::DefaultJsonFieldError};

internal::JsonFields Fields(const Json& o) { return internal::JsonFields(o, "", kShowFields); }

// The field, or null.
const Json& Field(const Json& o, const char* key) {
  static const Json kNull;
  const Json* v = Fields(o).Find(key);
  return v != nullptr ? *v : kNull;
}

const Json& List(const Json& reply, const char* key) {
  static const Json kEmpty = Json::array();
  const Json& v = Field(reply, key);
  return v.is_array() ? v : kEmpty;
}

bool Int(const Json& o, const char* key, int64_t* out) {
  const Result<std::optional<int64_t>> v = Fields(o).OptionalInt64(key);
  if (!v.ok() || !v->has_value()) return false;
  *out = **v;
  return true;
}

bool Number(const Json& o, const char* key, double* out) {
  const Result<std::optional<double>> v = Fields(o).OptionalNumber(key);
  if (!v.ok() || !v->has_value()) return false;
  *out = **v;
  return std::isfinite(*out);
}

std::string DurationCell(const Json& o, const char* key) {
  double s;
  return Number(o, key, &s) ? FormatDuration(s) : "-";
}

// Steps are >= 0; stintd says -1 for "none yet".
std::string StepCell(const Json& o, const char* key) {
  int64_t step;
  if (Int(o, key, &step) && step < 0) return "-";
  return Cell(o, key);
}

// A number with `digits` decimals ("-" when missing): money with two,
// ratios with three.
std::string FixedCell(const Json& o, const char* key, int digits) {
  double v;
  if (!Number(o, key, &v)) return "-";
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}
std::string MoneyCell(const Json& o, const char* key) { return FixedCell(o, key, 2); }
std::string RatioCell(const Json& o, const char* key) { return FixedCell(o, key, 3); }

std::string Plural(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

std::string Cell(const Json& object, const char* key) {
  const Json& v = Field(object, key);
  if (v.is_string()) return v.get<std::string>().empty() ? "-" : v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_number_integer()) return v.dump();
  if (v.is_number_float()) {
    double d = v.get<double>();
    char buf[64];
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e15) {
      std::snprintf(buf, sizeof(buf), "%.0f", d);
    } else {
      std::snprintf(buf, sizeof(buf), "%.3g", d);
    }
    return buf;
  }
  if (v.is_null()) return "-";
  return v.dump();
}

std::string GpuRangeCell(const Json& job) {
  int64_t lo, hi;
  if (!Int(job, "min_gpus", &lo)) return "-";
  if (!Int(job, "max_gpus", &hi) || hi == lo) return std::to_string(lo);
  return std::to_string(lo) + "-" + std::to_string(hi);
}

std::string AllocsCell(const Json& segment) {
  std::string out;
  for (const Json& a : List(segment, "allocs")) {
    if (!out.empty()) out += ",";
    out += "w" + Cell(a, "window_id") + ":" + Cell(a, "gpus");
  }
  return out.empty() ? "-" : out;
}

std::string TimeCell(const Json& object, const char* key, int64_t now_ms) {
  int64_t ms;
  if (!Int(object, key, &ms) || ms == 0) return "-";
  return FormatWhen(ms, now_ms);
}

std::string RenderPools(const Json& reply) {
  const Json& pools = List(reply, "pools");
  if (pools.empty()) return "no pools\n";
  Table t({"POOL", "PRICING", "PRICE_PER_GPU_H", "PRICE_CHANGES", "STORAGE", "DESCRIPTION"});
  for (const Json& p : pools) {
    // Undeclared storage: the pool is taken to reach every location.
    std::string storage;
    for (const Json& s : List(p, "storage")) {
      if (!s.is_string()) continue;
      storage += (storage.empty() ? "" : ",") + s.get<std::string>();
    }
    t.AddRow({Cell(p, "name"), Cell(p, "pricing"), MoneyCell(p, "price_per_gpu_hour"),
              std::to_string(List(p, "price_history").size()), storage.empty() ? "any" : storage,
              Cell(p, "description")});
  }
  return t.Render();
}

std::string RenderPriceRules(const Json& reply) {
  Table t({"PRIORITY", "MAX_PRICE_PER_GPU_H", "SPOT_FALLBACK_AFTER", "WITHIN"});
  for (const Json& r : List(reply, "rules")) {
    const std::string cap = Field(r, "max_price_per_gpu_hour").is_null()
                                ? "any"
                                : MoneyCell(r, "max_price_per_gpu_hour");
    int64_t n = 0;
    const std::string fallback = Int(r, "spot_fallback_revocations", &n) && n == 0
                                     ? "never"
                                     : Cell(r, "spot_fallback_revocations") + " revocations";
    t.AddRow({Cell(r, "priority"), cap, fallback, DurationCell(r, "spot_fallback_window_seconds")});
  }
  return t.Render();
}

std::string RenderWindows(const Json& reply, int64_t now_ms) {
  const Json& windows = List(reply, "windows");
  if (windows.empty()) return "no windows\n";
  Table t({"ID", "POOL", "KIND", "GPUS", "ALLOC", "STATE", "START", "END", "NOTICE_LEAD"});
  for (const Json& w : windows) {
    int64_t start = 0;
    std::string state = "-";
    if (Field(w, "open").is_boolean()) {
      const bool upcoming = Int(w, "start_ms", &start) && start > now_ms;
      state = Field(w, "open").get<bool>() ? "open" : upcoming ? "upcoming" : "closed";
    }
    if (Field(w, "closed_early").is_boolean() && Field(w, "closed_early").get<bool>())
      state += " (closed early)";
    const bool no_end = Field(w, "end_ms").is_null();
    t.AddRow({Cell(w, "id"), Cell(w, "pool"), Cell(w, "kind"), Cell(w, "gpus"),
              Cell(w, "allocated_gpus"), state, TimeCell(w, "start_ms", now_ms),
              no_end ? "none (until revoked)" : TimeCell(w, "end_ms", now_ms),
              DurationCell(w, "notice_lead_seconds")});
  }
  return t.Render();
}

std::string RenderTeams(const Json& reply, int64_t now_ms) {
  const Json& teams = List(reply, "teams");
  if (teams.empty()) return "no teams\n";
  Table t({"TEAM", "GUARANTEED", "BORROW_LIMIT", "ALLOCATED", "USAGE_GPU_H", "BUDGET", "SPENT",
           "LEFT", "PER_HOUR", "FORECAST", "PERIOD_ENDS"});
  for (const Json& team : teams) {
    int64_t limit;
    std::string borrow = Int(team, "borrow_limit_gpus", &limit) && limit < 0
                             ? "unlimited"
                             : Cell(team, "borrow_limit_gpus");
    double usage;
    char hours[32] = "-";
    if (Number(team, "usage_gpu_seconds", &usage))
      std::snprintf(hours, sizeof(hours), "%.1f", usage / 3600);
    const bool budgeted = !Field(team, "budget").is_null();
    t.AddRow({Cell(team, "name"), Cell(team, "guaranteed_gpus"), borrow,
              Cell(team, "allocated_gpus"), hours, budgeted ? MoneyCell(team, "budget") : "none",
              MoneyCell(team, "spent"), budgeted ? MoneyCell(team, "left") : "-",
              MoneyCell(team, "spend_per_hour"), MoneyCell(team, "forecast"),
              TimeCell(team, "period_end_ms", now_ms)});
  }
  return t.Render();
}

std::string RenderNodes(const Json& reply) {
  const Json& nodes = List(reply, "nodes");
  if (nodes.empty()) return "no nodes\n";
  Table t({"NODE", "EXECUTOR", "POOL", "GPUS", "STATE", "WINDOW", "KIND", "TOKEN", "ALLOCATED",
           "RUNNING"});
  auto indices = [](const Json& list) {
    std::string out;
    for (const Json& g : list.is_array() ? list : Json::array())
      out += (out.empty() ? "" : ",") + (g.is_number_integer() ? g.dump() : std::string("?"));
    return out;
  };
  for (const Json& n : nodes) {
    const std::string gpus = indices(n.value("gpus", Json::array()));
    const Json& w = n.value("window", Json::object()).is_object() ? n["window"] : Json::object();
    const bool open = n.value("open", false);
    // "job 3 llm (segment 4, GPUs 0,1)" per segment running there.
    std::string running;
    for (const Json& r : n.value("running", Json::array())) {
      running += (running.empty() ? "" : "; ") + std::string("job ") + Cell(r, "job_id") + " " +
                 Cell(r, "job_name") + " (segment " + Cell(r, "segment_id") + ", GPUs " +
                 indices(r.value("gpus", Json::array())) +
                 (r.contains("external_id") ? ", " + Cell(r, "external_id") : std::string()) + ")";
    }
    // An admin's window on the node (API.md, "Windows on nodes"), which
    // its agent may not have joined yet.
    const bool declared = w.value("declared", false);
    std::string state = open ? (w.value("closed_early", false) ? "closing" : "open") : "closed";
    if (open && declared && !w.value("joined", false)) state += ", no agent yet";
    t.AddRow({Cell(n, "name"), n.value("executor", std::string("stint-agent")), Cell(n, "pool"),
              gpus.empty() ? "-" : gpus, state, Cell(w, "id"),
              Cell(w, "kind") + (declared ? " (admin)" : ""),
              n.value("own_token", false) ? "own" : "shared", Cell(w, "allocated_gpus"),
              running.empty() ? "-" : running});
  }
  return t.Render();
}

std::string RenderJobs(const Json& reply, int64_t now_ms) {
  const Json& jobs = List(reply, "jobs");
  if (jobs.empty()) return "no jobs\n";
  Table t({"ID", "NAME", "TEAM", "PRIO", "STATE", "GPUS", "SEGMENT", "STEP", "CKPT_STEP",
           "PREEMPTED", "SUBMITTED", "MESSAGE"});
  for (const Json& j : jobs) {
    int64_t seg;
    std::string segment = Int(j, "segment_id", &seg) && seg > 0 ? std::to_string(seg) : "-";
    t.AddRow({Cell(j, "id"), Cell(j, "name"), Cell(j, "team"), Cell(j, "priority"),
              Cell(j, "state"), GpuRangeCell(j), segment, Cell(j, "last_step"),
              StepCell(j, "checkpoint_step"), Cell(j, "preemptions"),
              TimeCell(j, "submit_ms", now_ms), Cell(j, "message")});
  }
  return t.Render();
}

std::string RenderSegments(const Json& reply, int64_t now_ms) {
  const Json& segments = List(reply, "segments");
  if (segments.empty()) return "no segments\n";
  Table t({"ID", "JOB", "STATE", "GPUS", "WINDOWS", "TOKEN", "START", "PLANNED_END", "NOTICE",
           "DEADLINE", "ENDED", "RUNS_AS"});
  for (const Json& s : segments) {
    std::string notice = Cell(s, "notice_reason");
    if (notice == "none") notice = "-";
    std::string deadline = TimeCell(s, "deadline_ms", now_ms);
    // A shrink in flight: "shrink -N" (GPUs it gives up) and its deadline.
    const Json shrink = s.is_object() ? s.value("shrink", Json()) : Json();
    if (notice == "-" && shrink.is_object()) {
      int64_t released = 0;
      for (const Json& r : List(shrink, "release")) {
        int64_t n = 0;
        if (Int(r, "gpus", &n)) released += n;
      }
      notice = "shrink -" + std::to_string(released);
      deadline = TimeCell(shrink, "deadline_ms", now_ms);
    }
    t.AddRow({Cell(s, "id"), Cell(s, "job_id"), Cell(s, "state"), Cell(s, "gpus"), AllocsCell(s),
              Cell(s, "fencing_token"), TimeCell(s, "start_ms", now_ms),
              TimeCell(s, "planned_end_ms", now_ms), notice, deadline,
              TimeCell(s, "ended_ms", now_ms),
              // stintd --slurm: "slurm:1234"; stint-agent's segments have none.
              s.is_object() && s.contains("external_id") ? Cell(s, "external_id") : "-"});
  }
  return t.Render();
}

std::string RenderJob(const Json& job, int64_t now_ms) {
  Table kv({"FIELD", "VALUE"});
  auto add = [&](const char* label, std::string value) { kv.AddRow({label, std::move(value)}); };
  add("id", Cell(job, "id"));
  add("name", Cell(job, "name"));
  add("state", Cell(job, "state"));
  add("team", Cell(job, "team"));
  add("pool", Cell(job, "pool"));
  add("priority", Cell(job, "priority"));
  add("gpus", GpuRangeCell(job));
  add("gang", Cell(job, "gang"));
  add("preemptible", Cell(job, "preemptible"));
  add("checkpoint cost", DurationCell(job, "checkpoint_seconds"));
  add("restart cost", DurationCell(job, "restart_seconds"));
  add("checkpoint interval", DurationCell(job, "checkpoint_interval_seconds"));
  add("remaining", DurationCell(job, "remaining_seconds"));
  add("submitted", TimeCell(job, "submit_ms", now_ms));
  add("eligible", TimeCell(job, "eligible_ms", now_ms));
  int64_t segment_id;
  add("segment",
      Int(job, "segment_id", &segment_id) && segment_id > 0 ? std::to_string(segment_id) : "-");
  add("fencing token", Cell(job, "fencing_token"));
  add("last step", Cell(job, "last_step"));
  add("checkpoint step", StepCell(job, "checkpoint_step"));
  add("checkpoint at", TimeCell(job, "checkpoint_ms", now_ms));
  add("preemptions", Cell(job, "preemptions"));
  add("lost GPU time", DurationCell(job, "lost_gpu_seconds"));
  add("GPU time held", DurationCell(job, "service_gpu_seconds"));
  add("cost", MoneyCell(job, "cost"));
  add("samples", Cell(job, "samples"));
  const Json& figures = Field(job, "figures");
  if (figures.is_object()) {
    add("efficiency", RatioCell(figures, "efficiency") + " (useful " +
                          DurationCell(figures, "useful_gpu_seconds") + " of " +
                          DurationCell(figures, "held_gpu_seconds") + " GPU time held)");
    add("overheads", "restart " + DurationCell(figures, "restart_gpu_seconds") + ", checkpoint " +
                         DurationCell(figures, "checkpoint_gpu_seconds") + ", lost " +
                         DurationCell(figures, "lost_gpu_seconds") + " GPU time");
    add("cost per step", MoneyCell(figures, "cost_per_step"));
  }
  add("message", Cell(job, "message"));
  std::string out = kv.Render();
  // Drop the FIELD/VALUE header: a key-value list reads better without it.
  out = out.substr(out.find('\n') + 1);
  const Json& pending = Field(job, "pending");
  if (pending.is_object()) {
    out += "\npending: position " + Cell(pending, "position");
    // Attained-service class: why a job that has had GPU time sits behind newer ones.
    int64_t service_class = 0;
    if (Int(pending, "service_class", &service_class) && service_class > 0) {
      out += ", service class " + std::to_string(service_class);
    }
    out += ", blocked by " + Cell(pending, "reason");
    const std::string detail = Cell(pending, "detail");
    if (detail != "-" && !detail.empty()) out += " (" + detail + ")";
    out += "; planned start " +
           (Field(pending, "planned_start_ms").is_null()
                ? std::string("unknown")
                : TimeCell(pending, "planned_start_ms", now_ms)) +
           "\n";
  }
  // GET /v1/jobs/{id} puts the segment list where the plain job has a count.
  const Json& segments = Field(job, "segments");
  if (segments.is_array() && !segments.empty()) {
    out += "\nsegments:\n" + RenderSegments(Json{{"segments", segments}}, now_ms);
  }
  // What each segment's GPU time achieved (accounting.h in stintd).
  const Json& per_segment = List(figures, "segments");
  if (!per_segment.empty()) {
    Table t({"SEGMENT", "GPUS", "HELD", "USEFUL", "RESTART", "CHECKPOINT", "LOST", "KEPT_STEPS",
             "EFFICIENCY", "COST"});
    for (const Json& g : per_segment) {
      t.AddRow({Cell(g, "segment_id"), Cell(g, "gpus"), DurationCell(g, "held_gpu_seconds"),
                DurationCell(g, "useful_gpu_seconds"), DurationCell(g, "restart_gpu_seconds"),
                DurationCell(g, "checkpoint_gpu_seconds"), DurationCell(g, "lost_gpu_seconds"),
                Cell(g, "kept_steps"), RatioCell(g, "efficiency"), MoneyCell(g, "cost")});
    }
    out += "\nGPU time by segment:\n" + t.Render();
  }
  // Where its steps are (newest first): where stintd may start or move it.
  const Json& stored = List(job, "stored");
  if (!stored.empty()) {
    Table t({"LOCATION", "TIER", "STEP", "BYTES", "POOL", "SEGMENT", "AT"});
    for (const Json& l : stored) {
      t.AddRow({Cell(l, "location"), Cell(l, "tier"), Cell(l, "step"), Cell(l, "bytes"),
                Cell(l, "pool"), Cell(l, "segment_id"), TimeCell(l, "at_ms", now_ms)});
    }
    out += "\ncheckpoints stored at:\n" + t.Render();
  }
  const Json& evaluations = List(job, "evaluations");
  if (!evaluations.empty()) {
    Table t({"EVAL", "STEP", "STATE", "WHERE", "RESULT"});
    for (const Json& e : evaluations) {
      std::string where = Cell(e, "node");
      if (Field(e, "gpu").is_number_integer()) where += " GPU " + Cell(e, "gpu");
      const Json& result = Field(e, "result");
      t.AddRow({Cell(e, "id"), Cell(e, "step"), Cell(e, "state"), where,
                result.is_object() ? result.dump() : Cell(e, "message")});
    }
    out += "\nevaluations:\n" + t.Render();
  }
  return out;
}

std::string RenderQueue(const Json& reply) {
  int64_t now_ms = 0;
  Int(reply, "now_ms", &now_ms);
  std::string out;
  const Json& pending = List(reply, "pending");
  if (pending.empty()) {
    out += "no pending jobs\n";
  } else {
    out += "PENDING: " + Plural(pending.size(), "job", "jobs") + "\n";
    Table t({"POS", "JOB", "NAME", "TEAM", "PRIO", "GPUS", "WAIT", "REASON", "PLANNED_START",
             "DETAIL"});
    for (const Json& p : pending) {
      std::string planned = Field(p, "planned_start_ms").is_null()
                                ? "unknown"
                                : TimeCell(p, "planned_start_ms", now_ms);
      int64_t planned_gpus;
      if (planned != "unknown" && Int(p, "planned_gpus", &planned_gpus) && planned_gpus > 0) {
        planned += " on " + std::to_string(planned_gpus);
      }
      t.AddRow({Cell(p, "position"), Cell(p, "job_id"), Cell(p, "name"), Cell(p, "team"),
                Cell(p, "priority"), GpuRangeCell(p), DurationCell(p, "wait_seconds"),
                Cell(p, "reason"), planned, Cell(p, "detail")});
    }
    out += t.Render();
  }
  const Json& running = List(reply, "running");
  out += "\n";
  if (running.empty()) {
    out += "no running jobs\n";
  } else {
    out += "RUNNING: " + Plural(running.size(), "job", "jobs") + "\n";
    Table t(
        {"JOB", "NAME", "TEAM", "PRIO", "GPUS", "SEGMENT", "STATE", "WINDOWS", "STARTED", "ENDS"});
    for (const Json& r : running) {
      const Json& seg = Field(r, "segment");
      // A notified segment ends at its deadline; otherwise at its planned end.
      int64_t deadline = 0;
      std::string ends;
      if (Int(seg, "deadline_ms", &deadline) && deadline > 0) {
        ends = "deadline " + FormatWhen(deadline, now_ms) + " (" + Cell(seg, "notice_reason") + ")";
      } else if (Field(seg, "planned_end_ms").is_null()) {
        ends = "open-ended";
      } else {
        ends = TimeCell(seg, "planned_end_ms", now_ms);
      }
      t.AddRow({Cell(r, "job_id"), Cell(r, "name"), Cell(r, "team"), Cell(r, "priority"),
                Cell(seg, "gpus"), Cell(seg, "id"), Cell(seg, "state"), AllocsCell(seg),
                TimeCell(seg, "start_ms", now_ms), ends});
    }
    out += t.Render();
  }
  const Json& stats = Field(reply, "stats");
  if (stats.is_object() && !stats.empty()) {
    out += "\n";
    std::string line;
    for (const auto& item : stats.items()) {
      line += (line.empty() ? "" : "  ") + item.key() + "=" + Cell(stats, item.key().c_str());
    }
    out += line + "\n";
  }
  return out;
}

std::string RenderStatus(const Json& queue, const Json& jobs, const Json& windows,
                         const Json& leader) {
  // Counted by name, in the order stintd lists them; a state or priority this
  // stintctl does not know is still counted, after the known ones.
  auto count = [](const Json& list, const char* key, std::vector<std::string> order) {
    std::map<std::string, int64_t> n;
    for (const std::string& k : order) n[k] = 0;
    for (const Json& item : list) {
      const std::string v = Cell(item, key);
      if (n.emplace(v, 0).second) order.push_back(v);
      n[v]++;
    }
    std::string out;
    for (const std::string& k : order)
      out += (out.empty() ? "" : ", ") + std::to_string(n[k]) + " " + k;
    return out;
  };
  std::string lower_states;
  {
    std::string s =
        count(List(jobs, "jobs"), "state", {"PENDING", "RUNNING", "DONE", "CANCELLED", "FAILED"});
    for (char c : s) lower_states += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  Json pending_jobs = Json::array();
  for (const Json& j : List(jobs, "jobs")) {
    if (Cell(j, "state") == "PENDING") pending_jobs.push_back(j);
  }
  const Json& stats = Field(queue, "stats");
  int64_t now_ms = 0;
  Int(queue, "now_ms", &now_ms);
  int64_t open = 0, upcoming = 0, closed = 0, early = 0;
  for (const Json& w : List(windows, "windows")) {
    int64_t start = 0;
    if (Field(w, "open").is_boolean() && Field(w, "open").get<bool>()) {
      open++;
    } else if (Int(w, "start_ms", &start) && start > now_ms) {
      upcoming++;
    } else {
      closed++;
    }
    if (Field(w, "closed_early").is_boolean() && Field(w, "closed_early").get<bool>()) early++;
  }
  std::map<std::string, int64_t> blocked;  // the queue's reasons; "none" blocks nothing
  for (const Json& p : List(queue, "pending")) {
    const std::string r = Cell(p, "reason");
    if (r != "none") blocked[r]++;
  }
  std::string blocked_text;
  for (const auto& [reason, n] : blocked) {
    blocked_text += (blocked_text.empty() ? "" : ", ") + std::to_string(n) + " " + reason;
  }
  Table t({"WHAT", "COUNTS"});
  t.AddRow({"jobs", lower_states});
  t.AddRow({"gpus", Cell(stats, "open_window_gpus") + " open, " + Cell(stats, "allocated_gpus") +
                        " allocated, " + Cell(stats, "free_gpus") + " free, " +
                        Cell(stats, "fragmented_gpus") + " fragmented"});
  t.AddRow({"windows", std::to_string(open) + " open, " + std::to_string(upcoming) + " upcoming, " +
                           std::to_string(closed) + " closed (" + std::to_string(early) +
                           " closed early)"});
  t.AddRow({"pending", count(pending_jobs, "priority", {"LOW", "MEDIUM", "HIGH", "CRITICAL"}) +
                           "; blocked: " + (blocked_text.empty() ? "-" : blocked_text)});
  if (Field(leader, "leader").is_object()) {
    std::string standbys;
    for (const Json& m : List(leader, "standbys"))
      standbys += (standbys.empty() ? "" : ", ") + Cell(m, "url");
    t.AddRow({"leader", Cell(Field(leader, "leader"), "url") + " (epoch " + Cell(leader, "epoch") +
                            "); standbys: " + (standbys.empty() ? "none" : standbys)});
  }
  std::string out = t.Render();
  return out.substr(out.find('\n') + 1);  // a key-value list: no header
}

}  // namespace ctl
}  // namespace stint
