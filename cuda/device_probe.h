// CUDA device probe: the one check every CUDA entry point makes first, so
// that without a device callers get a clear "no CUDA device" status and the
// CPU path runs. The pinned staging pool and copy streams build on it.
#ifndef STINT_CUDA_DEVICE_PROBE_H_
#define STINT_CUDA_DEVICE_PROBE_H_

#include <string>

#include "stint/status.h"

namespace stint {

// Number of usable CUDA devices; kUnavailable ("no CUDA device: ...") when
// there is none or the driver is missing.
Result<int> CudaDeviceCount();
// "NVIDIA H200, 139 GiB, compute 9.0, runtime 13.0" for device `index`.
Result<std::string> CudaDeviceSummary(int index);

}  // namespace stint

#endif  // STINT_CUDA_DEVICE_PROBE_H_
