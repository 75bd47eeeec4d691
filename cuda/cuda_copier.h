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

struct CudaCopierOptions {
  // The device whose NUMA node pinned staging memory is placed on; -1: the
  // calling thread's current device. Default: -1
  int home_device = -1;
  // Place pinned memory on the home device's NUMA node. Default: true
  bool numa_placement = true;
};

// kUnavailable ("no CUDA device: ...") when there is no usable device.
Result<std::unique_ptr<DeviceCopier>> NewCudaDeviceCopier(const CudaCopierOptions& options = {});

}  // namespace stint

#endif  // STINT_CUDA_CUDA_COPIER_H_
