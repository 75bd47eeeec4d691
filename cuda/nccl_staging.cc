#include "nccl_staging.h"

#include <algorithm>

namespace stint {

NcclRoute RouteNcclBuffer(NcclMemoryKind kind, int pointer_device, int comm_device) {
  switch (kind) {
    case NcclMemoryKind::kDevice:
      return pointer_device == comm_device ? NcclRoute::kDirect : NcclRoute::kRefused;
    case NcclMemoryKind::kManaged:
      return NcclRoute::kDirect;
    case NcclMemoryKind::kHost:
    case NcclMemoryKind::kUnregistered:
      return NcclRoute::kStaged;
  }
  return NcclRoute::kRefused;
}

size_t NcclStagingChunkBytes(size_t element_bytes, size_t capacity_bytes) {
  return capacity_bytes / element_bytes * element_bytes;
}

size_t NcclStagingAllocation(size_t bytes, size_t capacity_bytes) {
  const size_t n = std::max<size_t>(1, std::min(bytes, capacity_bytes));
  return (n + 255) / 256 * 256;
}

}  // namespace stint
