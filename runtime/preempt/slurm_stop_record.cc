// RecordSlurmStop: ROOT/REQUEUE, the stop a run's tasks decided (stint/slurm.h).
#include <string>

#include "stint/slurm.h"

namespace stint {

Status RecordSlurmStop(Env* env, const std::string& root, int rank, const std::string& job_id,
                       int restart_count, uint64_t step, std::optional<uint64_t> durable_step) {
  if (root.empty() || job_id.empty()) {
    return Status::InvalidArgument("the Slurm stop record needs a root and a job id");
  }
  const std::string path = root + "/" + kSlurmStopRecordName;
  const std::string line = "slurm_job=" + job_id + " restart=" + std::to_string(restart_count) +
                           " step=" + std::to_string(step) +
                           " durable=" + (durable_step ? std::to_string(*durable_step) : "none") +
                           "\n";
  // Each rank its own temporary name: every rank writes the record at once.
  const std::string tmp = path + ".rank" + std::to_string(rank) + ".tmp";
  Status s = WriteStringToFileSync(env, tmp, line);
  if (s.ok()) s = env->RenameFile(tmp, path);
  if (s.ok()) s = env->SyncDir(root);
  if (!s.ok()) {
    env->RemoveFile(tmp).IgnoreError();
    return s.WithContext("recording the stop in " + path);
  }
  return Status::OK();
}

}  // namespace stint
