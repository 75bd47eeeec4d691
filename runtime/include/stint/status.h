// Status and Result<T>: the one error model of stint.
//
// Every fallible call inside runtime/, cuda/ and tools/ returns a Status or a
// Result<T>; nothing throws. The Python bindings translate a Status into an
// exception exactly once, at the boundary. A code says what the caller may do
// next (see the table in the project's style guide): kDataLoss means "skip this
// checkpoint", kResourceExhausted means "free space, maybe retry", and so on.
//
// Thread-compatible: const methods may be called concurrently.
#ifndef STINT_INCLUDE_STINT_STATUS_H_
#define STINT_INCLUDE_STINT_STATUS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace stint {

enum class Code : uint8_t {
  kOk = 0,
  kCancelled,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kFailedPrecondition,
  kAborted,
  kUnavailable,
  kDeadlineExceeded,
  kResourceExhausted,
  kDataLoss,
  kIoError,
  kInternal,
  kUnimplemented,
  kUnauthenticated,   // no or an unknown credential (HTTP 401)
  kPermissionDenied,  // a credential without the right (HTTP 403)
};

// "OK", "INVALID_ARGUMENT", ... (stable: used in logs, JSON and Python).
const char* CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message, int sys_errno = 0);

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return {Code::kInvalidArgument, std::move(msg)};
  }
  static Status NotFound(std::string msg) { return {Code::kNotFound, std::move(msg)}; }
  static Status AlreadyExists(std::string msg) { return {Code::kAlreadyExists, std::move(msg)}; }
  static Status FailedPrecondition(std::string msg) {
    return {Code::kFailedPrecondition, std::move(msg)};
  }
  static Status Aborted(std::string msg) { return {Code::kAborted, std::move(msg)}; }
  static Status Unavailable(std::string msg) { return {Code::kUnavailable, std::move(msg)}; }
  static Status DeadlineExceeded(std::string msg) {
    return {Code::kDeadlineExceeded, std::move(msg)};
  }
  static Status ResourceExhausted(std::string msg) {
    return {Code::kResourceExhausted, std::move(msg)};
  }
  static Status DataLoss(std::string msg) { return {Code::kDataLoss, std::move(msg)}; }
  static Status IoError(std::string msg) { return {Code::kIoError, std::move(msg)}; }
  static Status Internal(std::string msg) { return {Code::kInternal, std::move(msg)}; }
  static Status Unimplemented(std::string msg) { return {Code::kUnimplemented, std::move(msg)}; }
  static Status Unauthenticated(std::string msg) {
    return {Code::kUnauthenticated, std::move(msg)};
  }
  static Status PermissionDenied(std::string msg) {
    return {Code::kPermissionDenied, std::move(msg)};
  }
  static Status Cancelled(std::string msg) { return {Code::kCancelled, std::move(msg)}; }

  bool ok() const { return rep_ == nullptr; }
  Code code() const { return rep_ ? rep_->code : Code::kOk; }
  // errno of the failing syscall, 0 when the error did not come from one.
  int sys_errno() const { return rep_ ? rep_->sys_errno : 0; }
  // Empty for OK.
  const std::string& message() const;
  // "DATA_LOSS: rank-00000.stint chunk 3: checksum mismatch".
  std::string ToString() const;

  // The same error with "what: " put in front of the message.
  Status WithContext(std::string_view what) const;

  // Marks a deliberate ignore so it can be found with grep.
  void IgnoreError() const {}

 private:
  struct Rep {
    Code code;
    int sys_errno;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;  // null means OK: success costs nothing
};

// The one place errno becomes a Status: ENOENT -> kNotFound,
// ENOSPC/EDQUOT -> kResourceExhausted, EAGAIN -> kUnavailable,
// EEXIST -> kAlreadyExists, everything else -> kIoError.
Status StatusFromErrno(std::string_view context, int err);

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Status::Internal("Result constructed from OK status without value");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // REQUIRES: ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return std::move(*value_); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace stint

#define STINT_CONCAT_INNER_(a, b) a##b
#define STINT_CONCAT_(a, b) STINT_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` yields a non-OK Status.
#define STINT_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::stint::Status stint_status_ = (expr);        \
    if (!stint_status_.ok()) return stint_status_; \
  } while (0)

// `lhs = value of expr` or return its error. lhs may declare a variable.
#define STINT_ASSIGN_OR_RETURN(lhs, expr) \
  STINT_ASSIGN_OR_RETURN_IMPL_(STINT_CONCAT_(stint_result_, __LINE__), lhs, expr)
#define STINT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

#endif  // STINT_INCLUDE_STINT_STATUS_H_
