#include "nccl_types.h"

#include <string>

namespace stint {

Result<ncclDataType_t> NcclDataType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kInt8:
      return ncclInt8;
    case DType::kUInt8:
      return ncclUint8;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
    // NCCL has no 16-bit integer, boolean or complex type.
    case DType::kInt16:
    case DType::kBool:
    case DType::kComplex64:
    case DType::kComplex128:
      break;
  }
  return Status::InvalidArgument(std::string("nccl cannot reduce dtype ") + DTypeName(dtype) +
                                 " (" + std::to_string(static_cast<int>(dtype)) + ")");
}

Result<ncclRedOp_t> NcclRedOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return Status::InvalidArgument("nccl has no reduce op " + std::to_string(static_cast<int>(op)));
}

}  // namespace stint
