// Exception classes of stint._C and the Status <-> exception translation.
#include "status_to_exception.h"

#include <Python.h>

#include <array>
#include <cerrno>
#include <string>

namespace stint {
namespace python {
namespace {

namespace py = pybind11;

struct ClassSpec {
  Code code;
  const char* name;   // attribute of stint._C and of stint
  PyObject* builtin;  // second base, or null for stint.Error alone
  const char* doc;
  // OSError subclasses: the errno an error of this code stands for when it
  // did not come from a syscall (NotFoundError is ENOENT, as
  // FileNotFoundError is); 0: none (errno is then only the syscall's).
  int default_errno = 0;
};

constexpr size_t kCodes = static_cast<size_t>(Code::kPermissionDenied) + 1;

// Strong references owned by the module for the life of the process: the
// classes must outlive every exception object, and extension modules are
// never unloaded.
PyObject* g_error = nullptr;
std::array<PyObject*, kCodes> g_classes{};

std::array<ClassSpec, kCodes - 1> Specs() {
  return {{
      {Code::kCancelled, "CancelledError", nullptr,
       "The operation was cancelled (e.g. preempted)."},
      {Code::kInvalidArgument, "InvalidArgumentError", PyExc_ValueError,
       "A bad argument: wrong name, dtype, shape or option."},
      {Code::kNotFound, "NotFoundError", PyExc_FileNotFoundError,
       "No such checkpoint, tensor, blob or file.", ENOENT},
      {Code::kAlreadyExists, "AlreadyExistsError", PyExc_FileExistsError,
       "The checkpoint (or watcher, or name) already exists.", EEXIST},
      {Code::kFailedPrecondition, "FailedPreconditionError", PyExc_RuntimeError,
       "The call does not fit the current state (e.g. a changed data configuration); do not "
       "retry."},
      {Code::kAborted, "AbortedError", nullptr, "Aborted; retry at a higher level."},
      {Code::kUnavailable, "UnavailableError", nullptr,
       "Temporarily unavailable (a full staging pool, an unreachable coordinator); retry later."},
      {Code::kDeadlineExceeded, "DeadlineExceededError", PyExc_TimeoutError, "A deadline ran out.",
       ETIMEDOUT},
      {Code::kResourceExhausted, "ResourceExhaustedError", PyExc_OSError,
       "Out of space or memory: errno ENOSPC or EDQUOT for a full disk or quota, None for a "
       "staging pool too small."},
      {Code::kDataLoss, "DataLossError", nullptr,
       "A checkpoint is damaged: checksum, size or format mismatch. It is never loaded."},
      {Code::kIoError, "IoError", PyExc_OSError, "An I/O system call failed."},
      {Code::kInternal, "InternalError", PyExc_RuntimeError,
       "A bug or an unexpected library error."},
      {Code::kUnimplemented, "UnimplementedError", PyExc_NotImplementedError,
       "Not supported (yet)."},
      {Code::kUnauthenticated, "UnauthenticatedError", nullptr, "No or an unknown credential."},
      {Code::kPermissionDenied, "PermissionDeniedError", PyExc_PermissionError,
       "The credential lacks the right.", EACCES},
  }};
}

int DefaultErrno(Code code) {
  for (const ClassSpec& spec : Specs()) {
    if (spec.code == code) return spec.default_errno;
  }
  return 0;
}

PyObject* ClassFor(Code code) {
  size_t i = static_cast<size_t>(code);
  if (i < kCodes && g_classes[i] != nullptr) return g_classes[i];
  return g_error;
}

}  // namespace

void BindErrors(py::module_& m) {
  // Qualified as "stint.X": that is where users see and catch them.
  g_error = PyErr_NewExceptionWithDoc("stint.Error",
                                      "Base class of every error stint reports. str(e) is the "
                                      "runtime's message; e.code names the status code.",
                                      PyExc_Exception, nullptr);
  if (g_error == nullptr) throw py::error_already_set();
  PyObject_SetAttrString(g_error, "code", py::str("UNKNOWN").ptr());
  m.attr("Error") = py::handle(g_error);
  for (const ClassSpec& spec : Specs()) {
    py::tuple bases = spec.builtin != nullptr
                          ? py::tuple(py::make_tuple(py::handle(g_error), py::handle(spec.builtin)))
                          : py::tuple(py::make_tuple(py::handle(g_error)));
    std::string qualified = std::string("stint.") + spec.name;
    PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), spec.doc, bases.ptr(), nullptr);
    if (cls == nullptr) throw py::error_already_set();
    if (PyObject_SetAttrString(cls, "code", py::str(CodeName(spec.code)).ptr()) != 0) {
      throw py::error_already_set();
    }
    g_classes[static_cast<size_t>(spec.code)] = cls;
    m.attr(spec.name) = py::handle(cls);
  }
}

py::object ExceptionFor(const Status& status) {
  py::handle cls = ClassFor(status.code());
  py::object exc = cls(py::str(status.message()));
  exc.attr("sys_errno") = status.sys_errno();
  const int err = status.sys_errno() != 0 ? status.sys_errno() : DefaultErrno(status.code());
  if (err != 0 && PyObject_IsSubclass(cls.ptr(), PyExc_OSError) == 1) {
    exc.attr("errno") = err;  // OSError's own field; str(exc) stays the message
  }
  return exc;
}

void ThrowStatus(const Status& status) {
  py::object exc = ExceptionFor(status);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

std::optional<Status> StatusFromPythonError(const py::error_already_set& error) {
  if (g_error == nullptr || !error.matches(g_error)) return std::nullopt;
  const py::object& value = error.value();
  std::string message = py::str(value);
  int sys_errno = 0;
  if (py::hasattr(value, "sys_errno")) {
    py::object e = value.attr("sys_errno");
    if (py::isinstance<py::int_>(e)) sys_errno = e.cast<int>();
  }
  for (size_t i = 0; i < kCodes; ++i) {
    if (g_classes[i] != nullptr && PyObject_IsInstance(value.ptr(), g_classes[i]) == 1) {
      return Status(static_cast<Code>(i), std::move(message), sys_errno);
    }
  }
  return Status(Code::kInternal, std::move(message), sys_errno);  // a bare stint.Error
}

}  // namespace python
}  // namespace stint
