// FallbackLoader: what Checkpointer::Load loads. The newest checkpoint in any
// tier (0 memory, 1 root, 2 replica root) that loads and verifies; for one
// step, memory before root before replica. One that fails is passed over
// and reported in LoadResult::skipped when its bytes are damaged or cannot
// be read; a destination that does not match it goes straight back to the
// caller. With several ranks every rank must resume from the same step:
// AgreeOnLoad (rank_commit.h) takes them all back to the newest step every
// rank loads.
//
// Thread-compatible: one training thread calls Load.
#ifndef STINT_RUNTIME_CHECKPOINT_LOAD_FALLBACK_H_
#define STINT_RUNTIME_CHECKPOINT_LOAD_FALLBACK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/in_memory_checkpoint.h"
#include "checkpoint/memory_tier.h"
#include "stint/checkpointer.h"
#include "stint/device_copier.h"
#include "stint/env.h"

namespace stint {

class FallbackLoader {
 public:
  // `options` (with env and replica_env set) and `memory` outlive this
  // object; `copier` may be null.
  FallbackLoader(const CheckpointOptions& options, DeviceCopier* copier, const MemoryTier* memory)
      : options_(options), copier_(copier), memory_(memory) {}

  // Checkpointer::Load.
  Result<LoadResult> Load(const DestPlanner& planner, const LoadOptions& options);
  // Tier 1 is read through `env` instead of options.env (PeerReadEnv: a
  // node-local root with the job's other nodes behind it). Must outlive this.
  void set_tier1_env(Env* env) { tier1_env_ = env; }

 private:
  // One checkpoint Load may try.
  struct Candidate {
    int tier;
    uint64_t step;
    std::string name;
    std::shared_ptr<InMemoryCheckpoint> memory;  // tier 0
  };

  // The newest checkpoint (options.step: that one, in any tier) that loads.
  Result<LoadResult> LoadNewest(const DestPlanner& planner, const LoadOptions& options);
  // The newest step at most `at_most` (in any tier) that loads: the step
  // another rank took the job back to, or older.
  Result<LoadResult> LoadAtMost(const DestPlanner& planner, const LoadOptions& options,
                                uint64_t at_most);
  // What LoadNewest tries, newest first; tier-2 listing errors go to
  // result->skipped.
  Result<std::vector<Candidate>> Candidates(const LoadOptions& options, LoadResult* result);
  Status LoadOne(const Candidate& c, const DestPlanner& planner, const LoadOptions& options,
                 LoadResult* result);
  // Whether the committed manifest in `dir` places files on nodes.
  bool SpansNodes(const std::string& dir) const;
  Env* tier1_env() const { return tier1_env_ != nullptr ? tier1_env_ : options_.env; }
  bool tiered() const { return options_.keep_in_memory || !options_.replica_root.empty(); }

  const CheckpointOptions& options_;
  DeviceCopier* const copier_;
  const MemoryTier* const memory_;
  uint64_t loads_started_ = 0;
  Env* tier1_env_ = nullptr;  // null: options_.env
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_LOAD_FALLBACK_H_
