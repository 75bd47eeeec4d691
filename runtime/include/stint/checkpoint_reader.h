// CheckpointReader: read-only access to one committed checkpoint directory.
//
// Open() decodes and validates MANIFEST.json and checks that every data file
// exists with its recorded size. Every chunk read afterwards is checked
// against its XXH3-64 before its bytes are used; Verify() checks them all.
// Errors name the file and the chunk. It takes no lock and changes nothing,
// so it may read a root's checkpoints while that root's writer saves (see
// stint/checkpointer.h, "One writer per root").
//
// Thread-compatible.
#ifndef STINT_INCLUDE_STINT_CHECKPOINT_READER_H_
#define STINT_INCLUDE_STINT_CHECKPOINT_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stint/env.h"
#include "stint/state.h"
#include "stint/status.h"

namespace stint {

struct ReaderOptions {
  Env* env = nullptr;  // Default: Env::Default(); must outlive the reader
  // "auto", "uring" or "posix" (see STINT_IO). Default: "auto".
  std::string io_engine = "auto";
  bool direct_io = true;      // Default: true (O_DIRECT where supported)
  unsigned queue_depth = 16;  // reads in flight. Default: 16
  // Threads that verify and decode chunks while more reads are in flight;
  // 0 = hardware threads - 1. Default: 0
  unsigned threads = 0;
};

// One stored shard: a box of the global tensor, stored row-major.
struct ShardInfo {
  std::vector<int64_t> offsets;
  std::vector<int64_t> extents;
  std::string file;    // data file name inside the checkpoint directory
  uint64_t raw_bytes;  // before compression
};

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;          // global
  size_t shards;                       // shard_boxes.size()
  uint64_t raw_bytes;                  // stored shards, before compression
  std::vector<ShardInfo> shard_boxes;  // in manifest order; never overlapping
};

struct VerifyReport {
  uint64_t files = 0;
  uint64_t chunks = 0;
  uint64_t stored_bytes = 0;
};

class CheckpointReader {
 public:
  virtual ~CheckpointReader() = default;
  static Result<std::unique_ptr<CheckpointReader>> Open(const std::string& dir,
                                                        const ReaderOptions& options = {});

  virtual const std::string& dir() const = 0;
  virtual uint64_t step() const = 0;
  virtual const std::string& job_id() const = 0;
  virtual int world_size() const = 0;
  virtual std::vector<TensorInfo> tensors() const = 0;
  virtual std::vector<std::string> blob_names() const = 0;

  // Fills each destination region (any box of the global tensor) from the
  // stored shards, whatever their layout: each stored box that meets the
  // region gives its intersection, copied row by row, and only the chunks
  // holding bytes of an intersection are read (each once per call, however
  // many destinations it feeds). A destination equal to a stored shard is
  // filled by decoding that shard straight into it.
  // kNotFound for a tensor not in the checkpoint, or a part of a region no
  // stored shard covers ("<dir>: region [o..]+[e..] of tensor 'x' is not
  // covered by the stored shards ..."); kInvalidArgument for a dtype or
  // global shape that does not match, or a region outside the shape;
  // kDataLoss only for damaged bytes (a checksum mismatch, a short file).
  // On error the destinations may be partly written.
  virtual Status Read(const std::vector<TensorDest>& dests) const = 0;
  virtual Result<std::string> ReadBlob(const std::string& name) const = 0;
  // Reads every chunk and checks every checksum and file digest.
  virtual Result<VerifyReport> Verify() const = 0;
};

}  // namespace stint

#endif  // STINT_INCLUDE_STINT_CHECKPOINT_READER_H_
