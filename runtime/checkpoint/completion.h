// The root's COMPLETE marker: a run that finished says so in its checkpoint
// root, so any later start of the same run (a requeue racing the end, a
// resubmission) exits at once instead of training again.
#ifndef STINT_RUNTIME_CHECKPOINT_COMPLETION_H_
#define STINT_RUNTIME_CHECKPOINT_COMPLETION_H_

#include <optional>
#include <string>

#include "stint/checkpointer.h"
#include "stint/env.h"

namespace stint {

constexpr char kCompleteName[] = "COMPLETE";

// Writes root/COMPLETE durably (a tmp file synced, renamed, the root synced):
// {"step": step, "info": <info, a JSON object>}. kInvalidArgument when
// `info` is not a JSON object.
Status WriteCompletion(Env* env, const std::string& root, uint64_t step, const std::string& info);

// The marker, nullopt when there is none. kDataLoss naming the file when it
// is not what WriteCompletion writes (at most 64 KiB of JSON).
Result<std::optional<CompletionMarker>> ReadCompletion(Env* env, const std::string& root);

// Removes it (OK when there is none).
Status RemoveCompletion(Env* env, const std::string& root);

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_COMPLETION_H_
