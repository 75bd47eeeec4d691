// DeviceCopier: the seam between the checkpoint pipeline and device memory.
//
// The Checkpointer moves tensors that live on a device (TensorShard::device
// >= 0) through this interface only, so runtime/ never includes a CUDA
// header. cuda/ implements it (NewCudaDeviceCopier in cuda/cuda_copier.h);
// tests use a host double. A stream is opaque here: a cudaStream_t passed as
// void*, nullptr meaning the legacy default stream.
//
// The snapshot contract ("lazy" barrier): CopyToHostAsync orders each copy
// after the work already enqueued on the producer's stream and runs it on a
// dedicated copy stream, so Save() does not wait for it. The saved tensors
// must not be written until the copy has read them; the training loop calls
// OrderBeforeWrite(device, stream) right before the next write to the
// parameters (the optimizer step), `stream` being the stream that write is
// enqueued on, asked at that moment (torch's current stream of `device`
// then: the optimizer may run on another stream than the one the tensors
// were saved from; Checkpointer::BeforeWrite's writer_stream). That stream
// then waits on the device, the host never does, and the forward and
// backward passes in between overlap the copy.
//
// Devices: an implementation runs each device call with the copy's
// `device` current (never the device that happened to be current when it
// was made) and leaves the caller's current device as it found it.
//
// Thread-safe.
#ifndef STINT_INCLUDE_STINT_DEVICE_COPIER_H_
#define STINT_INCLUDE_STINT_DEVICE_COPIER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "stint/status.h"

namespace stint {

// One contiguous copy between host memory and memory on `device`.
struct DeviceCopy {
  int device = 0;
  // Device to host: the stream that produced `src`. Host to device: the
  // stream that will consume `dst`. nullptr: the legacy default stream.
  void* stream = nullptr;
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

class DeviceCopier {
 public:
  virtual ~DeviceCopier() = default;
  virtual const char* name() const = 0;  // "cuda", "host" (test double)

  // Page-locks [data, data + size) for DMA (cudaHostRegister), placed on the
  // device's NUMA node where the memory is still untouched. The staging pool
  // calls it once per buffer it maps, never per save. The CUDA copier may
  // defer the page-locking to the first copy that uses the memory, to do it
  // on that copy's device (cuda_copier.h, home_device): its failure is then
  // that copy's. kUnavailable/kInternal with the driver's reason on failure;
  // nothing stays registered then.
  virtual Status RegisterHostMemory(void* data, size_t size) = 0;
  // Undoes RegisterHostMemory(data, ...); called before the memory is
  // unmapped. A pointer that was never registered is ignored.
  virtual void UnregisterHostMemory(void* data) = 0;

  // Enqueues `copies` device-to-host without blocking on them: each is
  // ordered after the work already enqueued on its `stream`. `on_done` (may be
  // empty) runs exactly once when all of them completed successfully, on an
  // arbitrary thread (a driver callback thread): it must not block or call the
  // device API. It does not run when a copy fails; Wait() reports that.
  // Returns a ticket for Wait(). REQUIRES: each `dst` stays valid until
  // Wait(ticket) returned something other than kDeadlineExceeded, and each
  // `src` is not written before the copy read it (OrderBeforeWrite).
  virtual Result<uint64_t> CopyToHostAsync(const std::vector<DeviceCopy>& copies,
                                           std::function<void()> on_done) = 0;

  // Blocks until the ticket's copies completed: OK, or the device's error.
  // kDeadlineExceeded after `timeout` (the copies keep running; call again).
  // Any other answer retires the ticket; kNotFound for an unknown ticket.
  virtual Status Wait(uint64_t ticket, std::chrono::milliseconds timeout) = 0;

  // The lazy barrier: makes `stream` on `device` (the stream the next write
  // is enqueued on) wait, on the device, until every device-to-host copy
  // from `device` enqueued so far has completed. Cheap when nothing is in
  // flight.
  virtual Status OrderBeforeWrite(int device, void* stream) = 0;
  // The same for one ticket's copies from `device` only: `stream` waits for
  // them on the device. OK at once when they completed, or when the ticket
  // was retired by Wait() or never copied from `device`.
  virtual Status OrderAfter(uint64_t ticket, int device, void* stream) = 0;

  // Copies host to device on a copy stream, ordered after the work already on
  // each copy's `stream`, and makes that stream wait for the copy. Returns
  // once every copy completed, so the host sources may be reused.
  // kDeadlineExceeded after `timeout`.
  virtual Status CopyToDevice(const std::vector<DeviceCopy>& copies,
                              std::chrono::milliseconds timeout) = 0;
};

}  // namespace stint

#endif  // STINT_INCLUDE_STINT_DEVICE_COPIER_H_
