// The commit of a save that several ranks write, through a CommitChannel
// (stint/commit_channel.h). For save number n (every rank counts its Save()
// calls, which are collective) of step s, under "<prefix>/save-<n>-step-<s>/":
//
//   committer  creates .tmp-<s>-<nonce>/, publishes its name with
//              the save's timeout T (CommitTimeout)               -> tmp
//              (or, when it cannot take part, its error            -> tmp, abort)
//   each rank  waits for tmp, writes and fdatasyncs
//              rank-<r>.stint there, publishes                    -> report/<r>
//              (the tmp name, files, digests, shard boxes, fencing token;
//              or its error), counts itself                        -> reported
//              and, if it completed the count or failed, rings    -> bell
//   committer  waits for the bell until T after it published tmp, reads
//              every report at once; merges them into
//              the manifest, checks the shard layout and every rank's
//              token, commits (MANIFEST, rename, fsync, LATEST), publishes -> decision/<tmp>
//   each rank  waits for the decision until 2T after it read tmp: that is
//              its durable outcome
//
// Every wait is one blocking read of one key (CommitChannel::WaitFor) and
// the gather one read of every report (GetMany), so a commit costs each
// rank a constant number of round trips and the committer a few plus one
// read of N reports: no key is polled per rank.
//
// One deadline per save, the committer's, so no rank's own persist time
// decides how long another is waited for. Every channel read is bounded by
// it (CommitChannel::GetBy).
//
// The tmp name carries a random nonce, so a report or decision left on a
// reused channel by an earlier incarnation never passes for this save's:
// stale reports are ignored and decisions are keyed by the tmp name.
//
// One rank's failure, or a rank that does not report in time, makes the
// committer decide "aborted" at once, naming the rank; nothing is committed.
// A rank that gets no decision in time fails too, unless the committed
// manifest already lists its file with its digest (the committer died after
// the rename).
#ifndef STINT_RUNTIME_CHECKPOINT_RANK_COMMIT_H_
#define STINT_RUNTIME_CHECKPOINT_RANK_COMMIT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/incremental_base.h"
#include "checkpoint/node_commit.h"
#include "checkpoint/save_commit.h"
#include "format/manifest.h"
#include "stint/checkpointer.h"
#include "stint/commit_channel.h"
#include "stint/status.h"

namespace stint {

// One rank's account of its part of a save.
struct RankReport {
  int rank = 0;
  uint64_t fencing_token = 0;
  std::string tmp;  // the tmp directory's name it wrote into; empty if it never started
  Status status;    // OK: `part`'s files are durable in the tmp directory
  Manifest part;    // this rank's tensors, blobs and files (blob names as given)
  uint64_t persist_ms = 0;  // how long its part took to write and sync
  std::string node{};       // CheckpointOptions::node_id
  bool node_local = false;  // wrote into its node's root, not the committer's directory (node_commit.h)
};

std::string EncodeRankReport(const RankReport& report);
// `origin` (the key) prefixes every error.
Result<RankReport> DecodeRankReport(std::string_view bytes, std::string_view origin);

std::string EncodeDecision(const Status& outcome);
Status DecodeDecision(std::string_view bytes, std::string_view origin);

// The blob name under which rank `rank`'s blob `name` is stored in a
// multi-rank save: rank 0's keep their names (so they read as a one-rank
// checkpoint's), unless a name spells "rank-<rrrrr>/..." itself, the
// others' become "rank-<rrrrr>/<name>".
std::string RankBlobName(int rank, const std::string& name);
// The blobs rank `rank` sees on load of a checkpoint saved by
// `saved_world_size` ranks: every rank-0 blob, replaced by this rank's own
// where it saved one; other ranks' blobs are left out. A one-rank save's
// names are all rank 0's, as given.
std::map<std::string, std::string> BlobsForRank(std::map<std::string, std::string> stored,
                                                int rank, int saved_world_size);

// The manifest of the whole save: `header`'s fields, every rank's tensors
// (shards of one name merged; dtype and global shape must agree), blobs
// (renamed with RankBlobName) and files. kInvalidArgument naming the tensor
// and the ranks for shards that overlap, leave the shape or leave a gap.
Result<Manifest> MergeRankReports(const Manifest& header, const std::vector<RankReport>& reports);

// The keys of one save on the channel.
class SaveKeys {
 public:
  SaveKeys(const std::string& prefix, uint64_t save_number, uint64_t step);
  std::string tmp() const { return base_ + "tmp"; }
  std::string abort() const { return base_ + "abort"; }
  std::string report(int rank) const { return base_ + "report/" + std::to_string(rank); }
  std::string decision(const std::string& tmp_name) const { return base_ + "decision/" + tmp_name; }
  // The counter of ranks that reported (CommitChannel::Add); the last one,
  // or one that failed, sets the bell the committer waits on.
  std::string reported() const { return base_ + "reported"; }
  std::string bell() const { return base_ + "bell"; }
  // Node-local roots (node_commit.h): the committer's manifest for the
  // keepers, their answers, counted and rung like the reports.
  std::string prepare(const std::string& tmp_name) const { return base_ + "prepare/" + tmp_name; }
  std::string prepared(int rank) const { return base_ + "prepared/" + std::to_string(rank); }
  std::string prepared_count() const { return base_ + "prepared-count"; }
  std::string prepared_bell() const { return base_ + "prepared-bell"; }
  // Set by a rank that gave the save up before it started: the committer
  // clears the bell when it starts, never this mark.
  std::string abandoned() const { return base_ + "abandoned"; }
  // The counter of ranks done with the save's keys (CommitChannel::Add).
  std::string done() const { return base_ + "done"; }
  const std::string& base() const { return base_; }

 private:
  std::string base_;
};

using Deadline = std::chrono::steady_clock::time_point;

// Counts one more on `counter`; the one that completes the count of
// `expected`, or one that failed, rings the bell.
void CountAndRing(CommitChannel* channel, const std::string& counter, const std::string& bell,
                  int expected, bool failed);
// The receiver's half: waits for `bell` (unless `rung`), reads every key of
// `keys` at once, then polls those still missing until `deadline`. `take`
// gets each value found: true when it counts, false when it is stale (read
// again), or an error that ends the gather. Returns the indices of `keys`
// still missing at the deadline.
Result<std::vector<size_t>> GatherKeys(
    CommitChannel* channel, const std::string& bell, bool rung,
    const std::vector<std::string>& keys, Deadline deadline,
    const std::function<Result<bool>(size_t index, const std::string& value)>& take);

// The committer's gather: `own` and every other rank's report for the tmp
// directory own.tmp, by rank, once the bell rang (read at once), or the first failure (a rank's own
// error, naming it; kDeadlineExceeded naming the ranks that did not report by `deadline`). Reports
// of another tmp directory are stale and ignored; reports are checked to come from the rank whose
// key they are under.
Result<std::vector<RankReport>> GatherRankReports(CommitChannel* channel, const SaveKeys& keys,
                                                  int world_size, RankReport own,
                                                  Deadline deadline);

// The commit deadline of one save: options.commit_timeout, or the longest
// of 60 s, 10 x `persist_seconds` (the slowest rank's persist in the last
// save) and 1 s per 10 MB of `state_bytes`.
std::chrono::milliseconds CommitTimeout(const CheckpointOptions& options, double persist_seconds,
                                        uint64_t state_bytes = 0);

// The prefix of every key a Checkpointer of `options` puts on its channel.
std::string ChannelPrefix(const CheckpointOptions& options);

// One rank's attempt at a load: with nullopt its newest checkpoint that
// loads; with a step, its newest committed step at most that one that loads.
using LoadAttempt = std::function<Result<LoadResult>(std::optional<uint64_t> at_most)>;

// How long the ranks of a multi-rank load wait for each other, the same on
// every rank: options.commit_timeout, or 10 minutes.
std::chrono::milliseconds LoadTimeout(const CheckpointOptions& options);

// A multi-rank load (load number `load_number` of every rank) ends on one
// step on every rank, or fails on every rank. In rounds, under
// "<prefix>/load-<n>/round-<k>/":
//
//   each rank  loads (round 0: its newest; later: at most the decided step)
//              and publishes the step it loaded, or why it could not  -> answer/<r>
//              counts itself, and rings if it completed the count or failed
//                                                              -> answered, bell
//   rank 0     waits for the bell, reads every answer until LoadTimeout() after the round
//              began; decides the oldest step every rank loaded (final
//              when every rank loaded that one), or the first error, or
//              kDeadlineExceeded naming the ranks that did not answer
//              (its own answer counts only if it came in time)         -> decision
//   each rank  waits for the decision until twice that
//
// A decision that is not final starts the next round, in which the ranks
// that loaded a newer step load again, at most the decided step; the step
// decreases every round, so they end. Returns this rank's final load, its
// `skipped` listing the steps another rank could not load.
Result<LoadResult> AgreeOnLoad(const CheckpointOptions& options, uint64_t load_number,
                               const LoadAttempt& attempt);

// One rank's side of one multi-rank save. REQUIRES: options.world_size > 1
// and options.commit_channel set.
class RankSave {
 public:
  // `node_lock`: this rank's hold on its node-local root's writer lock,
  // taken when it first commits there as its node's keeper (node_commit.h);
  // null for a save that is only abandoned.
  RankSave(const CheckpointOptions& options, Env* env, uint64_t save_number, uint64_t step,
           NodeRootLock* node_lock = nullptr);
  // This rank is done with the save's keys (ReleaseKeys).
  ~RankSave();
  RankSave(const RankSave&) = delete;
  RankSave& operator=(const RankSave&) = delete;

  // The tmp directory (full path) to write this rank's file into: the
  // committer creates it and publishes its name with `timeout` (as
  // CommitTimeout), the save's one deadline; the others wait for it until
  // `timeout` (their own estimate), or fail with the committer's early
  // decision.
  Result<std::string> Start(std::chrono::milliseconds timeout);
  // Reports this rank's part (`persisted` OK: `part` lists its durable
  // files, written in `persist_seconds`) or its error, and returns the
  // save's outcome: on the committer, gather until its Start() + the
  // published timeout, merge, commit (removing the tmp directory unless
  // committed); on the others, the committer's decision, waited for until
  // twice that after their Start().
  Status Finish(const Status& persisted, const Manifest& part, double persist_seconds);
  // After Finish() on the committer: the slowest rank's persist time (its
  // own elsewhere), for the next save's deadline.
  double slowest_persist_seconds() const { return slowest_persist_seconds_; }
  // The save failed before Start() (e.g. BusyPolicy::kSkip, a bad state):
  // tells the other ranks at once rather than letting them wait.
  void Abandon(const Status& why);

  bool committer() const { return options_.rank == 0; }
  // After Finish() committed: the step spans node-local roots and this
  // rank is the committer or its node's keeper.
  bool leads_node_part() const { return leads_node_part_; }

 private:
  Status Commit(const std::vector<RankReport>& reports, const Manifest& part);
  // The committer: publishes the manifest to the keepers of `plan` and
  // waits until each prepared its node's part.
  Status PrepareNodes(const NodePlan& plan, const std::string& manifest_bytes);
  // A rank on a node-local root, after its report: the committer's prepare;
  // as its node's keeper, the node's part prepared and answered. Returns
  // whether this rank is the keeper, or the error that ended the save.
  Result<bool> TakePrepare();
  // After the decision, a keeper's node: published (committed) or removed.
  Status SettleNodePart(const Status& decided);
  Status AwaitDecision(const Manifest& part);
  void Publish(const std::string& key, const std::string& value);
  // A non-committer's report: published, counted, the bell rung when it
  // completes the count or is a failure.
  void Report(const RankReport& report);
  // Counts this rank as done with the save's keys; the last rank of all
  // deletes them (tmp, abort, decision, the counters and the bell; the
  // reports too unless committed, when each rank deleted its own). Every rank writes
  // before it counts, so none is written after, and none is deleted while
  // a rank may still poll it (a c10d get() of a key deleted after its
  // check() waits for the store's whole timeout).
  void ReleaseKeys();

  const CheckpointOptions& options_;
  Env* const env_;
  CommitChannel* const channel_;
  const SaveKeys keys_;
  const uint64_t step_;
  NodeRootLock* const node_lock_;
  std::string tmp_name_;  // the tmp directory's name in the root; set by Start()
  Deadline deadline_;     // of the gather (committer) or the decision; set by Start()
  std::chrono::milliseconds timeout_{0};  // the save's, as the committer published it
  bool node_local_ = false;  // this rank's tmp directory is its node's, not the committer's
  bool keeper_ = false;      // this rank commits its node's root (node_commit.h)
  bool leads_node_part_ = false;
  double slowest_persist_seconds_ = 0;
  bool committed_ = false;  // Finish() returned OK
};

// The multi-rank path of SaveCommit (save_commit.h): a RankSave whose
// Start() publishes (or waits for) the tmp directory with `timeout`
// (CommitTimeout).
class RankSaveCommit final : public SaveCommit {
 public:
  RankSaveCommit(const CheckpointOptions& options, Env* env, uint64_t save_number, uint64_t step,
                 std::chrono::milliseconds timeout, NodeRootLock* node_lock)
      : save_(options, env, save_number, step, node_lock),
        options_(options),
        env_(env),
        step_(step),
        timeout_(timeout) {}

  Result<std::string> Start() override { return save_.Start(timeout_); }
  Status Finish(const Status& persisted, const Manifest& part, double persist_seconds) override {
    return save_.Finish(persisted, part, persist_seconds);
  }
  // Read back from the root: every rank's chunks are in the committed
  // manifest, which only the committer holds in memory.
  std::shared_ptr<const IncrementalBase> CommittedBase(const Manifest& part) override;
  double slowest_persist_seconds() const override { return save_.slowest_persist_seconds(); }
  bool leads_node_part() const override { return save_.leads_node_part(); }

 private:
  RankSave save_;
  const CheckpointOptions& options_;
  Env* const env_;
  const uint64_t step_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_RANK_COMMIT_H_
