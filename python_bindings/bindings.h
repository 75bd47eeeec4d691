// The parts of stint._C, each bound in its own translation unit and put
// together by module.cc. Only checkpointer_binding.cc includes LibTorch headers.
#ifndef STINT_PYTHON_BINDINGS_BINDINGS_H_
#define STINT_PYTHON_BINDINGS_BINDINGS_H_

#include <pybind11/pybind11.h>

#include <chrono>
#include <cstdint>
#include <memory>

namespace stint {

class CoordinatorSession;

namespace python {

// Python's float seconds as the runtime's milliseconds, rounded.
inline std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0 + 0.5));
}

void BindErrors(pybind11::module_& m);   // status_to_exception.cc: Error and its subclasses
void BindFuture(pybind11::module_& m);   // module.cc: Future
void BindSampler(pybind11::module_& m);  // sampler_binding.cc: ResumableSampler, IndexPermutation
void BindPreemption(pybind11::module_& m);  // preemption_binding.cc: PreemptionWatcher, launch_env
void BindCheckpointer(
    pybind11::module_& m);  // checkpointer_binding.cc: Checkpointer, CheckpointReader, RNG
void BindElastic(
    pybind11::module_& m);  // elastic_binding.cc: CoordinatorSession, ElasticRendezvous

// The session of a stint._C.CoordinatorSession object (elastic_binding.cc);
// InvalidArgumentError naming `what` for any other object, FailedPrecondition
// for a closed one.
std::shared_ptr<CoordinatorSession> SessionOf(pybind11::handle session, const char* what);

}  // namespace python
}  // namespace stint

#endif  // STINT_PYTHON_BINDINGS_BINDINGS_H_
