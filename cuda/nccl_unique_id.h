// The text form of an ncclUniqueId: how NcclCommunicatorFactory::Form ships
// rank 0's id to the other ranks through a GroupKv (which holds strings).
// An id is 128 opaque bytes (NCCL_UNIQUE_ID_BYTES); its text is 256
// lowercase hex digits. Internal to cuda/ (and its tests).
//
// Pure functions; thread-safe.
#ifndef STINT_CUDA_NCCL_UNIQUE_ID_H_
#define STINT_CUDA_NCCL_UNIQUE_ID_H_

#include <nccl.h>

#include <string>
#include <string_view>

#include "stint/status.h"

namespace stint {

// 256 lowercase hex digits, two per byte, in byte order.
std::string EncodeNcclUniqueId(const ncclUniqueId& id);

// The id whose text is `hex` (either case). kDataLoss naming `key` (the KV
// key it was read from) when `hex` is not exactly 256 hex digits.
Result<ncclUniqueId> DecodeNcclUniqueId(std::string_view hex, std::string_view key);

}  // namespace stint

#endif  // STINT_CUDA_NCCL_UNIQUE_ID_H_
