// The root's SAVE_TIMES: how long the writer's recent saves took from Save()
// until durable, so a launcher can size its warning before a job's end from
// what this job's checkpoints really cost (`stint slurm submit --root`).
// Written by the root's writer (rank 0) after each committed save; readers
// never need it to load anything.
#ifndef STINT_RUNTIME_CHECKPOINT_SAVE_TIMES_H_
#define STINT_RUNTIME_CHECKPOINT_SAVE_TIMES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "stint/env.h"

namespace stint {

constexpr char kSaveTimesName[] = "SAVE_TIMES";
constexpr size_t kSaveTimesKept = 32;  // the newest saves only

struct SaveTime {
  uint64_t step = 0;
  double durable_seconds = 0;
};

// Adds one save to root/SAVE_TIMES, keeping the newest kSaveTimesKept; the
// file is replaced whole (a tmp file renamed), so a reader never sees it
// half-written. Not synced: after a power cut it may be short or empty.
Status RecordSaveTime(Env* env, const std::string& root, const SaveTime& t);

// The recorded saves, oldest first; empty when there is no file. kDataLoss
// naming the file and line when it is not what RecordSaveTime writes.
Result<std::vector<SaveTime>> ReadSaveTimes(Env* env, const std::string& root);

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_SAVE_TIMES_H_
