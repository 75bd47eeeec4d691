#include "common/launch_spec.h"

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>

namespace stint {
namespace tools {
namespace {

using json = nlohmann::json;

constexpr const char* kSignals[] = {"TERM", "INT", "HUP", "USR1", "USR2"};

// The GPUs a job asks for, which gpus_per_worker must divide.
struct JobGpus {
  int min = 0;
  int max = 0;
};

// The checks in the order they have always run, so a spec with several bad
// fields is refused for the same one. `job`: null when not checked.
Result<LaunchSpec> Read(const json& l, const JobGpus* job) {
  if (!l.is_object()) return Status::InvalidArgument("launch must be a JSON object");
  for (const auto& [key, value] : l.items()) {
    if (key != "command" && key != "env" && key != "workdir" && key != "gpus_per_worker" &&
        key != "signal" && key != "torchrun" && key != "restart_crashed") {
      return Status::InvalidArgument("launch: unknown field \"" + key + "\"");
    }
  }
  LaunchSpec spec;
  const json command = l.value("command", json());
  if (!command.is_array() || command.empty())
    return Status::InvalidArgument("launch.command must be a non-empty array of strings");
  for (const json& a : command) {
    if (!a.is_string()) return Status::InvalidArgument("launch.command must hold strings only");
    spec.command.push_back(a.get<std::string>());
  }
  const json torchrun = l.value("torchrun", json());
  if (!torchrun.is_null() && (!torchrun.is_array() || torchrun.empty() ||
                              !std::all_of(torchrun.begin(), torchrun.end(),
                                           [](const json& a) { return a.is_string(); }))) {
    return Status::InvalidArgument(
        "launch.torchrun must be a non-empty array of strings (the launcher, e.g. [\"torchrun\"])");
  }
  if (!torchrun.is_null()) spec.torchrun = torchrun.get<std::vector<std::string>>();
  if (l.contains("env")) {
    const json& env = l["env"];
    if (!env.is_object()) return Status::InvalidArgument("launch.env must be an object of strings");
    spec.env.emplace();
    for (const auto& [k, v] : env.items()) {
      if (!v.is_string() || k.empty() || k.find('=') != std::string::npos)
        return Status::InvalidArgument("launch.env: \"" + k + "\" must name a string value");
      (*spec.env)[k] = v.get<std::string>();
    }
  }
  if (l.contains("workdir")) {
    if (!l["workdir"].is_string())
      return Status::InvalidArgument("launch.workdir must be a string");
    spec.workdir = l["workdir"].get<std::string>();
  }
  const json gpw = l.value("gpus_per_worker", json(1));
  if (!gpw.is_number_integer() || gpw.get<int64_t>() < 1 || gpw.get<int64_t>() > 1024)
    return Status::InvalidArgument("launch.gpus_per_worker must be an integer in [1, 1024]");
  if (l.contains("gpus_per_worker")) spec.gpus_per_worker = gpw.get<int>();
  if (job != nullptr &&
      (job->min % spec.GpusPerWorker() != 0 || job->max % spec.GpusPerWorker() != 0)) {
    return Status::InvalidArgument("launch.gpus_per_worker must divide min_gpus and max_gpus");
  }
  if (l.contains("restart_crashed")) {
    if (!l["restart_crashed"].is_boolean())
      return Status::InvalidArgument("launch.restart_crashed must be true or false");
    spec.restart_crashed = l["restart_crashed"].get<bool>();
  }
  const json sig = l.value("signal", json("TERM"));
  bool known = false;
  for (const char* name : kSignals) known = known || (sig.is_string() && sig == name);
  if (!known) return Status::InvalidArgument("launch.signal must be TERM, INT, HUP, USR1 or USR2");
  if (l.contains("signal")) spec.signal = sig.get<std::string>();
  return spec;
}

}  // namespace

int LaunchSpec::SignalNumber() const {
  const std::string name = signal.value_or("TERM");
  if (name == "INT") return SIGINT;
  if (name == "HUP") return SIGHUP;
  if (name == "USR1") return SIGUSR1;
  if (name == "USR2") return SIGUSR2;
  return SIGTERM;
}

Result<LaunchSpec> LaunchSpec::FromJson(const json& launch) { return Read(launch, nullptr); }

Result<LaunchSpec> LaunchSpec::ForJob(const json& launch, int min_gpus, int max_gpus) {
  const JobGpus job{min_gpus, max_gpus};
  return Read(launch, &job);
}

Result<LaunchSpec> LaunchSpec::Parse(const std::string& text) {
  return FromJson(json::parse(text, nullptr, /*allow_exceptions=*/false));
}

json LaunchSpec::ToJson() const {
  json out{{"command", command}};
  if (env) out["env"] = *env;
  if (workdir) out["workdir"] = *workdir;
  if (gpus_per_worker) out["gpus_per_worker"] = *gpus_per_worker;
  if (signal) out["signal"] = *signal;
  if (torchrun) out["torchrun"] = *torchrun;
  if (restart_crashed) out["restart_crashed"] = *restart_crashed;
  return out;
}

}  // namespace tools
}  // namespace stint
