// The peer file service (issue 42) on loopback: a real PeerFileServer over
// real step directories, its client, and raw requests that try to leave the
// served directories or skip the token.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "peer/peer_file_client.h"
#include "peer/peer_file_server.h"
#include "stint/env.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr char kToken[] = "peer-test-token-0123456789";

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  for (; i < n; ++i) s[i] = static_cast<char>(rng());
  return s;
}

// A step directory as a save leaves it: data files, then (when committed)
// the manifest. The manifest's contents do not matter to the server.
void MakeStep(const std::string& parent, const std::string& dir,
              const std::vector<std::pair<std::string, std::string>>& files, bool committed) {
  Env* env = Env::Default();
  ASSERT_OK(CreateDirWithParents(env, parent + "/" + dir));
  for (const auto& [name, bytes] : files) {
    ASSERT_TRUE(WriteWholeFile(parent + "/" + dir + "/" + name, bytes)) << name;
  }
  if (committed) {
    ASSERT_TRUE(WriteWholeFile(parent + "/" + dir + "/MANIFEST.json", "{\"manifest\": {}}"));
  }
}

// A port nothing listens on: bound, then closed (the kernel does not hand it
// out again at once).
int DeadPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Runs `fn` on its own thread; false when it has not returned by `deadline`
// (the thread is then left behind: the test fails, the process ends soon).
bool FinishesWithin(std::function<void()> fn, milliseconds deadline) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> f = done->get_future();
  std::thread([fn = std::move(fn), done] {
    fn();
    done->set_value();
  }).detach();
  return f.wait_for(deadline) == std::future_status::ready;
}

class PeerFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.Sub("root");
    replica_ = dir_.Sub("replica");
    data_ = RandomBytes((3 << 20) + 4099, 1);
    replica_data_ = RandomBytes((2 << 20) + 5, 2);
    other_ = RandomBytes(1 << 20, 3);
    MakeStep(root_, "step-00000010", {{"rank-00000.stint", data_}}, true);
    MakeStep(root_, "step-00000020", {{"rank-00000.stint", other_}}, false);  // not committed
    // The replica holds another node's files of step 10 (and a stale copy
    // of this node's, which root's must win over), and a step root lacks.
    MakeStep(replica_, "step-00000010",
             {{"rank-00000.stint", other_}, {"rank-00001.stint", replica_data_}}, true);
    MakeStep(replica_, "step-00000030", {{"rank-00001.stint", replica_data_}}, true);
    ASSERT_TRUE(WriteWholeFile(dir_.Sub("secret"), "not to be served"));
    PeerFileServerOptions o;
    o.root = root_;
    o.replica_dir = replica_;
    o.bind_host = "127.0.0.1";
    o.token = kToken;
    auto server = PeerFileServer::Start(o);
    ASSERT_OK(server.status());
    server_ = std::move(*server);
    ASSERT_GT(server_->port(), 0);
    client_ = std::make_shared<PeerFileClient>(Url(), kToken, milliseconds(5000));
  }

  std::string Url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }

  // A raw GET with the token; the status (0: no answer).
  int RawGet(const std::string& path, const std::string& range = "bytes=0-9",
             std::string* body = nullptr) {
    httplib::Client c("127.0.0.1", server_->port());
    httplib::Headers h = {{"Authorization", std::string("Bearer ") + kToken}};
    if (!range.empty()) h.emplace("Range", range);
    auto r = c.Get(path, h);
    if (!r) return 0;
    if (body != nullptr) *body = r->body;
    return r->status;
  }

  TempDir dir_;
  std::string root_, replica_;
  std::string data_, replica_data_, other_;
  std::unique_ptr<PeerFileServer> server_;
  std::shared_ptr<PeerFileClient> client_;
};

TEST_F(PeerFilesTest, ListsCommittedStepsOfRootAndReplica) {
  auto steps = client_->ListSteps();
  ASSERT_OK(steps.status());
  EXPECT_EQ(*steps, (std::vector<std::string>{"step-00000010", "step-00000030"}));
  std::string body;
  ASSERT_EQ(RawGet("/v1/steps", "", &body), 200);
  EXPECT_EQ(body,
            R"({"steps":[{"dir":"step-00000010","where":"root"},)"
            R"({"dir":"step-00000010","where":"replica"},)"
            R"({"dir":"step-00000030","where":"replica"}]})");
}

TEST_F(PeerFilesTest, FileSizeFromRootThenReplica) {
  auto size = client_->FileSize("step-00000010", "rank-00000.stint");
  ASSERT_OK(size.status());
  EXPECT_EQ(*size, data_.size());  // root's, not the replica's stale copy
  size = client_->FileSize("step-00000010", "rank-00001.stint");
  ASSERT_OK(size.status());
  EXPECT_EQ(*size, replica_data_.size());
  std::string body;
  ASSERT_EQ(RawGet("/v1/stat/step-00000030/rank-00001.stint", "", &body), 200);
  EXPECT_EQ(body, R"({"size":)" + std::to_string(replica_data_.size()) + R"(,"where":"replica"})");
  size = client_->FileSize("step-00000010", "rank-00009.stint");
  EXPECT_EQ(size.status().code(), Code::kNotFound) << size.status().ToString();
  EXPECT_NE(size.status().message().find(Url()), std::string::npos) << size.status().ToString();
  EXPECT_NE(size.status().message().find("rank-00009.stint"), std::string::npos);
  EXPECT_EQ(client_->FileSize("step-00000099", "rank-00000.stint").status().code(),
            Code::kNotFound);
}

TEST_F(PeerFilesTest, ReadRangeAtOddOffsetsAndPastTheEnd) {
  const uint64_t size = data_.size();
  struct Case {
    uint64_t offset;
    size_t n;
  };
  const Case cases[] = {{0, 1},
                        {1, 4095},
                        {12345, (1 << 20) + 3},
                        {0, data_.size()},
                        {size - 7, 7},
                        {size - 7, 100},     // cut at the end
                        {size, 10},          // at the end
                        {size + 100, 10}};   // past it
  std::vector<char> buf(data_.size() + 200);
  for (const Case& c : cases) {
    SCOPED_TRACE("offset " + std::to_string(c.offset) + " n " + std::to_string(c.n));
    std::fill(buf.begin(), buf.end(), 0x5a);
    auto got = client_->ReadRange("step-00000010", "rank-00000.stint", c.offset, c.n, buf.data());
    ASSERT_OK(got.status());
    const size_t want = c.offset >= size ? 0 : std::min<uint64_t>(c.n, size - c.offset);
    ASSERT_EQ(*got, want);
    if (want > 0) {
      EXPECT_EQ(0, std::memcmp(buf.data(), data_.data() + c.offset, want));
    }
    EXPECT_EQ(buf[want], 0x5a);  // nothing written past what was read
  }
  // The RandomAccessFile over it reads the same.
  auto f = OpenPeerFile(client_, "step-00000010", "rank-00000.stint");
  ASSERT_OK(f.status());
  EXPECT_EQ((*f)->path(), Url() + "/step-00000010/rank-00000.stint");
  EXPECT_FALSE((*f)->direct_io());
  auto fsize = (*f)->Size();
  ASSERT_OK(fsize.status());
  EXPECT_EQ(*fsize, size);
  auto got = (*f)->Read(size - 1000, 5000, buf.data());
  ASSERT_OK(got.status());
  ASSERT_EQ(*got, 1000u);
  EXPECT_EQ(0, std::memcmp(buf.data(), data_.data() + size - 1000, 1000));
  EXPECT_EQ(OpenPeerFile(client_, "step-00000010", "absent").status().code(), Code::kNotFound);
  auto missing = client_->ReadRange("step-00000010", "absent", 0, 10, buf.data());
  EXPECT_EQ(missing.status().code(), Code::kNotFound) << missing.status().ToString();
  // The server's whole message, not cut to the range asked for.
  EXPECT_NE(missing.status().message().find("absent: not in " + root_), std::string::npos)
      << missing.status().ToString();
}

TEST_F(PeerFilesTest, ReplicaServesWhatRootLacks) {
  std::vector<char> buf(replica_data_.size());
  for (const char* step : {"step-00000010", "step-00000030"}) {
    auto got = client_->ReadRange(step, "rank-00001.stint", 0, buf.size(), buf.data());
    ASSERT_OK(got.status());
    ASSERT_EQ(*got, buf.size());
    EXPECT_EQ(0, std::memcmp(buf.data(), replica_data_.data(), buf.size())) << step;
  }
  // Root's copy wins over the replica's.
  std::vector<char> head(4096);
  auto got = client_->ReadRange("step-00000010", "rank-00000.stint", 0, head.size(), head.data());
  ASSERT_OK(got.status());
  EXPECT_EQ(0, std::memcmp(head.data(), data_.data(), head.size()));
}

TEST_F(PeerFilesTest, WrongOrMissingTokenRefused) {
  PeerFileClient wrong(Url(), "peer-test-token-0123456788", milliseconds(5000));
  auto steps = wrong.ListSteps();
  EXPECT_EQ(steps.status().code(), Code::kUnauthenticated) << steps.status().ToString();
  auto size = wrong.FileSize("step-00000010", "rank-00000.stint");
  EXPECT_EQ(size.status().code(), Code::kUnauthenticated) << size.status().ToString();
  char b[16];
  auto got = wrong.ReadRange("step-00000010", "rank-00000.stint", 0, sizeof(b), b);
  EXPECT_EQ(got.status().code(), Code::kUnauthenticated) << got.status().ToString();
  PeerFileClient prefix(Url(), "peer-test-token", milliseconds(5000));
  EXPECT_EQ(prefix.ListSteps().status().code(), Code::kUnauthenticated);
  httplib::Client c("127.0.0.1", server_->port());
  auto r = c.Get("/v1/files/step-00000010/rank-00000.stint", {{"Range", "bytes=0-9"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->body.find(data_.substr(0, 10)), std::string::npos);
  r = c.Get("/v1/steps", {{"Authorization", "Basic cGVlcjpwZWVy"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  // A server without a token is refused at start.
  PeerFileServerOptions o;
  o.root = root_;
  o.bind_host = "127.0.0.1";
  EXPECT_EQ(PeerFileServer::Start(o).status().code(), Code::kInvalidArgument);
}

TEST_F(PeerFilesTest, BadPathsAndRangesRefused) {
  const char* paths[] = {
      "/v1/files/step-00000010/../secret",
      "/v1/files/step-00000010/..",
      "/v1/files/step-00000010/%2e%2e",
      "/v1/files/step-00000010/%2e%2e%2f%2e%2e%2fsecret",
      "/v1/files/step-00000010/..%2F..%2Fsecret",
      "/v1/files/..%2fstep-00000010/rank-00000.stint",
      "/v1/files/step-1/../x",
      "/v1/files/step-00000010/.",
      "/v1/files/step-00000010/",
      "/v1/files/step-00000010",
      "/v1/files/step-00000010/a%00b",
      "/v1/files/step-x/rank-00000.stint",
      "/v1/files/step-/rank-00000.stint",
      "/v1/files/Step-00000010/rank-00000.stint",
      "/v1/files/step-00000010/sub/rank-00000.stint",
      "/v1/stat/step-00000010/%2e%2e",
      "/v1/stat/..%2f..%2fsecret/x",
  };
  for (const char* p : paths) {
    std::string body;
    const int status = RawGet(p, "bytes=0-9", &body);
    EXPECT_EQ(status, 400) << p;
    EXPECT_EQ(body.find("not to be served"), std::string::npos) << p;
  }
  // Range: required, one, well formed.
  EXPECT_EQ(RawGet("/v1/files/step-00000010/rank-00000.stint", ""), 400);
  EXPECT_EQ(RawGet("/v1/files/step-00000010/rank-00000.stint", "bytes=0-1,4-5"), 400);
  EXPECT_EQ(RawGet("/v1/files/step-00000010/rank-00000.stint", "bytes=-5"), 400);
  // httplib itself refuses a range that ends before it starts.
  EXPECT_EQ(RawGet("/v1/files/step-00000010/rank-00000.stint", "bytes=9-1"), 416);
  EXPECT_EQ(RawGet("/v1/files/step-00000010/rank-00000.stint",
                   "bytes=" + std::to_string(data_.size()) + "-"),
            416);
  std::string body;
  EXPECT_EQ(RawGet("/v1/files/step-00000010/rank-00000.stint", "bytes=5-", &body), 206);
  EXPECT_EQ(body, data_.substr(5));
  // The client refuses names that would leave the step directory too.
  char b[8];
  EXPECT_EQ(client_->ReadRange("step-00000010", "../secret", 0, 8, b).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(client_->FileSize("..", "secret").status().code(), Code::kInvalidArgument);
}

TEST_F(PeerFilesTest, ConcurrentReadsAreByteExact) {
  constexpr int kThreads = 8;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      auto file = OpenPeerFile(client_, "step-00000010", "rank-00000.stint");
      if (!file.ok()) {
        ADD_FAILURE() << file.status().ToString();
        failures++;
        return;
      }
      std::vector<char> buf(1 << 20);
      for (int i = 0; i < 24; ++i) {
        const uint64_t offset = rng() % data_.size();
        const size_t n = 1 + rng() % buf.size();
        const size_t want = std::min<uint64_t>(n, data_.size() - offset);
        Result<size_t> got =
            t % 2 == 0 ? (*file)->Read(offset, n, buf.data())
                       : client_->ReadRange("step-00000010", "rank-00000.stint", offset, n,
                                            buf.data());
        if (!got.ok() || *got != want || std::memcmp(buf.data(), data_.data() + offset, want)) {
          ADD_FAILURE() << "thread " << t << " offset " << offset << " n " << n << ": "
                        << (got.ok() ? std::to_string(*got) + " bytes, or wrong ones"
                                     : got.status().ToString());
          failures++;
          return;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(PeerFilesTest, DestructionWithConnectedClientsDoesNotHang) {
  // An idle keep-alive connection in the client's pool...
  auto size = client_->FileSize("step-00000010", "rank-00000.stint");
  ASSERT_OK(size.status());
  // ... and a reader in the middle of its reads.
  std::atomic<bool> stop{false};
  std::atomic<int> reads{0};
  std::thread reader([&] {
    auto other = std::make_shared<PeerFileClient>(Url(), kToken, milliseconds(2000));
    std::vector<char> buf(data_.size());
    while (!stop.load()) {
      auto got = other->ReadRange("step-00000010", "rank-00000.stint", 0, buf.size(), buf.data());
      if (!got.ok()) {
        EXPECT_EQ(got.status().code(), Code::kUnavailable) << got.status().ToString();
        break;
      }
      reads++;
    }
  });
  const auto wait_end = Clock::now() + std::chrono::seconds(10);
  while (reads.load() == 0 && Clock::now() < wait_end) std::this_thread::yield();
  ASSERT_GT(reads.load(), 0);
  // Transfers end at their next buffer and idle connections within the
  // server's 1 s keep-alive: 5 s is far more than either.
  std::unique_ptr<PeerFileServer> server = std::move(server_);
  const auto start = Clock::now();
  const bool finished = FinishesWithin([&server] { server.reset(); }, milliseconds(5000));
  if (!finished) {
    ADD_FAILURE() << "~PeerFileServer did not return within 5 s";
    std::_Exit(1);  // the destructor's thread still uses this frame
  }
  std::printf("~PeerFileServer took %.3f s with 2 clients connected\n",
              std::chrono::duration<double>(Clock::now() - start).count());
  stop = true;
  reader.join();
  // The port is closed now: a later call is refused, not hung.
  auto after = client_->FileSize("step-00000010", "rank-00000.stint");
  EXPECT_EQ(after.status().code(), Code::kUnavailable) << after.status().ToString();
}

TEST(PeerFileClientTest, DeadPortFailsUnavailableWithinTimeout) {
  const std::string url = "http://127.0.0.1:" + std::to_string(DeadPort());
  const milliseconds timeout(2000);
  PeerFileClient client(url, kToken, timeout);
  const auto start = Clock::now();
  auto size = client.FileSize("step-00000010", "rank-00000.stint");
  const auto elapsed = Clock::now() - start;
  EXPECT_EQ(size.status().code(), Code::kUnavailable) << size.status().ToString();
  EXPECT_NE(size.status().message().find(url), std::string::npos) << size.status().ToString();
  EXPECT_NE(size.status().message().find("rank-00000.stint"), std::string::npos);
  EXPECT_LT(elapsed, timeout);
  char b[8];
  const auto start2 = Clock::now();
  auto got = client.ReadRange("step-00000010", "rank-00000.stint", 0, sizeof(b), b);
  EXPECT_EQ(got.status().code(), Code::kUnavailable) << got.status().ToString();
  EXPECT_LT(Clock::now() - start2, timeout);
  EXPECT_EQ(client.ListSteps().status().code(), Code::kUnavailable);
  // A malformed URL is the caller's mistake.
  PeerFileClient bad("127.0.0.1:80", kToken, timeout);
  EXPECT_EQ(bad.ListSteps().status().code(), Code::kInvalidArgument);
}

TEST(PeerFileServerTest, PortInUseNamesHostAndPort) {
  TempDir dir;
  PeerFileServerOptions o;
  o.root = dir.path();
  o.bind_host = "127.0.0.1";
  o.token = kToken;
  auto first = PeerFileServer::Start(o);
  ASSERT_OK(first.status());
  o.port = (*first)->port();
  auto second = PeerFileServer::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("127.0.0.1:" + std::to_string(o.port)),
            std::string::npos)
      << second.status().ToString();
}

// Loopback throughput against the local file system (page cache warm for
// both): a measurement, printed, no threshold. STINT_PEER_BENCH=1 runs it.
TEST(PeerFileBench, LoopbackVersusLocal) {
  if (std::getenv("STINT_PEER_BENCH") == nullptr) GTEST_SKIP() << "set STINT_PEER_BENCH=1";
  constexpr size_t kSize = size_t{512} << 20;
  constexpr size_t kPiece = size_t{8} << 20;
  constexpr int kThreads = 4;
  TempDir dir;
  MakeStep(dir.path(), "step-00000001", {{"big.bin", RandomBytes(kSize, 7)}}, true);
  const std::string path = dir.Sub("step-00000001/big.bin");
  PeerFileServerOptions o;
  o.root = dir.path();
  o.bind_host = "127.0.0.1";
  o.token = kToken;
  auto server = PeerFileServer::Start(o);
  ASSERT_OK(server.status());
  auto client = std::make_shared<PeerFileClient>(
      "http://127.0.0.1:" + std::to_string((*server)->port()), kToken, milliseconds(10000));
  auto local = Env::Default()->NewRandomAccessFile(path, FileOptions());
  ASSERT_OK(local.status());
  auto remote = OpenPeerFile(client, "step-00000001", "big.bin");
  ASSERT_OK(remote.status());
  // Each thread reads every kThreads-th piece into its own buffer.
  auto run = [&](RandomAccessFile* f) {
    std::atomic<bool> ok{true};
    const auto start = Clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::vector<char> buf(kPiece);
        for (size_t off = t * kPiece; off < kSize; off += kThreads * kPiece) {
          auto got = f->Read(off, kPiece, buf.data());
          if (!got.ok() || *got != kPiece) ok = false;
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_TRUE(ok.load());
    return kSize / std::chrono::duration<double>(Clock::now() - start).count() / (1 << 20);
  };
  std::vector<double> l, r;
  for (int i = 0; i < 3; ++i) {
    l.push_back(run(local->get()));
    r.push_back(run(remote->get()));
  }
  std::sort(l.begin(), l.end());
  std::sort(r.begin(), r.end());
  std::printf("512 MiB, %d threads x 8 MiB reads, median of 3: local %.0f MiB/s, "
              "loopback peer %.0f MiB/s, ratio peer/local %.2f\n",
              kThreads, l[1], r[1], r[1] / l[1]);
}

}  // namespace
}  // namespace stint
