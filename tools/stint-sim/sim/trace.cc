#include "sim/trace.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <initializer_list>
#include <map>
#include <random>

#include "base/stats.h"
#include "base/strings.h"

namespace stint::sim {
namespace {

// Reads a text file line by line; strips a trailing '\r' (the Bamboo and
// Tiresias files use CRLF) and counts lines from 1 for error messages.
class LineReader {
 public:
  explicit LineReader(std::string path) : path_(std::move(path)), in_(path_) {}
  bool ok() const { return static_cast<bool>(in_); }
  bool Next(std::string* line) {
    if (!std::getline(in_, *line)) return false;
    line_no_++;
    if (!line->empty() && line->back() == '\r') line->pop_back();
    return true;
  }
  Status Error(const std::string& what) const {
    return Status::InvalidArgument(path_ + ":" + std::to_string(line_no_) + ": " + what);
  }
  // A field of a row: names the file, the line and the column (1-based).
  Status FieldError(size_t column, const std::string& name, const std::string& what,
                    const std::string& got) const {
    return Error(name + " (column " + std::to_string(column + 1) + ") " + what + " (got \"" +
                 Trim(got) + "\")");
  }
  Status OpenError() const {
    return Status::NotFound("cannot open " + path_ + ": " + std::strerror(errno));
  }

 private:
  std::string path_;
  std::ifstream in_;
  int line_no_ = 0;
};

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(cur);
  return out;
}

// The whole field (spaces trimmed) must be one number that `convert`
// (strtod or strtoll) reads; `finite` also refuses inf and nan.
template <typename T, typename Convert>
bool ParseNumber(const std::string& raw, T* out, Convert convert) {
  const std::string s = Trim(raw);
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const auto v = convert(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = static_cast<T>(v);
  return true;
}

bool ParseDouble(const std::string& raw, double* out) {
  double v = 0;
  if (!ParseNumber(raw, &v, [](const char* s, char** end) { return std::strtod(s, end); }) ||
      !std::isfinite(v)) {
    return false;
  }
  *out = v;
  return true;
}

bool ParseInt(const std::string& raw, int64_t* out) {
  return ParseNumber(raw, out, [](const char* s, char** end) { return std::strtoll(s, end, 10); });
}

// "YYYY-MM-DD HH:MM:SS" (UTC) or plain seconds.
bool ParseTime(const std::string& raw, double* out) {
  if (ParseDouble(raw, out)) return true;
  std::tm tm{};
  const std::string s = Trim(raw);
  if (s.size() >= 10 && std::sscanf(s.c_str(), "%d-%d-%d %d:%d:%d", &tm.tm_year, &tm.tm_mon,
                                    &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec) >= 3) {
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    *out = static_cast<double>(timegm(&tm));
    return true;
  }
  return false;
}

// A team name the coordinator accepts: [A-Za-z0-9._-]{1,64}.
std::string TeamName(const std::string& raw) {
  std::string out;
  for (char c : raw) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    out.push_back(ok ? c : '_');
  }
  if (out.empty()) out = "default";
  if (out.size() > 64) out.resize(64);
  return out;
}

SimJob MakeJob(const JobDefaults& d, std::string name, std::string team, double submit_s, int gpus,
               double work_s, LoadReport* report = nullptr) {
  SimJob j;
  j.name = std::move(name);
  j.team = TeamName(team);
  j.submit_s = submit_s;
  j.min_gpus = gpus;
  j.max_gpus = gpus;
  j.work_s = d.max_work_s > 0 ? std::min(work_s, d.max_work_s) : work_s;
  if (report != nullptr && j.work_s < work_s) report->capped++;
  j.work_s = std::max(1.0, j.work_s);
  j.checkpoint_s = d.checkpoint_s;
  j.restart_s = d.restart_s;
  j.interval_s = d.interval_s;
  j.gang = d.gang;
  return j;
}

// Elastic: a seeded share of the multi-GPU jobs may run on half their GPUs.
void ApplyElastic(std::vector<SimJob>* jobs, const JobDefaults& d) {
  if (d.elastic_fraction <= 0) return;
  std::mt19937_64 rng(d.seed ^ 0x9e3779b97f4a7c15ull);
  std::uniform_real_distribution<double> u(0, 1);
  for (SimJob& j : *jobs) {
    if (j.max_gpus >= 2 && u(rng) < d.elastic_fraction) j.min_gpus = j.max_gpus / 2;
  }
}

Status LoadPhillyFile(const std::string& path, const std::string& team, std::vector<SimJob>* out,
                      std::vector<std::pair<std::string, double>>* steps) {
  LineReader in(path);
  if (!in.ok()) return in.OpenError();
  std::string line;
  while (in.Next(&line)) {
    if (Trim(line).empty()) continue;
    const std::vector<std::string> f = Split(line, '\t');
    if (f.size() != 7) {
      return in.Error(
          "expected 7 tab-separated fields (job_type, command, num_steps_arg, needs_data_dir, "
          "total_steps, arrival_time, scale_factor), got " +
          std::to_string(f.size()));
    }
    double total_steps = 0, arrival = 0;
    int64_t gpus = 0;
    if (!ParseDouble(f[4], &total_steps) || total_steps <= 0)
      return in.FieldError(4, "total_steps", "is not a positive number", f[4]);
    if (!ParseDouble(f[5], &arrival) || arrival < 0)
      return in.FieldError(5, "arrival_time", "is not a number >= 0", f[5]);
    if (!ParseInt(f[6], &gpus) || gpus < 1 || gpus > 4096)
      return in.FieldError(6, "scale_factor", "is not an integer in [1, 4096]", f[6]);
    SimJob j;
    j.name = team + "/" + std::to_string(out->size());
    j.team = team;
    j.submit_s = arrival;
    j.min_gpus = j.max_gpus = static_cast<int>(gpus);
    out->push_back(j);
    steps->emplace_back(Trim(f[0]), total_steps);
  }
  return Status::OK();
}

std::string Stem(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') + 1);
  const size_t dot = base.find_last_of('.');
  return dot == std::string::npos ? base : base.substr(0, dot);
}

}  // namespace

Result<std::vector<SimJob>> LoadPhilly(const std::string& path, const JobDefaults& d,
                                       LoadReport* report) {
  std::vector<std::string> files;
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    return Status::NotFound("cannot open " + path + ": " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) {
    DIR* dir = opendir(path.c_str());
    if (dir == nullptr) return Status::NotFound("cannot open directory " + path);
    while (dirent* e = readdir(dir)) {
      const std::string n = e->d_name;
      if (n.size() > 6 && n.compare(n.size() - 6, 6, ".trace") == 0)
        files.push_back(path + "/" + n);
    }
    closedir(dir);
    std::sort(files.begin(), files.end());
    if (files.empty()) return Status::NotFound("no *.trace files in " + path);
  } else {
    files.push_back(path);
  }
  std::vector<SimJob> jobs;
  std::vector<std::pair<std::string, double>> steps;
  for (const std::string& f : files)
    STINT_RETURN_IF_ERROR(LoadPhillyFile(f, TeamName(Stem(f)), &jobs, &steps));
  // The trace has work in iterations, not seconds: each job type's median
  // total_steps is taken to run philly_median_s (a per-type throughput),
  // which keeps the spread of the trace within a type.
  std::map<std::string, std::vector<double>> by_type;
  for (const auto& [type, n] : steps) by_type[type].push_back(n);
  std::map<std::string, double> median;
  for (auto& [type, v] : by_type) median[type] = UpperMedian(v);
  std::vector<SimJob> out;
  out.reserve(jobs.size());
  for (size_t i = 0; i < jobs.size(); i++) {
    const double work = steps[i].second / median[steps[i].first] * d.philly_median_s;
    out.push_back(
        MakeJob(d, jobs[i].name, jobs[i].team, jobs[i].submit_s, jobs[i].max_gpus, work, report));
  }
  if (report != nullptr) report->rows += static_cast<int64_t>(jobs.size());
  Normalize(&out);
  ApplyElastic(&out, d);
  return out;
}

Result<std::vector<SimJob>> LoadTiresias(const std::string& path, const JobDefaults& d,
                                         LoadReport* report) {
  LoadReport unused;
  LoadReport* r = report != nullptr ? report : &unused;
  LineReader in(path);
  if (!in.ok()) return in.OpenError();
  std::string line;
  if (!in.Next(&line) || Trim(line).rfind("job_id", 0) != 0)
    return in.Error("expected the header job_id,num_gpu,...");
  std::vector<SimJob> out;
  while (in.Next(&line)) {
    if (Trim(line).empty()) continue;
    const std::vector<std::string> f = Split(line, ',');
    if (f.size() != 7)
      return in.Error("expected 7 comma-separated fields, got " + std::to_string(f.size()));
    r->rows++;
    int64_t gpus = 0;
    double submit = 0, duration = 0;
    if (!ParseInt(f[1], &gpus) || gpus < 0)
      return in.FieldError(1, "num_gpu", "is not an integer >= 0", f[1]);
    if (gpus == 0) {
      r->skipped["CPU-only jobs"]++;
      continue;
    }
    if (!ParseDouble(f[2], &submit) || submit < 0)
      return in.FieldError(2, "submit_time", "is not a number >= 0", f[2]);
    if (!ParseDouble(f[5], &duration) || duration < 0)
      return in.FieldError(5, "duration", "is not a number >= 0", f[5]);
    if (duration == 0) {
      r->skipped["zero-length jobs"]++;
      continue;
    }
    out.push_back(MakeJob(d, "tiresias/" + Trim(f[0]) + "-" + Trim(f[4]), "default", submit,
                          static_cast<int>(gpus), duration, r));
  }
  Normalize(&out);
  ApplyElastic(&out, d);
  return out;
}

// A CSV file whose first line names its columns (the Helios and Alibaba
// traces): rows are read by column name, each checked for the header's width.
class HeaderCsv {
 public:
  explicit HeaderCsv(std::string path) : in_(std::move(path)) {}

  // Reads the header and requires the named columns.
  Status Open(std::initializer_list<const char*> required) {
    if (!in_.ok()) return in_.OpenError();
    std::string line;
    if (!in_.Next(&line)) return in_.Error("empty file");
    const std::vector<std::string> header = Split(line, ',');
    width_ = header.size();
    for (size_t i = 0; i < header.size(); i++) col_[Trim(header[i])] = i;
    for (const char* need : required) {
      if (!col_.count(need)) return in_.Error(std::string("header has no column ") + need);
    }
    return Status::OK();
  }

  // The next non-blank row: true, false at the end, or the error of a row
  // of the wrong width.
  Result<bool> Next() {
    std::string line;
    while (in_.Next(&line)) {
      if (Trim(line).empty()) continue;
      row_ = Split(line, ',');
      if (row_.size() != width_) {
        return in_.Error("expected " + std::to_string(width_) + " fields, got " +
                         std::to_string(row_.size()));
      }
      return true;
    }
    return false;
  }

  // The current row's field of a column Open() required.
  const std::string& operator[](const char* column) const { return row_[col_.at(column)]; }
  Status Error(const std::string& what) const { return in_.Error(what); }
  // The current row's `column` is not what it should be.
  Status FieldError(const char* column, const std::string& what) const {
    return in_.FieldError(col_.at(column), column, what, (*this)[column]);
  }

 private:
  LineReader in_;
  std::map<std::string, size_t> col_;
  size_t width_ = 0;
  std::vector<std::string> row_;
};

Result<std::vector<SimJob>> LoadHeliosJobs(const std::string& path, const JobDefaults& d,
                                           LoadReport* report) {
  LoadReport unused;
  LoadReport* r = report != nullptr ? report : &unused;
  HeaderCsv in(path);
  STINT_RETURN_IF_ERROR(in.Open({"job_id", "vc", "gpu_num", "submit_time", "duration"}));
  std::vector<SimJob> out;
  for (;;) {
    STINT_ASSIGN_OR_RETURN(bool row, in.Next());
    if (!row) break;
    r->rows++;
    int64_t gpus = 0;
    double submit = 0, duration = 0;
    if (!ParseInt(in["gpu_num"], &gpus) || gpus < 0)
      return in.FieldError("gpu_num", "is not an integer >= 0");
    if (gpus == 0) {
      r->skipped["CPU-only jobs"]++;
      continue;
    }
    // A job cancelled in the queue never started: no start_time, duration 0.
    if (Trim(in["duration"]).empty()) {
      r->skipped["never-started jobs"]++;
      continue;
    }
    if (!ParseDouble(in["duration"], &duration) || duration < 0)
      return in.FieldError("duration", "is not a number >= 0");
    if (duration == 0) {
      r->skipped["never-started jobs"]++;
      continue;
    }
    if (!ParseTime(in["submit_time"], &submit))
      return in.FieldError("submit_time", "is not a time (YYYY-MM-DD HH:MM:SS or seconds)");
    out.push_back(MakeJob(d, "helios/" + Trim(in["job_id"]), Trim(in["vc"]), submit,
                          static_cast<int>(gpus), duration, r));
  }
  Normalize(&out);
  ApplyElastic(&out, d);
  return out;
}

Result<std::vector<SimJob>> LoadAlibabaPods(const std::string& path, const JobDefaults& d,
                                            LoadReport* report) {
  LoadReport unused;
  LoadReport* r = report != nullptr ? report : &unused;
  HeaderCsv in(path);
  STINT_RETURN_IF_ERROR(in.Open({"name", "num_gpu", "gpu_milli", "qos", "pod_phase",
                                 "creation_time", "deletion_time", "scheduled_time"}));
  // A GPU pod that ran; its end is known once the whole file is read (the
  // trace end is the largest deletion_time).
  struct Pod {
    SimJob job;
    double scheduled = 0;
    double deleted = 0;  // kForever: empty deletion_time
    bool running = false;
  };
  std::vector<Pod> pods;
  double trace_end = -kForever;
  for (;;) {
    STINT_ASSIGN_OR_RETURN(bool row, in.Next());
    if (!row) break;
    r->rows++;
    double deleted = 0;
    const bool has_deletion = !Trim(in["deletion_time"]).empty();
    if (has_deletion && ParseDouble(in["deletion_time"], &deleted))
      trace_end = std::max(trace_end, deleted);
    int64_t gpus = 0;
    if (!ParseInt(in["num_gpu"], &gpus) || gpus < 0)
      return in.FieldError("num_gpu", "is not an integer >= 0");
    if (gpus == 0) {
      r->skipped["CPU-only pods"]++;
      continue;
    }
    if (Trim(in["scheduled_time"]).empty()) {
      r->skipped["never-scheduled pods"]++;
      continue;
    }
    Pod p;
    double created = 0, milli = 0;
    if (!ParseDouble(in["creation_time"], &created))
      return in.FieldError("creation_time", "is not a number");
    if (!ParseDouble(in["scheduled_time"], &p.scheduled))
      return in.FieldError("scheduled_time", "is not a number");
    if (has_deletion && !ParseDouble(in["deletion_time"], &deleted))
      return in.FieldError("deletion_time", "is not a number");
    if (!ParseDouble(in["gpu_milli"], &milli) || milli < 0)
      return in.FieldError("gpu_milli", "is not a number >= 0");
    p.deleted = has_deletion ? deleted : kForever;
    p.running = Trim(in["pod_phase"]) == "Running";
    // A share of a GPU (GPU-sharing pods) is rounded up to a whole GPU.
    if (milli < 1000) r->fractional++;
    p.job.name = "alibaba/" + Trim(in["name"]);
    p.job.submit_s = created;
    p.job.max_gpus = static_cast<int>(gpus);
    const std::string qos = Trim(in["qos"]);
    if (qos == "LS" || qos == "Guaranteed") p.job.priority = stintd::Priority::kHigh;
    if (qos == "BE") p.job.priority = stintd::Priority::kLow;
    pods.push_back(std::move(p));
  }
  std::vector<SimJob> out;
  for (const Pod& p : pods) {
    const bool censored = p.deleted == kForever || (p.running && p.deleted >= trace_end);
    const double end = censored ? trace_end : p.deleted;
    if (!(end > p.scheduled)) {
      r->skipped["zero-length pods"]++;
      continue;
    }
    if (censored) r->censored++;
    SimJob j =
        MakeJob(d, p.job.name, "default", p.job.submit_s, p.job.max_gpus, end - p.scheduled, r);
    j.priority = p.job.priority;
    out.push_back(j);
  }
  Normalize(&out);
  ApplyElastic(&out, d);
  return out;
}

int64_t LoadReport::skipped_total() const {
  int64_t n = 0;
  for (const auto& [reason, count] : skipped) n += count;
  return n;
}

std::string LoadReport::Summary() const {
  std::string s = std::to_string(rows) + " rows";
  if (!skipped.empty()) {
    s += "; skipped";
    const char* sep = " ";
    for (const auto& [reason, count] : skipped) {
      s += sep + std::to_string(count) + " " + reason;
      sep = ", ";
    }
  }
  if (censored > 0)
    s += "; " + std::to_string(censored) +
         " censored (still running at the trace end: replayed up to it)";
  if (fractional > 0)
    s += "; " + std::to_string(fractional) + " fractional-GPU requests rounded up to whole GPUs";
  if (capped > 0) s += "; work capped for " + std::to_string(capped) + " jobs";
  char buf[96];
  std::snprintf(buf, sizeof(buf), "; replay starts at trace time %.0f s (%.0f s of lead-in trimmed",
                start_s, trimmed_s);
  s += buf;
  if (lead_in_joined > 0)
    s += ", " + std::to_string(lead_in_joined) + " lead-in jobs still running join at 0";
  return s + ")";
}

Result<StartAt> ParseStartAt(const std::string& s) {
  StartAt at;
  if (s == "first") return at;
  if (s == "auto") {
    at.mode = StartAt::Mode::kAuto;
    return at;
  }
  if (!ParseDouble(s, &at.seconds) || at.seconds < 0) {
    return Status::InvalidArgument("--start-at must be first, auto or seconds >= 0 (got \"" + s +
                                   "\")");
  }
  at.mode = StartAt::Mode::kSeconds;
  return at;
}

double EarnestStart(const std::vector<SimJob>& jobs) {
  if (jobs.empty()) return 0;
  std::vector<double> a;
  a.reserve(jobs.size());
  for (const SimJob& j : jobs) a.push_back(j.submit_s);
  std::sort(a.begin(), a.end());
  const size_t n = a.size();
  if (n < 2 || a.back() <= a.front()) return a.front();
  const size_t k = std::max<size_t>(1, (n + 19) / 20);
  const double mean_gap = (a.back() - a.front()) / static_cast<double>(n - 1);
  for (size_t i = 0; i + k < n; i++) {
    if (a[i + k] - a[i] <= 2.0 * static_cast<double>(k) * mean_gap) return a[i];
  }
  return a.front();
}

void TrimLeadIn(std::vector<SimJob>* jobs, const StartAt& at, LoadReport* report) {
  LoadReport unused;
  LoadReport* r = report != nullptr ? report : &unused;
  double first = kForever;
  for (const SimJob& j : *jobs) first = std::min(first, j.submit_s);
  if (jobs->empty()) first = 0;
  double start = first;
  if (at.mode == StartAt::Mode::kAuto) start = EarnestStart(*jobs);
  if (at.mode == StartAt::Mode::kSeconds) start = at.seconds;
  std::vector<SimJob> kept;
  kept.reserve(jobs->size());
  for (SimJob j : *jobs) {
    if (j.submit_s < start) {
      const double left = j.submit_s + j.work_s - start;
      if (left <= 0) {
        r->skipped["lead-in jobs ended before the start"]++;
        continue;
      }
      j.work_s = std::max(1.0, left);
      j.submit_s = start;
      r->lead_in_joined++;
    }
    j.submit_s -= start;
    kept.push_back(std::move(j));
  }
  *jobs = std::move(kept);
  Normalize(jobs);
  r->start_s = start;
  r->trimmed_s = std::max(0.0, start - std::min(first, start));
}

std::vector<SimWindow> FixedCapacity(int gpus) {
  SimWindow w;
  w.gpus = gpus;
  return {w};
}

std::vector<SimWindow> StepsToWindows(const std::vector<std::pair<double, int>>& steps,
                                      double last_end_s, stintd::WindowKind kind,
                                      double notice_lead_s, const std::string& pool) {
  std::vector<SimWindow> done;
  std::vector<SimWindow> stack;  // open windows, oldest first
  int level = 0;
  auto close = [&](SimWindow w, double t) {
    if (t <= w.start_s) return;  // opened and closed at the same time: never existed
    if (kind == stintd::WindowKind::kHard) {
      w.end_s = t;
    } else {
      w.end_s = kForever;
      w.revoke_s = t;
    }
    done.push_back(w);
  };
  for (const auto& [t, raw] : steps) {
    const int target = std::max(0, raw);
    while (level > target) {
      SimWindow top = stack.back();
      stack.pop_back();
      level -= top.gpus;
      close(top, t);
      if (level < target) {  // closed too much: the rest of it reopens as a smaller window
        SimWindow rest = top;
        rest.gpus = target - level;
        rest.start_s = t;
        stack.push_back(rest);
        level = target;
      }
    }
    if (target > level) {
      SimWindow w;
      w.pool = pool;
      w.gpus = target - level;
      w.start_s = t;
      w.kind = kind;
      w.notice_lead_s = kind == stintd::WindowKind::kSpot ? notice_lead_s : 0;
      stack.push_back(w);
      level = target;
    }
  }
  for (SimWindow& w : stack) {
    if (kind == stintd::WindowKind::kHard) {
      w.end_s = last_end_s;
      done.push_back(w);
    } else {
      w.end_s = kForever;
      done.push_back(w);
    }
  }
  std::stable_sort(done.begin(), done.end(),
                   [](const SimWindow& a, const SimWindow& b) { return a.start_s < b.start_s; });
  return done;
}

namespace {

// Opens a Helios cluster_gpu_number.csv and reads its header (date,vc...,total).
Result<std::vector<std::string>> ReadHeliosGpuHeader(LineReader& in) {
  if (!in.ok()) return in.OpenError();
  std::string line;
  if (!in.Next(&line)) return in.Error("empty file");
  std::vector<std::string> header = Split(line, ',');
  if (Trim(header[0]) != "date") return in.Error("expected a header starting with date");
  return header;
}

}  // namespace

Result<std::vector<std::pair<double, int>>> LoadHeliosCapacity(const std::string& path,
                                                               const std::string& column,
                                                               double scale) {
  LineReader in(path);
  STINT_ASSIGN_OR_RETURN(const std::vector<std::string> header, ReadHeliosGpuHeader(in));
  size_t col = header.size();
  for (size_t i = 0; i < header.size(); i++) {
    if (Trim(header[i]) == column) col = i;
  }
  if (col == header.size()) return in.Error("header has no column " + column);
  std::string line;
  std::vector<std::pair<double, int>> steps;
  int day = 0;
  while (in.Next(&line)) {
    if (Trim(line).empty()) continue;
    const std::vector<std::string> f = Split(line, ',');
    if (f.size() != header.size()) {
      return in.Error("expected " + std::to_string(header.size()) + " fields, got " +
                      std::to_string(f.size()));
    }
    double gpus = 0;
    if (!ParseDouble(f[col], &gpus) || gpus < 0) return in.Error(column + " is not a number >= 0");
    steps.emplace_back(day * 86400.0, static_cast<int>(std::lround(gpus * scale)));
    day++;
  }
  if (steps.empty()) return in.Error("no data rows");
  return steps;
}

Result<std::map<std::string, int>> HeliosTeamGuarantees(const std::string& path,
                                                        const std::vector<SimJob>& jobs,
                                                        int total_gpus) {
  LineReader in(path);
  STINT_ASSIGN_OR_RETURN(const std::vector<std::string> header, ReadHeliosGpuHeader(in));
  std::string line;
  if (!in.Next(&line)) return in.Error("no data rows");
  const std::vector<std::string> f = Split(line, ',');
  if (f.size() != header.size()) {
    return in.Error("expected " + std::to_string(header.size()) + " fields, got " +
                    std::to_string(f.size()));
  }
  std::vector<int> vc_gpus;
  for (size_t i = 1; i < header.size(); i++) {
    if (Trim(header[i]) == "total") continue;
    double gpus = 0;
    if (!ParseDouble(f[i], &gpus) || gpus < 0)
      return in.Error(Trim(header[i]) + " is not a number >= 0");
    if (gpus > 0) vc_gpus.push_back(static_cast<int>(std::lround(gpus)));
  }
  std::sort(vc_gpus.rbegin(), vc_gpus.rend());
  std::map<std::string, int> count;
  for (const SimJob& j : jobs) count[j.team]++;
  std::vector<std::pair<int, std::string>> teams;
  for (const auto& [team, n] : count) teams.emplace_back(-n, team);
  std::sort(teams.begin(), teams.end());
  const size_t n = std::min(teams.size(), vc_gpus.size());
  int64_t sum = 0;
  for (size_t i = 0; i < n; i++) sum += vc_gpus[i];
  std::map<std::string, int> out;
  for (size_t i = 0; i < teams.size(); i++) {
    out[teams[i].second] =
        i < n && sum > 0 ? static_cast<int>(static_cast<int64_t>(vc_gpus[i]) * total_gpus / sum) : 0;
  }
  return out;
}

Result<std::vector<SimWindow>> LoadBambooNodes(const std::string& path, int gpus_per_node,
                                               double notice_lead_s) {
  LineReader in(path);
  if (!in.ok()) return in.OpenError();
  std::string line;
  std::map<std::string, size_t> open;  // node -> index into out
  std::vector<SimWindow> out;
  while (in.Next(&line)) {
    if (Trim(line).empty()) continue;
    const std::vector<std::string> f = Split(line, ',');
    if (f.size() != 3)
      return in.Error("expected 3 fields (ms,add|remove,node), got " + std::to_string(f.size()));
    double ms = 0;
    if (!ParseDouble(f[0], &ms) || ms < 0) return in.Error("time is not a number of ms >= 0");
    const std::string ev = Trim(f[1]), node = Trim(f[2]);
    if (ev == "add") {
      if (open.count(node)) return in.Error("node " + node + " added twice");
      SimWindow w;
      w.pool = "spot";
      w.gpus = gpus_per_node;
      w.start_s = ms / 1000.0;
      w.end_s = kForever;
      w.kind = stintd::WindowKind::kSpot;
      w.notice_lead_s = notice_lead_s;
      open[node] = out.size();
      out.push_back(w);
    } else if (ev == "remove") {
      auto it = open.find(node);
      if (it == open.end()) return in.Error("node " + node + " removed before it was added");
      out[it->second].revoke_s = std::max(out[it->second].start_s + 1e-3, ms / 1000.0);
      open.erase(it);
    } else {
      return in.Error("event must be add or remove (got \"" + ev + "\")");
    }
  }
  if (out.empty()) return in.Error("no events");
  return out;
}

Result<std::vector<std::pair<double, int>>> LoadBambooAvailability(const std::string& path,
                                                                   bool hours,
                                                                   int gpus_per_instance) {
  LineReader in(path);
  if (!in.ok()) return in.OpenError();
  std::string line;
  std::vector<std::pair<double, int>> steps;
  while (in.Next(&line)) {
    if (Trim(line).empty()) continue;
    const std::vector<std::string> f = Split(line, ',');
    if (f.size() != 2)
      return in.Error("expected 2 fields (time,count), got " + std::to_string(f.size()));
    double t = 0;
    int64_t n = 0;
    if (!ParseDouble(f[0], &t) || t < 0) return in.Error("time is not a number >= 0");
    if (!ParseInt(f[1], &n) || n < 0) return in.Error("count is not an integer >= 0");
    steps.emplace_back(hours ? t * 3600 : t, static_cast<int>(n) * gpus_per_instance);
  }
  if (steps.empty()) return in.Error("no data rows");
  return steps;
}

std::vector<SimJob> GenerateJobs(const SyntheticJobs& g, const JobDefaults& d) {
  std::mt19937_64 rng(g.seed);
  std::exponential_distribution<double> gap(1.0 / std::max(1e-9, g.mean_interarrival_s));
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<SimJob> out;
  double t = 0;
  for (int i = 0; i < g.jobs; i++) {
    t += gap(rng);
    const double r = u(rng);
    const int gpus = r < 0.5 ? 1 : r < 0.65 ? 2 : r < 0.8 ? 4 : r < 0.95 ? 8 : 16;
    const double work = std::exp(std::log(300.0) + u(rng) * (std::log(86400.0) - std::log(300.0)));
    const std::string team =
        "team" + std::to_string(static_cast<int>(u(rng) * std::max(1, g.teams)));
    SimJob j = MakeJob(d, "syn/" + std::to_string(i), team, t, gpus, work);
    const double p = u(rng);
    j.priority = p < 0.3    ? stintd::Priority::kLow
                 : p < 0.85 ? stintd::Priority::kMedium
                            : stintd::Priority::kHigh;
    out.push_back(j);
  }
  Normalize(&out);
  ApplyElastic(&out, d);
  return out;
}

std::vector<SimWindow> GenerateWindows(const SyntheticWindows& g) {
  std::mt19937_64 rng(g.seed ^ 0x5bd1e995ull);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<SimWindow> out;
  if (g.base_gpus > 0) {
    SimWindow base;
    base.gpus = g.base_gpus;
    out.push_back(base);
  }
  for (int i = 0; i < g.fragments; i++) {
    SimWindow w;
    const double r = u(rng);
    w.gpus = r < 0.4 ? 4 : r < 0.8 ? 8 : 16;
    w.start_s = u(rng) * g.horizon_s;
    w.end_s =
        w.start_s + std::exp(std::log(1800.0) + u(rng) * (std::log(8 * 3600.0) - std::log(1800.0)));
    out.push_back(w);
  }
  for (int i = 0; i < g.spot; i++) {
    SimWindow w;
    w.pool = "p0";
    w.gpus = 8;
    w.kind = stintd::WindowKind::kSpot;
    w.notice_lead_s = g.spot_notice_s;
    w.start_s = u(rng) * g.horizon_s;
    w.end_s = kForever;
    w.revoke_s = w.start_s + 3600 + u(rng) * 11 * 3600;
    out.push_back(w);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const SimWindow& a, const SimWindow& b) { return a.start_s < b.start_s; });
  return out;
}

std::vector<SimWindow> NodeCapacity(int nodes, int gpus_per_node) {
  std::vector<SimWindow> out;
  for (int i = 0; i < nodes; i++) {
    SimWindow w;
    w.gpus = gpus_per_node;
    out.push_back(w);
  }
  return out;
}

std::vector<SimWindow> GenerateSpotNodes(const SyntheticSpotNodes& g) {
  std::mt19937_64 rng(g.seed ^ 0x9e3779b97f4a7c15ull);
  std::exponential_distribution<double> life(1.0 / std::max(1.0, g.mean_life_s));
  std::exponential_distribution<double> gap(1.0 / std::max(1.0, g.mean_gap_s));
  std::vector<SimWindow> out;
  for (int node = 0; node < g.nodes; node++) {
    double t = 0;
    while (true) {
      SimWindow w;
      w.pool = "p0";
      w.gpus = g.gpus_per_node;
      w.kind = stintd::WindowKind::kSpot;
      w.notice_lead_s = g.notice_s;
      w.start_s = t;
      w.end_s = kForever;
      // At least a minute up, so that the notice never precedes the open.
      const double revoke = t + std::max(60.0, life(rng));
      if (revoke >= g.horizon_s) {
        out.push_back(w);
        break;
      }
      w.revoke_s = revoke;
      out.push_back(w);
      t = revoke + gap(rng);
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const SimWindow& a, const SimWindow& b) { return a.start_s < b.start_s; });
  return out;
}

int DropUnplaceable(std::vector<SimJob>* jobs, const std::vector<SimWindow>& windows) {
  // The most GPUs a pool ever has open at once: windows that follow each
  // other in time do not add up.
  std::map<std::string, std::vector<std::pair<double, int>>> changes;  // pool -> (time, delta)
  for (const SimWindow& w : windows) {
    changes[w.pool].emplace_back(w.start_s, w.gpus);
    changes[w.pool].emplace_back(w.gone_s(), -w.gpus);
  }
  int max_pool = 0;
  for (auto& [pool, deltas] : changes) {
    std::sort(deltas.begin(), deltas.end());  // at one instant a close comes before an open
    int open = 0;
    for (const auto& [t, d] : deltas) {
      open += d;
      max_pool = std::max(max_pool, open);
    }
  }
  const size_t before = jobs->size();
  // A gang may span the windows of a pool, like any job.
  jobs->erase(std::remove_if(jobs->begin(), jobs->end(),
                             [&](const SimJob& j) { return j.min_gpus > max_pool; }),
              jobs->end());
  for (SimJob& j : *jobs) j.max_gpus = std::min(j.max_gpus, max_pool);
  Normalize(jobs);
  return static_cast<int>(before - jobs->size());
}

void Normalize(std::vector<SimJob>* jobs) {
  std::stable_sort(jobs->begin(), jobs->end(),
                   [](const SimJob& a, const SimJob& b) { return a.submit_s < b.submit_s; });
  for (size_t i = 0; i < jobs->size(); i++) (*jobs)[i].id = static_cast<int64_t>(i);
}

}  // namespace stint::sim
