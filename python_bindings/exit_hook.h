// Closing, at interpreter exit, the objects whose threads call into Python.
//
// CPython ends any thread that takes the GIL once finalization has begun
// (pthread_exit). A thread of ours caught that way unwinds through noexcept
// frames (destructors), which is std::terminate: the process dies of SIGABRT
// after it chose its exit code. Python's atexit handlers run while every
// thread may still take the GIL and before any object is destroyed, so
// closing such objects there (and joining their threads) makes the exit the
// same whatever order Python later destroys objects in.
#ifndef STINT_PYTHON_BINDINGS_EXIT_HOOK_H_
#define STINT_PYTHON_BINDINGS_EXIT_HOOK_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>

namespace stint {
namespace python {

// One object closed at exit unless it is destroyed first. Movable, not
// copyable; the destructor unregisters. Thread-safe.
class ExitClose {
 public:
  ExitClose() = default;
  // `close` runs with the GIL held, at most once, from the atexit hook.
  explicit ExitClose(std::function<void()> close);
  ~ExitClose();
  ExitClose(ExitClose&& other) noexcept;
  ExitClose& operator=(ExitClose&& other) noexcept;
  ExitClose(const ExitClose&) = delete;
  ExitClose& operator=(const ExitClose&) = delete;

 private:
  void Reset();
  uint64_t id_ = 0;  // 0: nothing registered
};

// Registers the atexit hook that runs every registered close (module.cc).
void BindExitHook(pybind11::module_& m);

}  // namespace python
}  // namespace stint

#endif  // STINT_PYTHON_BINDINGS_EXIT_HOOK_H_
