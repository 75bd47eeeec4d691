#include "stintd/core/evals.h"

#include <algorithm>
#include <set>

namespace stint::stintd {
namespace {

bool NodeOpen(const ClusterState& s, const std::string& node, TimeMs now) {
  return std::any_of(s.windows.begin(), s.windows.end(),
                     [&](const auto& w) { return w.second.node == node && w.second.open_at(now); });
}

void Requeue(EvalTask& e, const std::string& why, Changes* changes) {
  e.state = EvalState::kPending;
  e.node.clear();
  e.gpu = -1;
  e.message = why;
  changes->evals.insert(e.id);
}

}  // namespace

void QueueEvaluation(ClusterState& s, Job& job, int64_t step, TimeMs now, Changes* changes) {
  if (job.eval.empty() || job.eval_every < 1) return;
  job.checkpoints++;
  changes->jobs.insert(job.id);
  if (job.checkpoints % job.eval_every != 0) return;
  std::vector<int64_t> without_result;  // the job's superseded and failed ones, oldest first
  for (auto& [id, e] : s.evals) {
    if (e.job_id != job.id) continue;
    if (e.step == step && e.state != EvalState::kSuperseded) return;  // this one is queued already
    if (e.state == EvalState::kPending) {
      e.state = EvalState::kSuperseded;
      e.ended_ms = now;
      e.message = "superseded by the checkpoint of step " + std::to_string(step);
      changes->evals.insert(id);
    }
    if (e.state == EvalState::kSuperseded || e.state == EvalState::kFailed) {
      without_result.push_back(id);
    }
  }
  // Results are kept; of the rest only the newest few, or a job that
  // checkpoints often would grow the table (and every heartbeat's walk of
  // it) without end.
  for (size_t k = 0; k + kKeptWithoutResult < without_result.size(); ++k) {
    s.evals.erase(without_result[k]);
    changes->evals.insert(without_result[k]);  // deleted from the store
  }
  EvalTask e;
  e.id = s.next_id++;
  e.job_id = job.id;
  e.step = step;
  e.created_ms = now;
  s.evals[e.id] = e;
  changes->evals.insert(e.id);
  changes->counters = true;  // next_id
}

std::set<int64_t> PinnedSteps(const ClusterState& s, int64_t job_id) {
  std::set<int64_t> steps;
  for (const auto& [id, e] : s.evals) {
    if (e.job_id == job_id && (e.state == EvalState::kPending || e.state == EvalState::kRunning))
      steps.insert(e.step);
  }
  return steps;
}

std::vector<int> HeldGpus(const ClusterState& s, const Window& window,
                          const std::set<int64_t>* among) {
  std::vector<int> held;
  auto add = [&](const Segment& seg) {
    if (!SegmentActive(seg.state)) return;
    for (const Placement& p : seg.placement) {
      if (p.window_id == window.id) held.insert(held.end(), p.gpus.begin(), p.gpus.end());
    }
  };
  if (among == nullptr) {
    for (const auto& [id, seg] : s.segments) add(seg);
  } else {
    for (int64_t id : *among) {
      auto seg = s.segments.find(id);
      if (seg != s.segments.end()) add(seg->second);
    }
  }
  return held;
}

std::vector<int64_t> PlaceEvaluations(ClusterState& s, const Window& window, int slots, TimeMs now,
                                      Changes* changes) {
  // One evaluation per GPU the node lends at most, whatever it asks for:
  // a node cannot claim the queue's evaluations wholesale.
  slots = std::min(slots, window.gpus);
  const std::vector<int> held = HeldGpus(s, window);
  std::set<int> busy(held.begin(), held.end());
  std::vector<int64_t> run;
  for (auto& [id, e] : s.evals) {
    if (e.state != EvalState::kRunning) continue;
    if (e.node != window.node) {
      if (!NodeOpen(s, e.node, now)) Requeue(e, "node " + e.node + " left while it ran", changes);
      continue;
    }
    if (e.gpu >= 0 && std::count(held.begin(), held.end(), e.gpu) > 0) {
      Requeue(e,
              "stopped: GPU " + std::to_string(e.gpu) + " of node " + window.node +
                  " went to a training segment",
              changes);
      continue;
    }
    if (static_cast<int>(run.size()) >= slots) {
      Requeue(e, "stopped: node " + window.node + " has fewer evaluation slots now", changes);
      continue;
    }
    if (e.gpu >= 0) busy.insert(e.gpu);
    run.push_back(id);
  }
  for (auto& [id, e] : s.evals) {
    if (static_cast<int>(run.size()) >= slots) break;
    if (e.state != EvalState::kPending) continue;
    auto job = s.jobs.find(e.job_id);
    if (job == s.jobs.end()) continue;
    // Only in the job's pools: its command and env go to the node that runs it.
    const std::vector<std::string>& pools = job->second.pools;
    if (!pools.empty() && std::find(pools.begin(), pools.end(), window.pool) == pools.end())
      continue;
    int gpu = -1;
    if (job->second.eval_gpus > 0) {
      for (int g : window.node_gpus) {
        if (!busy.count(g)) {
          gpu = g;
          break;
        }
      }
      if (gpu < 0) continue;  // no GPU left over here
      busy.insert(gpu);
    }
    e.state = EvalState::kRunning;
    e.node = window.node;
    e.gpu = gpu;
    e.started_ms = now;
    e.attempts++;
    changes->evals.insert(id);
    run.push_back(id);
  }
  return run;
}

Status ReportEvaluation(ClusterState& s, const std::string& node, int64_t eval_id, int exit_code,
                        const std::string& result, const std::string& message, TimeMs now,
                        Changes* changes) {
  auto it = s.evals.find(eval_id);
  if (it == s.evals.end())
    return Status::NotFound("evaluation " + std::to_string(eval_id) + " does not exist");
  EvalTask& e = it->second;
  if (e.state != EvalState::kRunning || e.node != node) return Status::OK();
  e.ended_ms = now;
  if (exit_code == 0 && !result.empty()) {
    e.state = EvalState::kDone;
    e.result = result;
    e.message.clear();
  } else {
    e.state = EvalState::kFailed;
    e.message = exit_code == 0 ? "exited 0 without printing a JSON object of metrics"
                               : "exited " + std::to_string(exit_code) +
                                     (message.empty() ? std::string() : ": " + message);
  }
  changes->evals.insert(eval_id);
  return Status::OK();
}

}  // namespace stint::stintd
