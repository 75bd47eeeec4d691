// stint._C.PreemptionWatcher, PreemptionPlan, launch_env() and the Slurm
// calls (expand_hostlist, slurm_job_end_time, slurm_requeue): preemption
// notices for Python training loops. stint.PreemptionWatcher
// (python_bindings/stint/preemption.py) adds the context manager and the
// callback thread.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bindings.h"
#include "future.h"
#include "status_to_exception.h"
#include "stint/launch_env.h"
#include "stint/preemption.h"
#include "stint/slurm.h"

namespace stint {
namespace python {

namespace py = pybind11;

namespace {

double SecondsBetween(SteadyTime from, SteadyTime to) {
  return std::chrono::duration<double>(to - from).count();
}

// The installed watcher; uninstall() (or garbage collection) removes it.
// Thread-safe: every method but the waiting part of Wait() runs with the GIL
// held, which orders them; Uninstall() waits for Wait()s in progress to
// notice and return before it destroys the watcher.
class PyWatcher {
 public:
  explicit PyWatcher(std::unique_ptr<PreemptionWatcher> watcher) : watcher_(std::move(watcher)) {}
  ~PyWatcher() { Destroy(); }

  PreemptionWatcher& get() const {
    if (watcher_ == nullptr || closed_) {
      ThrowStatus(Status::FailedPrecondition("the preemption watcher was uninstalled"));
    }
    return *watcher_;
  }
  bool installed() const { return watcher_ != nullptr && !closed_; }

  void Uninstall() {
    ReleasedGil nogil;
    Destroy();
  }

  // REQUIRES: the GIL is held (released while waiting).
  bool Wait(std::optional<double> timeout) {
    const PreemptionWatcher& watcher = get();
    ++waiters_;
    struct Leave {
      std::atomic<int>* n;
      ~Leave() { --*n; }
    } leave{&waiters_};
    return WaitWithoutGil(
               [&](auto slice) {
                 // requested() is one atomic load: poll it in 5 ms steps within the slice.
                 auto end = std::chrono::steady_clock::now() + slice;
                 for (;;) {
                   if (closed_) return true;  // uninstalled: stop waiting
                   if (watcher.requested()) return true;
                   if (std::chrono::steady_clock::now() >= end) return false;
                   std::this_thread::sleep_for(std::chrono::milliseconds(5));
                 }
               },
               timeout) &&
           !closed_ && watcher.requested();
  }

 private:
  void Destroy() {
    closed_ = true;
    while (waiters_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    watcher_.reset();  // joins the watcher thread (never needs the GIL), restores handlers
  }

  std::unique_ptr<PreemptionWatcher> watcher_;
  std::atomic<bool> closed_{false};
  std::atomic<int> waiters_{0};
};

py::object NoticeDict(const std::optional<PreemptionNotice>& notice) {
  if (!notice) return py::none();
  SteadyTime now = std::chrono::steady_clock::now();
  py::dict d;
  d["source"] = notice->source;
  d["seconds_since_received"] = SecondsBetween(notice->received, now);
  d["seconds_to_deadline"] = SecondsBetween(now, notice->deadline);
  return d;
}

// The keyword arguments of plan() and due(): a checkpoint's cost.
CheckpointCost Cost(uint64_t state_bytes, double bytes_per_second, double fixed_seconds,
                    uint64_t steps_since_durable) {
  CheckpointCost c;
  c.state_bytes = state_bytes;
  c.bytes_per_second = bytes_per_second;
  c.fixed_seconds = fixed_seconds;
  c.steps_since_durable = steps_since_durable;
  return c;
}

}  // namespace

void BindPreemption(py::module_& m) {
  py::class_<PreemptionPlan>(m, "PreemptionPlan", "What to do at a step boundary.")
      .def_readonly("preempted", &PreemptionPlan::preempted, "A notice is pending.")
      .def_readonly("save", &PreemptionPlan::save, "Take an emergency checkpoint now.")
      .def_readonly("remaining_seconds", &PreemptionPlan::remaining_seconds,
                    "Until the deadline minus the safety margin.")
      .def_readonly("estimated_seconds", &PreemptionPlan::estimated_seconds,
                    "For the emergency checkpoint.")
      .def_readonly("steps_lost", &PreemptionPlan::steps_lost,
                    "When not saving: steps since the last durable checkpoint.")
      .def_readonly("reason", &PreemptionPlan::reason, "One line for the log.")
      .def("__repr__", [](const PreemptionPlan& p) {
        return std::string("<stint.PreemptionPlan preempted=") + (p.preempted ? "True" : "False") +
               " save=" + (p.save ? "True" : "False") + " reason='" + p.reason + "'>";
      });

  py::class_<PyWatcher>(m, "PreemptionWatcher",
                        "Turns preemption signals (SIGTERM, SIGUSR1 by default) and notify() "
                        "calls into a pending notice with a deadline. One per process.")
      .def_static(
          "install",
          [](std::optional<std::vector<int>> signals, std::optional<double> grace,
             std::optional<double> safety) {
            PreemptionOptions o;
            if (signals) o.signals = *signals;
            if (grace) o.grace = Millis(*grace);
            if (safety) o.safety = Millis(*safety);
            return std::make_unique<PyWatcher>(ValueOrThrow(PreemptionWatcher::Install(o)));
          },
          py::arg("signals") = py::none(), py::arg("grace") = py::none(),
          py::arg("safety") = py::none(),
          "Installs the signal handlers (previous ones are chained) and starts the watcher "
          "thread. grace and safety in seconds (defaults 30 and 2; $STINT_GRACE_SECONDS "
          "overrides grace). AlreadyExistsError if a watcher is installed already.")
      .def("uninstall", &PyWatcher::Uninstall,
           "Stops the thread and restores the previous handlers. Idempotent.")
      .def_property_readonly("installed", &PyWatcher::installed)
      .def_property_readonly(
          "requested", [](const PyWatcher& w) { return w.get().requested(); },
          "True once a notice is pending (one atomic load: call it every step).")
      .def_property_readonly("signals_received",
                             [](const PyWatcher& w) { return w.get().signals_received(); })
      .def(
          "notice", [](const PyWatcher& w) { return NoticeDict(w.get().notice()); },
          "None, or {'source', 'seconds_since_received', 'seconds_to_deadline'}.")
      .def(
          "notify",
          [](const PyWatcher& w, const std::string& source, double deadline_in) {
            w.get().Notify(source, std::chrono::steady_clock::now() +
                                       std::chrono::duration_cast<SteadyTime::duration>(
                                           std::chrono::duration<double>(deadline_in)));
          },
          py::arg("source"), py::arg("deadline_in"),
          "A notice from another source (coordinator, cloud poller): the resources go away "
          "in `deadline_in` seconds. The earliest deadline wins.")
      .def(
          "plan",
          [](const PyWatcher& w, uint64_t state_bytes, double bytes_per_second,
             double fixed_seconds, uint64_t steps_since_durable) {
            return w.get().PlanAt(
                Cost(state_bytes, bytes_per_second, fixed_seconds, steps_since_durable));
          },
          py::arg("state_bytes") = 0, py::arg("bytes_per_second") = 0.0,
          py::arg("fixed_seconds") = 0.05, py::arg("steps_since_durable") = 0,
          "The decision for the pending notice, now: emergency checkpoint if it fits the "
          "remaining grace at the measured throughput (unknown throughput: try).")
      .def(
          "keep_until_exit", [](const PyWatcher& w) { w.get().KeepUntilExit(); },
          "The run is over: the signals stay caught until the process exits, also after "
          "uninstall(); late signals are dropped.")
      .def("wait", &PyWatcher::Wait, py::arg("timeout") = py::none(),
           "Blocks (GIL released) until a notice is pending or `timeout` seconds pass; returns "
           "requested.");

  m.def(
      "launch_env",
      []() {
        LaunchEnv e = ValueOrThrow(LaunchEnvFromEnvironment());
        py::dict d;
        d["rank"] = e.rank;
        d["world_size"] = e.world_size;
        d["local_rank"] = e.local_rank;
        d["launcher"] = e.launcher;
        d["node_rank"] = e.node_rank;
        d["master_addr"] = e.master_addr;
        d["master_port"] = e.master_port;
        d["job_id"] = e.job_id;
        d["restart_count"] = e.restart_count;
        return d;
      },
      "Rank, world size, local and node rank, the master address and port, and under Slurm "
      "the job id and restart count, from torchrun's or Slurm's environment.");
  m.def(
      "expand_hostlist",
      [](const std::string& hostlist) { return ValueOrThrow(ExpandHostlist(hostlist)); },
      py::arg("hostlist"), "Slurm's hostlist syntax expanded: 'gpu[01-02],x' -> gpu01 gpu02 x.");
  m.def(
      "slurm_job_end_time",
      [](const std::string& job_id, double timeout) -> std::optional<double> {
        std::optional<Result<std::optional<std::chrono::system_clock::time_point>>> r;
        {
          ReleasedGil nogil;
          r.emplace(SlurmJobEndTime(job_id, std::chrono::milliseconds(
                                                static_cast<int64_t>(timeout * 1000))));
        }
        auto end = ValueOrThrow(std::move(*r));
        if (!end) return std::nullopt;
        return std::chrono::duration<double>(end->time_since_epoch()).count();
      },
      py::arg("job_id"), py::arg("timeout") = 30.0,
      "UNIX time the Slurm job ends (SLURM_JOB_END_TIME, else squeue); None without a limit.");
  py::class_<SlurmEndClock>(
      m, "SlurmEndClock",
      "When a job with a time limit must stop for its last checkpoint to fit (stint/slurm.h).")
      .def(py::init([](double end, double safety) {
             return SlurmEndClock(
                 std::chrono::system_clock::time_point(std::chrono::duration_cast<
                     std::chrono::system_clock::duration>(std::chrono::duration<double>(end))),
                 std::chrono::milliseconds(static_cast<int64_t>(safety * 1000)));
           }),
           py::arg("end"), py::arg("safety"),
           "end: UNIX seconds the job ends; safety: seconds kept free before it.")
      .def(
          "due",
          [](SlurmEndClock& clock, uint64_t state_bytes, double bytes_per_second,
             double fixed_seconds, uint64_t steps_since_durable) {
            return clock.Due(Cost(state_bytes, bytes_per_second, fixed_seconds, steps_since_durable));
          },
          py::arg("state_bytes") = 0, py::arg("bytes_per_second") = 0.0,
          py::arg("fixed_seconds") = 0.05, py::arg("steps_since_durable") = 0,
          "Call at every step boundary: seconds left to the end when the run must stop now "
          "(the checkpoint, two steps and the safety margin still fit), else None.")
      .def_property_readonly("end", [](const SlurmEndClock& clock) {
        return std::chrono::duration<double>(clock.end().time_since_epoch()).count();
      });
  m.def(
      "slurm_requeue",
      [](const std::string& job_id, double timeout) {
        Status s;
        {
          ReleasedGil nogil;
          s = SlurmRequeue(job_id,
                           std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000)));
        }
        ThrowIfError(s);
      },
      py::arg("job_id"), py::arg("timeout") = 60.0,
      "`scontrol requeue JOB`: ends every task of this run at once; only after a durable save.");
  m.def(
      "record_slurm_stop",
      [](const std::string& root, int rank, const std::string& job_id, int restart_count,
         uint64_t step, std::optional<uint64_t> durable_step) {
        Status s;
        {
          ReleasedGil nogil;
          s = RecordSlurmStop(Env::Default(), root, rank, job_id, restart_count, step,
                              durable_step);
        }
        ThrowIfError(s);
      },
      py::arg("root"), py::arg("rank"), py::arg("job_id"), py::arg("restart_count"),
      py::arg("step"), py::arg("durable_step"),
      "Writes ROOT/REQUEUE, the run's stop for `stint slurm submit`'s batch script "
      "(stint/slurm.h, RecordSlurmStop).");
}

}  // namespace python
}  // namespace stint
