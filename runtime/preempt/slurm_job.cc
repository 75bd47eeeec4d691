// SlurmJobEndTime and SlurmRequeue over Slurm's CLI (squeue, scontrol).
#include "stint/slurm.h"

#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "base/strings.h"
#include "base/subprocess.h"

namespace stint {
namespace {

using SystemTime = std::chrono::system_clock::time_point;

Result<SystemTime> FromUnixSeconds(const std::string& what, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long long seconds = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || seconds <= 0) {
    return Status::InvalidArgument(what + "='" + text + "': not UNIX seconds");
  }
  return SystemTime(std::chrono::seconds(seconds));
}

}  // namespace

Result<std::optional<SystemTime>> ParseSlurmTime(const std::string& text) {
  if (text == "NONE" || text == "N/A" || text == "Unknown" || text == "INVALID" ||
      text == "UNLIMITED") {
    return std::optional<SystemTime>();
  }
  tm parts{};
  const char* rest = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &parts);
  if (rest == nullptr || *rest != '\0') {
    return Status::InvalidArgument("Slurm time '" + text + "' is not YYYY-MM-DDTHH:MM:SS");
  }
  parts.tm_isdst = -1;
  const time_t t = mktime(&parts);
  if (t == static_cast<time_t>(-1)) {
    return Status::InvalidArgument("Slurm time '" + text + "' is not a local time");
  }
  return std::optional<SystemTime>(std::chrono::system_clock::from_time_t(t));
}

Result<std::optional<SystemTime>> SlurmJobEndTime(const std::string& job_id,
                                                  std::chrono::milliseconds timeout) {
  if (const char* end = std::getenv("SLURM_JOB_END_TIME"); end != nullptr && end[0] != '\0') {
    STINT_ASSIGN_OR_RETURN(SystemTime t, FromUnixSeconds("SLURM_JOB_END_TIME", end));
    return std::optional<SystemTime>(t);
  }
  STINT_ASSIGN_OR_RETURN(CommandOutput out,
                         RunCommand({"squeue", "-h", "-j", job_id, "-o", "%e"}, timeout));
  const std::string text = Trim(out.output);
  if (out.exit_code != 0 || text.empty()) {
    return Status::NotFound("squeue -j " + job_id + " (exit " + std::to_string(out.exit_code) +
                            "): " + (out.Text().empty() ? "no such job" : out.Text()));
  }
  Result<std::optional<SystemTime>> end = ParseSlurmTime(text);
  if (!end.ok()) return end.status().WithContext("squeue's end time of Slurm job " + job_id);
  return end;
}

std::optional<double> SlurmEndClock::Due(const CheckpointCost& cost, SystemTime now) {
  if (last_boundary_) {
    step_seconds_ = std::max(step_seconds_ * 0.8,
                             std::chrono::duration<double>(now - *last_boundary_).count());
  }
  last_boundary_ = now;
  const double save = cost.fixed_seconds + (cost.bytes_per_second > 0
                                                ? double(cost.state_bytes) / cost.bytes_per_second
                                                : 10.0);
  const double left = std::chrono::duration<double>(end_ - now).count();
  const double safety = std::chrono::duration<double>(safety_).count();
  if (left <= save + 2 * step_seconds_ + safety) return left;
  return std::nullopt;
}

Status SlurmRequeue(const std::string& job_id, std::chrono::milliseconds timeout) {
  STINT_ASSIGN_OR_RETURN(CommandOutput out, RunCommand({"scontrol", "requeue", job_id}, timeout));
  if (out.exit_code != 0) {
    return Status::FailedPrecondition("scontrol requeue " + job_id + " (exit " +
                                      std::to_string(out.exit_code) + "): " + out.Text());
  }
  return Status::OK();
}

}  // namespace stint
