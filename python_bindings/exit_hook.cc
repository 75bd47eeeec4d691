// ExitClose and the atexit hook that runs the closes (see exit_hook.h).
#include "exit_hook.h"

#include <map>
#include <mutex>
#include <utility>

namespace stint {
namespace python {

namespace py = pybind11;

namespace {

// Registered closes by id. Leaked on purpose: ExitClose objects may be
// destroyed after static destructors ran.
struct Registry {
  std::mutex mu;
  uint64_t next_id = 1;
  std::map<uint64_t, std::function<void()>> closes;
};

Registry& GetRegistry() {
  static Registry* registry = new Registry;
  return *registry;
}

// The atexit hook. Each close is taken out under the lock and run without
// it (a close releases the GIL while it joins; meanwhile another Python
// thread may make or drop objects). The GIL is held from the take to the
// close's own release, so the owner's destructor, which needs the GIL,
// cannot run in between.
void CloseAll() {
  Registry& r = GetRegistry();
  for (;;) {
    std::function<void()> close;
    {
      std::lock_guard<std::mutex> lock(r.mu);
      if (r.closes.empty()) return;
      auto it = r.closes.begin();
      close = std::move(it->second);
      r.closes.erase(it);
    }
    try {
      close();
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("stint: closing at interpreter exit");
    } catch (const std::exception& e) {
      PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "stint: closing at interpreter exit: %s", e.what());
    }
  }
}

}  // namespace

ExitClose::ExitClose(std::function<void()> close) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  id_ = r.next_id++;
  r.closes.emplace(id_, std::move(close));
}

ExitClose::~ExitClose() { Reset(); }

ExitClose::ExitClose(ExitClose&& other) noexcept : id_(std::exchange(other.id_, 0)) {}

ExitClose& ExitClose::operator=(ExitClose&& other) noexcept {
  if (this != &other) {
    Reset();
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

void ExitClose::Reset() {
  if (id_ == 0) return;
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.closes.erase(id_);
  id_ = 0;
}

void BindExitHook(py::module_& m) {
  m.def("_close_at_exit", &CloseAll,
        "Closes every object whose threads call into Python (checkpointers with a "
        "torch.distributed store). Registered with atexit when stint._C is imported.");
  py::module_::import("atexit").attr("register")(m.attr("_close_at_exit"));
}

}  // namespace python
}  // namespace stint
