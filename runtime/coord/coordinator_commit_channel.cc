#include "stint/coordinator_commit_channel.h"

#include <chrono>

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

}  // namespace stint
