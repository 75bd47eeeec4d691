// Retention: which committed checkpoints to delete, and deleting one safely.
#ifndef STINT_RUNTIME_CHECKPOINT_RETENTION_H_
#define STINT_RUNTIME_CHECKPOINT_RETENTION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "stint/env.h"

namespace stint {

// Keeps the newest `keep_last` steps (0: all), every step divisible by
// `keep_every` (0: none) and `protect` (what LATEST names). Returns the rest,
// ascending. Pure.
std::vector<uint64_t> StepsToDelete(std::vector<uint64_t> steps, int keep_last, uint64_t keep_every,
                                    std::optional<uint64_t> protect);

// Renames step-<step> to a .tmp- name first (atomic), so a crash mid-delete
// never leaves a half-deleted directory that looks committed, then removes it.
Status DeleteCheckpoint(Env* env, const std::string& root, uint64_t step);

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_RETENTION_H_
