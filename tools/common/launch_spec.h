// LaunchSpec: how stint-agent starts a job's workers, the "launch" object of
// POST /v1/jobs (tools/stintd/API.md, "Launching"). The one reading of it
// for the three tools that handle it: stintd refuses a bad one at submit
// (naming the field) and reads the stored one to hand out and grow work,
// stint-agent runs what a heartbeat hands it, stintctl builds one from its
// flags. The optional fields are those the submitter gave: ToJson() writes
// exactly them, so a spec read and written again is the one submitted.
#ifndef STINT_TOOLS_COMMON_LAUNCH_SPEC_H_
#define STINT_TOOLS_COMMON_LAUNCH_SPEC_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "stint/status.h"

namespace stint {
namespace tools {

struct LaunchSpec {
  // The worker's argv (with torchrun: the argv torchrun starts per worker).
  // Never empty in a parsed spec.
  std::vector<std::string> command;
  // Added to the workers' environment. Keys non-empty, without '='.
  std::optional<std::map<std::string, std::string>> env;
  // The workers' working directory. Default: the agent's.
  std::optional<std::string> workdir;
  // GPUs per worker process, in [1, 1024]. Default: 1.
  std::optional<int> gpus_per_worker;
  // Sent to the workers on a notice: TERM, INT, HUP, USR1 or USR2.
  // Default: TERM.
  std::optional<std::string> signal;
  // The launcher (e.g. {"torchrun"}): one per node, which starts the node's
  // workers. Default: none, the agent starts each worker.
  std::optional<std::vector<std::string>> torchrun;
  // false: a crashed worker ends its segment instead of being started again.
  // Default: true.
  std::optional<bool> restart_crashed;

  int GpusPerWorker() const { return gpus_per_worker.value_or(1); }
  bool ThroughTorchrun() const { return torchrun.has_value(); }
  bool RestartCrashed() const { return restart_crashed.value_or(true); }
  // The signal's number (SIGTERM, ...).
  int SignalNumber() const;

  // A "launch" object. kInvalidArgument naming the first bad field
  // ("launch.env: ..."), or an unknown one; the whole spec is refused.
  static Result<LaunchSpec> FromJson(const nlohmann::json& launch);
  // As FromJson, for a job of min_gpus..max_gpus: gpus_per_worker must also
  // divide both.
  static Result<LaunchSpec> ForJob(const nlohmann::json& launch, int min_gpus, int max_gpus);
  // A job's stored spec (stintd's Job::launch, the JSON text submitted).
  static Result<LaunchSpec> Parse(const std::string& text);

  // The fields given, as a "launch" object.
  nlohmann::json ToJson() const;
};

}  // namespace tools
}  // namespace stint

#endif  // STINT_TOOLS_COMMON_LAUNCH_SPEC_H_
