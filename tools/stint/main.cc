// stint: look at and check checkpoints on disk.
//
//   stint ls <root> [--json]                  committed checkpoints and leftovers
//   stint inspect <dir-or-root> [--json] [--all-shards]
//                                             what one manifest records, with
//                                             each tensor's shard boxes
//   stint verify <dir-or-root> [--all]        full checksum pass, and that the
//                                             shards of each tensor cover it
//
// A root stands for the checkpoint LATEST names. Exit codes: 0 success, 1 a
// checkpoint failed to verify or could not be read, 2 usage error (bad flags,
// a path that is not a directory). Every error message comes from the runtime
// unchanged, so it names the file and the chunk.
//
// Only reads: nothing here writes, renames or cleans up, so it is safe to run
// next to a job that is saving into the same root.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/strings.h"
#include "checkpoint/commit.h"
#include "checkpoint/replica.h"
#include "slurm_command.h"
#include "format/manifest.h"
#include "format/shard_layout.h"
#include "objstore/object_store_env.h"
#include "stint/checkpoint_reader.h"
#include "stint/env.h"
#include "stint/status.h"

namespace stint {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// kInvalidArgument is what this file returns for a bad path; everything else
// means the checkpoint (or the disk) is at fault.
int ExitCodeFor(const Status& s) {
  if (s.ok()) return kExitOk;
  return s.code() == Code::kInvalidArgument ? kExitUsage : kExitFailed;
}

int Fail(const Status& s) {
  std::cerr << "stint: " << s.ToString() << "\n";
  return ExitCodeFor(s);
}

// The Env of `path`: an s3:// path's is the object store, configured the
// AWS way (AWS_ENDPOINT_URL, AWS_REGION, credentials) and made once; any
// other path's the local file system.
Result<Env*> EnvFor(const std::string& path) {
  if (!IsObjectStorePath(path)) return Env::Default();
  static Result<std::unique_ptr<ObjectStoreEnv>> store =
      ObjectStoreEnv::FromEnvironment(Env::Default());
  if (!store.ok()) return store.status();
  return static_cast<Env*>(store->get());
}

// Names may hold any bytes; replace invalid UTF-8 instead of throwing.
void PrintJson(const Json& j) {
  std::cout << j.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
}

std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string BaseName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "2024-05-01T12:00:00.123Z"; manifests record wall-clock milliseconds.
std::string UtcTime(int64_t unix_ms) {
  std::time_t secs = std::time_t(unix_ms / 1000);
  std::tm tm{};
  if (unix_ms < 0 || gmtime_r(&secs, &tm) == nullptr) return "-";
  char buf[80];  // fits any int fields, which keeps -Wformat-truncation quiet
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, int(unix_ms % 1000));
  return buf;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// Left-aligned columns, two spaces apart.
void PrintTable(const std::vector<std::vector<std::string>>& rows, const std::string& indent = "") {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    std::cout << line << "\n";
  }
}

// Bytes on disk below `path` (a checkpoint directory is flat, but a leftover
// may be anything).
Result<uint64_t> DiskUsage(Env* env, const std::string& path) {
  if (!env->IsDirectory(path)) {
    STINT_ASSIGN_OR_RETURN(auto file, env->NewRandomAccessFile(path, FileOptions{}));
    return file->Size();
  }
  STINT_ASSIGN_OR_RETURN(auto children, env->GetChildren(path));
  uint64_t total = 0;
  for (const auto& c : children) {
    STINT_ASSIGN_OR_RETURN(uint64_t n, DiskUsage(env, path + "/" + c));
    total += n;
  }
  return total;
}

Result<Manifest> LoadManifest(Env* env, const std::string& dir) {
  std::string path = dir + "/" + kManifestName;
  STINT_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(env, path));
  return DecodeManifest(bytes, path);
}

// A checkpoint directory as given, or the one a root's LATEST names. Without
// LATEST (a crash between the commit rename and the LATEST update) the newest
// committed step stands in, as Checkpointer::Load would pick it.
Result<std::string> ResolveCheckpointDir(Env* env, std::string path) {
  path = StripTrailingSlashes(path);
  if (!env->IsDirectory(path) && BaseName(path) == kManifestName && env->FileExists(path)) {
    size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
  }
  if (!env->IsDirectory(path)) return Status::InvalidArgument(path + ": not a directory");
  if (env->FileExists(path + "/" + kManifestName)) return path;
  STINT_ASSIGN_OR_RETURN(std::optional<std::string> latest, ReadLatest(env, path));
  if (latest) {
    std::string dir = path + "/" + *latest;
    if (!env->IsDirectory(dir)) {
      return Status::DataLoss(path + "/LATEST names " + *latest + ", which does not exist");
    }
    return dir;
  }
  STINT_ASSIGN_OR_RETURN(std::vector<uint64_t> steps, ListCheckpointSteps(env, path));
  if (steps.empty()) {
    return Status::NotFound(path +
                            ": no MANIFEST.json, no LATEST and no committed step-* directory");
  }
  std::cerr << "stint: " << path << " has no LATEST; using the newest committed "
            << StepDirName(steps.back()) << "\n";
  return path + "/" + StepDirName(steps.back());
}

// ---------------------------------------------------------------- ls

struct LsEntry {
  std::string dir;
  std::optional<uint64_t> step;
  // "committed", "corrupt" (manifest does not decode), "no-manifest" (a
  // step-* directory that was never committed) or "uncommitted" (.tmp-*).
  std::string state;
  bool latest = false;
  uint64_t size = 0;
  std::optional<size_t> tensors;
  std::optional<int64_t> created_unix_ms;
  std::string error;
};

int RunLs(const std::string& root_arg, bool json) {
  Result<Env*> env_of = EnvFor(root_arg);
  if (!env_of.ok()) return Fail(env_of.status());
  Env* env = *env_of;
  std::string root = StripTrailingSlashes(root_arg);
  if (!env->IsDirectory(root)) return Fail(Status::InvalidArgument(root + ": not a directory"));
  auto children = env->GetChildren(root);
  if (!children.ok()) return Fail(children.status());

  // LATEST problems are reported, not fatal: the point of ls is to look around.
  std::optional<std::string> latest;
  std::string latest_error;
  auto l = ReadLatest(env, root);
  if (l.ok()) {
    latest = *l;
  } else {
    latest_error = l.status().ToString();
  }

  std::vector<LsEntry> entries;
  for (const std::string& name : *children) {
    LsEntry e;
    e.dir = name;
    std::string path = root + "/" + name;
    bool is_tmp = name.compare(0, sizeof(kTmpPrefix) - 1, kTmpPrefix) == 0;
    if (is_tmp) {
      if (!env->IsDirectory(path)) continue;  // LATEST.tmp etc. are files, not checkpoints
      e.step = ParseTmpDirStep(name);
      e.state = "uncommitted";
    } else if ((e.step = ParseStepDirName(name)) && env->IsDirectory(path)) {
      if (!env->FileExists(path + "/" + kManifestName)) {
        e.state = "no-manifest";
      } else if (auto m = LoadManifest(env, path); m.ok()) {
        e.state = "committed";
        e.tensors = m->tensors.size();
        e.created_unix_ms = m->created_unix_ms;
      } else {
        e.state = "corrupt";
        e.error = m.status().ToString();
      }
    } else {
      continue;
    }
    e.latest = latest && *latest == name;
    auto size = DiskUsage(env, path);
    if (size.ok()) {
      e.size = *size;
    } else if (e.error.empty()) {
      e.error = size.status().ToString();  // e.g. a leftover removed while we looked
    }
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const LsEntry& a, const LsEntry& b) {
    if (a.step != b.step) return !b.step || (a.step && *a.step < *b.step);
    return a.dir < b.dir;
  });
  bool latest_found = !latest || std::any_of(entries.begin(), entries.end(),
                                             [](const LsEntry& e) { return e.latest; });
  if (latest && !latest_found) latest_error = "LATEST names " + *latest + ", which does not exist";

  if (json) {
    Json out;
    out["root"] = root;
    out["latest"] = latest ? Json(*latest) : Json(nullptr);
    if (!latest_error.empty()) out["latest_error"] = latest_error;
    Json list = Json::array();
    for (const auto& e : entries) {
      Json j;
      j["dir"] = e.dir;
      j["step"] = e.step ? Json(*e.step) : Json(nullptr);
      j["state"] = e.state;
      j["latest"] = e.latest;
      j["size_bytes"] = e.size;
      j["tensors"] = e.tensors ? Json(*e.tensors) : Json(nullptr);
      j["created_unix_ms"] = e.created_unix_ms ? Json(*e.created_unix_ms) : Json(nullptr);
      if (!e.error.empty()) j["error"] = e.error;
      list.push_back(std::move(j));
    }
    out["checkpoints"] = std::move(list);
    PrintJson(out);
    return kExitOk;
  }

  if (entries.empty()) {
    std::cout << root << ": no checkpoints\n";
  } else {
    std::vector<std::vector<std::string>> rows = {
        {"", "STEP", "DIR", "STATE", "SIZE", "TENSORS", "CREATED (UTC)"}};
    for (const auto& e : entries) {
      rows.push_back({e.latest ? "*" : "", e.step ? std::to_string(*e.step) : "-", e.dir, e.state,
                      HumanBytes(e.size), e.tensors ? std::to_string(*e.tensors) : "-",
                      e.created_unix_ms ? UtcTime(*e.created_unix_ms) : "-"});
    }
    PrintTable(rows);
    size_t committed = std::count_if(entries.begin(), entries.end(),
                                     [](const LsEntry& e) { return e.state == "committed"; });
    std::cout << committed << " committed, " << entries.size() - committed << " other; "
              << "* = LATEST (" << (latest ? *latest : "none") << ")\n";
  }
  for (const auto& e : entries) {
    if (!e.error.empty()) std::cout << e.dir << ": " << e.error << "\n";
  }
  if (!latest_error.empty()) std::cout << "warning: " << latest_error << "\n";
  return kExitOk;
}

// ---------------------------------------------------------------- inspect

struct ChunkStats {
  uint64_t raw = 0, stored = 0, chunks = 0;
  std::map<std::string, uint64_t> codecs;  // codec name -> chunk count

  void Add(const std::vector<ChunkRecord>& list) {
    for (const auto& c : list) {
      raw += c.raw_len;
      stored += c.stored_len;
      ++chunks;
      ++codecs[CodecName(c.codec)];
    }
  }
  // raw / stored; 1 for an empty entry so "no data" does not read as a gain.
  double Ratio() const { return stored == 0 ? 1.0 : double(raw) / double(stored); }
  std::string CodecMix() const {
    std::string out;
    for (const auto& [name, n] : codecs)
      out += (out.empty() ? "" : ", ") + name + " " + std::to_string(n);
    return out;
  }
  Json CodecJson() const {
    Json j = Json::object();
    for (const auto& [name, n] : codecs) j[name] = n;
    return j;
  }
};

// A tensor with more shards than this gets one summary line in `inspect`
// unless --all-shards asks for every box.
constexpr size_t kShardLinesPerTensor = 8;

uint64_t RawBytes(const std::vector<ChunkRecord>& chunks) {
  uint64_t n = 0;
  for (const auto& c : chunks) n += c.raw_len;
  return n;
}

// "64 shards in 8 files, split along dims 0 and 1, each [128, 4096]": what a
// long list of boxes has in common.
std::string ShardSummary(const TensorRecord& t) {
  std::vector<std::string> files;
  std::vector<size_t> split;
  bool same_extents = true;
  for (const auto& s : t.shards) {
    if (std::find(files.begin(), files.end(), s.file) == files.end()) files.push_back(s.file);
    same_extents = same_extents && s.extents == t.shards[0].extents;
  }
  for (size_t d = 0; d < t.global_shape.size(); ++d) {
    for (const auto& s : t.shards) {
      if (d < s.offsets.size() && s.offsets[d] != t.shards[0].offsets[d]) {
        split.push_back(d);
        break;
      }
    }
  }
  std::string out = std::to_string(t.shards.size()) + " shards in " + std::to_string(files.size()) +
                    (files.size() == 1 ? " file" : " files");
  if (!split.empty()) {
    out += ", split along dim" + std::string(split.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < split.size(); ++i) {
      out += (i == 0 ? "" : i + 1 == split.size() ? " and " : ", ") + std::to_string(split[i]);
    }
  }
  if (same_extents) out += ", each " + ShapeString(t.shards[0].extents);
  return out + " (--all-shards lists them)";
}

std::string RatioString(double r) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2fx", r);
  return buf;
}

int RunInspect(const std::string& path, bool json, bool all_shards) {
  Result<Env*> env_of = EnvFor(path);
  if (!env_of.ok()) return Fail(env_of.status());
  Env* env = *env_of;
  auto dir = ResolveCheckpointDir(env, path);
  if (!dir.ok()) return Fail(dir.status());
  auto m = LoadManifest(env, *dir);
  if (!m.ok()) return Fail(m.status());
  const std::string version =
      std::to_string(m->version_major) + "." + std::to_string(m->version_minor);

  if (json) {
    Json out;
    out["dir"] = *dir;
    out["job_id"] = m->job_id;
    out["step"] = m->step;
    out["fencing_token"] = m->fencing_token;
    out["world_size"] = m->world_size;
    out["format_version"] = version;
    out["chunk_size"] = m->chunk_size;
    out["created_unix_ms"] = m->created_unix_ms;
    Json files = Json::array();
    for (const auto& f : m->files) {
      files.push_back({{"name", f.name}, {"size_bytes", f.size}, {"digest", HashToHex(f.digest)}});
    }
    out["files"] = std::move(files);
    Json tensors = Json::array();
    for (const auto& t : m->tensors) {
      ChunkStats st;
      Json layout = Json::array();
      for (const auto& s : t.shards) {
        st.Add(s.chunks);
        ChunkStats shard;
        shard.Add(s.chunks);
        layout.push_back({{"offsets", s.offsets},
                          {"extents", s.extents},
                          {"file", s.file},
                          {"raw_bytes", shard.raw},
                          {"stored_bytes", shard.stored}});
      }
      tensors.push_back({{"name", t.name},
                         {"dtype", DTypeName(t.dtype)},
                         {"shape", t.global_shape},
                         {"shards", t.shards.size()},
                         {"chunks", st.chunks},
                         {"raw_bytes", st.raw},
                         {"stored_bytes", st.stored},
                         {"codecs", st.CodecJson()},
                         {"compression_ratio", st.Ratio()},
                         {"shard_layout", std::move(layout)}});
    }
    out["tensors"] = std::move(tensors);
    Json blobs = Json::array();
    for (const auto& b : m->blobs) {
      ChunkStats st;
      st.Add(b.chunks);
      blobs.push_back({{"name", b.name},
                       {"file", b.file},
                       {"chunks", st.chunks},
                       {"raw_bytes", st.raw},
                       {"stored_bytes", st.stored}});
    }
    out["blobs"] = std::move(blobs);
    PrintJson(out);
    return kExitOk;
  }

  PrintTable({{"checkpoint", *dir},
              {"job id", m->job_id.empty() ? "-" : m->job_id},
              {"step", std::to_string(m->step)},
              {"fencing token", std::to_string(m->fencing_token)},
              {"world size", std::to_string(m->world_size)},
              {"format version", version},
              {"chunk size", HumanBytes(m->chunk_size)},
              {"created (UTC)", UtcTime(m->created_unix_ms)}});

  std::cout << "\nfiles (" << m->files.size() << ")\n";
  std::vector<std::vector<std::string>> rows = {{"NAME", "SIZE", "DIGEST"}};
  for (const auto& f : m->files) rows.push_back({f.name, HumanBytes(f.size), HashToHex(f.digest)});
  PrintTable(rows, "  ");

  std::cout << "\ntensors (" << m->tensors.size() << ")\n";
  rows = {{"NAME", "DTYPE", "SHAPE", "SHARDS", "BYTES", "STORED", "CODECS", "RATIO"}};
  ChunkStats all;
  for (const auto& t : m->tensors) {
    ChunkStats st;
    for (const auto& s : t.shards) {
      st.Add(s.chunks);
      all.Add(s.chunks);
    }
    rows.push_back({t.name, DTypeName(t.dtype), ShapeString(t.global_shape),
                    std::to_string(t.shards.size()), HumanBytes(st.raw), HumanBytes(st.stored),
                    st.CodecMix(), RatioString(st.Ratio())});
  }
  PrintTable(rows, "  ");

  // One line per shard box: where each part of a tensor lives.
  std::cout << "\nshards\n";
  for (const auto& t : m->tensors) {
    std::cout << "  " << t.name << " " << ShapeString(t.global_shape) << "\n";
    if (t.shards.size() > kShardLinesPerTensor && !all_shards) {
      std::cout << "    " << ShardSummary(t) << "\n";
      continue;
    }
    rows.clear();
    for (const auto& s : t.shards) {
      rows.push_back(
          {BoxString(ShardBox(s)), ShardFileLabel(s.file), HumanBytes(RawBytes(s.chunks))});
    }
    PrintTable(rows, "    ");
  }

  std::cout << "\nblobs (" << m->blobs.size() << ")\n";
  rows = {{"NAME", "BYTES", "STORED"}};
  for (const auto& b : m->blobs) {
    ChunkStats st;
    st.Add(b.chunks);
    all.Add(b.chunks);
    rows.push_back({b.name, HumanBytes(st.raw), HumanBytes(st.stored)});
  }
  PrintTable(rows, "  ");
  std::cout << "\ntotal " << HumanBytes(all.raw) << " in " << all.chunks << " chunks, "
            << HumanBytes(all.stored) << " stored (" << RatioString(all.Ratio()) << ")\n";
  return kExitOk;
}

// ---------------------------------------------------------------- verify

// Every tensor's shards cover it exactly. A manifest with overlapping shards
// does not open at all; one with a gap opens (the covered parts load), so
// this is the check that finds it.
Status CheckCoverage(const CheckpointReader& reader) {
  for (const TensorInfo& info : reader.tensors()) {
    TensorRecord t{info.name, info.dtype, info.shape, {}};
    for (const ShardInfo& s : info.shard_boxes) {
      t.shards.push_back(ShardRecord{s.offsets, s.extents, s.file, {}});
    }
    STINT_RETURN_IF_ERROR(CheckShardLayout(t, reader.dir()));
  }
  return Status::OK();
}

// One line per checkpoint on stdout, pass or fail, so a log of `verify --all`
// reads top to bottom.
// A node-local root (format 1.2) holds its node's files of a step; the
// rest are on the nodes the manifest names. Verifies those here and names
// where the others live; nullopt for a checkpoint with every file here.
std::optional<bool> VerifyNodePart(const std::string& dir) {
  Result<Env*> env_of = EnvFor(dir);
  if (!env_of.ok()) return std::nullopt;  // VerifyOne's reader names it
  Env* env = *env_of;
  auto bytes = ReadFileToString(env, dir + "/" + kManifestName);
  if (!bytes.ok()) return std::nullopt;
  auto m = DecodeManifest(*bytes, dir + "/" + kManifestName);
  if (!m.ok()) return std::nullopt;
  std::set<std::string> here;
  std::string elsewhere;
  for (const FileRecord& f : m->files) {
    if (env->FileExists(dir + "/" + f.name)) {
      here.insert(f.name);
    } else if (!f.node.empty()) {
      elsewhere += (elsewhere.empty() ? "" : ", ") + f.name + " on node '" + f.node + "'";
    } else {
      return std::nullopt;  // missing with no node: the reader names the damage
    }
  }
  if (elsewhere.empty()) return std::nullopt;
  Status s = VerifyStoredChunks(env, dir, *m, here);
  const std::string name = BaseName(dir);
  if (!s.ok()) {
    std::cout << "FAILED " << name << ": " << s.ToString() << "\n";
    return false;
  }
  std::cout << "verified " << name << " (this node's part): " << here.size() << " of "
            << m->files.size() << " files; elsewhere: " << elsewhere << "\n";
  return true;
}

bool VerifyOne(const std::string& dir) {
  if (std::optional<bool> part = VerifyNodePart(dir)) return *part;
  const std::string name = BaseName(dir);
  Result<Env*> env_of = EnvFor(dir);
  if (!env_of.ok()) {
    std::cout << "FAILED " << name << ": " << env_of.status().ToString() << "\n";
    return false;
  }
  ReaderOptions options;
  options.env = *env_of;
  auto reader = CheckpointReader::Open(dir, options);
  Result<VerifyReport> report =
      reader.ok() ? (*reader)->Verify() : Result<VerifyReport>(reader.status());
  Status coverage = report.ok() ? CheckCoverage(**reader) : Status::OK();
  if (!report.ok() || !coverage.ok()) {
    std::cout << "FAILED " << name << ": " << (report.ok() ? coverage : report.status()).ToString()
              << "\n";
    return false;
  }
  std::cout << "verified " << name << ": " << report->files << " files, " << report->chunks
            << " chunks, " << HumanBytes(report->stored_bytes) << "; shards cover all "
            << (*reader)->tensors().size() << " tensors\n";
  return true;
}

int RunVerify(const std::string& path_arg, bool all) {
  Result<Env*> env_of = EnvFor(path_arg);
  if (!env_of.ok()) return Fail(env_of.status());
  Env* env = *env_of;
  if (!all) {
    auto dir = ResolveCheckpointDir(env, path_arg);
    if (!dir.ok()) return Fail(dir.status());
    return VerifyOne(*dir) ? kExitOk : kExitFailed;
  }
  std::string root = StripTrailingSlashes(path_arg);
  if (!env->IsDirectory(root)) return Fail(Status::InvalidArgument(root + ": not a directory"));
  if (env->FileExists(root + "/" + kManifestName)) {
    return Fail(Status::InvalidArgument(root + " is a checkpoint directory; --all takes a root"));
  }
  auto steps = ListCheckpointSteps(env, root);
  if (!steps.ok()) return Fail(steps.status());
  if (steps->empty()) return Fail(Status::NotFound(root + ": no committed checkpoint to verify"));
  size_t failed = 0;
  for (uint64_t step : *steps) {
    if (!VerifyOne(root + "/" + StepDirName(step))) ++failed;
  }
  std::cout << steps->size() - failed << " of " << steps->size() << " checkpoints verified";
  if (failed > 0) std::cout << ", " << failed << " failed";
  std::cout << "\n";
  return failed == 0 ? kExitOk : kExitFailed;
}

}  // namespace
}  // namespace stint

int main(int argc, char** argv) {
  // `stint slurm ...` takes sbatch's options and a command after `--`: its
  // own parser (slurm_command.h), not CLI11's.
  if (argc >= 2 && std::string(argv[1]) == "slurm") {
    const std::vector<std::string> rest(argv + std::min(argc, 3), argv + argc);
    const std::string sub = argc >= 3 ? argv[2] : "";
    if (sub == "submit") return stint::RunSlurmSubmit(rest);
    if (sub == "status") return stint::RunSlurmStatus(rest);
    std::cerr << "usage: stint slurm submit [OPTIONS] -- COMMAND [ARG ...]\n"
                 "       stint slurm status JOB [--root DIR]\n";
    return stint::kExitUsage;
  }
  CLI::App app{"stint: list, inspect and verify stint checkpoints; submit and follow Slurm jobs "
               "(stint slurm submit|status)"};
  app.require_subcommand(1);
  std::string path;
  bool json = false, all = false, all_shards = false;

  CLI::App* ls = app.add_subcommand("ls", "List the checkpoints and leftovers in a root");
  ls->add_option("root", path, "Checkpoint root (holds LATEST and step-* directories)")->required();
  ls->add_flag("--json", json, "Machine-readable output");

  CLI::App* inspect = app.add_subcommand("inspect", "Show what a checkpoint's manifest records");
  inspect->add_option("path", path, "Checkpoint directory, or a root (meaning its LATEST)")
      ->required();
  inspect->add_flag("--json", json, "Machine-readable output");
  inspect->add_flag("--all-shards", all_shards,
                    "List every shard box, also of tensors with more than 8 shards");

  CLI::App* verify = app.add_subcommand(
      "verify", "Check every chunk checksum and file digest, and that shards cover each tensor");
  verify->add_option("path", path, "Checkpoint directory, or a root (meaning its LATEST)")
      ->required();
  verify->add_flag("--all", all, "Verify every committed checkpoint in the root");

  // CLI11 reports parse errors by throwing; this is the only place they are
  // caught, and every one becomes exit code 2.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : stint::kExitUsage;
  }
  if (ls->parsed()) return stint::RunLs(path, json);
  if (inspect->parsed()) return stint::RunInspect(path, json, all_shards);
  return stint::RunVerify(path, all);
}
