// preemption: a training loop's preemption path without the training. Fake
// steps run until a SIGTERM or SIGUSR1 arrives (or --steps are done); at the
// next step boundary it prints the notice and the plan and exits with
// kExitRequeue (75), which tells the scheduler to run it again.
//
//   preemption_example &              # prints "running pid N", then a line every 10 steps
//   kill -TERM %1                     # notice: signal SIGTERM ... / plan: ... / exit 75
//   STINT_GRACE_SECONDS=5 preemption_example --state-mb 4000 --mbps 1000 --every 1000
//                                     # too big for the time left: "50 steps ... will be lost"
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "stint/preemption.h"

namespace {

struct Flags {
  int64_t steps = 1000000;  // stop after this many steps when nothing arrives
  int64_t step_ms = 20;     // duration of one fake step
  int64_t every = 50;       // a fake durable checkpoint every N steps
  double state_mb = 256;    // size of the emergency checkpoint
  double mbps = 2000;       // measured persist throughput; 0 = unknown
};

void Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--steps N=1000000] [--step-ms MS=20] [--every N=50]\n"
               "          [--state-mb MB=256] [--mbps MB_PER_S=2000]\n",
               argv0);
}

bool ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return false;
    const char* value = argv[++i];
    char* end = nullptr;
    if (arg == "--steps") {
      flags->steps = std::strtoll(value, &end, 10);
    } else if (arg == "--step-ms") {
      flags->step_ms = std::strtoll(value, &end, 10);
    } else if (arg == "--every") {
      flags->every = std::strtoll(value, &end, 10);
    } else if (arg == "--state-mb") {
      flags->state_mb = std::strtod(value, &end);
    } else if (arg == "--mbps") {
      flags->mbps = std::strtod(value, &end);
    } else {
      return false;
    }
    if (end == value || *end != '\0') return false;
  }
  return flags->steps >= 0 && flags->step_ms >= 0 && flags->every > 0 && flags->state_mb >= 0 &&
         flags->mbps >= 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    Usage(argv[0]);
    return stint::kExitDoNotRequeue;
  }
  auto launch = stint::LaunchEnvFromEnvironment();
  if (!launch.ok()) {
    std::fprintf(stderr, "launch environment: %s\n", launch.status().ToString().c_str());
    return stint::kExitDoNotRequeue;
  }
  auto watcher = stint::PreemptionWatcher::Install();
  if (!watcher.ok()) {
    std::fprintf(stderr, "preemption watcher: %s\n", watcher.status().ToString().c_str());
    return stint::kExitDoNotRequeue;
  }
  std::printf("running pid %d rank %d/%d (%s)\n", int(getpid()), launch->rank, launch->world_size,
              launch->launcher.c_str());
  std::fflush(stdout);

  uint64_t last_durable = 0;
  for (int64_t step = 1; step <= flags.steps; ++step) {
    std::this_thread::sleep_for(std::chrono::milliseconds(flags.step_ms));  // the "step"
    if (step % flags.every == 0) last_durable = uint64_t(step);             // the "checkpoint"
    if (step % 10 == 0) {
      std::printf("step %lld\n", static_cast<long long>(step));
      std::fflush(stdout);
    }

    // The step boundary: one atomic load when nothing is pending.
    if (!(*watcher)->requested()) continue;
    stint::CheckpointCost cost;
    cost.state_bytes = uint64_t(flags.state_mb * 1e6);
    cost.bytes_per_second = flags.mbps * 1e6;
    cost.steps_since_durable = uint64_t(step) - last_durable;
    const stint::PreemptionNotice notice = *(*watcher)->notice();
    const stint::PreemptionPlan plan = (*watcher)->PlanAt(cost);
    const auto grace = std::chrono::duration<double>(notice.deadline - notice.received).count();
    std::printf("notice: %s at step %lld, grace %.1f s\n", notice.source.c_str(),
                static_cast<long long>(step), grace);
    std::printf("plan: %s\n", plan.reason.c_str());
    if (plan.save) {
      // A real loop calls Checkpointer::Save and waits for it to be durable here.
      std::printf("emergency checkpoint at step %lld\n", static_cast<long long>(step));
    }
    std::printf("exit %d (requeue)\n", stint::kExitRequeue);
    std::fflush(stdout);
    return stint::kExitRequeue;
  }
  std::printf("done: %lld steps\n", static_cast<long long>(flags.steps));
  return 0;
}
