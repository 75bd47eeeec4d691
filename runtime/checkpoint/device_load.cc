#include "checkpoint/device_load.h"

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

}  // namespace

Status ReadIntoDests(const CheckpointReader& reader, const std::vector<TensorDest>& dests,
                     DeviceCopier* copier, std::chrono::milliseconds copy_timeout) {
  std::vector<size_t> on_device;
  for (size_t i = 0; i < dests.size(); ++i) {
    if (dests[i].device != kHostDevice) on_device.push_back(i);
  }
  if (on_device.empty()) return reader.Read(dests);
  if (copier == nullptr) {
    return Status::FailedPrecondition("load: tensor '" + dests[on_device[0]].name +
                                      "' is on device " +
                                      std::to_string(dests[on_device[0]].device) +
                                      ": CheckpointOptions.device_copier is not set");
  }
  std::vector<TensorDest> host = dests;
  std::vector<uint64_t> offset(dests.size()), bytes(dests.size());
  uint64_t total = 0;
  for (size_t i : on_device) {
    const TensorDest& d = dests[i];
    bytes[i] =
        uint64_t(NumElements(d.extents.empty() ? d.global_shape : d.extents)) * DTypeSize(d.dtype);
    offset[i] = total;
    total += AlignBlock(bytes[i] == 0 ? 1 : bytes[i]);
  }
  auto memory = MappedBuffer::Map(total);
  if (!memory.ok()) return memory.status().WithContext("load");
  LoadBounce bounce(copier, std::move(*memory));
  STINT_RETURN_IF_ERROR(bounce.Register());
  std::vector<DeviceCopy> copies;
  for (size_t i : on_device) {
    host[i].data = bounce.data() + offset[i];
    host[i].device = kHostDevice;
    host[i].stream = nullptr;
    if (bytes[i] > 0) {
      copies.push_back(
          DeviceCopy{dests[i].device, dests[i].stream, dests[i].data, host[i].data, bytes[i]});
    }
  }
  STINT_RETURN_IF_ERROR(reader.Read(host));
  Status s = copier->CopyToDevice(copies, copy_timeout);
  if (s.code() == Code::kDeadlineExceeded) bounce.Leak();
  return s.WithContext("load: host-to-device copy");
}

}  // namespace stint
