#include "stintd/slurm/slurm_view.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "stint/launch_env.h"
#include "stint/slurm.h"

namespace stint::stintd {
namespace {

using json = nlohmann::json;

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

Result<json> ParseJson(const std::string& what, const std::string& text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Status::InvalidArgument(what + ": not a JSON object (" +
                                   text.substr(0, std::min<size_t>(text.size(), 120)) + ")");
  }
  return doc;
}

std::string StringOr(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A job_state field: "RUNNING" (22.05), or ["RUNNING", flags...] (23.02+),
// whose first entry is the state.
std::string ReadState(const json& v) {
  if (v.is_string()) return Upper(v.get<std::string>());
  if (v.is_array() && !v.empty() && v[0].is_string()) return Upper(v[0].get<std::string>());
  return "";
}

// The GPU count of a gres string: "gpu:4", "gpu:a100:4(S:0-1)",
// "gpu:2,shard:8"; 0 without one.
int GresGpus(const std::string& gres) {
  int total = 0;
  std::stringstream items(gres);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.rfind("gpu:", 0) != 0) continue;
    item = item.substr(0, item.find('('));
    const size_t colon = item.rfind(':');
    const std::string count = item.substr(colon + 1);
    if (!count.empty() && std::all_of(count.begin(), count.end(), ::isdigit))
      total += std::stoi(count);
  }
  return total;
}

// A hostlist field ("sx[1-2]"); "" or "(null)" is none.
Result<std::vector<std::string>> Hosts(const std::string& what, const std::string& list) {
  if (list.empty() || list == "(null)") return std::vector<std::string>();
  Result<std::vector<std::string>> hosts = ExpandHostlist(list);
  if (!hosts.ok()) return hosts.status().WithContext(what);
  return hosts;
}

// One line of scontrol's -o output: KEY=VALUE fields separated by spaces,
// where a word that does not start a KEY= continues the value before it
// (OS=Linux 6.1 #1 SMP, Reason=fan failed [root@...]).
std::map<std::string, std::string> KeyValues(const std::string& line) {
  std::map<std::string, std::string> fields;
  std::string* value = nullptr;
  std::stringstream words(line);
  std::string word;
  while (words >> word) {
    const size_t eq = word.find('=');
    const bool key =
        eq != std::string::npos && eq > 0 && std::isalpha(static_cast<unsigned char>(word[0])) &&
        std::all_of(word.begin(), word.begin() + eq,
                    [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
    if (key) {
      value = &fields[word.substr(0, eq)];
      *value = word.substr(eq + 1);
    } else if (value != nullptr) {
      *value += " " + word;
    }
  }
  return fields;
}

// A number field: N (22.05) or {"set": true, "number": N} (23.02+); 0
// otherwise.
int64_t Number(const json& n) {
  if (n.is_number_integer()) return n.get<int64_t>();
  if (n.is_object() && n.contains("number") && n["number"].is_number_integer())
    return n["number"].get<int64_t>();
  return 0;
}

// An exit_code field: the raw wait status (22.05), or {"status": [...],
// "return_code": N | {"number": N}, "signal": {"id": N | {"number": N}}}.
int ExitCode(const json& v) {
  if (v.is_number_integer()) {
    const int status = v.get<int>();
    if ((status & 0x7f) == 0) return (status >> 8) & 0xff;  // exited
    return 128 + (status & 0x7f);                           // killed by a signal
  }
  if (!v.is_object()) return 0;
  auto number = [](const json& n) { return static_cast<int>(Number(n)); };
  if (v.contains("signal") && v["signal"].is_object() && v["signal"].contains("id")) {
    const int sig = number(v["signal"]["id"]);
    if (sig > 0) return 128 + sig;
  }
  return v.contains("return_code") ? number(v["return_code"]) : 0;
}

}  // namespace

bool SlurmNode::Schedulable() const {
  if (state != "IDLE" && state != "MIXED" && state != "ALLOCATED" && state != "COMPLETING")
    return false;
  for (const char* bad : {"DRAIN", "DRAINING", "DRAINED", "FAIL", "NOT_RESPONDING", "MAINTENANCE",
                          "REBOOT_REQUESTED", "REBOOT_ISSUED", "POWER_DOWN", "POWERED_DOWN",
                          "POWERING_DOWN", "POWERING_UP", "RESERVED", "INVALID_REG"}) {
    if (Contains(flags, bad)) return false;
  }
  return true;
}

bool SlurmNode::InPartition(const std::string& partition) const {
  return Contains(partitions, partition);
}

bool SlurmJob::Live() const {
  for (const char* s : {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
                        "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "STAGE_OUT", "SIGNALING"}) {
    if (state == s) return true;
  }
  return false;
}

int SlurmJob::GpusOn(const std::string& node) const {
  for (size_t i = 0; i < nodes.size() && i < node_gpus.size(); i++)
    if (nodes[i] == node) return node_gpus[i];
  return 0;
}

bool SlurmJob::LaunchFailed() const {
  if (state == "FAILED") return reason == "JobLaunchFailure";
  return state == "CANCELLED" && !nodes.empty() && start_time > 0 && end_time - start_time <= 1;
}

Result<std::vector<SlurmNode>> ParseNodes(const std::string& text) {
  std::vector<SlurmNode> out;
  std::stringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::map<std::string, std::string> fields = KeyValues(line);
    SlurmNode node;
    node.name = fields["NodeName"];
    if (node.name.empty()) {
      return Status::InvalidArgument("scontrol show node -o: a line without NodeName= (" +
                                     line.substr(0, 120) + ")");
    }
    node.address = fields["NodeAddr"];
    std::stringstream parts(fields["State"]);
    std::string part;
    while (std::getline(parts, part, '+')) {
      // sinfo's marks on the base state, as scontrol prints some of them.
      static const std::map<char, const char*> kMarks = {
          {'*', "NOT_RESPONDING"}, {'~', "POWERED_DOWN"}, {'#', "POWERING_UP"},
          {'%', "POWERING_DOWN"},  {'!', "POWER_DOWN"},   {'@', "REBOOT_REQUESTED"},
          {'^', "REBOOT_ISSUED"},  {'$', "MAINTENANCE"},  {'-', "PLANNED"}};
      while (!part.empty() && kMarks.count(part.back())) {
        node.flags.push_back(kMarks.at(part.back()));
        part.pop_back();
      }
      if (part.empty()) continue;
      if (node.state.empty()) {
        node.state = Upper(part);
      } else {
        node.flags.push_back(Upper(part));
      }
    }
    if (node.state.empty())
      return Status::InvalidArgument("scontrol show node -o: node " + node.name + " has no State=");
    node.gpus = GresGpus(fields["Gres"]);
    std::stringstream partitions(fields["Partitions"]);
    while (std::getline(partitions, part, ','))
      if (!part.empty() && part != "(null)") node.partitions.push_back(part);
    node.reason = fields["Reason"];
    out.push_back(std::move(node));
  }
  return out;
}

Result<std::vector<SlurmJob>> ParseSqueueJson(const std::string& text) {
  STINT_ASSIGN_OR_RETURN(json doc, ParseJson("squeue --json", text));
  auto jobs = doc.find("jobs");
  if (jobs == doc.end() || !jobs->is_array())
    return Status::InvalidArgument("squeue --json: no \"jobs\" array");
  std::vector<SlurmJob> out;
  for (const json& j : *jobs) {
    if (!j.is_object()) continue;
    SlurmJob job;
    if (!j.contains("job_id") || !j["job_id"].is_number_integer())
      return Status::InvalidArgument("squeue --json: a job without a job_id");
    job.id = j["job_id"].get<int64_t>();
    const std::string what = "squeue --json: job " + std::to_string(job.id);
    job.name = StringOr(j, "name");
    if (j.contains("job_state")) job.state = ReadState(j["job_state"]);
    STINT_ASSIGN_OR_RETURN(job.nodes, Hosts(what + " nodes", StringOr(j, "nodes")));
    job.partition = StringOr(j, "partition");
    job.reason = StringOr(j, "state_reason");
    if (j.contains("exit_code")) job.exit_code = ExitCode(j["exit_code"]);
    if (j.contains("start_time")) job.start_time = Number(j["start_time"]);
    if (j.contains("end_time")) job.end_time = Number(j["end_time"]);
    if (j.contains("gres_detail") && j["gres_detail"].is_array()) {
      for (const json& g : j["gres_detail"])
        job.node_gpus.push_back(g.is_string() ? GresGpus(g.get<std::string>()) : 0);
    }
    if (j.contains("het_job_id")) job.het_job_id = Number(j["het_job_id"]);
    if (j.contains("het_job_offset")) job.het_job_offset = Number(j["het_job_offset"]);
    out.push_back(std::move(job));
  }
  return out;
}

Result<std::vector<SlurmJob>> ParseSacct(const std::string& text) {
  std::map<int64_t, SlurmJob> by_id;
  std::stringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    // JobIDRaw|State|ExitCode|JobName, the name last: it may hold a '|'.
    std::vector<std::string> f;
    size_t from = 0;
    for (int i = 0; i < 3; i++) {
      const size_t bar = line.find('|', from);
      if (bar == std::string::npos) break;
      f.push_back(line.substr(from, bar - from));
      from = bar + 1;
    }
    auto bad = [&](const std::string& why) {
      return Status::InvalidArgument("sacct: " + why + " in line \"" + line.substr(0, 120) +
                                     "\" (expected JobIDRaw|State|ExitCode|JobName)");
    };
    if (f.size() != 3) return bad("not 4 fields");
    f.push_back(line.substr(from));
    if (f[0].empty() || !std::all_of(f[0].begin(), f[0].end(), ::isdigit)) {
      if (f[0].find('.') != std::string::npos) continue;  // a step of a job
      return bad("job id \"" + f[0] + "\" is not a number");
    }
    SlurmJob job;
    job.id = std::stoll(f[0]);
    job.state = Upper(f[1].substr(0, f[1].find(' ')));
    if (job.state.empty()) return bad("no state");
    const size_t colon = f[2].find(':');
    const std::string code = f[2].substr(0, colon);
    const std::string sig = colon == std::string::npos ? "0" : f[2].substr(colon + 1);
    auto number = [](const std::string& s) {
      return !s.empty() && s.size() < 4 && std::all_of(s.begin(), s.end(), ::isdigit);
    };
    if (!number(code) || !number(sig)) return bad("exit code \"" + f[2] + "\" is not CODE:SIGNAL");
    job.exit_code = std::stoi(sig) != 0 ? 128 + std::stoi(sig) : std::stoi(code);
    job.name = f[3];
    by_id[job.id] = std::move(job);
  }
  std::vector<SlurmJob> out;
  for (auto& [id, job] : by_id) out.push_back(std::move(job));
  return out;
}

Result<std::vector<SlurmReservation>> ParseReservations(const std::string& text) {
  std::vector<SlurmReservation> out;
  std::stringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("ReservationName=", 0) != 0) continue;  // "No reservations in the system"
    std::map<std::string, std::string> fields = KeyValues(line);
    SlurmReservation r;
    r.name = fields["ReservationName"];
    const std::string what = "reservation " + r.name;
    for (auto [key, out_ms] : {std::pair{"StartTime", &r.start_ms}, {"EndTime", &r.end_ms}}) {
      Result<std::optional<std::chrono::system_clock::time_point>> t = ParseSlurmTime(fields[key]);
      if (!t.ok()) return t.status().WithContext(what + " " + key);
      *out_ms =
          t->has_value()
              ? std::chrono::duration_cast<std::chrono::milliseconds>((*t)->time_since_epoch())
                    .count()
              : std::numeric_limits<int64_t>::max();
    }
    STINT_ASSIGN_OR_RETURN(r.nodes, Hosts(what + " Nodes", fields["Nodes"]));
    std::stringstream flags(fields["Flags"]);
    std::string flag;
    while (std::getline(flags, flag, ','))
      if (!flag.empty()) r.flags.push_back(flag);
    out.push_back(std::move(r));
  }
  return out;
}

std::string SlurmTimeLimit(int64_t seconds) {
  const int64_t s = seconds % 60;
  return std::to_string(seconds / 60) + (s < 10 ? ":0" : ":") + std::to_string(s);
}

}  // namespace stint::stintd
