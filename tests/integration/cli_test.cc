// The real `stint` binary against real checkpoints: ls, inspect, verify, and
// verify after a flipped byte. Runs the binary as a child process because the
// exit code and the printed text are the interface under test.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/commit.h"
#include "checkpoint/save_times.h"
#include "format/manifest.h"
#include "stint/checkpointer.h"
#include "util/status_matchers.h"
#include "util/subprocess.h"
#include "util/checkpoint_checks.h"
#include "util/temp_dir.h"

#ifndef STINT_CLI_PATH
#error "STINT_CLI_PATH must name the stint binary (see cli_tests.cmake)"
#endif

namespace stint {
namespace {

using json = nlohmann::json;

RunResult RunCli(const std::vector<std::string>& args, bool with_stderr = true) {
  return RunProgram(STINT_CLI_PATH, args, with_stderr);
}

json ParseJson(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON:\n" << text;
  return j;
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// The line of `text` that contains `needle`, or "".
std::string LineWith(const std::string& text, const std::string& needle) {
  size_t pos = text.find(needle);
  if (pos == std::string::npos) return "";
  size_t begin = text.rfind('\n', pos);
  begin = begin == std::string::npos ? 0 : begin + 1;
  size_t end = text.find('\n', pos);
  return text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.Sub("ckpt");
    CheckpointOptions o;
    o.root = root_;
    o.job_id = "job-cli";
    o.fencing_token = 5;
    o.chunk_size = 16 * 1024;  // several chunks per tensor
    o.compress = true;
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    weights_.resize(300 * 100);
    for (auto& x : weights_) x = normal(rng);
    zeros_.assign(64 * 1024, 0.0f);  // compresses well: a ratio to look for
    counters_ = {1, 2, 3};
    auto ckpt = Checkpointer::Open(o);
    ASSERT_OK(ckpt);
    for (uint64_t step : {1, 2}) {
      State s;
      s.tensors.push_back({"layer.w", DType::kFloat32, {300, 100}, {}, {}, weights_.data()});
      s.tensors.push_back({"zeros", DType::kFloat32, {64, 1024}, {}, {}, zeros_.data()});
      s.tensors.push_back({"counters", DType::kInt64, {3}, {}, {}, counters_.data()});
      s.blobs["rng"] = "mt19937-state";
      auto h = (*ckpt)->Save(step, s);
      ASSERT_OK(h);
      ASSERT_OK(h->durable.get());
    }
    step2_ = root_ + "/" + StepDirName(2);
  }

  Manifest ReadManifest(const std::string& dir) {
    auto bytes = ReadFileToString(Env::Default(), dir + "/" + kManifestName);
    EXPECT_OK(bytes);
    auto m = DecodeManifest(bytes.ok() ? *bytes : "", dir);
    EXPECT_OK(m);
    return m.ok() ? *m : Manifest{};
  }

  TempDir dir_;
  std::string root_, step2_;
  std::vector<float> weights_, zeros_;
  std::vector<int64_t> counters_;
};

TEST_F(CliTest, LsListsCommittedAndUncommitted) {
  // A save interrupted by a crash leaves one of these behind.
  ASSERT_OK(Env::Default()->CreateDir(root_ + "/" + TmpDirName(3, 0xabc)));
  ASSERT_OK(WriteStringToFileSync(Env::Default(),
                                  root_ + "/" + TmpDirName(3, 0xabc) + "/rank-00000.stint",
                                  std::string(5000, 'x')));
  RunResult r = RunCli({"ls", root_});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string l1 = LineWith(r.output, "step-00000001"), l2 = LineWith(r.output, "step-00000002");
  std::string lt = LineWith(r.output, TmpDirName(3, 0xabc));
  EXPECT_TRUE(Contains(l1, "committed")) << r.output;
  EXPECT_TRUE(Contains(l2, "committed")) << r.output;
  EXPECT_EQ(l2.rfind("*", 0), 0u) << "LATEST mark missing:\n" << r.output;
  EXPECT_NE(l1.rfind("*", 0), 0u) << r.output;
  EXPECT_TRUE(Contains(lt, "uncommitted")) << r.output;
  EXPECT_TRUE(Contains(lt, "4.88 KiB")) << r.output;
  EXPECT_TRUE(Contains(r.output, "2 committed, 1 other")) << r.output;

  r = RunCli({"ls", root_ + "/", "--json"}, /*with_stderr=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json j = ParseJson(r.output);
  EXPECT_EQ(j["latest"], "step-00000002");
  ASSERT_EQ(j["checkpoints"].size(), 3u) << j.dump(2);
  const json& c1 = j["checkpoints"][0];
  const json& c2 = j["checkpoints"][1];
  const json& tmp = j["checkpoints"][2];
  EXPECT_EQ(c1["dir"], "step-00000001");
  EXPECT_EQ(c1["step"], 1);
  EXPECT_EQ(c1["state"], "committed");
  EXPECT_EQ(c1["latest"], false);
  EXPECT_EQ(c1["tensors"], 3);
  EXPECT_EQ(c2["dir"], "step-00000002");
  EXPECT_EQ(c2["latest"], true);
  EXPECT_GT(c2["created_unix_ms"].get<int64_t>(), 1600000000000);
  // Size on disk: the data file plus the manifest.
  Manifest m = ReadManifest(step2_);
  auto manifest_bytes = ReadFileToString(Env::Default(), step2_ + "/" + kManifestName);
  ASSERT_OK(manifest_bytes);
  EXPECT_EQ(c2["size_bytes"].get<uint64_t>(), m.files[0].size + manifest_bytes->size());
  EXPECT_EQ(tmp["dir"], TmpDirName(3, 0xabc));
  EXPECT_EQ(tmp["step"], 3);
  EXPECT_EQ(tmp["state"], "uncommitted");
  EXPECT_EQ(tmp["size_bytes"], 5000);
  EXPECT_TRUE(tmp["tensors"].is_null());
}

TEST_F(CliTest, LsEmptyAndMissingRoot) {
  RunResult r = RunCli({"ls", dir_.path()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "no checkpoints")) << r.output;
  r = RunCli({"ls", dir_.Sub("nope")});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "not a directory")) << r.output;
}

TEST_F(CliTest, InspectJson) {
  Manifest m = ReadManifest(step2_);
  // A root means the checkpoint LATEST names.
  RunResult r = RunCli({"inspect", root_, "--json"}, /*with_stderr=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json j = ParseJson(r.output);
  EXPECT_EQ(j["dir"], step2_);
  EXPECT_EQ(j["job_id"], "job-cli");
  EXPECT_EQ(j["step"], 2);
  EXPECT_EQ(j["fencing_token"], 5);
  EXPECT_EQ(j["world_size"], 1);
  EXPECT_EQ(j["format_version"], "1.1");
  EXPECT_EQ(j["chunk_size"], 16 * 1024);
  ASSERT_EQ(j["files"].size(), 1u);
  EXPECT_EQ(j["files"][0]["name"], "rank-00000.stint");
  EXPECT_EQ(j["files"][0]["size_bytes"].get<uint64_t>(), m.files[0].size);
  EXPECT_EQ(j["files"][0]["digest"], HashToHex(m.files[0].digest));

  ASSERT_EQ(j["tensors"].size(), 3u);
  std::map<std::string, json> tensors;
  for (const auto& t : j["tensors"]) tensors[t["name"]] = t;
  const json& w = tensors["layer.w"];
  EXPECT_EQ(w["dtype"], "float32");
  EXPECT_EQ(w["shape"], json::array({300, 100}));
  EXPECT_EQ(w["shards"], 1);
  EXPECT_EQ(w["raw_bytes"], 300 * 100 * 4);
  EXPECT_EQ(w["chunks"], 8);  // 120000 B in 16 KiB chunks
  const json& z = tensors["zeros"];
  EXPECT_EQ(z["raw_bytes"], 64 * 1024 * 4);
  EXPECT_EQ(z["codecs"]["zstd"], 16);
  EXPECT_GT(z["compression_ratio"].get<double>(), 50.0);
  EXPECT_EQ(tensors["counters"]["dtype"], "int64");
  EXPECT_EQ(tensors["counters"]["shape"], json::array({3}));
  ASSERT_EQ(j["blobs"].size(), 1u);
  EXPECT_EQ(j["blobs"][0]["name"], "rng");
  EXPECT_EQ(j["blobs"][0]["raw_bytes"], 13);

  // A step directory directly gives the same answer.
  RunResult direct = RunCli({"inspect", step2_, "--json"}, /*with_stderr=*/false);
  ASSERT_EQ(direct.exit_code, 0);
  EXPECT_EQ(ParseJson(direct.output), j);
}

TEST_F(CliTest, InspectText) {
  RunResult r = RunCli({"inspect", root_ + "/" + StepDirName(1)});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* want :
       {"job-cli", "fencing token", "format version", "1.0", "rank-00000.stint", "layer.w",
        "float32", "[300, 100]", "[64, 1024]", "zstd 16", "rng", "13 B"}) {
    EXPECT_TRUE(Contains(r.output, want)) << want << " missing from:\n" << r.output;
  }
  EXPECT_TRUE(Contains(LineWith(r.output, "step  "), "1")) << r.output;
}

TEST_F(CliTest, VerifyPasses) {
  Manifest m = ReadManifest(step2_);
  size_t chunks = 0;
  for (const auto& t : m.tensors) {
    for (const auto& s : t.shards) chunks += s.chunks.size();
  }
  for (const auto& b : m.blobs) chunks += b.chunks.size();
  RunResult r = RunCli({"verify", root_});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output,
                       "verified step-00000002: 1 files, " + std::to_string(chunks) + " chunks, "))
      << r.output;

  r = RunCli({"verify", root_, "--all"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "verified step-00000001: ")) << r.output;
  EXPECT_TRUE(Contains(r.output, "verified step-00000002: ")) << r.output;
  EXPECT_TRUE(Contains(r.output, "2 of 2 checkpoints verified")) << r.output;
}

TEST_F(CliTest, VerifyFindsFlippedByte) {
  Manifest m = ReadManifest(step2_);
  const TensorRecord* w = m.FindTensor("layer.w");
  ASSERT_NE(w, nullptr);
  ASSERT_GE(w->shards[0].chunks.size(), 3u);
  const ChunkRecord& c = w->shards[0].chunks[2];
  FlipByte(step2_ + "/rank-00000.stint", c.file_offset + c.stored_len / 2);

  RunResult r = RunCli({"verify", step2_});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "FAILED step-00000002")) << r.output;
  EXPECT_TRUE(Contains(r.output, "rank-00000.stint chunk 2 (tensor layer.w shard 0)")) << r.output;
  EXPECT_TRUE(Contains(r.output, "checksum mismatch")) << r.output;
  EXPECT_TRUE(Contains(r.output, "DATA_LOSS")) << r.output;

  // --all still checks the others and says how many failed.
  r = RunCli({"verify", root_, "--all"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "verified step-00000001")) << r.output;
  EXPECT_TRUE(Contains(r.output, "FAILED step-00000002")) << r.output;
  EXPECT_TRUE(Contains(r.output, "1 of 2 checkpoints verified, 1 failed")) << r.output;
}

TEST_F(CliTest, InspectShowsShardLayout) {
  RunResult r = RunCli({"inspect", step2_});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "\nshards\n")) << r.output;
  EXPECT_TRUE(Contains(r.output, "  layer.w [300, 100]\n")) << r.output;
  EXPECT_TRUE(Contains(LineWith(r.output, "[0, 0]+[300, 100]"), "rank 0")) << r.output;
  EXPECT_TRUE(Contains(LineWith(r.output, "[0, 0]+[300, 100]"), "117.19 KiB")) << r.output;

  r = RunCli({"inspect", step2_, "--json"}, /*with_stderr=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json j = ParseJson(r.output);
  for (const auto& t : j["tensors"]) {
    if (t["name"] != "layer.w") continue;
    ASSERT_EQ(t["shard_layout"].size(), 1u);
    EXPECT_EQ(t["shard_layout"][0]["offsets"], json::array({0, 0}));
    EXPECT_EQ(t["shard_layout"][0]["extents"], json::array({300, 100}));
    EXPECT_EQ(t["shard_layout"][0]["file"], "rank-00000.stint");
    EXPECT_EQ(t["shard_layout"][0]["raw_bytes"], 300 * 100 * 4);
  }
}

// A tensor saved as 12 row shards: one summary line unless --all-shards;
// verify checks that the shards cover every tensor, and finds a hole.
TEST_F(CliTest, ManyShardsAndCoverage) {
  CheckpointOptions o;
  o.root = dir_.Sub("many");
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  std::vector<float> rows(12 * 4, 1.0f);
  State s;
  for (int64_t i = 0; i < 12; ++i) {
    s.tensors.push_back({"rows", DType::kFloat32, {12, 4}, {i, 0}, {1, 4}, rows.data() + 4 * i});
  }
  auto h = (*ckpt)->Save(1, s);
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());
  const std::string step = o.root + "/" + StepDirName(1);

  RunResult r = RunCli({"inspect", step});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output,
                       "    12 shards in 1 file, split along dim 0, each [1, 4] "
                       "(--all-shards lists them)\n"))
      << r.output;
  EXPECT_FALSE(Contains(r.output, "[11, 0]+[1, 4]")) << r.output;
  r = RunCli({"inspect", step, "--all-shards"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(LineWith(r.output, "[11, 0]+[1, 4]"), "rank 0")) << r.output;

  r = RunCli({"verify", step});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "; shards cover all 1 tensors")) << r.output;

  // Drop shard [5, 0]+[1, 4] from the manifest (fixing the file digest, which
  // binds the file's chunk list): the checkpoint opens, verify reports the hole.
  Manifest m = ReadManifest(step);
  auto& shards = m.tensors[0].shards;
  shards.erase(shards.begin() + 5);
  std::vector<ChunkRecord> in_file;
  for (const auto& sh : shards) in_file.insert(in_file.end(), sh.chunks.begin(), sh.chunks.end());
  std::sort(in_file.begin(), in_file.end(), [](const ChunkRecord& a, const ChunkRecord& b) {
    return a.file_offset < b.file_offset;
  });
  m.files[0].digest = FileDigest(in_file, m.files[0].size);
  ASSERT_OK(WriteStringToFileSync(Env::Default(), step + "/" + kManifestName, EncodeManifest(m)));
  r = RunCli({"verify", step});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(
      Contains(r.output, "FAILED step-00000001: INVALID_ARGUMENT: " + step +
                             ": tensor 'rows': region [5, 0]+[1, 4] is covered by no shard"))
      << r.output;
}

TEST_F(CliTest, DamagedManifest) {
  std::string dir = root_ + "/" + StepDirName(1);
  auto bytes = ReadFileToString(Env::Default(), dir + "/" + kManifestName);
  ASSERT_OK(bytes);
  std::string bad = *bytes;
  size_t pos = bad.find("\"step\":1");
  ASSERT_NE(pos, std::string::npos) << bad;
  bad[pos + 7] = '7';
  ASSERT_OK(WriteStringToFileSync(Env::Default(), dir + "/" + kManifestName, bad));

  RunResult r = RunCli({"verify", dir});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "manifest checksum mismatch")) << r.output;
  r = RunCli({"inspect", dir});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "manifest checksum mismatch")) << r.output;
  r = RunCli({"ls", root_, "--json"}, /*with_stderr=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json j = ParseJson(r.output);
  EXPECT_EQ(j["checkpoints"][0]["state"], "corrupt");
  EXPECT_TRUE(Contains(j["checkpoints"][0]["error"].get<std::string>(), "checksum mismatch"));
}

TEST_F(CliTest, ABadLatestIsRefusedWithoutPrintingWhatItHoldsOrPointsAt) {
  // LATEST as a link to a file that is not the root's.
  const std::string other = dir_.Sub("other-file");
  ASSERT_TRUE(WriteWholeFile(other, "PRIVATE-CONTENT-0123456789\nanother line of it\n"));
  const std::string latest = root_ + "/" + kLatestName;
  ASSERT_OK(Env::Default()->RemoveFile(latest));
  ASSERT_EQ(::symlink(other.c_str(), latest.c_str()), 0) << std::strerror(errno);
  // And as a file holding a terminal escape sequence.
  const std::string escape = "\x1b]0;title\x07step-00000001\n";
  for (bool as_link : {true, false}) {
    SCOPED_TRACE(as_link ? "link" : "escape");
    if (!as_link) {
      ASSERT_OK(Env::Default()->RemoveFile(latest));
      ASSERT_TRUE(WriteWholeFile(latest, escape));
    }
    for (const char* command : {"verify", "inspect", "ls"}) {
      RunResult r = RunCli({command, root_});
      EXPECT_FALSE(Contains(r.output, "PRIVATE-CONTENT")) << command << ": " << r.output;
      EXPECT_FALSE(Contains(r.output, "\x1b")) << command << ": " << r.output;
      EXPECT_TRUE(Contains(r.output, "LATEST does not hold a step-* name")) << command << ": "
                                                                          << r.output;
      if (std::string(command) != "ls") {
        EXPECT_EQ(r.exit_code, 1) << command << ": " << r.output;
      }
    }
  }
}

TEST_F(CliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(RunCli({}).exit_code, 2);
  EXPECT_EQ(RunCli({"bogus"}).exit_code, 2);
  EXPECT_EQ(RunCli({"verify"}).exit_code, 2);
  EXPECT_EQ(RunCli({"verify", root_, "--nope"}).exit_code, 2);
  EXPECT_EQ(RunCli({"verify", dir_.Sub("nope")}).exit_code, 2);
  RunResult r = RunCli({"verify", step2_, "--all"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "--all takes a root")) << r.output;
  r = RunCli({"--help"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "verify")) << r.output;
}

TEST_F(CliTest, SlurmSubmitSizesItsWarningFromTheRootsMeasuredSaves) {
  // The two saves of SetUp recorded their time to durable in the root.
  auto times = ReadSaveTimes(Env::Default(), root_);
  ASSERT_OK(times);
  ASSERT_EQ(times->size(), 2u);
  double slowest = 0;
  for (const SaveTime& t : *times) slowest = std::max(slowest, t.durable_seconds);
  const int lead = 2 * std::max(1, int(std::ceil(slowest))) + 60;
  const std::vector<std::string> tail = {"--dry-run", "--", "python", "train.py"};
  auto submit = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"slurm", "submit", "--root", root_});
    args.insert(args.end(), tail.begin(), tail.end());
    return RunCli(args);
  };
  RunResult r = submit({});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "#SBATCH --signal=USR1@" + std::to_string(lead) + "\n"))
      << r.output;
  EXPECT_TRUE(Contains(r.output, "measured: the slowest of the 2 newest saves")) << r.output;
  // A --time-min grant that leaves little training before the warning is flagged.
  r = submit({"--time-min=2"});
  EXPECT_TRUE(Contains(r.output, "warning: --time-min=2 leaves")) << r.output;
  r = submit({"--time-min=0:30:00"});
  EXPECT_FALSE(Contains(r.output, "submit: warning")) << r.output;
  // Given by the user, the lead is theirs.
  r = submit({"--lead", "300"});
  EXPECT_TRUE(Contains(r.output, "#SBATCH --signal=USR1@300\n")) << r.output;
  EXPECT_FALSE(Contains(r.output, "measured")) << r.output;
  // status shows them with the root (whatever squeue says of job 1 here).
  r = RunCli({"slurm", "status", "1", "--root", root_});
  EXPECT_TRUE(Contains(r.output, "save to durable over the newest 2: median ")) << r.output;
  // A damaged record is named, and the default lead is used.
  ASSERT_OK(WriteStringToFileSync(Env::Default(), root_ + "/" + kSaveTimesName, "garbage\n"));
  r = submit({});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "SAVE_TIMES line 1")) << r.output;
  EXPECT_TRUE(Contains(r.output, "#SBATCH --signal=USR1@120\n")) << r.output;
}

// Issue 41: sbatch's options as users type them; no option value that
// writes a line of its own into the script; the script kept in the root.
TEST_F(CliTest, SlurmSubmitTakesSbatchOptionsAsTypedAndKeepsItsScriptInTheRoot) {
  RunResult r = RunCli({"slurm", "submit", "--root", root_, "-p", "low", "-N2", "-o", "out",
                        "--job-name", "a b", "--dry-run", "--", "python", "train.py"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output,
                       "#SBATCH -p low\n#SBATCH -N 2\n#SBATCH -o out\n"
                       "#SBATCH --job-name=\"a b\"\n"))
      << r.output;
  r = RunCli({"slurm", "submit", "-J", "x\ntouch pwned", "--dry-run", "--", "true"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "'-J': its value holds a control character (0x0a)")) << r.output;
  EXPECT_FALSE(Contains(r.output, "\ntouch pwned")) << r.output;
  r = RunCli({"slurm", "submit", "--comment=x\ntouch pwned", "--dry-run", "--", "true"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_FALSE(Contains(r.output, "\ntouch pwned")) << r.output;
  // Submitted (sbatch fails here: no cluster), the script is in the root, not here.
  auto scripts = [](const std::string& dir) {
    std::vector<std::string> found;
    auto children = Env::Default()->GetChildren(dir);
    EXPECT_OK(children);
    for (const std::string& name : *children) {
      if (name.rfind("stint-slurm-job-", 0) == 0) found.push_back(name);
    }
    return found;
  };
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  const std::vector<std::string> here = scripts(cwd);
  r = RunCli({"slurm", "submit", "--root", root_, "--", "true"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const std::vector<std::string> in_root = scripts(root_);
  ASSERT_EQ(in_root.size(), 1u) << r.output;
  EXPECT_TRUE(Contains(r.output, "sbatch " + root_ + "/" + in_root[0])) << r.output;
  EXPECT_EQ(scripts(cwd), here);
}

TEST_F(CliTest, RootWithoutCheckpoints) {
  RunResult r = RunCli({"verify", dir_.path(), "--all"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "no committed checkpoint")) << r.output;
  r = RunCli({"inspect", dir_.path()});
  EXPECT_EQ(r.exit_code, 1) << r.output;
}

}  // namespace
}  // namespace stint
