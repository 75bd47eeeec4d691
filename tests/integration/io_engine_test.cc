// Conformance suite run against both I/O engines on real files.
#include "io/io_engine.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "util/fault_env.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

struct Aligned {
  explicit Aligned(size_t n) : size(n) {
    void* p = nullptr;
    EXPECT_EQ(posix_memalign(&p, 4096, n), 0);
    data = static_cast<char*>(p);
  }
  ~Aligned() { std::free(data); }
  char* data;
  size_t size;
};

class IoEngineTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  std::unique_ptr<IoEngine> Engine(unsigned depth = 4) {
    IoEngineOptions o;
    o.kind = GetParam();
    o.queue_depth = depth;
    auto e = NewIoEngine(o);
    EXPECT_OK(e);
    return std::move(*e);
  }
  TempDir dir_;
};

TEST_P(IoEngineTest, ManyWritesInFlightThenReadBack) {
  auto engine = Engine(4);
  const size_t block = 64 * 1024, blocks = 64;  // 16x the queue depth: backpressure
  Aligned src(block * blocks);
  std::mt19937 rng(1);
  for (size_t i = 0; i < src.size; ++i) src.data[i] = char(rng());
  auto file = Env::Default()->NewWritableFile(dir_.Sub("f"), FileOptions{true});
  ASSERT_OK(file);
  std::atomic<int> done{0};
  // Submitted out of order on purpose.
  for (size_t k = 0; k < blocks; ++k) {
    size_t i = (k * 37) % blocks;
    ASSERT_OK(engine->SubmitWrite(file->get(), src.data + i * block, block, i * block,
                                  [&](const Status& s, size_t n) {
                                    EXPECT_OK(s);
                                    EXPECT_EQ(n, block);
                                    ++done;
                                  }));
  }
  ASSERT_OK(engine->Drain());
  EXPECT_EQ(done.load(), int(blocks));
  ASSERT_OK((*file)->Sync());
  ASSERT_OK((*file)->Close());

  auto rfile = Env::Default()->NewRandomAccessFile(dir_.Sub("f"), FileOptions{true});
  ASSERT_OK(rfile);
  Aligned dst(src.size);
  std::memset(dst.data, 0, dst.size);
  for (size_t i = 0; i < blocks; ++i) {
    ASSERT_OK(engine->SubmitRead(rfile->get(), dst.data + i * block, block, i * block));
  }
  ASSERT_OK(engine->Drain());
  EXPECT_EQ(0, std::memcmp(src.data, dst.data, src.size));
}

TEST_P(IoEngineTest, ReadPastEndIsShortNotAnError) {
  auto engine = Engine();
  ASSERT_OK(WriteStringToFileSync(Env::Default(), dir_.Sub("small"), std::string(5000, 'x')));
  auto rfile = Env::Default()->NewRandomAccessFile(dir_.Sub("small"), FileOptions{false});
  ASSERT_OK(rfile);
  Aligned dst(8192);
  size_t got = 0;
  ASSERT_OK(engine->SubmitRead(rfile->get(), dst.data, 8192, 0, [&](const Status& s, size_t n) {
    EXPECT_OK(s);
    got = n;
  }));
  ASSERT_OK(engine->Drain());
  EXPECT_EQ(got, 5000u);
}

TEST_P(IoEngineTest, RegisteredBuffersWork) {
  auto engine = Engine();
  Aligned src(1 << 20);
  std::memset(src.data, 7, src.size);
  engine->RegisterBuffer(src.data, src.size);
  auto file = Env::Default()->NewWritableFile(dir_.Sub("fixed"), FileOptions{true});
  ASSERT_OK(file);
  for (size_t off = 0; off < src.size; off += 256 * 1024) {
    ASSERT_OK(engine->SubmitWrite(file->get(), src.data + off, 256 * 1024, off));
  }
  ASSERT_OK(engine->Drain());
  engine->UnregisterBuffer(src.data);
  if (GetParam() == IoEngineKind::kUring) {
    EXPECT_EQ(engine->fixed_bytes(), src.size);
  }
  auto back = ReadFileToString(Env::Default(), dir_.Sub("fixed"));
  ASSERT_OK(back);
  EXPECT_EQ(*back, std::string(src.size, 7));
}

TEST_P(IoEngineTest, BuffersStayRegisteredAndCanBeForgottenFromAnotherThread) {
  auto engine = Engine();
  Aligned a(1 << 20), b(1 << 20);
  std::memset(a.data, 1, a.size);
  std::memset(b.data, 2, b.size);
  engine->RegisterBuffer(a.data, a.size);
  engine->RegisterBuffer(a.data, a.size);  // again: no second registration
  engine->RegisterBuffer(b.data, b.size);
  auto file = Env::Default()->NewWritableFile(dir_.Sub("two"), FileOptions{true});
  ASSERT_OK(file);
  // While `b` is written, another thread forgets `a` (as the staging pool does).
  std::thread forget([&] { engine->UnregisterBuffer(a.data); });
  for (size_t off = 0; off < b.size; off += 128 * 1024) {
    ASSERT_OK(engine->SubmitWrite(file->get(), b.data + off, 128 * 1024, off));
  }
  forget.join();
  ASSERT_OK(engine->SubmitWrite(file->get(), a.data, a.size, b.size));  // now a plain write
  ASSERT_OK(engine->Drain());
  if (GetParam() == IoEngineKind::kUring) {
    EXPECT_EQ(engine->fixed_bytes(), b.size);
  }
  auto back = ReadFileToString(Env::Default(), dir_.Sub("two"));
  ASSERT_OK(back);
  EXPECT_EQ(*back, std::string(b.size, 2) + std::string(a.size, 1));
}

TEST_P(IoEngineTest, ShortWriteIsResubmittedAndItsErrorReported) {
  // Past RLIMIT_FSIZE the kernel writes what fits (a short write), then
  // fails the rest with EFBIG: the engine must resubmit and surface EFBIG.
  auto engine = Engine();
  struct rlimit old;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto prev = signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = old;
  lim.rlim_cur = 12288;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
  Aligned src(16384);
  std::memset(src.data, 1, src.size);
  auto file = Env::Default()->NewWritableFile(dir_.Sub("limited"), FileOptions{false});
  ASSERT_OK(file);
  size_t reported = 1;
  Status on_done;
  ASSERT_OK(engine->SubmitWrite(file->get(), src.data, src.size, 0, [&](const Status& s, size_t n) {
    on_done = s;
    reported = n;
  }));
  Status s = engine->Drain();
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, prev);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.sys_errno(), EFBIG) << s.ToString();
  EXPECT_EQ(on_done.code(), s.code());
  EXPECT_EQ(reported, 0u);
  auto size = ReadFileToString(Env::Default(), dir_.Sub("limited"));
  ASSERT_OK(size);
  EXPECT_EQ(size->size(), 12288u);  // the short part did land
}

TEST_P(IoEngineTest, ErrorsAreStickyUntilDrain) {
  auto engine = Engine();
  FaultEnv env(Env::Default());
  auto file = env.NewWritableFile(dir_.Sub("faulty"), FileOptions{false});
  ASSERT_OK(file);
  env.FailWritesAfterBytes(4096, ENOSPC);
  Aligned src(4096);
  std::memset(src.data, 0, 4096);
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK(engine->SubmitWrite(file->get(), src.data, 4096, uint64_t(i) * 4096));
  }
  Status s = engine->Drain();
  EXPECT_EQ(s.code(), Code::kResourceExhausted) << s.ToString();
  EXPECT_OK(engine->Drain()) << "Drain returns an error once";
}

INSTANTIATE_TEST_SUITE_P(Engines, IoEngineTest,
                         ::testing::Values(IoEngineKind::kUring, IoEngineKind::kPosix),
                         [](const auto& info) {
                           return std::string(info.param == IoEngineKind::kUring ? "uring"
                                                                                 : "posix");
                         });

TEST(IoEngineSelection, ForcedPosixByEnvironment) {
  setenv("STINT_IO", "posix", 1);
  auto e = NewIoEngine(IoEngineOptions{});
  unsetenv("STINT_IO");
  ASSERT_OK(e);
  EXPECT_STREQ((*e)->name(), "posix");
  EXPECT_FALSE(ParseIoEngineKind("spdk").ok());
}

}  // namespace
}  // namespace stint
