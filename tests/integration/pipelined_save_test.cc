// A save's first chunks reach its data file while later ones are still
// being copied (by Save() itself: StagingWatermark; from a device: groups
// of tickets): Save() -> durable takes about the time of the writes, not of
// the copies plus the writes.
//
// Deterministic, not timed. Host: the last tensor's memory is protected, so
// the copy of it faults. The SIGSEGV handler holds that copy until the data file
// has been written to (or a deadline passes), then lets it go on. Were the
// writes to start only after the whole snapshot, the handler would wait out
// its deadline and the test fail.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "stint/checkpointer.h"
#include "stint/env.h"
#include "util/host_copier.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

// What the fault handler and the Env share (a signal handler reaches only
// globals).
std::atomic<bool> g_data_written{false};
std::atomic<bool> g_fault_seen{false};
std::atomic<bool> g_written_while_held{false};
char* g_region = nullptr;
size_t g_region_len = 0;

constexpr double kHoldDeadlineSeconds = 60;

double MonotonicSeconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

// Holds a copy that touched the protected region until the data file has
// been written to, then opens the region; the faulting instruction runs
// again. Only async-signal-safe calls.
void HoldCopyUntilWritten(int, siginfo_t* info, void*) {
  char* at = static_cast<char*>(info->si_addr);
  if (at < g_region || at >= g_region + g_region_len) {
    signal(SIGSEGV, SIG_DFL);  // a real crash: fault again, and die of it
    return;
  }
  g_fault_seen = true;
  const double deadline = MonotonicSeconds() + kHoldDeadlineSeconds;
  while (!g_data_written && MonotonicSeconds() < deadline) {
    timespec pause{0, 1000 * 1000};
    nanosleep(&pause, nullptr);
  }
  g_written_while_held = g_data_written.load();
  mprotect(g_region, g_region_len, PROT_READ | PROT_WRITE);
}

// Real files; notes the first write to a rank's data file.
class WriteWatchEnv : public EnvWrapper {
 public:
  explicit WriteWatchEnv(Env* base) : EnvWrapper(base) {}

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        const FileOptions& options) override {
    STINT_ASSIGN_OR_RETURN(auto file, target()->NewWritableFile(path, options));
    if (path.size() < 6 || path.compare(path.size() - 6, 6, ".stint") != 0) return file;
    return std::unique_ptr<WritableFile>(new WatchedFile(std::move(file)));
  }

 private:
  class WatchedFile final : public WritableFile {
   public:
    explicit WatchedFile(std::unique_ptr<WritableFile> base) : base_(std::move(base)) {}
    Status PositionedWrite(const void* data, size_t n, uint64_t offset) override {
      Status s = base_->PositionedWrite(data, n, offset);
      if (s.ok()) g_data_written = true;
      return s;
    }
    Status Allocate(uint64_t size) override { return base_->Allocate(size); }
    Status Sync() override { return base_->Sync(); }
    Status Fsync() override { return base_->Fsync(); }
    Status Close() override { return base_->Close(); }
    bool direct_io() const override { return base_->direct_io(); }
    const std::string& path() const override { return base_->path(); }

   private:
    std::unique_ptr<WritableFile> base_;
  };
};

class PipelinedSaveTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    struct sigaction sa {};
    sa.sa_sigaction = HoldCopyUntilWritten;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ASSERT_EQ(sigaction(SIGSEGV, &sa, &old_), 0);
  }
  void TearDown() override {
    sigaction(SIGSEGV, &old_, nullptr);
    if (g_region != nullptr) munmap(g_region, g_region_len);
    g_region = nullptr;
  }
  struct sigaction old_ {};
  TempDir dir_;
};

TEST_P(PipelinedSaveTest, TheFirstChunksAreWrittenWhileLaterOnesAreStillCopied) {
  WriteWatchEnv env(Env::Default());
  CheckpointOptions o;
  o.root = dir_.Sub("ckpt");
  o.env = &env;
  o.io_engine = GetParam();
  o.chunk_size = 1u << 20;
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);

  // 96 MiB copied first (more than one write window), then 1 MiB whose
  // copy faults.
  std::vector<float> first((96u << 20) / sizeof(float));
  for (size_t i = 0; i < first.size(); ++i) first[i] = float(i % 1000) * 0.5f;
  g_region_len = 1u << 20;
  void* mem =
      mmap(nullptr, g_region_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  g_region = static_cast<char*>(mem);
  float* last = reinterpret_cast<float*>(g_region);
  const size_t last_n = g_region_len / sizeof(float);
  for (size_t i = 0; i < last_n; ++i) last[i] = -float(i);
  ASSERT_EQ(mprotect(g_region, g_region_len, PROT_NONE), 0);
  g_data_written = g_fault_seen = g_written_while_held = false;

  State state;
  state.tensors.push_back(
      {"first", DType::kFloat32, {int64_t(first.size())}, {}, {}, first.data()});
  state.tensors.push_back({"last", DType::kFloat32, {int64_t(last_n)}, {}, {}, last});
  auto h = (*ckpt)->Save(5, state);
  ASSERT_OK(h);
  EXPECT_TRUE(g_fault_seen) << "the protected tensor was never copied";
  EXPECT_TRUE(g_written_while_held)
      << "no byte reached the data file in " << kHoldDeadlineSeconds
      << " s while Save() was held copying its last tensor: writes wait for the whole snapshot";
  ASSERT_OK(h->durable.get());

  // What was written while the copy was held is the saved state, whole.
  std::vector<float> first_back(first.size()), last_back(last_n);
  auto loaded =
      (*ckpt)->Load({{"first", DType::kFloat32, {int64_t(first.size())}, {}, {}, first_back.data()},
                     {"last", DType::kFloat32, {int64_t(last_n)}, {}, {}, last_back.data()}});
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->step, 5u);
  EXPECT_EQ(std::memcmp(first_back.data(), first.data(), first.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(last_back.data(), last, g_region_len), 0);
}

// Device tensors: their copies go out in groups of tickets, and the first
// group's chunks are written while a later group is still held on the
// "device" (the HostCopier double, held from its second ticket on).
TEST_P(PipelinedSaveTest, TheFirstDeviceGroupIsWrittenWhileALaterOneIsStillCopied) {
  WriteWatchEnv env(Env::Default());
  HostCopier copier;
  CheckpointOptions o;
  o.root = dir_.Sub("ckpt");
  o.env = &env;
  o.io_engine = GetParam();
  o.chunk_size = 1u << 20;
  o.device_copier = &copier;
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);

  // Two "device" tensors of 64 MiB: a ticket each.
  const size_t n = (64u << 20) / sizeof(float);
  std::vector<float> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = float(i % 977);
    b[i] = -float(i % 613);
  }
  State state;
  state.tensors.push_back({"a", DType::kFloat32, {int64_t(n)}, {}, {}, a.data(), 0, nullptr});
  state.tensors.push_back({"b", DType::kFloat32, {int64_t(n)}, {}, {}, b.data(), 0, nullptr});
  g_data_written = false;
  copier.Hold(/*from_ticket=*/2);
  auto h = (*ckpt)->Save(9, state);
  ASSERT_OK(h);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!g_data_written && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const bool written_while_held = g_data_written;
  EXPECT_GE(copier.copies_pending(), 1) << "the second group was not held";
  copier.Release();
  EXPECT_TRUE(written_while_held)
      << "no byte reached the data file in 60 s while the second device group was held: "
         "writes wait for every device copy";
  ASSERT_OK(h->staged.get());
  ASSERT_OK(h->durable.get());
  EXPECT_EQ(copier.d2h_calls.load(), 2);

  std::vector<float> a_back(n), b_back(n);
  auto loaded = (*ckpt)->Load({{"a", DType::kFloat32, {int64_t(n)}, {}, {}, a_back.data()},
                               {"b", DType::kFloat32, {int64_t(n)}, {}, {}, b_back.data()}});
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->step, 9u);
  EXPECT_EQ(a_back, a);
  EXPECT_EQ(b_back, b);
}

INSTANTIATE_TEST_SUITE_P(Engines, PipelinedSaveTest, ::testing::Values("uring", "posix"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace stint
