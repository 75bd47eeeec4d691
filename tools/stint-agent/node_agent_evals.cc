// NodeAgent's evaluations: started on leftover GPUs as stintd hands them,
// stopped when stintd takes the GPU back, killed whole at their deadline,
// and reported only once every process of them is gone (node_agent.h).
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <set>

#include "coord/http_json.h"
#include "coord/wall_clock.h"
#include "stint-agent/job_process.h"
#include "stint-agent/node_agent.h"
#include "stint-agent/process_tree.h"
#include "stint/env.h"

namespace stint {
namespace agent {

using internal::Json;

namespace {

// An evaluation's deadline when its spec gives none (eval.timeout_seconds).
constexpr double kEvalTimeoutSeconds = 3600;

}  // namespace

void NodeAgent::RunEvaluations(const void* list) {
  const Json& evals = *static_cast<const Json*>(list);
  std::set<int64_t> listed;
  for (const Json& e : evals) listed.insert(e.value("id", int64_t{0}));
  for (auto& [id, e] : evals_) {
    if (listed.count(id) || e.exited || e.stopped) continue;
    // Stopped by stintd (its GPU went to a segment): it runs again later.
    // SettleEvaluations drops it once all of it is gone.
    e.stopped = e.killed = true;
    e.tree->Kill();
    std::printf("stint-agent: evaluation %lld stopped\n", static_cast<long long>(id));
  }
  for (const Json& e : evals) {
    const int64_t id = e.value("id", int64_t{0});
    if (evals_.count(id)) continue;
    const Json spec = e.value("eval", Json());
    const Json gpu = e.value("gpu", Json());
    if (!spec.is_object() || !spec.value("command", Json()).is_array()) continue;
    std::vector<std::string> command;
    for (const Json& arg : spec["command"]) command.push_back(arg.get<std::string>());
    const int64_t job = e.value("job_id", int64_t{0});
    const std::string dir = options_.workdir + "/job-" + std::to_string(job);
    if (!CreateDirWithParents(Env::Default(), dir).ok()) continue;
    EnvVars vars = {{"STINT_EVAL_ID", std::to_string(id)},
                    {"STINT_EVAL_JOB_ID", std::to_string(job)},
                    {"STINT_EVAL_STEP", std::to_string(e.value("step", int64_t{0}))},
                    {"CUDA_VISIBLE_DEVICES",
                     gpu.is_number_integer() ? std::to_string(gpu.get<int>()) : std::string()}};
    const Json env = spec.value("env", Json::object());
    for (const auto& [k, v] : env.items()) vars.emplace_back(k, v.get<std::string>());
    const Result<std::optional<JobIdentity>> as = job_users_.For(job, ActiveJobs());
    if (!as.ok()) {
      std::fprintf(stderr, "stint-agent: evaluation %lld of job %lld: %s\n",
                   static_cast<long long>(id), static_cast<long long>(job),
                   as.status().ToString().c_str());
      continue;  // stintd hands it again with the next beat
    }
    const Json timeout = spec.value("timeout_seconds", Json(kEvalTimeoutSeconds));
    const double seconds = timeout.is_number() ? timeout.get<double>() : kEvalTimeoutSeconds;
    EvalRun run;
    run.job_id = job;
    run.gpu = gpu.is_number_integer() ? gpu.get<int>() : -1;
    run.log = dir + "/eval-" + std::to_string(id) + ".log";
    run.pid = ForkJobProcess(command, run.log, spec.value("workdir", std::string()), vars, *as);
    if (run.pid < 0) continue;
    run.tree = std::make_unique<ProcessTree>(run.pid, "STINT_EVAL_ID=" + std::to_string(id));
    run.timeout_seconds = seconds;
    run.deadline_ms = internal::WallNowMs() + static_cast<int64_t>(seconds * 1000);
    // Leftover capacity: the lowest CPU priority, below any training worker.
    setpriority(PRIO_PROCESS, static_cast<id_t>(run.pid), 19);
    std::printf(
        "stint-agent: evaluation %lld of job %lld step %lld started (%s, deadline in %g s)\n",
        static_cast<long long>(id), static_cast<long long>(job),
        static_cast<long long>(e.value("step", int64_t{0})),
        gpu.is_number_integer() ? ("GPU " + std::to_string(gpu.get<int>())).c_str() : "CPU",
        seconds);
    evals_[id] = std::move(run);
  }
  std::fflush(stdout);
}

std::set<int> NodeAgent::SettleEvaluations(std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + wait;
  const pid_t agent = getpid();
  for (;;) {
    Reap();
    const ProcessTable table = evals_.empty() ? ProcessTable() : ReadProcessTable();
    const int64_t now = internal::WallNowMs();
    std::set<int> dying;
    for (auto& [id, e] : evals_) {
      if (e.exited) continue;
      e.tree->Update(table, agent);
      if (!e.killed && now >= e.deadline_ms) {
        e.killed = true;
        char why[128];
        std::snprintf(why, sizeof(why),
                      "deadline exceeded: killed after its timeout_seconds (%g s)",
                      e.timeout_seconds);
        e.why = why;
        std::printf("stint-agent: evaluation %lld: %s\n", static_cast<long long>(id), why);
      }
      if (e.killed) e.tree->Kill();
      if (e.reaped && !e.tree->HasMembers()) {
        e.exited = true;
      } else if (e.killed && e.gpu >= 0) {
        dying.insert(e.gpu);
      }
    }
    for (auto it = evals_.begin(); it != evals_.end();) {
      it = it->second.exited && it->second.stopped ? evals_.erase(it) : std::next(it);
    }
    bool settled = true;
    for (const auto& [id, e] : evals_) settled = settled && (e.exited || !e.killed);
    if (settled || std::chrono::steady_clock::now() >= until) {
      std::fflush(stdout);
      return dying;
    }
    usleep(10000);
  }
}

}  // namespace agent
}  // namespace stint
