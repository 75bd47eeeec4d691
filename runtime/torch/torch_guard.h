// Guard: the edge where LibTorch's exceptions become Status values. Every
// public function of runtime/torch runs its body inside one.
#ifndef STINT_TORCH_TORCH_GUARD_H_
#define STINT_TORCH_TORCH_GUARD_H_

#include <c10/util/Exception.h>

#include <exception>
#include <new>
#include <string>

#include "stint/status.h"

namespace stint {

// Runs `body` and turns anything LibTorch (or the standard library under it)
// throws into a Status naming `what`.
template <typename F>
auto Guard(const std::string& what, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const c10::Error& e) {
    return Status::Internal(what + ": LibTorch: " + e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(what + ": out of memory");
  } catch (const std::exception& e) {
    return Status::Internal(what + ": " + e.what());
  }
}

// A c10d call's exception (a store or a process group): its message's first
// line, kDeadlineExceeded for c10d's timeouts ("Timed out waiting ...") and
// kUnavailable otherwise (a lost peer: "Connection closed by peer", a
// read/write error), prefixed with `what`.
inline Status StatusFromC10dError(const std::exception& e, const std::string& what) {
  const std::string m = e.what();
  const bool timed_out =
      m.find("imed out") != std::string::npos || m.find("imeout") != std::string::npos;
  return Status(timed_out ? Code::kDeadlineExceeded : Code::kUnavailable,
                what + ": " + m.substr(0, m.find('\n')));
}

}  // namespace stint

#endif  // STINT_TORCH_TORCH_GUARD_H_
