// A worker stint-agent launches in agent_test: it reaches stintd with
// nothing but the environment the agent set (no shared token), through
// CoordinatorSession, the KV and the fencing check, and cannot touch
// another job ($OTHER_JOB). Prints "coord_worker: ok" and exits 0, or
// names what failed and exits 1.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "stint/coordinator_client.h"

namespace {

int Fail(const std::string& what) {
  std::printf("coord_worker: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main() {
  using stint::Code;
  auto options = stint::CoordinatorOptionsFromEnvironment();
  if (!options.ok()) return Fail("environment: " + options.status().ToString());
  if (!options->token.empty()) return Fail("a shared token reached the worker");
  if (!options->preregistered) return Fail("no registration in the environment");
  auto session = stint::CoordinatorSession::Start(*options, nullptr);
  if (!session.ok()) return Fail("session: " + session.status().ToString());
  const auto& reg = (*session)->registration();
  if (reg.worker_id != options->preregistered->worker_id)
    return Fail("the session registered again instead of adopting the agent's registration");
  stint::CoordinatorClient* client = (*session)->client();
  auto beat = client->Heartbeat(1);
  if (!beat.ok() || !beat->active) return Fail("heartbeat: " + beat.status().ToString());
  const char* rank = std::getenv("RANK");
  auto put = client->Put(std::string("hello-") + (rank != nullptr ? rank : "?"), "hi");
  if (!put.ok()) return Fail("kv put: " + put.status().ToString());
  auto check = client->CheckFencing();
  if (!check.ok() || !check->valid)
    return Fail("fencing: " + (check.ok() ? check->reason : check.status().ToString()));
  if (const char* other = std::getenv("OTHER_JOB")) {
    stint::CoordinatorOptions o = *options;
    o.job_id = std::strtoull(other, nullptr, 10);
    o.preregistered.reset();
    auto foreign = stint::CoordinatorClient::Create(o);
    if (!foreign.ok()) return Fail("client: " + foreign.status().ToString());
    (*foreign)->UseRegistration(reg);
    stint::Status s = (*foreign)->Put("intrusion", "x").status();
    if (s.code() != Code::kUnauthenticated && s.code() != Code::kPermissionDenied)
      return Fail("another job's KV answered " + s.ToString());
    auto other_check = (*foreign)->CheckFencing(o.job_id, reg.fencing_token);
    if (other_check.ok()) return Fail("another job's fencing check answered");
  }
  std::printf("coord_worker: ok\n");
  return 0;
}
