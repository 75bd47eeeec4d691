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
#include <memory>
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

// Where a tensor's bytes live: host memory, or device memory on `device`.
constexpr int kHostDevice = -1;

// The point of a training step before which a saved tensor may next be
// written, so a snapshot still copying it must be waited for there (see
// Checkpointer::BeforeWrite).
enum class WriteBarrier : uint8_t {
  kOptimizerStep,  // parameters and optimizer state: the next optimizer step
  kForward,        // buffers the forward pass updates (BatchNorm running statistics)
};

// A shard of a global tensor to save. `data` is borrowed: it must stay valid
// and unmodified until Save()'s staged future is ready. A shard on a device
// (device >= 0, e.g. a CUDA tensor's data_ptr) is copied through
// CheckpointOptions::device_copier, ordered after the work already enqueued
// on `stream`; see stint/device_copier.h for when it may be modified again.
struct TensorShard {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> global_shape;
  // Start of the shard in each dimension. Empty: the whole tensor.
  std::vector<int64_t> offsets;
  // Size of the shard in each dimension. Empty: global_shape.
  std::vector<int64_t> extents;
  const void* data = nullptr;  // row-major contiguous, NumElements(extents) elements
  int device = kHostDevice;    // Default: host memory
  // The stream that produces `data` (a cudaStream_t); nullptr: the legacy
  // default stream. Device shards only. Default: nullptr
  void* stream = nullptr;
  // When the training loop writes it next; copies of kForward shards are
  // issued first. Default: kOptimizerStep
  WriteBarrier written_at = WriteBarrier::kOptimizerStep;
  // Incremental saves (CheckpointOptions::incremental): a promise that the
  // bytes are those of the previous save (frozen weights), so when the
  // previous committed checkpoint holds this very shard it is referenced
  // without being copied or hashed. Unflagged shards are hashed and only
  // their changed chunks written. Default: false
  bool frozen = false;
};

// A region of a global tensor to load into. Same conventions as TensorShard;
// `data` must hold the whole region. A device region (device >= 0) is filled
// host-to-device on a copy stream; `stream` is made to wait for that copy.
struct TensorDest {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offsets;
  std::vector<int64_t> extents;
  void* data = nullptr;
  int device = kHostDevice;  // Default: host memory
  void* stream = nullptr;    // consumer stream (a cudaStream_t). Default: nullptr
};

struct State {
  std::vector<TensorShard> tensors;
  std::map<std::string, std::string> blobs;  // copied at Save()
  // Whatever owns the memory `tensors` borrow (e.g. the tensors themselves).
  // A save whose copies outlast Save() (device tensors, lazy snapshots) holds
  // it until they completed, and releases it on the thread that calls the
  // Checkpointer, never on a background thread. May be null.
  std::shared_ptr<const void> owner;
};

// Product of `dims`; 1 for a scalar (no dims).
int64_t NumElements(const std::vector<int64_t>& dims);

}  // namespace stint

#endif  // STINT_INCLUDE_STINT_STATE_H_
