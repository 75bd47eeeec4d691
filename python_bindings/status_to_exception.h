// Status -> Python exception: the one place where a stint::Code becomes an
// exception class, and back (for errors raised by Python callbacks that the
// runtime calls, such as a load planner).
//
// Every code has a class, all subclasses of stint.Error, most also of the
// closest builtin so ordinary `except` clauses work:
//   INVALID_ARGUMENT -> InvalidArgumentError(Error, ValueError)
//   NOT_FOUND        -> NotFoundError(Error, FileNotFoundError)
//   ALREADY_EXISTS   -> AlreadyExistsError(Error, FileExistsError)
//   DEADLINE_EXCEEDED-> DeadlineExceededError(Error, TimeoutError)
//   IO_ERROR         -> IoError(Error, OSError)
//   RESOURCE_EXHAUSTED -> ResourceExhaustedError(Error, OSError)  (ENOSPC, EDQUOT)
//   ...
// str(exception) is the Status message, unchanged; `code` is CodeName()
// ("DATA_LOSS") and `sys_errno` the errno (0 when not from a syscall). The
// OSError subclasses carry `errno`: the syscall's, else the one their code
// stands for (NotFoundError ENOENT, AlreadyExistsError EEXIST,
// PermissionDeniedError EACCES, DeadlineExceededError ETIMEDOUT), else None.
//
// REQUIRES: the GIL is held for every function here.
#ifndef STINT_PYTHON_BINDINGS_STATUS_TO_EXCEPTION_H_
#define STINT_PYTHON_BINDINGS_STATUS_TO_EXCEPTION_H_

#include <pybind11/pybind11.h>

#include <optional>
#include <utility>

#include "stint/status.h"

namespace stint {
namespace python {

// Raises the Python exception for a non-OK `status` (as pybind11's
// error_already_set). REQUIRES: !status.ok().
[[noreturn]] void ThrowStatus(const Status& status);

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

template <typename T>
T ValueOrThrow(Result<T> result) {
  if (!result.ok()) ThrowStatus(result.status());
  return std::move(result).value();
}

// The exception object for a non-OK `status`, not raised.
pybind11::object ExceptionFor(const Status& status);

// The Status a stint.Error carries (its class's code and its message); nullopt
// for any other exception.
std::optional<Status> StatusFromPythonError(const pybind11::error_already_set& error);

}  // namespace python
}  // namespace stint

#endif  // STINT_PYTHON_BINDINGS_STATUS_TO_EXCEPTION_H_
