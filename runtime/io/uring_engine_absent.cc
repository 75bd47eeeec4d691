// Built instead of uring_engine.cc when liburing was not found at configure
// time: io_uring is then refused like a kernel that blocks it, and
// NewIoEngine(kAuto) falls back to the POSIX engine.
#include "io/io_engine.h"

namespace stint {

Result<std::unique_ptr<IoEngine>> NewUringEngine(const IoEngineOptions&) {
  return Status::Unimplemented("io_uring engine: stint was built without liburing");
}

}  // namespace stint
