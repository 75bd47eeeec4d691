#include "checkpoint/device_load.h"

#include <algorithm>
#include <string>
#include <utility>

#include "base/mapped_buffer.h"
#include "stint/env.h"

namespace stint {
namespace {

// Host memory for the device destinations, pinned through the copier while
// it lives (unpinned before it is unmapped).
class LoadBounce {
 public:
  LoadBounce(DeviceCopier* copier, MappedBuffer memory)
      : copier_(copier), memory_(std::move(memory)) {}
  ~LoadBounce() {
    if (registered_) copier_->UnregisterHostMemory(memory_.data());
  }
  LoadBounce(const LoadBounce&) = delete;
  LoadBounce& operator=(const LoadBounce&) = delete;

  Status Register() {
    STINT_RETURN_IF_ERROR(copier_->RegisterHostMemory(memory_.data(), memory_.size()));
    registered_ = true;
    return Status::OK();
  }
  char* data() const { return memory_.data(); }
  // A copy that timed out may still read the memory: it stays mapped and pinned.
  void Leak() {
    registered_ = false;
    memory_.Leak();
  }

 private:
  DeviceCopier* const copier_;
  MappedBuffer memory_;
  bool registered_ = false;
};

uint64_t AlignBlock(uint64_t n) {
  return (n + kDirectIoAlignment - 1) / kDirectIoAlignment * kDirectIoAlignment;
}

// One piece of a device destination: rows [first, first + count) of its box
// along dimension 0, contiguous in the destination (row-major).
struct Piece {
  size_t dest = 0;
  int64_t first_row = 0;
  int64_t rows = 0;
  uint64_t bytes = 0;
  uint64_t slot() const { return AlignBlock(bytes == 0 ? 1 : bytes); }
};

// Splits device destination `i` into pieces whose slots fit `bound` bytes
// where a single row does (a row bigger than `bound` is a piece of its own).
void SplitDest(const TensorDest& d, size_t i, uint64_t bound, std::vector<Piece>* pieces) {
  const std::vector<int64_t>& box = d.extents.empty() ? d.global_shape : d.extents;
  const uint64_t bytes = uint64_t(NumElements(box)) * DTypeSize(d.dtype);
  if (box.empty() || box[0] <= 1 || AlignBlock(bytes) <= bound) {
    pieces->push_back(Piece{i, 0, box.empty() ? 1 : box[0], bytes});
    return;
  }
  const uint64_t row_bytes = bytes / uint64_t(box[0]);
  const int64_t rows_per_piece =
      std::max<int64_t>(1, int64_t(bound / std::max<uint64_t>(1, row_bytes)));
  for (int64_t first = 0; first < box[0]; first += rows_per_piece) {
    const int64_t rows = std::min(rows_per_piece, box[0] - first);
    pieces->push_back(Piece{i, first, rows, uint64_t(rows) * row_bytes});
  }
}

// The host destination that reads piece `p` of `d` into `host_data`.
TensorDest HostDestOf(const TensorDest& d, const Piece& p, char* host_data) {
  TensorDest h = d;
  h.data = host_data;
  h.device = kHostDevice;
  h.stream = nullptr;
  if (h.global_shape.empty()) return h;  // a scalar: one piece
  if (h.extents.empty()) {
    h.extents = h.global_shape;
    h.offsets.assign(h.global_shape.size(), 0);
  }
  h.offsets[0] += p.first_row;
  h.extents[0] = p.rows;
  return h;
}

}  // namespace

Status ReadIntoDests(const CheckpointReader& reader, const std::vector<TensorDest>& dests,
                     DeviceCopier* copier, uint64_t bounce_bytes,
                     std::chrono::milliseconds copy_timeout) {
  std::vector<TensorDest> host;
  std::vector<size_t> on_device;
  for (size_t i = 0; i < dests.size(); ++i) {
    if (dests[i].device != kHostDevice) {
      on_device.push_back(i);
    } else {
      host.push_back(dests[i]);
    }
  }
  if (on_device.empty()) return reader.Read(dests);
  if (copier == nullptr) {
    return Status::FailedPrecondition("load: tensor '" + dests[on_device[0]].name +
                                      "' is on device " +
                                      std::to_string(dests[on_device[0]].device) +
                                      ": CheckpointOptions.device_copier is not set");
  }
  const uint64_t bound = AlignBlock(std::max<uint64_t>(1, bounce_bytes));
  std::vector<Piece> pieces;
  for (size_t i : on_device) SplitDest(dests[i], i, bound, &pieces);
  // The pinned buffer: the bound, or less when everything fits, or one
  // piece bigger than the bound (a single row).
  uint64_t all = 0, largest = 0;
  for (const Piece& p : pieces) {
    all += p.slot();
    largest = std::max(largest, p.slot());
  }
  const uint64_t size = std::max(std::min(all, bound), largest);
  auto memory = MappedBuffer::Map(size);
  if (!memory.ok()) return memory.status().WithContext("load");
  LoadBounce bounce(copier, std::move(*memory));
  STINT_RETURN_IF_ERROR(bounce.Register());
  STINT_RETURN_IF_ERROR(reader.Read(host));
  // Rounds: as many pieces as fit the buffer are read into it, copied to
  // their devices, and the buffer is reused once those copies completed.
  for (size_t next = 0; next < pieces.size();) {
    std::vector<TensorDest> round;
    std::vector<DeviceCopy> copies;
    uint64_t used = 0;
    for (; next < pieces.size() && (round.empty() || used + pieces[next].slot() <= size); ++next) {
      const Piece& p = pieces[next];
      const TensorDest& d = dests[p.dest];
      char* host_data = bounce.data() + used;
      used += p.slot();
      round.push_back(HostDestOf(d, p, host_data));
      if (p.bytes > 0) {
        const uint64_t row_bytes = p.rows > 0 ? p.bytes / uint64_t(p.rows) : 0;
        copies.push_back(DeviceCopy{d.device, d.stream,
                                    static_cast<char*>(d.data) + uint64_t(p.first_row) * row_bytes,
                                    host_data, p.bytes});
      }
    }
    STINT_RETURN_IF_ERROR(reader.Read(round));
    Status s = copier->CopyToDevice(copies, copy_timeout);
    if (s.code() == Code::kDeadlineExceeded) bounce.Leak();
    if (!s.ok()) return s.WithContext("load: host-to-device copy");
  }
  return Status::OK();
}

}  // namespace stint
