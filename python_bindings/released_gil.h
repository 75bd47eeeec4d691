// ReleasedGil: pybind11's gil_scoped_release, safe in a thread that Python
// ends at interpreter exit.
//
// A daemon thread (one a user made, or stint's preemption callback) waiting
// in stint with the GIL released is ended by CPython when it takes the GIL
// back after finalization began: pthread_exit, which unwinds the stack.
// gil_scoped_release takes it back in its destructor, which is noexcept, and
// an unwind out of a noexcept function is std::terminate (SIGABRT, whatever
// exit code the main thread chose). This destructor lets the unwind pass, so
// such a thread ends quietly, as a Python daemon thread does.
#ifndef STINT_PYTHON_BINDINGS_RELEASED_GIL_H_
#define STINT_PYTHON_BINDINGS_RELEASED_GIL_H_

#include <Python.h>

namespace stint {
namespace python {

class ReleasedGil {
 public:
  // REQUIRES: the GIL held by this thread.
  ReleasedGil() : state_(PyEval_SaveThread()) {}
  ~ReleasedGil() noexcept(false) { PyEval_RestoreThread(state_); }
  ReleasedGil(const ReleasedGil&) = delete;
  ReleasedGil& operator=(const ReleasedGil&) = delete;

 private:
  PyThreadState* state_;
};

}  // namespace python
}  // namespace stint

#endif  // STINT_PYTHON_BINDINGS_RELEASED_GIL_H_
