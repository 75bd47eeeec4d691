// Device load: reading a checkpoint into destinations some of which are in
// device memory. Host destinations are read into directly; device ones
// through host memory mapped for this read and pinned through the copier,
// then host-to-device on the copier's streams.
#ifndef STINT_RUNTIME_CHECKPOINT_DEVICE_LOAD_H_
#define STINT_RUNTIME_CHECKPOINT_DEVICE_LOAD_H_

#include <chrono>
#include <cstdint>
#include <vector>

#include "stint/checkpoint_reader.h"
#include "stint/device_copier.h"
#include "stint/status.h"

namespace stint {

// Reads every destination from `reader`. `copier` may be null when none is on
// a device (kFailedPrecondition otherwise). The device destinations go
// through one pinned host buffer of at most `bounce_bytes` (rounded up to
// the direct-I/O block; bigger only when one row, along dimension 0, of a
// destination is bigger: then one row), in rounds: read, copied to the
// devices, reused. A destination bigger than the buffer is split by rows.
// `copy_timeout` bounds each round's host-to-device copies; when they time
// out the buffer stays mapped and pinned for good, since a copy may still
// read it.
Status ReadIntoDests(const CheckpointReader& reader, const std::vector<TensorDest>& dests,
                     DeviceCopier* copier, uint64_t bounce_bytes,
                     std::chrono::milliseconds copy_timeout);

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_DEVICE_LOAD_H_
