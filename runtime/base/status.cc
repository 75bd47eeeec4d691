#include "stint/status.h"

#include <cerrno>
#include <cstring>

namespace stint {

const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kCancelled:
      return "CANCELLED";
    case Code::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case Code::kNotFound:
      return "NOT_FOUND";
    case Code::kAlreadyExists:
      return "ALREADY_EXISTS";
    case Code::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case Code::kAborted:
      return "ABORTED";
    case Code::kUnavailable:
      return "UNAVAILABLE";
    case Code::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case Code::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case Code::kDataLoss:
      return "DATA_LOSS";
    case Code::kIoError:
      return "IO_ERROR";
    case Code::kInternal:
      return "INTERNAL";
    case Code::kUnimplemented:
      return "UNIMPLEMENTED";
    case Code::kUnauthenticated:
      return "UNAUTHENTICATED";
    case Code::kPermissionDenied:
      return "PERMISSION_DENIED";
  }
  return "UNKNOWN";
}

Status::Status(Code code, std::string message, int sys_errno) {
  if (code != Code::kOk) {
    rep_ = std::make_shared<const Rep>(Rep{code, sys_errno, std::move(message)});
  }
}

const std::string& Status::message() const {
  static const std::string* const kEmpty = new std::string();
  return rep_ ? rep_->message : *kEmpty;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(rep_->code)) + ": " + rep_->message;
}

Status Status::WithContext(std::string_view what) const {
  if (ok()) return *this;
  return Status(rep_->code, std::string(what) + ": " + rep_->message, rep_->sys_errno);
}

Status StatusFromErrno(std::string_view context, int err) {
  std::string msg = std::string(context) + ": " + std::strerror(err);
  switch (err) {
    case ENOENT:
      return Status(Code::kNotFound, std::move(msg), err);
    case EEXIST:
      return Status(Code::kAlreadyExists, std::move(msg), err);
    case ENOSPC:
    case EDQUOT:
      return Status(Code::kResourceExhausted, std::move(msg), err);
    case EAGAIN:
      return Status(Code::kUnavailable, std::move(msg), err);
    default:
      return Status(Code::kIoError, std::move(msg), err);
  }
}

}  // namespace stint
