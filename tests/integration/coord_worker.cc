// A worker stint-agent launches in agent_test: it reaches stintd with
// nothing but the environment the agent set (no shared token), through
// CoordinatorSession, the KV and the fencing check, and cannot touch
// another job ($OTHER_JOB). Prints "coord_worker: ok worker <id>" and exits
// 0, or names what failed and exits 1. With --self-register (a rank under a
// torchrun launch) it must hold no registration but a registration token,
// and registers itself with it.
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

int main(int argc, char** argv) {
  using stint::Code;
  const bool self_register = argc > 1 && std::string(argv[1]) == "--self-register";
  auto options = stint::CoordinatorOptionsFromEnvironment();
  if (!options.ok()) return Fail("environment: " + options.status().ToString());
  if (self_register) {
    if (options->preregistered) return Fail("the launcher's registration reached a rank");
    if (options->token.rfind("stg1.", 0) != 0) return Fail("no segment registration token");
  } else {
    if (!options->token.empty()) return Fail("a shared token reached the worker");
    if (!options->preregistered) return Fail("no registration in the environment");
  }
  auto session = stint::CoordinatorSession::Start(*options, nullptr);
  if (!session.ok()) return Fail("session: " + session.status().ToString());
  const auto& reg = (*session)->registration();
  if (!self_register && reg.worker_id != options->preregistered->worker_id)
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
  std::printf("coord_worker: ok worker %llu\n", static_cast<unsigned long long>(reg.worker_id));
  return 0;
}
