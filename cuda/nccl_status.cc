#include "nccl_status.h"

namespace stint {

std::string NcclErrorText(ncclResult_t result, ncclComm_t comm) {
  std::string text = ncclGetErrorString(result);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
  return text;
}

Status StatusFromNccl(ncclResult_t result, ncclComm_t comm, const std::string& context) {
  std::string msg = context + ": " + NcclErrorText(result, comm);
  switch (result) {
    case ncclInvalidArgument:
      return Status::InvalidArgument(std::move(msg));
    case ncclInvalidUsage:
      return Status::FailedPrecondition(std::move(msg));
    default:
      return Status::Unavailable(std::move(msg));
  }
}

}  // namespace stint
