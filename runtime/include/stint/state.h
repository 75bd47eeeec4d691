// What a checkpoint holds: tensor shards (borrowed host memory) and named
// byte blobs (RNG state, sampler cursor, user JSON).
//
// A tensor is described by its global shape; each saved piece is a shard
// (offsets, extents) of it, row-major contiguous. Any process can later load
// any region of the global tensor (see TensorDest), whatever the sharding at
// save time.
#ifndef STINT_INCLUDE_STINT_STATE_H_
#define STINT_INCLUDE_STINT_STATE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "stint/status.h"

namespace stint {

enum class DType : uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt8,
  kUInt8,
  kInt16,
  kInt32,
  kInt64,
  kBool,
  kComplex64,
  kComplex128,
};

size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);  // "float32", "bfloat16", ...
Result<DType> ParseDType(std::string_view name);

// A shard of a global tensor to save. `data` is borrowed: it must stay valid
// and unmodified until Save()'s staged future is ready.
struct TensorShard {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> global_shape;
  // Start of the shard in each dimension. Empty: the whole tensor.
  std::vector<int64_t> offsets;
  // Size of the shard in each dimension. Empty: global_shape.
  std::vector<int64_t> extents;
  const void* data = nullptr;  // row-major contiguous, NumElements(extents) elements
};

// A region of a global tensor to load into. Same conventions as TensorShard;
// `data` must hold the whole region.
struct TensorDest {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offsets;
  std::vector<int64_t> extents;
  void* data = nullptr;
};

struct State {
  std::vector<TensorShard> tensors;
  std::map<std::string, std::string> blobs;  // copied at Save()
};

// Product of `dims`; 1 for a scalar (no dims).
int64_t NumElements(const std::vector<int64_t>& dims);

}  // namespace stint

#endif  // STINT_INCLUDE_STINT_STATE_H_
