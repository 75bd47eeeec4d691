// Manifests crafted to make a reader write past a destination or allocate
// without bound (their checksum and file digests recomputed, as an attacker
// or a buggy writer would): refused with kDataLoss naming the file and the
// chunk when the checkpoint is opened, before any read or allocation.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "checkpoint/commit.h"
#include "format/chunk.h"
#include "format/manifest.h"
#include "stint/checkpoint_reader.h"
#include "stint/checkpointer.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

class CraftedManifestTest : public ::testing::Test {
 protected:
  // One raw 8 KiB tensor chunk and one blob chunk: rank-00000.stint is 12 KiB.
  void SetUp() override {
    CheckpointOptions o;
    o.root = dir_.Sub("ckpt");
    o.chunk_size = 8192;
    o.io_engine = "posix";
    auto ckpt = Checkpointer::Open(o);
    ASSERT_OK(ckpt);
    State s;
    s.tensors.push_back({"w", DType::kFloat32, {2048}, {}, {}, w_.data()});
    s.blobs["meta"] = std::string(100, 'm');
    auto h = (*ckpt)->Save(1, s);
    ASSERT_OK(h);
    ASSERT_OK(h->durable.get());
    step_dir_ = o.root + "/" + StepDirName(1);
  }

  // Rewrites the committed manifest after `craft`, with every file digest
  // and the manifest checksum made to match again.
  template <typename Craft>
  void Rewrite(Craft craft) {
    const std::string path = step_dir_ + "/" + kManifestName;
    auto bytes = ReadFileToString(Env::Default(), path);
    ASSERT_OK(bytes);
    auto m = DecodeManifest(*bytes, path);
    ASSERT_OK(m);
    craft(&*m);
    for (FileRecord& f : m->files) {
      std::vector<ChunkRecord> chunks;
      for (const auto& t : m->tensors) {
        for (const auto& sh : t.shards) {
          if (sh.file == f.name) chunks.insert(chunks.end(), sh.chunks.begin(), sh.chunks.end());
        }
      }
      for (const auto& b : m->blobs) {
        if (b.file == f.name) chunks.insert(chunks.end(), b.chunks.begin(), b.chunks.end());
      }
      std::sort(chunks.begin(), chunks.end(), [](const ChunkRecord& a, const ChunkRecord& b) {
        return a.file_offset < b.file_offset;
      });
      f.digest = FileDigest(chunks, f.size);
    }
    ASSERT_OK(WriteStringToFileSync(Env::Default(), path, EncodeManifest(*m)));
  }

  void ExpectRefused(const std::string& what) {
    auto reader = CheckpointReader::Open(step_dir_);
    ASSERT_FALSE(reader.ok()) << "the crafted manifest was accepted";
    const Status& s = reader.status();
    EXPECT_EQ(s.code(), Code::kDataLoss) << s.ToString();
    EXPECT_NE(s.message().find(RankFileName(0)), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("chunk 0"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.ToString();
  }

  TempDir dir_;
  std::vector<float> w_ = std::vector<float>(2048, 1.5f);
  std::string step_dir_;
};

// stored > raw on a raw chunk: its read, straight into the 8 KiB destination,
// would write 12 KiB.
TEST_F(CraftedManifestTest, RawChunkStoringMoreThanItHoldsIsRefused) {
  Rewrite([](Manifest* m) {
    ASSERT_EQ(m->files[0].size, 12288u);
    m->tensors[0].shards[0].chunks[0].stored_len = 12288;
  });
  ExpectRefused("uncompressed chunk stores 12288 bytes but holds 8192");
  // Load through the Checkpointer: no step loads, the reason is reported.
  CheckpointOptions o;
  o.root = dir_.Sub("ckpt");
  o.read_only = true;
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  std::vector<float> out(2048);
  auto r = (*ckpt)->Load({{"w", DType::kFloat32, {2048}, {}, {}, out.data()}});
  EXPECT_EQ(r.status().code(), Code::kDataLoss) << r.status().ToString();
  EXPECT_NE(r.status().message().find("uncompressed chunk stores"), std::string::npos)
      << r.status().ToString();
}

// A compressed chunk claiming 2^40 raw bytes: decoding it would allocate
// that much first.
TEST_F(CraftedManifestTest, HugeRawLengthIsRefusedBeforeAnyAllocation) {
  Rewrite([](Manifest* m) {
    ChunkRecord& c = m->blobs[0].chunks[0];
    c.codec = Codec::kZstd;
    c.raw_len = uint64_t{1} << 40;
  });
  ExpectRefused("compressed chunk holds 1099511627776 bytes, more than the chunk size 8192");
}

}  // namespace
}  // namespace stint
