// What a load asks the disk for, on both engines. Chunks that lie one after
// another in a data file and go through bounce slots are read in one request
// (a state of thousands of small tensors, a LoRA adapter's, is not read one
// request per tensor); buffered files read every whole chunk straight into
// its destination, at any address. Either way the bytes land bit-exact, and
// a damaged chunk fails the read naming its own tensor, file and offset.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/peer_read_env.h"
#include "peer/peer_file_client.h"
#include "peer/peer_file_server.h"
#include "stint/checkpoint_reader.h"
#include "stint/checkpointer.h"
#include "stint/env.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

// A real file whose reads are counted. NativeFd() is -1, so both engines
// read through Read() and every request passes here.
class CountingFile final : public RandomAccessFile {
 public:
  CountingFile(std::unique_ptr<RandomAccessFile> base, std::atomic<uint64_t>* reads)
      : base_(std::move(base)), reads_(reads) {}
  Result<size_t> Read(uint64_t offset, size_t n, void* dst) const override {
    reads_->fetch_add(1);
    return base_->Read(offset, n, dst);
  }
  Result<uint64_t> Size() const override { return base_->Size(); }
  bool direct_io() const override { return base_->direct_io(); }
  const std::string& path() const override { return base_->path(); }

 private:
  std::unique_ptr<RandomAccessFile> base_;
  std::atomic<uint64_t>* reads_;
};

class CountingEnv final : public EnvWrapper {
 public:
  CountingEnv() : EnvWrapper(Env::Default()) {}
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const FileOptions& options) override {
    STINT_ASSIGN_OR_RETURN(auto file, EnvWrapper::NewRandomAccessFile(path, options));
    direct = file->direct_io();
    return std::unique_ptr<RandomAccessFile>(
        std::make_unique<CountingFile>(std::move(file), &reads));
  }
  std::atomic<uint64_t> reads{0};
  bool direct = false;  // the last file opened was opened with O_DIRECT
};

constexpr int kTensors = 2000;
constexpr char kStep[] = "/step-00000001";
constexpr char kDataFile[] = "/step-00000001/rank-00000.stint";

std::string Name(int i) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "t%05d", i);
  return buf;
}

// kTensors int32 tensors of 1..3000 elements (4 B to 12 KiB: one chunk
// each), every one a distinct pattern, saved as step 1 under `root`.
std::vector<std::vector<int32_t>> SaveSmallTensors(const std::string& root) {
  std::vector<std::vector<int32_t>> values(kTensors);
  State state;
  for (int i = 0; i < kTensors; ++i) {
    values[i].resize(1 + (size_t(i) * 7919) % 3000);
    for (size_t k = 0; k < values[i].size(); ++k) values[i][k] = int32_t(i * 100003 + k);
    state.tensors.push_back({Name(i), DType::kInt32, {int64_t(values[i].size())}, {}, {},
                             values[i].data()});
  }
  CheckpointOptions o;
  o.root = root;
  auto ckpt = Checkpointer::Open(o);
  EXPECT_OK(ckpt);
  auto h = (*ckpt)->Save(1, state);
  EXPECT_OK(h);
  EXPECT_OK(h->durable.get());
  return values;
}

// Heap destinations, at whatever address malloc gives (mostly not
// page-aligned), filled with a pattern no tensor holds.
struct Destinations {
  explicit Destinations(const std::vector<std::vector<int32_t>>& values) : into(values.size()) {
    for (size_t i = 0; i < values.size(); ++i) {
      into[i].assign(values[i].size(), -1);
      dests.push_back({Name(int(i)), DType::kInt32, {int64_t(values[i].size())}, {}, {},
                       into[i].data()});
    }
  }
  std::vector<std::vector<int32_t>> into;
  std::vector<TensorDest> dests;
};

// Flips one bit inside tensor `victim`'s bytes (found by their pattern) and
// returns their offset in the data file.
uint64_t DamageTensor(const std::string& root, const std::vector<int32_t>& victim) {
  const std::string file = root + kDataFile;
  std::string bytes = ReadWholeFile(file);
  const std::string pattern(reinterpret_cast<const char*>(victim.data()), victim.size() * 4);
  const size_t at = bytes.find(pattern);
  EXPECT_NE(at, std::string::npos);
  bytes[at + pattern.size() / 2] ^= 0x10;
  EXPECT_TRUE(WriteWholeFile(file, bytes));
  return at;
}

class ReaderRequestsTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ReaderRequestsTest, SmallChunksThroughBounceSlotsAreMergedIntoFewRequests) {
  TempDir dir;
  const std::string root = dir.Sub("ckpt");
  const auto values = SaveSmallTensors(root);
  uint64_t padded = 0;  // the data file's bytes: each chunk padded to 4 KiB
  for (const auto& v : values) padded += (v.size() * 4 + 4095) / 4096 * 4096;
  CountingEnv env;
  ReaderOptions ro;
  ro.env = &env;
  ro.io_engine = GetParam();
  auto reader = CheckpointReader::Open(root + kStep, ro);
  ASSERT_OK(reader);
  Destinations d(values);
  env.reads = 0;
  ASSERT_OK((*reader)->Read(d.dests));
  for (int i = 0; i < kTensors; ++i) ASSERT_EQ(d.into[i], values[i]) << Name(i);
  if (!env.direct) GTEST_SKIP() << "no O_DIRECT here (tmpfs?): every chunk is read in place";
  // One request per 8 MiB of adjacent chunks, not one per tensor (a few
  // destinations may be page-aligned by chance and read alone, in place).
  EXPECT_LE(env.reads.load(), padded / (8u << 20) + 1 + 50)
      << kTensors << " tensors, " << padded << " bytes";
}

TEST_P(ReaderRequestsTest, BufferedReadsGoStraightIntoUnalignedDestinations) {
  TempDir dir;
  const std::string root = dir.Sub("ckpt");
  const auto values = SaveSmallTensors(root);
  CountingEnv env;
  ReaderOptions ro;
  ro.env = &env;
  ro.io_engine = GetParam();
  ro.direct_io = false;
  auto reader = CheckpointReader::Open(root + kStep, ro);
  ASSERT_OK(reader);
  ASSERT_FALSE(env.direct);
  Destinations d(values);
  env.reads = 0;
  ASSERT_OK((*reader)->Read(d.dests));
  for (int i = 0; i < kTensors; ++i) ASSERT_EQ(d.into[i], values[i]) << Name(i);
  // Each chunk its own read, into its destination: no bounce slot, no copy.
  EXPECT_EQ(env.reads.load(), uint64_t(kTensors));
}

TEST_P(ReaderRequestsTest, DamageNamesItsTensorFileAndOffsetOnEveryPath) {
  TempDir dir;
  const std::string root = dir.Sub("ckpt");
  const auto values = SaveSmallTensors(root);
  const int victim = 1234;
  const uint64_t at = DamageTensor(root, values[victim]);
  for (bool direct_io : {true, false}) {  // merged bounce requests; reads in place
    SCOPED_TRACE(direct_io ? "O_DIRECT" : "buffered");
    ReaderOptions ro;
    ro.io_engine = GetParam();
    ro.direct_io = direct_io;
    auto reader = CheckpointReader::Open(root + kStep, ro);
    ASSERT_OK(reader);
    Destinations d(values);
    Status s = (*reader)->Read(d.dests);
    EXPECT_EQ(s.code(), Code::kDataLoss) << s.ToString();
    EXPECT_NE(s.message().find(root + kDataFile + " chunk 0 (tensor " + Name(victim) +
                               " shard 0) at offset " +
                               std::to_string(at)),
              std::string::npos)
        << s.ToString();
    EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.ToString();
  }
}

// A lost node's part as a node-local load reads it: the data file is on a
// peer only, behind PeerReadEnv (ranged HTTP reads, a file without a
// descriptor, direct_io() false), with a big tensor beside the small ones.
// Merged requests and reads in place both go over the network; every byte
// lands bit-exact.
TEST_P(ReaderRequestsTest, PartOnAPeerOnlyLoadsThroughPeerReadEnv) {
  TempDir dir;
  const std::string peer_root = dir.Sub("peer");
  const auto values = SaveSmallTensors(peer_root);
  // Here: the committed manifest only (what a replacement node sees of a
  // step through its peers), no data file.
  const std::string root = dir.Sub("here");
  ASSERT_OK(CreateDirWithParents(Env::Default(), root + kStep));
  ASSERT_TRUE(WriteWholeFile(root + kStep + "/MANIFEST.json",
                             ReadWholeFile(peer_root + kStep + "/MANIFEST.json")));
  PeerFileServerOptions so;
  so.root = peer_root;
  so.bind_host = "127.0.0.1";
  so.token = "reader-requests-token";
  auto server = PeerFileServer::Start(so);
  ASSERT_OK(server.status());
  auto client =
      std::make_shared<PeerFileClient>("http://127.0.0.1:" + std::to_string((*server)->port()),
                                       so.token, std::chrono::milliseconds(10000));
  PeerReadEnv env(Env::Default(), root, dir.Sub("replicas"), [client] {
    return std::vector<Peer>{Peer{"peer", "", client}};
  });
  for (bool direct_io : {true, false}) {
    SCOPED_TRACE(direct_io ? "O_DIRECT asked for" : "buffered");
    ReaderOptions ro;
    ro.env = &env;
    ro.io_engine = GetParam();
    ro.direct_io = direct_io;
    auto reader = CheckpointReader::Open(root + kStep, ro);
    ASSERT_OK(reader);
    Destinations d(values);
    ASSERT_OK((*reader)->Read(d.dests));
    for (int i = 0; i < kTensors; ++i) ASSERT_EQ(d.into[i], values[i]) << Name(i);
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, ReaderRequestsTest, ::testing::Values("uring", "posix"));

}  // namespace
}  // namespace stint
