// IoEngine: asynchronous positioned reads and writes with several requests in
// flight, below the Env. Two implementations pass one conformance suite:
//   UringEngine  io_uring (liburing), O_DIRECT files, registered buffers,
//                short-transfer resubmission, queue-full backpressure.
//   PosixEngine  a small thread pool calling Env file methods (pwrite/pread).
// NewIoEngine() picks io_uring unless it is refused at run time (seccomp,
// io_uring_disabled, old kernel) or STINT_IO=posix forces the fallback.
//
// Files whose NativeFd() is -1 (fault-injecting wrappers) are always written
// and read through their own methods, so every byte passes through the Env.
//
// Buffers: `buf` must stay valid and unmodified until the request's `on_done`
// has run or Drain() has returned.
//
// Confined to one thread (the submitter). `on_done` runs either on that
// thread (inside Submit*/Drain) or on an engine thread; it must not block and
// must not call back into the engine.
#ifndef STINT_RUNTIME_IO_IO_ENGINE_H_
#define STINT_RUNTIME_IO_IO_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "stint/env.h"
#include "stint/status.h"

namespace stint {

enum class IoEngineKind { kAuto, kUring, kPosix };

struct IoEngineOptions {
  // kAuto: $STINT_IO ("posix" or "uring") if set, else io_uring when it works.
  // Default: kAuto.
  IoEngineKind kind = IoEngineKind::kAuto;
  // Requests in flight before Submit* blocks. Default: 32.
  unsigned queue_depth = 32;
  // Worker threads of the POSIX engine. Default: 4.
  unsigned posix_threads = 4;
};

// Status of the request and bytes transferred: 0 on error; for reads fewer
// than asked only at end of file.
using IoDone = std::function<void(const Status&, size_t bytes)>;

class IoEngine {
 public:
  virtual ~IoEngine() = default;
  virtual const char* name() const = 0;  // "io_uring" or "posix"

  // Writes all `len` bytes. Errors are also kept (first one) for Drain().
  virtual Status SubmitWrite(WritableFile* file, const void* buf, size_t len, uint64_t offset,
                             IoDone on_done = nullptr) = 0;
  // Reads up to `len` bytes (short only at end of file).
  virtual Status SubmitRead(const RandomAccessFile* file, void* buf, size_t len, uint64_t offset,
                            IoDone on_done = nullptr) = 0;
  // Waits for every request in flight; returns the first error since the
  // previous Drain() and clears it.
  virtual Status Drain() = 0;

  // Pins a long-lived buffer for zero-copy fixed I/O (io_uring); a no-op where
  // not supported. Registration failure is not an error: I/O then uses plain
  // requests. Registering an already registered buffer does nothing.
  // `base` must stay mapped until UnregisterBuffer(base) or the engine's
  // destruction.
  virtual void RegisterBuffer(void* base, size_t len) {}
  // REQUIRES: no request on this buffer in flight. Unlike everything else,
  // callable from any thread (a pool releasing its memory).
  virtual void UnregisterBuffer(void* base) {}
  // Bytes written/read through registered (fixed) buffers; for benchmarks.
  virtual uint64_t fixed_bytes() const { return 0; }
};

// "auto", "uring" or "posix".
Result<IoEngineKind> ParseIoEngineKind(const std::string& name);

// Never fails for kAuto (falls back to POSIX); kUring fails if io_uring is
// unavailable.
Result<std::unique_ptr<IoEngine>> NewIoEngine(const IoEngineOptions& options);

Result<std::unique_ptr<IoEngine>> NewUringEngine(const IoEngineOptions& options);
std::unique_ptr<IoEngine> NewPosixEngine(const IoEngineOptions& options);

}  // namespace stint

#endif  // STINT_RUNTIME_IO_IO_ENGINE_H_
