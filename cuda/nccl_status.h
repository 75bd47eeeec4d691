// StatusFromNccl: the one place an ncclResult_t becomes a Status (STYLE
// §2.3), whether NCCL returned it from a call or reported it later through
// ncclCommGetAsyncError. Internal to cuda/.
//
// Thread-safe (ncclGetLastError is per thread when `comm` is null).
#ifndef STINT_CUDA_NCCL_STATUS_H_
#define STINT_CUDA_NCCL_STATUS_H_

#include <nccl.h>

#include <string>

#include "stint/status.h"

namespace stint {

// "remote process exited or there was a network error (NCCL WARN text)":
// ncclGetErrorString with ncclGetLastError(comm) appended when there is one.
// `comm` may be null (the thread's last error then).
std::string NcclErrorText(ncclResult_t result, ncclComm_t comm);

// The message is "<context>: <NcclErrorText>", the code:
//   kInvalidArgument for ncclInvalidArgument (the caller's argument);
//   kFailedPrecondition for ncclInvalidUsage (e.g. two ranks on one GPU:
//     not a transient failure);
//   kUnavailable for anything else: the group (a peer, the network, the
//     device) is not usable now.
// REQUIRES: result is neither ncclSuccess nor ncclInProgress (which is not
// an error).
Status StatusFromNccl(ncclResult_t result, ncclComm_t comm, const std::string& context);

}  // namespace stint

#endif  // STINT_CUDA_NCCL_STATUS_H_
