// Retention: which committed checkpoints to delete, deleting one safely, and
// keeping deletion away from the step another thread is reading.
#ifndef STINT_RUNTIME_CHECKPOINT_RETENTION_H_
#define STINT_RUNTIME_CHECKPOINT_RETENTION_H_

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
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

// The one step of a root that another thread is reading (tier-2 replication
// copies a tier-1 step while the persist thread applies tier-1 retention).
// Deletions run under its lock, so Hold() also waits for a deletion in
// progress: after it returns, the step is either gone or stays until
// Release().
//
// Thread-safe.
class RetentionGuard {
 public:
  void Hold(uint64_t step);
  void Release();
  std::optional<uint64_t> held();
  // DeleteCheckpoint unless `step` is held (then OK, nothing deleted).
  Status DeleteUnlessHeld(Env* env, const std::string& root, uint64_t step);

 private:
  std::mutex mu_;
  std::optional<uint64_t> held_;  // guarded by mu_
};

// The steps whose data files the checkpoints `kept` reference (incremental
// saves), directly or through a referenced one, read from their manifests
// every time (never from a cache). A step whose MANIFEST is gone adds
// nothing; one that cannot be read or decoded (an I/O error, damage, a format
// version this build does not know) is an error naming it: what it
// references is unknown.
Result<std::set<uint64_t>> ReferencedSteps(Env* env, const std::string& root,
                                           const std::set<uint64_t>& kept);

// Steps retention must keep that only someone else knows (an evaluation
// queued on them: CheckpointOptions::retention_pins).
using RetentionPins = std::function<Result<std::set<uint64_t>>()>;

// Deletes what StepsToDelete names among the committed steps of `root`, with
// the step LATEST names protected, and never a `pinned` step (a save in
// progress references it), a step `pins` (may be empty; asked only when
// something is due for deletion) names, nor one that a kept, held (by
// `guard`, may be null), pinned or named step references. When the pins
// cannot be had, what a kept step references cannot be established, or a
// step due for deletion has a manifest this build cannot read (it may be a
// newer format's, referencing older steps), nothing at all is deleted: OK is
// returned and *held_back (when not null) says why; it is cleared when
// retention ran. Stops at the first deletion that fails.
Status ApplyRetention(Env* env, const std::string& root, int keep_last, uint64_t keep_every,
                      RetentionGuard* guard, const std::set<uint64_t>& pinned = {},
                      std::string* held_back = nullptr, const RetentionPins& pins = nullptr);

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_RETENTION_H_
