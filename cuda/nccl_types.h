// How stint's element types and reductions map onto NCCL's. The NCCL
// communicator refuses (kInvalidArgument) what has no NCCL equivalent
// instead of reinterpreting it. Internal to cuda/ (and its tests).
//
// Pure functions; thread-safe.
#ifndef STINT_CUDA_NCCL_TYPES_H_
#define STINT_CUDA_NCCL_TYPES_H_

#include <nccl.h>

#include "stint/communicator.h"
#include "stint/state.h"
#include "stint/status.h"

namespace stint {

// float32/64, float16, bfloat16, int8, uint8, int32, int64. Anything else
// (int16, bool, complex64, complex128) is kInvalidArgument naming the dtype.
Result<ncclDataType_t> NcclDataType(DType dtype);

// sum, max, min; kInvalidArgument for a value outside ReduceOp.
Result<ncclRedOp_t> NcclRedOp(ReduceOp op);

}  // namespace stint

#endif  // STINT_CUDA_NCCL_TYPES_H_
