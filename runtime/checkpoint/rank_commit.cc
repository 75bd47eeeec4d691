// The multi-rank commit's messages and the committer's gather and merge.
#include "checkpoint/rank_commit.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <unordered_map>

#include "base/json_fields.h"
#include "base/channel_poll.h"
#include "checkpoint/commit.h"
#include "checkpoint/incremental_base.h"
#include "format/shard_layout.h"

namespace stint {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// A report or decision is written by another rank of the same job: malformed
// means a bug or a foreign writer on the channel, reported as such.
Status ChannelFieldError(const internal::JsonFieldError& e) {
  return Status::DataLoss("malformed commit message: " + e.path() + " " +
                          (e.detail.empty() ? "is missing or of the wrong type" : e.detail));
}
constexpr internal::JsonFieldPolicy kChannelFields{
    /*null_is_absent=*/false, internal::JsonFieldPolicy::Floats::kRefuse, ChannelFieldError};

json StatusJson(const Status& s) {
  return json{{"code", static_cast<int>(s.code())}, {"message", s.message()}};
}

// The Status that `f` describes into *out; the error if `f` is malformed.
Status StatusFromJson(const internal::JsonFields& f, Status* out) {
  STINT_ASSIGN_OR_RETURN(int64_t code, f.Int64("code"));
  STINT_ASSIGN_OR_RETURN(std::string message, f.String("message"));
  if (code < 0 || code > static_cast<int64_t>(Code::kPermissionDenied)) {
    return f.BadValue("code", "is not a status code");
  }
  *out = Status(static_cast<Code>(code), std::move(message));
  return Status::OK();
}

// The error a message carries in its "error" field into *carried (OK when
// it has none); an error of its own when the field is malformed or holds
// no error.
Status CarriedError(const internal::JsonFields& f, Status* carried) {
  *carried = Status::OK();
  STINT_ASSIGN_OR_RETURN(const json* error, f.OptionalObject("error"));
  if (error == nullptr) return Status::OK();
  STINT_RETURN_IF_ERROR(StatusFromJson(f.Child(*error, "error"), carried));
  return carried->ok() ? f.BadValue("error", "holds no error") : Status::OK();
}

Result<json> ParseMessage(std::string_view bytes, std::string_view origin) {
  json top = json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (top.is_discarded() || !top.is_object()) {
    return Status::DataLoss(std::string(origin) + ": commit message is not a JSON object");
  }
  return top;
}

// What the committer published under a save's tmp key: the tmp directory's
// name and the save's timeout, or the error it could not start the save with.
struct PublishedTmp {
  std::string name;
  uint64_t timeout_ms = 0;
};

// A message under `key` that holds either an error or its fields: the
// error it carries, or what read(fields) makes of the fields.
template <typename T, typename Read>
Result<T> DecodeUnlessError(std::string_view bytes, const std::string& key, Read read) {
  STINT_ASSIGN_OR_RETURN(json top, ParseMessage(bytes, key));
  internal::JsonFields f(top, key, kChannelFields);
  Status why;
  STINT_RETURN_IF_ERROR(CarriedError(f, &why));
  if (!why.ok()) return why;
  return read(f);
}

Result<PublishedTmp> DecodePublishedTmp(std::string_view bytes, const std::string& key) {
  return DecodeUnlessError<PublishedTmp>(
      bytes, key, [](const internal::JsonFields& f) -> Result<PublishedTmp> {
        PublishedTmp p;
        STINT_ASSIGN_OR_RETURN(p.name, f.String("tmp"));
        STINT_ASSIGN_OR_RETURN(p.timeout_ms, f.Uint64("timeout_ms"));
        return p;
      });
}

}  // namespace

std::string EncodeRankReport(const RankReport& report) {
  json j{{"rank", report.rank},
         {"fencing_token", report.fencing_token},
         {"tmp", report.tmp},
         {"persist_ms", report.persist_ms}};
  if (!report.node.empty()) j["node"] = report.node;
  if (report.node_local) j["node_local"] = true;
  if (report.status.ok()) {
    j["part"] = EncodeManifest(report.part);
  } else {
    j["error"] = StatusJson(report.status);
  }
  return j.dump();
}

Result<RankReport> DecodeRankReport(std::string_view bytes, std::string_view origin) {
  STINT_ASSIGN_OR_RETURN(json top, ParseMessage(bytes, origin));
  internal::JsonFields f(top, std::string(origin), kChannelFields);
  RankReport r;
  STINT_ASSIGN_OR_RETURN(int64_t rank, f.Int64("rank"));
  r.rank = static_cast<int>(rank);
  STINT_ASSIGN_OR_RETURN(r.fencing_token, f.Uint64("fencing_token"));
  STINT_ASSIGN_OR_RETURN(r.tmp, f.String("tmp"));
  STINT_ASSIGN_OR_RETURN(r.persist_ms, f.Uint64("persist_ms"));
  STINT_ASSIGN_OR_RETURN(auto node, f.OptionalString("node"));
  if (node) r.node = std::move(*node);
  STINT_ASSIGN_OR_RETURN(auto node_local, f.OptionalBool("node_local"));
  r.node_local = node_local.value_or(false);
  STINT_RETURN_IF_ERROR(CarriedError(f, &r.status));
  if (!r.status.ok()) return r;
  STINT_ASSIGN_OR_RETURN(std::string part, f.String("part"));
  STINT_ASSIGN_OR_RETURN(r.part, DecodeManifest(part, std::string(origin) + " part"));
  return r;
}

std::string EncodeDecision(const Status& outcome) { return StatusJson(outcome).dump(); }

Status DecodeDecision(std::string_view bytes, std::string_view origin) {
  auto top = ParseMessage(bytes, origin);
  if (!top.ok()) return top.status();
  internal::JsonFields f(*top, std::string(origin), kChannelFields);
  Status decided;
  STINT_RETURN_IF_ERROR(StatusFromJson(f, &decided));
  return decided;
}

namespace {

std::string RankPrefix(int rank) {
  char prefix[24];
  std::snprintf(prefix, sizeof(prefix), "rank-%05d/", rank);
  return prefix;
}

// The rank and name a stored blob name "rank-<rrrrr>/<name>" spells (only
// the canonical spelling, as RankBlobName writes it); nullopt otherwise.
std::optional<std::pair<int, std::string>> SplitRankBlobName(const std::string& stored) {
  const size_t slash = stored.find('/');
  if (stored.compare(0, 5, "rank-") != 0 || slash == std::string::npos || slash > 5 + 9) {
    return std::nullopt;
  }
  int rank = 0;
  for (size_t i = 5; i < slash; ++i) {
    if (stored[i] < '0' || stored[i] > '9') return std::nullopt;
    rank = rank * 10 + (stored[i] - '0');
  }
  if (stored.compare(0, slash + 1, RankPrefix(rank)) != 0) return std::nullopt;
  return std::make_pair(rank, stored.substr(slash + 1));
}

}  // namespace

std::string RankBlobName(int rank, const std::string& name) {
  // Rank 0's names are kept, except one that spells a rank's prefix.
  if (rank == 0 && !SplitRankBlobName(name)) return name;
  return RankPrefix(rank) + name;
}

std::map<std::string, std::string> BlobsForRank(std::map<std::string, std::string> stored,
                                                int rank, int saved_world_size) {
  std::map<std::string, std::string> own, out;
  for (auto& [name, bytes] : stored) {
    // A one-rank save stores every name as given (a user's key may be
    // "rank-00001/x"); a multi-rank one through RankBlobName.
    int owner = 0;
    std::string key = name;
    if (saved_world_size > 1) {
      auto split = SplitRankBlobName(name);
      if (split && split->first < saved_world_size) {  // else no such rank saved
        owner = split->first;
        key = std::move(split->second);
      }
    }
    if (owner == rank) {
      own[std::move(key)] = std::move(bytes);
    } else if (owner == 0) {
      out[std::move(key)] = std::move(bytes);
    }
  }
  for (auto& [name, bytes] : own) out[name] = std::move(bytes);  // a rank's own blob wins
  return out;
}

Result<Manifest> MergeRankReports(const Manifest& header, const std::vector<RankReport>& reports) {
  Manifest m = header;
  m.tensors.clear();
  m.blobs.clear();
  m.files.clear();
  m.refs.clear();
  std::unordered_map<std::string, size_t> tensor_index;  // thousands of tensors: no linear search
  for (const RankReport& r : reports) {
    const std::string who = "rank " + std::to_string(r.rank);
    for (const FileRecord& f : r.part.files) {
      if (m.FindFile(f.name) != nullptr) {
        return Status::InvalidArgument(who + " reports data file " + f.name +
                                       ", which another rank reported too");
      }
      m.files.push_back(f);
    }
    for (const FileRecord& f : r.part.refs) {
      const FileRecord* known = m.FindRef(f.name);
      if (known == nullptr) {
        m.refs.push_back(f);
      } else if (known->size != f.size) {
        return Status::InvalidArgument(who + " references " + f.name + " as " +
                                       std::to_string(f.size) + " bytes, another rank as " +
                                       std::to_string(known->size));
      }
    }
    for (const BlobRecord& b : r.part.blobs) {
      m.blobs.push_back(BlobRecord{RankBlobName(r.rank, b.name), b.file, b.chunks});
    }
    for (const TensorRecord& t : r.part.tensors) {
      auto [at, fresh] = tensor_index.emplace(t.name, m.tensors.size());
      if (fresh) {
        m.tensors.push_back(t);
        continue;
      }
      TensorRecord* it = &m.tensors[at->second];
      if (it->dtype != t.dtype || it->global_shape != t.global_shape) {
        return Status::InvalidArgument(
            "tensor '" + t.name + "': " + who + " saves it as " + DTypeName(t.dtype) + " of " +
            std::to_string(t.global_shape.size()) + " dims, another rank as " +
            DTypeName(it->dtype) + " of " + std::to_string(it->global_shape.size()) +
            " dims (or another global shape)");
      }
      it->shards.insert(it->shards.end(), t.shards.begin(), t.shards.end());
    }
  }
  for (const TensorRecord& t : m.tensors) {
    STINT_RETURN_IF_ERROR(CheckShardLayout(t, "step " + std::to_string(m.step)));
  }
  return m;
}

SaveKeys::SaveKeys(const std::string& prefix, uint64_t save_number, uint64_t step)
    : base_(prefix + "/save-" + std::to_string(save_number) + "-step-" + std::to_string(step) +
            "/") {}

// A count that failed rings the bell too: the receiver then reads what is
// there.
void CountAndRing(CommitChannel* channel, const std::string& counter, const std::string& bell,
                  int expected, bool failed) {
  auto counted = channel->Add(counter, 1);
  if (failed || !counted.ok() || *counted >= expected) channel->Set(bell, "").IgnoreError();
}

// Those still missing after the bell: a count lost, a stale value.
Result<std::vector<size_t>> GatherKeys(
    CommitChannel* channel, const std::string& bell, bool rung,
    const std::vector<std::string>& keys, Deadline deadline,
    const std::function<Result<bool>(size_t index, const std::string& value)>& take) {
  if (!rung) STINT_RETURN_IF_ERROR(channel->WaitFor(bell, deadline).status());
  std::vector<size_t> missing(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) missing[i] = i;
  auto pause = std::chrono::milliseconds(2);
  for (;;) {
    std::vector<std::string> wanted;
    wanted.reserve(missing.size());
    for (size_t i : missing) wanted.push_back(keys[i]);
    STINT_ASSIGN_OR_RETURN(std::vector<std::optional<std::string>> values,
                           channel->GetMany(wanted, deadline));
    std::vector<size_t> still;
    for (size_t j = 0; j < missing.size(); ++j) {
      bool taken = false;
      if (values[j]) {
        STINT_ASSIGN_OR_RETURN(taken, take(missing[j], *values[j]));
      }
      if (!taken) still.push_back(missing[j]);
    }
    missing = std::move(still);
    if (missing.empty() || !PauseBeforeNextPoll(deadline, &pause)) return missing;
  }
}

Result<std::vector<RankReport>> GatherRankReports(CommitChannel* channel, const SaveKeys& keys,
                                                  int world_size, RankReport own,
                                                  Deadline deadline) {
  std::vector<std::optional<RankReport>> got(world_size);
  const int own_rank = own.rank;
  const std::string tmp = own.tmp;
  got[own_rank] = std::move(own);
  std::vector<std::string> report_keys;
  std::vector<int> ranks;
  for (int r = 0; r < world_size; ++r) {
    if (r == own_rank) continue;
    report_keys.push_back(keys.report(r));
    ranks.push_back(r);
  }
  // A rank that gave the save up before it started may have rung a bell
  // the committer's Start() cleared; its mark stays.
  STINT_ASSIGN_OR_RETURN(std::optional<std::string> abandoned,
                         channel->GetBy(keys.abandoned(), deadline));
  STINT_ASSIGN_OR_RETURN(
      std::vector<size_t> missing,
      GatherKeys(
          channel, keys.bell(), abandoned.has_value(), report_keys, deadline,
          [&](size_t i, const std::string& value) -> Result<bool> {
            const int r = ranks[i];
            STINT_ASSIGN_OR_RETURN(RankReport report, DecodeRankReport(value, report_keys[i]));
            if (!report.tmp.empty() && report.tmp != tmp) return false;  // stale
            if (report.rank != r) {
              return Status::DataLoss(report_keys[i] + ": holds the report of rank " +
                                      std::to_string(report.rank));
            }
            if (!report.status.ok()) {
              return report.status.WithContext("rank " + std::to_string(r) + " failed its part");
            }
            got[r] = std::move(report);
            return true;
          }));
  if (!missing.empty()) {
    std::string named;
    for (size_t j = 0; j < missing.size(); ++j) {
      if (j == 16) {
        named += ", ...";
        break;
      }
      named += (named.empty() ? "rank " : ", rank ") + std::to_string(ranks[missing[j]]);
    }
    return Status::DeadlineExceeded(named + " did not report within the commit deadline (lost, " +
                                    "killed or still writing) on " + channel->Describe());
  }
  std::vector<RankReport> out;
  out.reserve(world_size);
  for (auto& r : got) out.push_back(std::move(*r));
  return out;
}

std::string ChannelPrefix(const CheckpointOptions& options) {
  return "stint-ckpt" + (options.job_id.empty() ? std::string() : "/" + options.job_id);
}

std::chrono::milliseconds LoadTimeout(const CheckpointOptions& options) {
  if (options.commit_timeout.count() > 0) return options.commit_timeout;
  return std::chrono::minutes(10);
}

namespace {

// One round of a load's agreement: what rank 0 decided, or an error.
struct LoadDecision {
  uint64_t step = 0;
  bool final = false;
};

Result<LoadDecision> DecodeLoadDecision(std::string_view bytes, const std::string& key) {
  return DecodeUnlessError<LoadDecision>(bytes, key,
                                         [](const internal::JsonFields& f) -> Result<LoadDecision> {
                                           LoadDecision d;
                                           STINT_ASSIGN_OR_RETURN(d.step, f.Uint64("step"));
                                           STINT_ASSIGN_OR_RETURN(d.final, f.Bool("final"));
                                           return d;
                                         });
}

// Rank 0's decision of one round: every answer (its own first) by `deadline`.
Result<LoadDecision> DecideLoadRound(CommitChannel* channel, const std::string& base,
                                     int world_size, const Result<LoadResult>& own,
                                     Deadline deadline, std::chrono::milliseconds timeout) {
  if (!own.ok()) return own.status().WithContext("rank 0 could not load");
  if (Clock::now() > deadline) {
    return Status::DeadlineExceeded("rank 0 loaded step " + std::to_string(own->step) +
                                    " only after the load deadline (" +
                                    std::to_string(timeout.count()) + " ms)");
  }
  LoadDecision d{own->step, true};
  std::vector<std::string> answers;
  for (int r = 1; r < world_size; ++r) answers.push_back(base + "answer/" + std::to_string(r));
  STINT_ASSIGN_OR_RETURN(
      std::vector<size_t> missing,
      GatherKeys(channel, base + "bell", /*rung=*/false, answers, deadline,
                 [&](size_t i, const std::string& value) -> Result<bool> {
                   const std::string& key = answers[i];
                   STINT_ASSIGN_OR_RETURN(json theirs, ParseMessage(value, key));
                   internal::JsonFields f(theirs, key, kChannelFields);
                   Status why;
                   STINT_RETURN_IF_ERROR(CarriedError(f, &why));
                   if (!why.ok()) {
                     return why.WithContext("rank " + std::to_string(i + 1) + " could not load");
                   }
                   STINT_ASSIGN_OR_RETURN(uint64_t step, f.Uint64("step"));
                   if (step != d.step) d.final = false;
                   d.step = std::min(d.step, step);
                   return true;
                 }));
  if (!missing.empty()) {
    return Status::DeadlineExceeded(
        "rank " + std::to_string(missing[0] + 1) + " did not say which step it loaded within " +
        std::to_string(timeout.count()) + " ms on " + channel->Describe());
  }
  return d;
}

// Each rank calls it once it has round `base`'s decision (rank 0 once it
// published it): rank 0 reads no answer after deciding, so each rank
// deletes its own; the last one deletes the round's other keys, so a
// finished load leaves nothing in the job's store. Best effort, like
// ReleaseKeys.
void ReleaseLoadRound(CommitChannel* channel, const std::string& base, int world_size, int rank) {
  if (rank != 0) channel->Delete(base + "answer/" + std::to_string(rank)).IgnoreError();
  auto read = channel->Add(base + "read", 1);
  if (!read.ok() || *read < world_size) return;
  for (const char* key : {"decision", "answered", "bell", "read"}) {
    channel->Delete(base + key).IgnoreError();
  }
}

}  // namespace

Result<LoadResult> AgreeOnLoad(const CheckpointOptions& options, uint64_t load_number,
                               const LoadAttempt& attempt) {
  CommitChannel* channel = options.commit_channel;
  const std::chrono::milliseconds timeout = LoadTimeout(options);
  Clock::time_point round_start = Clock::now();
  Result<LoadResult> loaded = attempt(std::nullopt);
  std::vector<std::string> passed_over;  // steps this rank loaded that another could not
  for (uint64_t round = 0;; ++round) {
    const std::string base = ChannelPrefix(options) + "/load-" + std::to_string(load_number) +
                             "/round-" + std::to_string(round) + "/";
    const std::string decision_key = base + "decision";
    Result<LoadDecision> decided = Status::Internal("no decision");
    if (options.rank == 0) {
      decided = DecideLoadRound(channel, base, options.world_size, loaded,
                                round_start + timeout, timeout);
      json d = decided.ok() ? json{{"step", decided->step}, {"final", decided->final}}
                            : json{{"error", StatusJson(decided.status())}};
      // Best effort: a rank that cannot read it fails at its own deadline.
      channel->Set(decision_key, d.dump()).IgnoreError();
    } else {
      json mine = loaded.ok() ? json{{"step", loaded->step}}
                              : json{{"error", StatusJson(loaded.status())}};
      STINT_RETURN_IF_ERROR(channel->Set(base + "answer/" + std::to_string(options.rank),
                                         mine.dump()));
      CountAndRing(channel, base + "answered", base + "bell", options.world_size - 1, !loaded.ok());
      STINT_ASSIGN_OR_RETURN(auto found, channel->WaitFor(decision_key, round_start + 2 * timeout));
      if (!found) {
        return Status::DeadlineExceeded("rank 0 gave no decision on load " +
                                        std::to_string(load_number) + " within " +
                                        std::to_string((2 * timeout).count()) + " ms on " +
                                        channel->Describe());
      }
      decided = DecodeLoadDecision(*found, decision_key);
    }
    ReleaseLoadRound(channel, base, options.world_size, options.rank);
    if (!decided.ok()) return decided.status();
    if (decided->final) {
      if (!loaded.ok() || loaded->step != decided->step) {
        return Status::Internal("load " + std::to_string(load_number) + ": decided step " +
                                std::to_string(decided->step) + " as final, which this rank " +
                                "did not load");
      }
      loaded->skipped.insert(loaded->skipped.begin(), passed_over.begin(), passed_over.end());
      return loaded;
    }
    round_start = Clock::now();
    if (loaded.ok() && loaded->step != decided->step) {
      passed_over.insert(passed_over.end(), loaded->skipped.begin(), loaded->skipped.end());
      passed_over.push_back(StepDirName(loaded->step) + ": another rank could not load it");
      loaded = attempt(decided->step);
    }
  }
}

std::chrono::milliseconds CommitTimeout(const CheckpointOptions& options, double persist_seconds,
                                        uint64_t state_bytes) {
  if (options.commit_timeout.count() > 0) return options.commit_timeout;
  auto derived = std::chrono::milliseconds(static_cast<int64_t>(persist_seconds * 10'000));
  auto by_size = std::chrono::milliseconds(state_bytes / 10'000);  // 10 MB/s
  return std::max({std::chrono::milliseconds(std::chrono::seconds(60)), derived, by_size});
}

RankSave::RankSave(const CheckpointOptions& options, Env* env, uint64_t save_number, uint64_t step,
                   NodeRootLock* node_lock)
    : options_(options),
      env_(env),
      channel_(options.commit_channel),
      keys_(ChannelPrefix(options), save_number, step),
      step_(step),
      node_lock_(node_lock) {}

RankSave::~RankSave() { ReleaseKeys(); }

void RankSave::ReleaseKeys() {
  // A committed save's reports were all read (a commit reads every one):
  // each rank deletes its own, so the last rank's clean-up does not grow
  // with the job. Best effort: keys a failed count leaves behind go with
  // the job's store.
  if (committed_ && !committer()) channel_->Delete(keys_.report(options_.rank)).IgnoreError();
  if (keeper_) channel_->Delete(keys_.prepared(options_.rank)).IgnoreError();
  auto done = channel_->Add(keys_.done(), 1);
  if (!done.ok() || *done < options_.world_size) return;
  std::string tmp = tmp_name_;
  if (tmp.empty()) {  // this rank never learned it; nobody else deletes it
    auto published = channel_->Get(keys_.tmp());
    if (published.ok() && published->has_value()) {
      auto decoded = DecodePublishedTmp(**published, keys_.tmp());
      if (decoded.ok()) tmp = decoded->name;
    }
  }
  if (!tmp.empty()) {
    channel_->Delete(keys_.decision(tmp)).IgnoreError();
    channel_->Delete(keys_.prepare(tmp)).IgnoreError();
  }
  if (!committed_) {
    for (int r = 1; r < options_.world_size; ++r) channel_->Delete(keys_.report(r)).IgnoreError();
  }
  for (const std::string& key :
       {keys_.tmp(), keys_.abort(), keys_.reported(), keys_.bell(), keys_.abandoned(),
        keys_.prepared_count(), keys_.prepared_bell()}) {
    channel_->Delete(key).IgnoreError();
  }
  channel_->Delete(keys_.done()).IgnoreError();
}

void RankSave::Publish(const std::string& key, const std::string& value) {
  // Best effort: a rank that cannot reach the channel is a rank that did not
  // report, which the deadline covers.
  channel_->Set(key, value).IgnoreError();
}

void RankSave::Report(const RankReport& report) {
  Publish(keys_.report(options_.rank), EncodeRankReport(report));
  if (report.tmp.empty()) {
    // Before the committer's Start(), which clears the count and the bell.
    Publish(keys_.abandoned(), "1");
    Publish(keys_.bell(), "");
    return;
  }
  CountAndRing(channel_, keys_.reported(), keys_.bell(), options_.world_size - 1,
               !report.status.ok());
}

Result<std::string> RankSave::Start(std::chrono::milliseconds timeout) {
  const std::string what = "step " + std::to_string(step_);
  if (committer()) {
    const std::string name = TmpDirName(step_, RandomNonce());
    // Left by an earlier incarnation (counts too, or the last rank would
    // come early; a bell would ring at once).
    Status s = Status::OK();
    for (const std::string& key : {keys_.abort(), keys_.done(), keys_.reported(), keys_.bell(),
                                   keys_.prepared_count(), keys_.prepared_bell()}) {
      if (s.ok()) s = channel_->Delete(key);
    }
    if (s.ok()) s = env_->CreateDir(options_.root + "/" + name);
    // Before the name goes out: how a rank tells this directory from its
    // node's own (node_commit.h).
    if (s.ok()) s = LeaveCommitterMarker(env_, options_.root + "/" + name);
    // The save's one deadline goes with the tmp name: every rank measures it
    // from when it starts, none from its own persist time.
    deadline_ = Clock::now() + timeout;
    timeout_ = timeout;
    if (s.ok()) {
      s = channel_->Set(keys_.tmp(), json{{"tmp", name}, {"timeout_ms", timeout.count()}}.dump());
    }
    if (!s.ok()) {
      Abandon(s.WithContext("could not start " + what));
      return s;
    }
    tmp_name_ = name;
    return options_.root + "/" + name;
  }
  STINT_ASSIGN_OR_RETURN(auto found, channel_->WaitFor(keys_.tmp(), Clock::now() + timeout));
  if (!found) {
    Status s = Status::DeadlineExceeded("rank 0 (the committer) did not start " + what +
                                        " within " + std::to_string(timeout.count()) + " ms on " +
                                        channel_->Describe());
    Abandon(s);
    return s;
  }
  const Clock::time_point started = Clock::now();
  // An error here is the committer's: it could not start the save.
  STINT_ASSIGN_OR_RETURN(PublishedTmp published, DecodePublishedTmp(*found, keys_.tmp()));
  const std::string& name = published.name;
  if (ParseTmpDirStep(name) != step_ || name.find('/') != std::string::npos) {
    return Status::DataLoss(keys_.tmp() + ": '" + name.substr(0, 64) +
                            "' is not a tmp directory name of " + what);
  }
  // The committer decides by its start + timeout: waiting twice that for
  // its decision covers its commit and the clocks' different starts.
  timeout_ = std::chrono::milliseconds(published.timeout_ms);
  deadline_ = started + 2 * timeout_;
  tmp_name_ = name;
  auto place = EnterTmpDir(env_, options_.root + "/" + name);
  if (!place.ok()) {
    Abandon(place.status());
    return place.status();
  }
  node_local_ = *place == TmpPlace::kNodeLocal;
  return options_.root + "/" + name;
}

void RankSave::Abandon(const Status& why) {
  if (committer()) {
    const Status failed = why.WithContext("rank 0 failed its part");
    Publish(keys_.abort(), EncodeDecision(failed));
    // The ranks waiting for the tmp directory's name learn it there.
    if (tmp_name_.empty()) Publish(keys_.tmp(), json{{"error", StatusJson(failed)}}.dump());
  } else {
    Report(RankReport{options_.rank, options_.fencing_token, tmp_name_, why, {}, 0,
                      options_.node_id, node_local_});
  }
}

Status RankSave::Finish(const Status& persisted, const Manifest& part, double persist_seconds) {
  const auto persist_ms = static_cast<uint64_t>(persist_seconds * 1000);
  slowest_persist_seconds_ = persist_seconds;
  if (!committer()) {
    Report(RankReport{options_.rank, options_.fencing_token, tmp_name_, persisted, part,
                      persist_ms, options_.node_id, node_local_});
    // Its own error is this rank's outcome (the committer decides "aborted"
    // for everyone else when it reads the report), unless the save was
    // aborted already: then that is the cause (e.g. the tmp directory this
    // rank could not write into was removed because rank 0 failed).
    if (!persisted.ok()) {
      auto aborted = channel_->Get(keys_.abort());
      if (aborted.ok() && aborted->has_value()) {
        Status cause = DecodeDecision(**aborted, keys_.abort());
        if (!cause.ok()) return cause.WithContext(persisted.ToString() + "; the save was aborted");
      }
      return persisted;
    }
    if (node_local_) {
      auto keeper = TakePrepare();
      if (!keeper.ok()) {
        RemoveRecursively(env_, options_.root + "/" + tmp_name_).IgnoreError();
        return keeper.status();
      }
      keeper_ = *keeper;
    }
    Status decided = AwaitDecision(part);
    committed_ = decided.ok();
    if (keeper_) {
      Status settled = SettleNodePart(decided);
      leads_node_part_ = settled.ok();
      return settled;
    }
    return decided;
  }
  Status outcome = persisted.WithContext("rank 0 failed its part");
  if (persisted.ok()) {
    auto reports = GatherRankReports(
        channel_, keys_, options_.world_size,
        RankReport{0, options_.fencing_token, tmp_name_, persisted, part, persist_ms,
                   options_.node_id, false},
        deadline_);
    if (reports.ok()) {
      for (const RankReport& r : *reports) {
        slowest_persist_seconds_ = std::max(slowest_persist_seconds_, r.persist_ms / 1000.0);
      }
    }
    outcome = reports.ok() ? Commit(*reports, part) : reports.status();
  }
  if (!outcome.ok()) outcome = outcome.WithContext("step " + std::to_string(step_) + " not committed");
  // The decision goes out before the tmp directory: a rank still writing
  // into it then finds the cause ("rank 0 failed its part") when its write
  // fails, not only its own NotFound.
  Publish(keys_.decision(tmp_name_), EncodeDecision(outcome));
  if (!outcome.ok()) {
    // A rank that has not even started (not read the tmp name) learns it too,
    // and so do ranks on node-local roots waiting for the manifest.
    Publish(keys_.abort(), EncodeDecision(outcome));
    Publish(keys_.prepare(tmp_name_), EncodePrepareError(outcome));
    // A crash here: the next Open removes it.
    RemoveRecursively(env_, options_.root + "/" + tmp_name_).IgnoreError();
  }
  // The save's keys go once every rank is done with them (ReleaseKeys);
  // reports too when not committed (a rank may report after the gather gave up).
  committed_ = outcome.ok();
  return outcome;
}

Status RankSave::Commit(const std::vector<RankReport>& reports, const Manifest& part) {
  Manifest header = part;
  header.world_size = options_.world_size;
  STINT_ASSIGN_OR_RETURN(Manifest merged, MergeRankReports(header, reports));
  STINT_ASSIGN_OR_RETURN(NodePlan plan,
                         PlanNodeCommit(reports, options_.node_id, options_.incremental));
  if (plan.node_local) RecordFileNodes(reports, options_.node_id, &merged);
  const std::string manifest_bytes = EncodeManifest(merged);
  if (plan.node_local) STINT_RETURN_IF_ERROR(PrepareNodes(plan, manifest_bytes));
  leads_node_part_ = plan.node_local;
  auto guard = [&](uint64_t step) -> Status {
    STINT_RETURN_IF_ERROR(CheckReferencedFiles(env_, options_.root, merged));
    if (options_.token_guard) {
      for (const RankReport& r : reports) {
        STINT_RETURN_IF_ERROR(options_.token_guard(r.fencing_token)
                                  .WithContext("rank " + std::to_string(r.rank) + " (token " +
                                               std::to_string(r.fencing_token) + ")"));
      }
    }
    return options_.commit_guard ? options_.commit_guard(step) : Status::OK();
  };
  const std::string tmp_dir = options_.root + "/" + tmp_name_;
  STINT_RETURN_IF_ERROR(env_->RemoveFile(tmp_dir + "/" + kCommitterMarker));
  return CommitCheckpoint(env_, options_.root, tmp_dir, step_, manifest_bytes, guard);
}

Status RankSave::PrepareNodes(const NodePlan& plan, const std::string& manifest_bytes) {
  Publish(keys_.prepare(tmp_name_), EncodePrepare(manifest_bytes, plan));
  std::vector<std::string> keys;
  std::vector<std::string> nodes;
  for (const auto& [node, rank] : plan.keepers) {
    keys.push_back(keys_.prepared(rank));
    nodes.push_back(node);
  }
  // Half the save's timeout more than the reports had, still well inside
  // the others' wait for the decision (twice the timeout).
  const Deadline deadline = deadline_ + timeout_ / 2;
  STINT_ASSIGN_OR_RETURN(
      std::vector<size_t> missing,
      GatherKeys(channel_, keys_.prepared_bell(), false, keys, deadline,
                 [&](size_t i, const std::string& value) -> Result<bool> {
                   Status prepared = DecodeDecision(value, keys[i]);
                   if (!prepared.ok()) {
                     return prepared.WithContext("node '" + nodes[i] + "' could not prepare");
                   }
                   return true;
                 }));
  if (!missing.empty()) {
    return Status::DeadlineExceeded("node '" + nodes[missing[0]] + "' (its keeper, rank " +
                                    std::to_string(plan.keepers.at(nodes[missing[0]])) +
                                    ") did not prepare its part within the commit deadline on " +
                                    channel_->Describe());
  }
  return Status::OK();
}

Result<bool> RankSave::TakePrepare() {
  const std::string key = keys_.prepare(tmp_name_);
  STINT_ASSIGN_OR_RETURN(auto found, channel_->WaitFor(key, deadline_));
  if (!found) {
    return Status::DeadlineExceeded("rank 0 (the committer) sent no manifest for step " +
                                    std::to_string(step_) + " by the save's deadline on " +
                                    channel_->Describe() + "; not committed");
  }
  STINT_ASSIGN_OR_RETURN(Prepare prepare, DecodePrepare(*found, key));
  if (std::find(prepare.keepers.begin(), prepare.keepers.end(), options_.rank) ==
      prepare.keepers.end()) {
    return false;
  }
  const std::string tmp_dir = options_.root + "/" + tmp_name_;
  Status prepared = node_lock_ == nullptr
                        ? Status::Internal("a keeper without its node's lock holder")
                        : node_lock_->Acquire(env_, options_.root, options_.lock_wait, tmp_name_);
  if (prepared.ok()) {
    auto manifest = DecodeManifest(prepare.manifest_bytes, key);
    prepared = manifest.ok() ? PrepareNodePart(env_, tmp_dir, options_.node_id, *manifest,
                                               prepare.manifest_bytes)
                             : manifest.status();
  }
  Publish(keys_.prepared(options_.rank), EncodeDecision(prepared));
  CountAndRing(channel_, keys_.prepared_count(), keys_.prepared_bell(),
               static_cast<int>(prepare.keepers.size()), !prepared.ok());
  return true;
}

Status RankSave::SettleNodePart(const Status& decided) {
  const std::string tmp_dir = options_.root + "/" + tmp_name_;
  if (!decided.ok()) {
    RemoveRecursively(env_, tmp_dir).IgnoreError();
    return decided;
  }
  return PublishNodePart(env_, options_.root, tmp_dir, step_);
}

Status RankSave::AwaitDecision(const Manifest& part) {
  const std::string key = keys_.decision(tmp_name_);
  STINT_ASSIGN_OR_RETURN(auto found, channel_->WaitFor(key, deadline_));
  if (found) return DecodeDecision(*found, key);
  // The committer may have died between its rename and its decision: the
  // committed manifest, if it lists this rank's file as written, says so.
  const std::string dir = options_.root + "/" + StepDirName(step_);
  auto bytes = ReadFileToString(env_, dir + "/" + kManifestName);
  if (bytes.ok() && !part.files.empty()) {
    auto committed = DecodeManifest(*bytes, dir);
    const FileRecord* mine = committed.ok() ? committed->FindFile(part.files[0].name) : nullptr;
    if (mine != nullptr && mine->digest == part.files[0].digest &&
        mine->size == part.files[0].size) {
      return Status::OK();
    }
  }
  return Status::DeadlineExceeded("rank 0 (the committer) gave no decision on step " +
                                  std::to_string(step_) + " by the save's deadline on " +
                                  channel_->Describe() + "; not committed");
}

std::shared_ptr<const IncrementalBase> RankSaveCommit::CommittedBase(const Manifest& /*part*/) {
  auto base = IncrementalBase::Load(env_, options_.root, StepDirName(step_));
  if (!base.ok()) return nullptr;
  return std::move(*base);
}

}  // namespace stint
