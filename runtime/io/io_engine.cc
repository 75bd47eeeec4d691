#include "io/io_engine.h"

#include <cstdlib>
#include <cstring>

namespace stint {

Result<IoEngineKind> ParseIoEngineKind(const std::string& name) {
  if (name == "auto" || name.empty()) return IoEngineKind::kAuto;
  if (name == "uring" || name == "io_uring") return IoEngineKind::kUring;
  if (name == "posix") return IoEngineKind::kPosix;
  return Status::InvalidArgument("unknown I/O engine '" + name + "' (auto, uring, posix)");
}

Result<std::unique_ptr<IoEngine>> NewIoEngine(const IoEngineOptions& options) {
  IoEngineKind kind = options.kind;
  if (kind == IoEngineKind::kAuto) {
    const char* forced = std::getenv("STINT_IO");
    if (forced != nullptr && std::strcmp(forced, "posix") == 0) kind = IoEngineKind::kPosix;
    if (forced != nullptr && std::strcmp(forced, "uring") == 0) kind = IoEngineKind::kUring;
  }
  if (kind == IoEngineKind::kPosix) return NewPosixEngine(options);
  auto uring = NewUringEngine(options);
  if (uring.ok() || kind == IoEngineKind::kUring) return uring;
  // io_uring refused (containers often block it): the POSIX engine is correct, only slower.
  return NewPosixEngine(options);
}

}  // namespace stint
