// stint._C: the native half of `import stint`. The Python package
// (python_bindings/stint/) wraps it into the public, Pythonic API; this
// module keeps to the runtime's own concepts.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "bindings.h"
#include "exit_hook.h"
#include "future.h"
#include "status_to_exception.h"
#include "stint/preemption.h"
#include "stint/version.h"

namespace stint {
namespace python {

namespace py = pybind11;

Status Future::Wait(std::optional<double> timeout_seconds) const {
  bool ready = WaitWithoutGil(
      [this](auto slice) { return future_.wait_for(slice) == std::future_status::ready; },
      timeout_seconds);
  if (!ready) {
    return Status::DeadlineExceeded("step " + std::to_string(step_) + ": not " + what_ + " after " +
                                    std::to_string(*timeout_seconds) + " s");
  }
  return future_.get();
}

uint64_t Future::result(std::optional<double> timeout_seconds) const {
  Status s = Wait(timeout_seconds);
  if (!s.ok() && done()) reported_->store(true);  // not when the wait itself timed out
  ThrowIfError(s);
  return step_;
}

py::object Future::exception(std::optional<double> timeout_seconds) const {
  Status s = Wait(timeout_seconds);
  if (s.code() == Code::kDeadlineExceeded && !done()) ThrowStatus(s);  // the wait itself timed out
  if (s.ok()) return py::none();
  reported_->store(true);
  return ExceptionFor(s);
}

void BindFuture(py::module_& m) {
  py::class_<Future>(m, "Future",
                     "Completion of one stage of a save (`staged`: the state may be modified "
                     "again; `durable`: committed on disk). Waits release the GIL.")
      .def("done", &Future::done, "True once the stage finished, successfully or not.")
      .def("result", &Future::result, py::arg("timeout") = py::none(),
           "Waits (at most `timeout` seconds; None: no limit) and returns the step. Raises the "
           "stint error the stage failed with, or DeadlineExceededError when the timeout passes.")
      .def("exception", &Future::exception, py::arg("timeout") = py::none(),
           "Waits like result() and returns the error the stage failed with, or None.")
      .def_property_readonly("step", &Future::step)
      .def("__repr__", [](const Future& f) {
        return "<stint.Future " + f.what() + " step " + std::to_string(f.step()) +
               (f.done() ? " done>" : " pending>");
      });
}

}  // namespace python
}  // namespace stint

PYBIND11_MODULE(_C, m) {
  m.doc() = "Native part of stint; use the `stint` package instead.";
  stint::python::BindErrors(m);
  stint::python::BindFuture(m);
  stint::python::BindSampler(m);
  stint::python::BindPreemption(m);
  stint::python::BindCheckpointer(m);
  stint::python::BindElastic(m);
  stint::python::BindExitHook(m);  // last: closes what the others made
  m.attr("EXIT_REQUEUE") = stint::kExitRequeue;
  m.attr("EXIT_DO_NOT_REQUEUE") = stint::kExitDoNotRequeue;
  m.attr("__version__") = stint::kVersion;  // project(stint VERSION ...), via stint/version.h
}
