// CudaDeviceCopier: the CUDA implementation of stint::DeviceCopier
// (stint/device_copier.h): dedicated copy streams per device (one
// device-to-host, one host-to-device, both non-blocking), events that order
// them after the caller's streams, and the lazy barrier.
//
//   auto copier = stint::NewCudaDeviceCopier().value();   // kUnavailable without a device
//   options.device_copier = copier.get();                  // outlives the Checkpointer
//   auto h = ckpt->Save(step, state);                      // CUDA shards: enqueue only
//   ... forward, backward (overlap the copy) ...
//   copier->OrderBeforeWrite(device, compute_stream);      // then optimizer.step()
//
// Plain C++ on the CUDA runtime API; every call is checked. Thread-safe.
#ifndef STINT_CUDA_CUDA_COPIER_H_
#define STINT_CUDA_CUDA_COPIER_H_

#include <memory>

#include "stint/device_copier.h"
#include "stint/status.h"

namespace stint {

// Devices: every CUDA call runs with the device of the copy it serves
// current (streams and events are made per device, at its first copy), and
// the calling thread's current device is restored afterwards. Nothing is
// bound to the device current when the copier is made.
struct CudaCopierOptions {
  // The device host memory is page-locked on (RegisterHostMemory) and whose
  // NUMA node it is placed on. -1: page-locking waits for the first copy
  // that uses the memory and runs on that copy's device (the registration
  // is portable, so copies from other devices use it too), and placement
  // follows the device of the first copy made so far, else the calling
  // thread's current device at RegisterHostMemory. So a rank that makes
  // the copier before torch.cuda.set_device(3) pins, and creates its
  // context, on device 3 only. Default: -1
  int home_device = -1;
  // Place pinned memory on the device's NUMA node. Default: true
  bool numa_placement = true;
};

// kUnavailable ("no CUDA device: ...") when there is no usable device.
Result<std::unique_ptr<DeviceCopier>> NewCudaDeviceCopier(const CudaCopierOptions& options = {});

}  // namespace stint

#endif  // STINT_CUDA_CUDA_COPIER_H_
