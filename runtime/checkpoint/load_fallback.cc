#include "checkpoint/load_fallback.h"

#include <algorithm>
#include <cerrno>
#include <map>
#include <utility>

#include "checkpoint/commit.h"
#include "checkpoint/device_load.h"
#include "checkpoint/rank_commit.h"
#include "format/manifest.h"

namespace stint {
namespace {

// Why a checkpoint did not load, which decides what Load does next.
enum class LoadFailure {
  kDamage,      // its bytes are wrong: try an older one; Quarantine may move it
  kUnreadable,  // an I/O error, or a format version this build does not know:
                // try an older one, and leave it where it is
  kCaller,      // the destinations do not match it: straight back to the caller
};

LoadFailure ClassifyLoadFailure(const Status& s) {
  switch (s.code()) {
    case Code::kDataLoss:
      return LoadFailure::kDamage;
    case Code::kUnimplemented:
    case Code::kIoError:
    case Code::kPermissionDenied:
      return LoadFailure::kUnreadable;
    default:
      return LoadFailure::kCaller;
  }
}

}  // namespace

bool FallbackLoader::SpansNodes(const std::string& dir) const {
  auto bytes = ReadFileToString(tier1_env_, dir + "/" + kManifestName);
  if (!bytes.ok()) return false;
  auto m = DecodeManifest(*bytes, dir);
  if (!m.ok()) return false;
  for (const FileRecord& f : m->files) {
    if (!f.node.empty()) return true;
  }
  return false;
}

Result<LoadResult> FallbackLoader::Load(const DestPlanner& planner, const LoadOptions& options) {
  if (options_.world_size == 1) return LoadNewest(planner, options);
  // Every rank must resume from the same step: a rank whose newest step
  // does not load (damage it alone read) or is missing takes the others
  // back to the newest step every rank loads (AgreeOnLoad).
  const uint64_t number = loads_started_++;
  return AgreeOnLoad(options_, number, [&](std::optional<uint64_t> at_most) {
    return at_most ? LoadAtMost(planner, options, *at_most) : LoadNewest(planner, options);
  });
}

Result<LoadResult> FallbackLoader::LoadAtMost(const DestPlanner& planner,
                                              const LoadOptions& options, uint64_t at_most) {
  STINT_ASSIGN_OR_RETURN(std::vector<uint64_t> steps,
                         ListCheckpointSteps(tier1_env(), options_.root));
  if (!options_.replica_root.empty()) {
    auto replicated = ListCheckpointSteps(options_.replica_env, options_.replica_root);
    if (replicated.ok()) steps.insert(steps.end(), replicated->begin(), replicated->end());
  }
  if (options.step) steps = {*options.step};
  std::sort(steps.begin(), steps.end(), [](uint64_t a, uint64_t b) { return a > b; });
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  std::vector<std::string> skipped;
  for (uint64_t step : steps) {
    if (step > at_most) continue;
    LoadOptions one = options;
    one.step = step;
    auto loaded = LoadNewest(planner, one);
    if (loaded.ok()) {
      loaded->skipped.insert(loaded->skipped.begin(), skipped.begin(), skipped.end());
      return loaded;
    }
    if (ClassifyLoadFailure(loaded.status()) == LoadFailure::kCaller) return loaded.status();
    skipped.push_back(StepDirName(step) + ": " + loaded.status().ToString());
  }
  std::string why;
  for (const auto& s : skipped) why += "\n  " + s;
  return Status::DataLoss(options_.root + ": no checkpoint at or before step " +
                          std::to_string(at_most) + " loads and verifies:" + why);
}

Result<LoadResult> FallbackLoader::LoadNewest(const DestPlanner& planner,
                                              const LoadOptions& options) {
  LoadResult result;
  STINT_ASSIGN_OR_RETURN(std::vector<Candidate> candidates, Candidates(options, &result));
  if (candidates.empty()) {
    if (options.step) {
      return Status::NotFound(options_.root + ": no checkpoint " + StepDirName(*options.step) +
                              " to load" + (tiered() ? " on any tier" : ""));
    }
    return Status::NotFound(options_.root + ": no committed checkpoint to load");
  }
  Status last;
  for (const auto& c : candidates) {
    Status loaded = LoadOne(c, planner, options, &result);
    if (loaded.ok()) return result;
    last = loaded;
    const LoadFailure failure = ClassifyLoadFailure(loaded);
    // One asked-for step in one tier: its own error. Otherwise the list.
    if (failure == LoadFailure::kCaller || (options.step && candidates.size() == 1)) {
      return loaded;
    }
    // Reported, never silent; only damage is offered to Quarantine.
    std::string line = (tiered() ? "[tier " + std::to_string(c.tier) + "] " : std::string()) +
                       c.name + ": " + loaded.ToString();
    if (loaded.code() == Code::kUnimplemented) {
      line += " (written by a newer stint? left in place, never quarantined or deleted)";
    } else if (failure == LoadFailure::kUnreadable) {
      line += " (left in place)";
    }
    result.skipped.push_back(std::move(line));
    if (failure == LoadFailure::kDamage) result.skipped_steps.push_back(c.step);
  }
  std::string why;
  for (const auto& s : result.skipped) why += "\n  " + s;
  // Damage anywhere is data loss; otherwise what stopped the last one
  // (e.g. only a newer format's checkpoints: kUnimplemented).
  return Status(result.skipped_steps.empty() ? last.code() : Code::kDataLoss,
                options_.root + ": no checkpoint loads and verifies:" + why);
}

Result<std::vector<FallbackLoader::Candidate>> FallbackLoader::Candidates(
    const LoadOptions& options, LoadResult* result) {
  Env* const env = tier1_env();
  std::vector<Candidate> candidates;
  auto wanted = [&](uint64_t step) { return !options.step || *options.step == step; };
  if (auto image = memory_->image(); image != nullptr && wanted(image->step())) {
    candidates.push_back(Candidate{0, image->step(), StepDirName(image->step()), image});
  }
  if (options.step) {
    // A step that is not there is not found, not damaged.
    if (env->FileExists(options_.root + "/" + StepDirName(*options.step))) {
      candidates.push_back(Candidate{1, *options.step, StepDirName(*options.step), nullptr});
    }
  } else {
    // The rename is the commit point; LATEST may lag it by one crash, so it
    // names a candidate but does not outrank a newer one.
    STINT_ASSIGN_OR_RETURN(auto steps, ListCheckpointSteps(env, options_.root));
    for (uint64_t st : steps) candidates.push_back(Candidate{1, st, StepDirName(st), nullptr});
    auto latest = ReadLatest(env, options_.root);
    if (latest.ok() && latest->has_value() &&
        std::find(steps.begin(), steps.end(), *ParseStepDirName(**latest)) == steps.end()) {
      // Vanished: tried first, and reported as skipped.
      candidates.push_back(Candidate{1, *ParseStepDirName(**latest), **latest, nullptr});
    }
  }
  if (!options_.replica_root.empty()) {
    auto steps = ListCheckpointSteps(options_.replica_env, options_.replica_root);
    if (steps.ok()) {
      for (uint64_t st : *steps) {
        if (wanted(st)) candidates.push_back(Candidate{2, st, StepDirName(st), nullptr});
      }
    } else {
      result->skipped.push_back("[tier 2] " + options_.replica_root + ": " +
                                steps.status().ToString());
    }
  }
  // Newest first; for one step, memory before root before replica.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) {
                     return a.step != b.step ? a.step > b.step : a.tier < b.tier;
                   });
  return candidates;
}

Status FallbackLoader::LoadOne(const Candidate& c, const DestPlanner& planner,
                               const LoadOptions& options, LoadResult* result) {
  ReaderOptions ro;
  ro.env = c.tier == 2 ? options_.replica_env : tier1_env();
  ro.io_engine = options_.io_engine;
  if (c.tier == 1 && tier1_env_ != nullptr && SpansNodes(options_.root + "/" + c.name)) {
    // Files on other nodes are ranged reads over the network, which the
    // POSIX engine's threads keep several of in flight (io_uring's path for
    // a file without a descriptor reads one at a time).
    ro.io_engine = "posix";
  }
  ro.direct_io = options_.direct_io;
  ro.queue_depth = options_.io_queue_depth;
  const std::string dir = c.tier == 0   ? c.memory->dir()
                          : c.tier == 2 ? options_.replica_root + "/" + c.name
                                        : options_.root + "/" + c.name;
  auto opened = c.tier == 0 ? c.memory->OpenReader(ro) : CheckpointReader::Open(dir, ro);
  if (!opened.ok()) {
    // LATEST naming a vanished directory, or a step-* entry that is a
    // file, is damage too.
    if (opened.status().code() == Code::kNotFound || opened.status().sys_errno() == ENOTDIR)
      return Status::DataLoss(opened.status().message());
    return opened.status();
  }
  std::unique_ptr<CheckpointReader> reader = std::move(*opened);
  if (options.verify_all) STINT_RETURN_IF_ERROR(reader->Verify().status());
  STINT_ASSIGN_OR_RETURN(auto dests, planner(*reader));
  STINT_RETURN_IF_ERROR(
      ReadIntoDests(*reader, dests, copier_, options_.device_load_bytes, options_.block_timeout));
  std::map<std::string, std::string> blobs;
  for (const auto& name : reader->blob_names()) {
    STINT_ASSIGN_OR_RETURN(blobs[name], reader->ReadBlob(name));
  }
  result->blobs = BlobsForRank(std::move(blobs), options_.rank, reader->world_size());
  result->step = reader->step();
  result->tier = c.tier;
  result->dir = dir;
  return Status::OK();
}

}  // namespace stint
