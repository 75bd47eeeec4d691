// stint._C.CoordinatorSession and ElasticRendezvous: a worker registered
// with stintd, and the job's elastic membership for a group the caller forms
// itself (torch.distributed). stint.elastic (python_bindings/stint/elastic.py)
// turns them into init_process_group calls, one per generation.
//
// ElasticRendezvous is an ElasticGroup without a communicator factory: it
// joins stintd's rendezvous and reports (generation, rank, world size, rank
// 0's address); rank 0's listening socket is closed before the answer, so
// the caller's own store binds that port.
//
// join() and reform() run on a thread the rendezvous owns while the calling
// thread waits with the GIL released, waking every 50 ms for signals
// (future.h). Ctrl-C (any exception a signal handler raises) cancels the
// call (ElasticGroup::Cancel), waits for it to return, which it does
// promptly, and closes the rendezvous before the KeyboardInterrupt
// propagates: no thread of it is left running. close() from another Python
// thread does the same to a call in progress, which then raises
// CancelledError.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include "bindings.h"
#include "future.h"
#include "status_to_exception.h"
#include "stint/coordinator_client.h"
#include "stint/elastic_group.h"
#include "stint/progress_reporter.h"

namespace stint {
namespace python {

namespace py = pybind11;

namespace {

// What a join() or reform() on the call thread answers: everything the
// Python thread needs afterwards, so it never touches the group again (a
// concurrent close() may have destroyed it by then).
struct CallAnswer {
  Status status;
  ElasticStep step;
  GroupMembership membership;
};

// One thread that runs the blocking calls of one ElasticRendezvous, one at
// a time. Started by the constructor, joined by the destructor after the
// call in progress (if any) returned. Thread-safe.
class CallThread {
 public:
  CallThread() : thread_([this] { Loop(); }) {}
  ~CallThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  CallThread(const CallThread&) = delete;
  CallThread& operator=(const CallThread&) = delete;

  // Runs `fn` on the thread. REQUIRES: the previous call's future is ready.
  std::future<CallAnswer> Post(std::function<CallAnswer()> fn) {
    std::packaged_task<CallAnswer()> task(std::move(fn));
    std::future<CallAnswer> answer = task.get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      task_ = std::move(task);
      has_task_ = true;
    }
    cv_.notify_all();
    return answer;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      // A posted task runs even when the stop comes first, so its future is
      // always fulfilled (never a broken promise).
      cv_.wait(lock, [&] { return stop_ || has_task_; });
      if (!has_task_) return;
      std::packaged_task<CallAnswer()> task = std::move(task_);
      has_task_ = false;
      lock.unlock();
      task();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::packaged_task<CallAnswer()> task_;  // guarded by mu_
  bool has_task_ = false;                  // guarded by mu_
  bool stop_ = false;                      // guarded by mu_
  std::thread thread_;                     // last: starts after the state above exists
};

// The registered worker. Shared with every ElasticRendezvous over it, so the
// client those use outlives them; close() gives up this object's share.
class PySession {
 public:
  explicit PySession(std::shared_ptr<CoordinatorSession> session) : session_(std::move(session)) {}

  CoordinatorSession& get() const {
    if (session_ == nullptr)
      ThrowStatus(Status::FailedPrecondition("the coordinator session was closed"));
    return *session_;
  }
  const std::shared_ptr<CoordinatorSession>& shared() const {
    get();
    return session_;
  }

  // Releases the GIL: ending the session joins its threads.
  void Close() {
    std::shared_ptr<CoordinatorSession> s = std::move(session_);
    ReleasedGil nogil;
    s.reset();
  }
  bool closed() const { return session_ == nullptr; }

  // A worker call that may block on stintd (retries included; bounded by
  // the retry deadline). The local share keeps the session alive should
  // another Python thread close() it meanwhile.
  template <typename Fn>
  void Call(Fn fn) {
    std::shared_ptr<CoordinatorSession> s = shared();
    Status status;
    {
      ReleasedGil nogil;
      status = fn(*s);
    }
    ThrowIfError(status);
  }

 private:
  std::shared_ptr<CoordinatorSession> session_;
};

using MembershipTuple = std::tuple<uint64_t, int, int, std::string, int, double>;

// The state below (pointers, busy_, the cached membership) is only read and
// written with the GIL held, which serializes every Python-visible method;
// the call thread sees only the group, through the task it runs.
class PyRendezvous {
 public:
  PyRendezvous(const PySession& session, std::optional<std::string> advertise_host,
               double join_timeout) {
    ElasticOptions o;
    if (advertise_host) o.advertise_host = *advertise_host;
    if (!(join_timeout > 0)) ThrowStatus(Status::InvalidArgument("join_timeout must be positive"));
    o.join_timeout = Millis(join_timeout);
    session_ = session.shared();
    group_ =
        ValueOrThrow(ElasticGroup::Create(session_->client(), /*factory=*/nullptr, std::move(o)));
    calls_ = std::make_unique<CallThread>();
  }
  ~PyRendezvous() { Close(); }
  PyRendezvous(const PyRendezvous&) = delete;
  PyRendezvous& operator=(const PyRendezvous&) = delete;

  MembershipTuple Join() {
    return Call("join()", [](ElasticGroup& g) { return g.Join(nullptr); });
  }
  MembershipTuple Reform(bool failed) {
    return Call("reform()", [failed](ElasticGroup& g) { return g.Reform(failed, nullptr); });
  }
  bool changed() {
    group();                              // raises once closed
    return group_->generation_changed();  // atomic: safe while a call runs
  }
  // The last formed generation (generation 0 before the first join()).
  MembershipTuple membership() const { return Tuple(membership_, reform_seconds_); }

  // Cancels a call in progress (another Python thread waits for it), waits
  // for it, and stops the group's threads. Idempotent.
  void Close() {
    std::unique_ptr<ElasticGroup> group = std::move(group_);
    std::unique_ptr<CallThread> calls = std::move(calls_);
    std::shared_ptr<CoordinatorSession> session = std::move(session_);
    if (group == nullptr) return;
    ReleasedGil nogil;
    group->Cancel();
    calls.reset();    // the call in progress returns promptly once cancelled
    group.reset();    // joins the watcher; before the session: it uses the session's client
    session.reset();  // the last share ends the session (joins its threads)
  }
  bool closed() const { return group_ == nullptr; }

 private:
  ElasticGroup& group() const {
    if (group_ == nullptr) {
      ThrowStatus(Status::FailedPrecondition(
          interrupted_ ? "the elastic rendezvous was closed by an interrupted call"
                       : "the elastic rendezvous was closed"));
    }
    return *group_;
  }

  static MembershipTuple Tuple(const GroupMembership& m, double reform_seconds) {
    return {m.generation, m.rank, m.world_size, m.master_host, m.master_port, reform_seconds};
  }

  // Runs `fn` on the call thread and waits for it without the GIL.
  template <typename Fn>
  MembershipTuple Call(const char* what, Fn fn) {
    ElasticGroup* g = &group();
    if (busy_) {
      ThrowStatus(Status::FailedPrecondition(std::string(what) +
                                             ": another join() or reform() is in progress"));
    }
    std::future<CallAnswer> answer = calls_->Post([g, fn] {
      CallAnswer a;
      Result<ElasticStep> step = fn(*g);
      a.status = step.status();
      if (step.ok()) a.step = *step;
      a.membership = g->membership();
      return a;
    });
    busy_ = true;
    try {
      WaitWithoutGil(
          [&](auto slice) { return answer.wait_for(slice) == std::future_status::ready; },
          std::nullopt);
    } catch (...) {
      // A signal handler raised (Ctrl-C): end the call, then the rendezvous,
      // before the exception propagates. The exception object stays as it
      // is while the GIL is released (nothing Python runs meanwhile here).
      busy_ = false;
      interrupted_ = true;
      Close();
      {
        ReleasedGil nogil;
        answer.wait();  // already returned, unless a close() on another thread still joins it
      }
      throw;
    }
    busy_ = false;
    CallAnswer a = answer.get();
    if (!a.status.ok()) {
      if (group_ == nullptr) {
        ThrowStatus(Status::Cancelled(std::string(what) +
                                      ": the elastic rendezvous was closed meanwhile (" +
                                      a.status.message() + ")"));
      }
      ThrowStatus(a.status);
    }
    membership_ = a.membership;
    reform_seconds_ = a.step.reform_seconds;
    return Tuple(membership_, reform_seconds_);
  }

  std::shared_ptr<CoordinatorSession> session_;  // declared first: destroyed after the group
  std::unique_ptr<ElasticGroup> group_;
  std::unique_ptr<CallThread> calls_;  // destroyed before the group it calls into
  bool busy_ = false;                  // a join() or reform() is waiting on the call thread
  bool interrupted_ = false;           // closed by an interrupted call
  GroupMembership membership_;
  double reform_seconds_ = 0;
};

// Arguments given override the environment; the environment fills in the
// rest (CoordinatorOptionsFromEnvironment, which requires STINT_COORD_TOKEN
// and STINT_JOB_ID, is read only when an argument leaves one of them out).
// The CA file comes from `ca_file`, else $STINT_CA_FILE, on either path, so an
// https stintd is verified the same way however the session was started.
CoordinatorOptions MakeOptions(std::optional<std::string> url, std::optional<std::string> token,
                               std::optional<uint64_t> job_id,
                               std::optional<std::string> worker_name,
                               std::optional<double> request_timeout,
                               std::optional<double> retry_deadline,
                               std::optional<std::string> ca_file) {
  CoordinatorOptions o;
  if (!token || !job_id) {
    o = ValueOrThrow(CoordinatorOptionsFromEnvironment());
  } else {
    const char* env_url = std::getenv("STINT_COORD_URL");
    if (env_url != nullptr && *env_url != '\0') o.url = env_url;
    const char* env_name = std::getenv("STINT_WORKER_NAME");
    if (env_name != nullptr && *env_name != '\0') o.worker_name = env_name;
    const char* env_ca = std::getenv("STINT_CA_FILE");
    if (env_ca != nullptr && *env_ca != '\0') o.ca_file = env_ca;
  }
  if (ca_file) o.ca_file = *ca_file;
  if (url) o.url = *url;
  if (token) o.token = *token;
  if (job_id) o.job_id = *job_id;
  if (worker_name) o.worker_name = *worker_name;
  if (request_timeout) {
    if (!(*request_timeout > 0))
      ThrowStatus(Status::InvalidArgument("request_timeout must be positive"));
    o.request_timeout = Millis(*request_timeout);
  }
  if (retry_deadline) {
    if (!(*retry_deadline >= 0))
      ThrowStatus(Status::InvalidArgument("retry_deadline must not be negative"));
    o.retry.deadline = Millis(*retry_deadline);
  }
  return o;
}

py::object NoticeDict(const std::optional<CoordinatorNotice>& n) {
  if (!n) return py::none();
  py::dict d;
  d["reason"] = n->reason;
  d["deadline_ms"] = n->deadline_ms;
  d["notice_ms"] = n->notice_ms;
  return d;
}

}  // namespace

std::shared_ptr<CoordinatorSession> SessionOf(py::handle session, const char* what) {
  if (!py::isinstance<PySession>(session)) {
    ThrowStatus(Status::InvalidArgument(std::string(what) +
                                        " must be a stint._C.CoordinatorSession, got " +
                                        std::string(py::str(py::type::of(session)))));
  }
  return session.cast<const PySession&>().shared();
}

void BindProgressReporter(py::module_& m) {
  py::class_<ProgressReporter>(
      m, "ProgressReporter",
      "Sends a worker's step, training loss and samples to stintd from a thread of its own, "
      "once per heartbeat interval (stint.Resumable makes one under stint-agent).")
      .def_static(
          "from_environment",
          []() -> std::unique_ptr<ProgressReporter> {
            return ValueOrThrow(ProgressReporter::FromEnvironment());
          },
          "For the worker registration stint-agent put in the environment; None outside "
          "stint-agent.")
      .def(
          "report",
          [](ProgressReporter& r, uint64_t step, std::optional<double> loss,
             std::optional<uint64_t> samples) { r.Report(step, loss, samples); },
          py::arg("step"), py::arg("loss") = py::none(), py::arg("samples") = py::none(),
          "The newest finished step, its loss and the samples so far; never blocks.")
      .def(
          "report_checkpoint",
          [](ProgressReporter& r, uint64_t step, double seconds,
             std::optional<double> notice_to_replicas_seconds) {
            if (!std::isfinite(seconds) || seconds < 0 ||
                (notice_to_replicas_seconds && (!std::isfinite(*notice_to_replicas_seconds) ||
                                                *notice_to_replicas_seconds < 0))) {
              ThrowStatus(Status::InvalidArgument(
                  "report_checkpoint: seconds and notice_to_replicas_seconds must be finite "
                  "numbers >= 0"));
            }
            r.ReportCheckpoint(step, seconds, notice_to_replicas_seconds);
          },
          py::arg("step"), py::arg("seconds"), py::arg("notice_to_replicas_seconds") = py::none(),
          "A durable checkpoint of `step` that took `seconds`; for an emergency one the seconds "
          "from the notice to durable and on its replicas (stintd keeps it as the segment's "
          "figure). Sent at once from the reporter's thread; never blocks.")
      .def(
          "report_stored",
          [](ProgressReporter& r, const std::string& location, int tier, uint64_t step,
             uint64_t bytes) {
            if (tier != 1 && tier != 2)
              ThrowStatus(Status::InvalidArgument("report_stored: tier must be 1 or 2"));
            r.ReportStored(location, tier, step, bytes);
          },
          py::arg("location"), py::arg("tier"), py::arg("step"), py::arg("bytes") = 0,
          "`step` is committed at `location` (tier 1: the root, 2: the replica root); stintd "
          "starts and moves the job only where its newest step can be read. Never blocks.")
      .def_property_readonly(
          "interval_seconds",
          [](const ProgressReporter& r) {
            return std::chrono::duration<double>(r.interval()).count();
          },
          "How often it heartbeats (a loss need not be read more often).")
      .def(
          "last_error",
          [](const ProgressReporter& r) -> py::object {
            Status e = r.last_error();
            return e.ok() ? py::object(py::none()) : ExceptionFor(e);
          },
          "The last heartbeat's error, or None. Dropping the last reference sends what was "
          "reported, then stops its thread.");
}

void BindElastic(py::module_& m) {
  BindProgressReporter(m);
  py::class_<PySession>(
      m, "CoordinatorSession",
      "A worker registered with stintd, kept alive by heartbeats on the session's "
      "own threads.")
      .def_static(
          "start",
          [](std::optional<std::string> url, std::optional<std::string> token,
             std::optional<uint64_t> job_id, std::optional<std::string> worker_name,
             std::optional<double> request_timeout, std::optional<double> retry_deadline,
             std::optional<std::string> ca_file) {
            CoordinatorOptions o = MakeOptions(url, token, job_id, worker_name, request_timeout,
                                               retry_deadline, ca_file);
            Result<std::unique_ptr<CoordinatorSession>> s = Status::Internal("not started");
            {
              ReleasedGil nogil;
              s = CoordinatorSession::Start(o, nullptr);
            }
            return std::make_unique<PySession>(
                std::shared_ptr<CoordinatorSession>(ValueOrThrow(std::move(s))));
          },
          py::arg("url") = py::none(), py::arg("token") = py::none(),
          py::arg("job_id") = py::none(), py::arg("worker_name") = py::none(),
          py::arg("request_timeout") = py::none(), py::arg("retry_deadline") = py::none(),
          py::arg("ca_file") = py::none(),
          "Registers a worker of job `job_id` and starts heartbeating. Options not given come "
          "from $STINT_COORD_URL, $STINT_COORD_TOKEN, $STINT_JOB_ID, $STINT_WORKER_NAME (token "
          "and job_id are then required there). ca_file: the PEM CAs an https stintd's "
          "certificate must chain to (default $STINT_CA_FILE, else the system's). "
          "request_timeout: seconds to wait for an answer "
          "(default 10); retry_deadline: seconds a call keeps retrying an unreachable stintd "
          "(default 60; 0: one attempt). UnauthenticatedError for a bad token; "
          "FailedPreconditionError when the job has no running segment yet (retry later); "
          "UnavailableError when stintd cannot be reached within retry_deadline.")
      .def_property_readonly("worker_id",
                             [](const PySession& s) { return s.get().registration().worker_id; })
      .def_property_readonly("job_id",
                             [](const PySession& s) { return s.get().registration().job_id; })
      .def_property_readonly("segment_id",
                             [](const PySession& s) { return s.get().registration().segment_id; })
      .def_property_readonly("fencing_token",
                             [](const PySession& s) { return s.get().fencing_token(); })
      .def_property_readonly(
          "fenced", [](const PySession& s) { return s.get().fenced(); },
          "True once stintd fenced this worker (its segment ended): stop, do not commit.")
      .def_property_readonly("closed", &PySession::closed)
      .def(
          "notice", [](const PySession& s) { return NoticeDict(s.get().notice()); },
          "None, or the newest notice {'reason', 'deadline_ms', 'notice_ms'} (wall clock ms).")
      .def(
          "last_error",
          [](const PySession& s) -> py::object {
            Status e = s.get().last_error();
            return e.ok() ? py::object(py::none()) : ExceptionFor(e);
          },
          "The error of the last failed background call (heartbeat, notice poll), or None.")
      .def(
          "set_step", [](PySession& s, uint64_t step) { s.get().SetStep(step); }, py::arg("step"),
          "The step sent with the next heartbeat. Cheap; call it every step.")
      .def(
          "report_loss", [](PySession& s, double loss) { s.get().ReportLoss(loss); },
          py::arg("loss"),
          "The newest step's training loss, sent with the next heartbeat (stintd's loss curve). "
          "Cheap; a loss that is not finite is not sent.")
      .def(
          "set_samples", [](PySession& s, uint64_t samples) { s.get().SetSamples(samples); },
          py::arg("samples"), "The samples trained on so far, sent with the next heartbeat.")
      .def(
          "report_checkpoint",
          [](PySession& s, uint64_t step, double seconds, std::optional<uint64_t> bytes) {
            s.Call([&](CoordinatorSession& c) { return c.ReportCheckpoint(step, seconds, bytes); });
          },
          py::arg("step"), py::arg("seconds"), py::arg("bytes") = py::none())
      .def(
          "ack",
          [](PySession& s, uint64_t step) {
            s.Call([&](CoordinatorSession& c) { return c.Ack(step); });
          },
          py::arg("step"),
          "After a notice: the checkpoint of `step` is durable; give the GPUs back.")
      .def(
          "finished",
          [](PySession& s) { s.Call([](CoordinatorSession& c) { return c.Finished(); }); },
          "The job is complete.")
      .def(
          "leave", [](PySession& s) { s.Call([](CoordinatorSession& c) { return c.Leave(); }); },
          "This worker leaves without ending the job.")
      .def("close", &PySession::Close,
           "Stops heartbeating (the lease then expires unless ack/finished/leave was called). "
           "Rendezvous made from this session keep it alive until they are closed.");

  py::class_<PyRendezvous>(
      m, "ElasticRendezvous",
      "The job's elastic membership from stintd's rendezvous, for a group the "
      "caller forms itself. Membership tuples are (generation, rank, world_size, "
      "master_addr, master_port, reform_seconds).")
      .def(py::init<const PySession&, std::optional<std::string>, double>(), py::arg("session"),
           py::arg("advertise_host") = py::none(), py::arg("join_timeout") = 300.0,
           "advertise_host: the address peers reach this worker at (default "
           "$STINT_ADVERTISE_HOST, else 127.0.0.1); join_timeout: seconds join() and reform() may "
           "wait for a group to form.")
      .def("join", &PyRendezvous::Join,
           "Joins the first generation (or the current one after a restart) and returns its "
           "membership. DeadlineExceededError after join_timeout (naming what was missing); "
           "AbortedError 'fenced: ...' when this worker's segment ended. Releases the GIL; "
           "Ctrl-C cancels the call and closes the rendezvous before KeyboardInterrupt "
           "propagates.")
      .def("changed", &PyRendezvous::changed,
           "True once stintd's generation differs from this one (a worker died or joined). "
           "One atomic load.")
      .def("reform", &PyRendezvous::Reform, py::arg("failed") = false,
           "Leaves the current generation and joins the next; `failed`: this generation is broken "
           "(a collective failed). Returns the new membership. Waits and fails like join().")
      .def_property_readonly("membership", &PyRendezvous::membership,
                             "The last formed generation's membership tuple (generation 0 before "
                             "join()).")
      .def_property_readonly("closed", &PyRendezvous::closed)
      .def("close", &PyRendezvous::Close,
           "Stops watching stintd and joins the rendezvous' threads; a join() or reform() in "
           "progress on another thread is cancelled (it raises CancelledError). Idempotent.");
}

}  // namespace python
}  // namespace stint
