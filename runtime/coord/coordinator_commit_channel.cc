#include "stint/coordinator_commit_channel.h"

#include <chrono>
#include <cstdlib>

namespace stint {

CoordinatorCommitChannel::CoordinatorCommitChannel(CoordinatorClient* client, std::string prefix)
    : client_(client), prefix_(std::move(prefix)) {}

Status CoordinatorCommitChannel::Set(const std::string& key, const std::string& value) {
  return client_->Put(prefix_ + "/" + key, value).status();
}

Result<std::optional<std::string>> CoordinatorCommitChannel::Get(const std::string& key) {
  auto entry = client_->Get(prefix_ + "/" + key, std::chrono::seconds(0));
  if (!entry.ok()) {
    if (entry.status().code() == Code::kNotFound) return std::optional<std::string>();
    return entry.status();
  }
  return std::optional<std::string>(std::move(entry->value));
}

Status CoordinatorCommitChannel::Delete(const std::string& key) {
  Status s = client_->Delete(prefix_ + "/" + key);
  return s.code() == Code::kNotFound ? Status::OK() : s;
}

Result<int64_t> CoordinatorCommitChannel::Add(const std::string& key, int64_t delta) {
  return client_->Add(prefix_ + "/" + key, delta);
}

std::string CoordinatorCommitChannel::Describe() const {
  return "stintd KV of job " + std::to_string(client_->options().job_id) + " under " + prefix_;
}

std::function<Status(uint64_t fencing_token)> CoordinatorTokenGuard(CoordinatorClient* client) {
  return [client](uint64_t token) -> Status {
    const std::string who = "fencing token " + std::to_string(token) + " of job " +
                            std::to_string(client->options().job_id);
    auto check = client->CheckFencing(client->options().job_id, token);
    if (!check.ok()) return check.status().WithContext("cannot confirm " + who);
    if (!check->valid) {
      return Status::Aborted("fenced: " + who +
                             " is stale (that worker left or was dropped from the group, or its "
                             "segment ended)");
    }
    return Status::OK();
  };
}

Status FenceCommits(CoordinatorClient* client, CheckpointOptions* options) {
  std::optional<WorkerRegistration> reg = client->registration();
  if (!reg) {
    return Status::FailedPrecondition(
        "fencing commits needs a registered coordinator client (Register() first)");
  }
  if (options->fencing_token == 0) options->fencing_token = reg->fencing_token;
  if (!options->commit_guard) options->commit_guard = client->CommitGuard();
  if (!options->token_guard) options->token_guard = CoordinatorTokenGuard(client);
  if (!options->retention_pins) options->retention_pins = client->RetentionPins();
  return Status::OK();
}

Result<std::unique_ptr<CoordinatorClient>> WorkerClientFromEnvironment() {
  auto set = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0';
  };
  if (!set("STINT_WORKER_ID") && !set("STINT_WORKER_SECRET"))
    return std::unique_ptr<CoordinatorClient>();
  STINT_ASSIGN_OR_RETURN(CoordinatorOptions o, CoordinatorOptionsFromEnvironment());
  STINT_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> client, CoordinatorClient::Create(o));
  STINT_RETURN_IF_ERROR(client->Register().status());  // adopts the agent's registration
  return client;
}

Result<std::unique_ptr<CoordinatorClient>> FenceCommitsFromEnvironment(CheckpointOptions* options) {
  if (options->read_only) return std::unique_ptr<CoordinatorClient>();
  STINT_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> client,
                         WorkerClientFromEnvironment());
  if (client != nullptr) {
    STINT_RETURN_IF_ERROR(FenceCommits(client.get(), options)
                              .WithContext("the worker registration in the environment"));
  }
  return client;
}

}  // namespace stint
