// The commit protocol and the names in a checkpoint root. Written once, here;
// every step goes through the Env so fault tests can cut it anywhere:
//
//   <root>/.tmp-<step>-<nonce>/rank-*.stint   data, fdatasync'ed by persist
//   <root>/.tmp-<step>-<nonce>/MANIFEST.json  written, fsync'ed; tmp dir fsync'ed
//   commit guard (CheckpointOptions::commit_guard), may refuse
//   rename .tmp-<step>-<nonce> -> step-<step>; fsync root   <- the commit point
//   LATEST.tmp written, fsync'ed; rename -> LATEST; fsync root
//
// A directory named step-* without a valid MANIFEST.json is never committed
// (can only appear by outside tampering) and is not loaded.
#ifndef STINT_RUNTIME_CHECKPOINT_COMMIT_H_
#define STINT_RUNTIME_CHECKPOINT_COMMIT_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "stint/env.h"

namespace stint {

constexpr char kLatestName[] = "LATEST";
constexpr char kTmpPrefix[] = ".tmp-";

std::string StepDirName(uint64_t step);  // "step-00001200"
std::optional<uint64_t> ParseStepDirName(const std::string& name);
std::string RankFileName(int rank);  // "rank-00000.stint"
std::string TmpDirName(uint64_t step, uint64_t nonce);
// A nonce for TmpDirName and quarantine names: random bits mixed with the
// clock, so two processes (or a restarted one) never pick the same name.
uint64_t RandomNonce();
// The step of a ".tmp-<step>-<nonce>" save or a ".tmp-deleting-step-<step>"
// deletion left behind; nullopt for any other name.
std::optional<uint64_t> ParseTmpDirStep(const std::string& name);

// Removes .tmp-* entries (interrupted saves and deletions) and LATEST.tmp,
// except `keep` (a save in flight that this writer takes part in). Only for
// the holder of the root's writer lock (root_lock.h), before it writes:
// anyone else may be removing a save in flight. (In an object store, what
// uploads leave is store_leftovers.h's.)
Status CleanLeftovers(Env* env, const std::string& root, const std::string& keep = "");

// Writes the manifest into tmp_dir and makes it step-<step> (see above).
// kAlreadyExists if that step is already committed: committed data is never
// overwritten. `guard`, when set, runs right before the rename; its error is
// returned as is and nothing is renamed (the caller removes tmp_dir).
Status CommitCheckpoint(Env* env, const std::string& root, const std::string& tmp_dir,
                        uint64_t step, const std::string& manifest_bytes,
                        const std::function<Status(uint64_t step)>& guard = nullptr);
// CommitCheckpoint's two halves, for a commit whose manifest is written
// before the decision (node-local roots, node_commit.h): the manifest
// written and synced in tmp_dir; then (guard,) the rename and LATEST.
Status WriteTmpManifest(Env* env, const std::string& tmp_dir, const std::string& manifest_bytes);
Status RenameToStep(Env* env, const std::string& root, const std::string& tmp_dir, uint64_t step,
                    const std::function<Status(uint64_t step)>& guard = nullptr);

// The commit into an object store, where a directory cannot be renamed:
// the data files were written straight into <root>/step-<step>, and the
// manifest, written last (after `guard`), commits it. A listing
// (ListCheckpointSteps) shows only steps with a manifest, so a partial
// upload is never seen as committed. kAlreadyExists if it already has one.
Status CommitInPlace(Env* env, const std::string& root, uint64_t step,
                     const std::string& manifest_bytes,
                     const std::function<Status(uint64_t step)>& guard = nullptr);

// Atomically points LATEST at `dir_name`.
Status WriteLatest(Env* env, const std::string& root, const std::string& dir_name);
// The name LATEST holds; nullopt when there is no LATEST. kDataLoss when it
// holds anything but a step-* name (its bytes are not repeated: LATEST may be
// a link to any file); every reader of a root (Load, retention, the `stint`
// CLI) goes through this.
Result<std::optional<std::string>> ReadLatest(Env* env, const std::string& root);

// Steps with a step-* directory holding a MANIFEST.json, ascending.
Result<std::vector<uint64_t>> ListCheckpointSteps(Env* env, const std::string& root);

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_COMMIT_H_
