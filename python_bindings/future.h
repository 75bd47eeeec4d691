// Future: a save's `staged` or `durable` completion as a Python object, and
// the one helper every blocking binding uses to wait without the GIL.
//
// Waits release the GIL and wake up every 50 ms to let Python deliver
// signals (Ctrl-C raises KeyboardInterrupt out of result()), so no wait
// holds up other Python threads or is uninterruptible.
//
// REQUIRES: the GIL is held when calling into these (they release it).
#ifndef STINT_PYTHON_BINDINGS_FUTURE_H_
#define STINT_PYTHON_BINDINGS_FUTURE_H_

#include <pybind11/pybind11.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "released_gil.h"
#include "stint/status.h"

namespace stint {
namespace python {

// Calls `wait_for(slice)` (which blocks for at most `slice` and returns true
// once the awaited event happened) with the GIL released until it returns
// true or `timeout_seconds` (none: no limit) passed. Returns whether it
// happened. Raises the pending Python exception if a signal handler raised
// (KeyboardInterrupt).
template <typename WaitFor>
bool WaitWithoutGil(WaitFor&& wait_for, std::optional<double> timeout_seconds) {
  using Clock = std::chrono::steady_clock;
  constexpr auto kSlice = std::chrono::milliseconds(50);
  const bool bounded = timeout_seconds.has_value();
  const Clock::time_point deadline =
      bounded ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(std::max(0.0, *timeout_seconds)))
              : Clock::time_point::max();
  for (;;) {
    auto slice = std::chrono::duration_cast<Clock::duration>(kSlice);
    if (bounded)
      slice = std::min(slice, std::max(Clock::duration::zero(), deadline - Clock::now()));
    bool done;
    {
      ReleasedGil nogil;
      done = wait_for(slice);
    }
    if (done) return true;
    if (PyErr_CheckSignals() != 0) throw pybind11::error_already_set();
    if (bounded && Clock::now() >= deadline) return false;
  }
}

// Completion of one stage of a save. result() returns the step on success
// and raises the stint exception of the failure otherwise. Copies share
// whether a failure was handed to Python (result() raised it, exception()
// returned it), so flush() does not raise it again.
// Thread-safe (a shared_future may be waited on from several threads).
class Future {
 public:
  Future(std::shared_future<Status> future, uint64_t step, std::string what)
      : future_(std::move(future)),
        step_(step),
        what_(std::move(what)),
        reported_(std::make_shared<std::atomic<bool>>(false)) {}

  bool done() const {
    return future_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }
  // Blocks at most `slice`; whether the stage finished.
  bool WaitFor(std::chrono::steady_clock::duration slice) const {
    return future_.wait_for(slice) == std::future_status::ready;
  }
  // Waits; raises DeadlineExceededError when `timeout_seconds` passes first.
  uint64_t result(std::optional<double> timeout_seconds) const;
  // Waits; returns the exception the future failed with, or None.
  pybind11::object exception(std::optional<double> timeout_seconds) const;
  // Waits; the Status itself (for the bindings).
  Status Wait(std::optional<double> timeout_seconds) const;
  // REQUIRES: done(). The outcome, without counting as handed to Python.
  Status Outcome() const { return future_.get(); }
  // Whether result() or exception() handed a failure to Python.
  bool reported() const { return reported_->load(); }

  uint64_t step() const { return step_; }
  const std::string& what() const { return what_; }  // "staged" or "durable"

 private:
  std::shared_future<Status> future_;
  uint64_t step_;
  std::string what_;
  std::shared_ptr<std::atomic<bool>> reported_;
};

}  // namespace python
}  // namespace stint

#endif  // STINT_PYTHON_BINDINGS_FUTURE_H_
