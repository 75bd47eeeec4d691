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

// A state field: "IDLE" (22.05), or ["IDLE", "DRAIN"] (23.02+), whose first
// entry is the base state and the rest flags.
void ReadState(const json& v, std::string* state, std::vector<std::string>* flags) {
  if (v.is_string()) {
    *state = Upper(v.get<std::string>());
  } else if (v.is_array()) {
    for (const json& e : v) {
      if (!e.is_string()) continue;
      if (state->empty()) {
        *state = Upper(e.get<std::string>());
      } else if (flags != nullptr) {
        flags->push_back(Upper(e.get<std::string>()));
      }
    }
  }
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

bool SlurmJob::LaunchFailed() const {
  if (state == "FAILED") return reason == "JobLaunchFailure";
  return state == "CANCELLED" && !nodes.empty() && start_time > 0 && end_time - start_time <= 1;
}

Result<std::vector<SlurmNode>> ParseSinfoJson(const std::string& text) {
  STINT_ASSIGN_OR_RETURN(json doc, ParseJson("sinfo --json", text));
  auto nodes = doc.find("nodes");
  if (nodes == doc.end() || !nodes->is_array())
    return Status::InvalidArgument("sinfo --json: no \"nodes\" array");
  std::vector<SlurmNode> out;
  for (const json& n : *nodes) {
    if (!n.is_object()) continue;
    SlurmNode node;
    node.name = StringOr(n, "name");
    if (node.name.empty()) return Status::InvalidArgument("sinfo --json: a node without a name");
    node.address = StringOr(n, "address");
    if (n.contains("state")) ReadState(n["state"], &node.state, &node.flags);
    if (n.contains("state_flags") && n["state_flags"].is_array()) {
      for (const json& f : n["state_flags"])
        if (f.is_string()) node.flags.push_back(Upper(f.get<std::string>()));
    }
    node.gpus = GresGpus(StringOr(n, "gres"));
    if (n.contains("partitions") && n["partitions"].is_array()) {
      for (const json& p : n["partitions"])
        if (p.is_string()) node.partitions.push_back(p.get<std::string>());
    }
    node.reason = StringOr(n, "reason");
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
    if (j.contains("job_state")) ReadState(j["job_state"], &job.state, nullptr);
    STINT_ASSIGN_OR_RETURN(job.nodes, Hosts(what + " nodes", StringOr(j, "nodes")));
    job.partition = StringOr(j, "partition");
    job.reason = StringOr(j, "state_reason");
    if (j.contains("exit_code")) job.exit_code = ExitCode(j["exit_code"]);
    if (j.contains("start_time")) job.start_time = Number(j["start_time"]);
    if (j.contains("end_time")) job.end_time = Number(j["end_time"]);
    out.push_back(std::move(job));
  }
  return out;
}

Result<std::vector<SlurmReservation>> ParseReservations(const std::string& text) {
  std::vector<SlurmReservation> out;
  std::stringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("ReservationName=", 0) != 0) continue;  // "No reservations in the system"
    std::map<std::string, std::string> fields;
    std::stringstream words(line);
    std::string word;
    while (words >> word) {
      const size_t eq = word.find('=');
      if (eq != std::string::npos) fields[word.substr(0, eq)] = word.substr(eq + 1);
    }
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
