// The Checkpointer's device path (TensorShard::device >= 0) through the
// HostCopier double: staged future, copy tickets, pinned staging buffers,
// load into device destinations. Runs without a GPU; the same path with CUDA
// is in cuda_copier_test.
#include <gtest/gtest.h>

#include <numeric>

#include "stint/checkpointer.h"
#include "util/host_copier.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

struct DeviceState {
  explicit DeviceState(float seed) : w(300000), b(1000) {
    std::iota(w.begin(), w.end(), seed);
    std::iota(b.begin(), b.end(), int32_t(seed) * 7);
  }
  State AsState(void* stream = nullptr) {
    State s;
    s.tensors.push_back({"w", DType::kFloat32, {300, 1000}, {}, {}, w.data(), 0, stream});
    s.tensors.push_back({"b", DType::kInt32, {1000}, {}, {}, b.data()});  // host
    s.blobs["meta"] = "x";
    return s;
  }
  std::vector<TensorDest> Dests() {
    return {{"w", DType::kFloat32, {300, 1000}, {}, {}, w.data(), 0, nullptr},
            {"b", DType::kInt32, {1000}, {}, {}, b.data()}};
  }
  std::vector<float> w;
  std::vector<int32_t> b;
};

CheckpointOptions Options(const std::string& root, DeviceCopier* copier) {
  CheckpointOptions o;
  o.root = root;
  o.device_copier = copier;
  o.chunk_size = 64 << 10;
  o.io_engine = "posix";
  return o;
}

TEST(DeviceSnapshot, DeviceTensorWithoutCopierIsRefused) {
  TempDir dir;
  auto ckpt = Checkpointer::Open(Options(dir.Sub("c"), nullptr));
  ASSERT_OK(ckpt);
  DeviceState s(1);
  auto h = (*ckpt)->Save(1, s.AsState());
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(h.status().message().find("device_copier"), std::string::npos);
}

TEST(DeviceSnapshot, SaveCopiesThroughCopierAndLoadsBackToDevice) {
  TempDir dir;
  HostCopier copier;
  copier.copy_delay = std::chrono::milliseconds(50);
  auto ckpt = Checkpointer::Open(Options(dir.Sub("c"), &copier));
  ASSERT_OK(ckpt);
  DeviceState s(3);
  auto h = (*ckpt)->Save(7, s.AsState());
  ASSERT_OK(h);
  // Save() only enqueued the device copy: staged is not ready before it ran.
  EXPECT_NE(h->staged.wait_for(std::chrono::milliseconds(0)), std::future_status::ready);
  ASSERT_OK(h->staged.get());
  ASSERT_OK(h->durable.get());
  EXPECT_EQ(copier.d2h_calls.load(), 1);
  EXPECT_EQ(copier.registrations.load(), 1);  // the staging buffer, once
  auto stats = (*ckpt)->stats();
  ASSERT_TRUE(stats.last.has_value());
  EXPECT_GE(stats.last->device_copy_seconds, 0.04);
  EXPECT_LT(stats.last->snapshot_seconds, stats.last->device_copy_seconds);

  // A second save of the same size reuses the pinned buffer: no new registration.
  DeviceState s2(5);
  auto h2 = (*ckpt)->Save(8, s2.AsState());
  ASSERT_OK(h2);
  ASSERT_OK(h2->durable.get());
  EXPECT_EQ(copier.registrations.load(), 1);

  DeviceState out(0);
  auto loaded = (*ckpt)->Load(out.Dests(), LoadOptions{7});
  ASSERT_OK(loaded);
  EXPECT_EQ(out.w, s.w);
  EXPECT_EQ(out.b, s.b);
  EXPECT_EQ(copier.h2d_calls.load(), 1);
  // The load's bounce buffer was pinned and released again.
  EXPECT_EQ(copier.registrations.load(), 2);
  EXPECT_EQ(copier.unregistrations.load(), 1);
}

// Restoring device tensors pins a bounded buffer, not the whole state: a
// tensor bigger than device_load_bytes arrives in pieces of rows, each copy
// round reusing the buffer, and the bytes land where they belong.
TEST(DeviceSnapshot, LoadIntoDeviceGoesThroughABoundedPinnedBuffer) {
  TempDir dir;
  HostCopier copier;
  CheckpointOptions o = Options(dir.Sub("c"), &copier);
  o.device_load_bytes = 256 << 10;  // w is 1.2 MB: 300 rows of 4000 bytes
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  DeviceState s(3);
  auto h = (*ckpt)->Save(7, s.AsState());
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());
  const int registered_by_save = copier.registrations.load();

  DeviceState out(0);
  ASSERT_OK((*ckpt)->Load(out.Dests(), LoadOptions{7}));
  EXPECT_EQ(out.w, s.w);
  EXPECT_EQ(out.b, s.b);
  EXPECT_EQ(copier.registrations.load(), registered_by_save + 1);  // one buffer for the load
  EXPECT_EQ(copier.unregistrations.load(), 1);
  // 1.2 MB through a 256 KiB buffer: at least five rounds.
  EXPECT_GE(copier.h2d_calls.load(), 5);
  // The staging pool's buffer is the save's; the load's is bounded.
  DeviceState fresh(0);
  HostCopier load_copier;
  CheckpointOptions lo = o;
  lo.device_copier = &load_copier;
  lo.read_only = true;
  auto reader = Checkpointer::Open(lo);
  ASSERT_OK(reader);
  ASSERT_OK((*reader)->Load(fresh.Dests(), LoadOptions{7}));
  EXPECT_EQ(fresh.w, s.w);
  EXPECT_LE(load_copier.largest_registration(), size_t(256) << 10);
}

// A bound below one row (4000 bytes): each round is one row.
TEST(DeviceSnapshot, LoadIntoDeviceWithABoundBelowOneRowCopiesARowARound) {
  TempDir dir;
  HostCopier copier;
  CheckpointOptions o = Options(dir.Sub("c"), &copier);
  o.device_load_bytes = 1000;  // one row of w is 4000 bytes
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  DeviceState s(9);
  auto h = (*ckpt)->Save(1, s.AsState());
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());
  DeviceState out(0);
  ASSERT_OK((*ckpt)->Load(out.Dests(), LoadOptions{1}));
  EXPECT_EQ(out.w, s.w);
  EXPECT_EQ(copier.h2d_calls.load(), 300);
}

TEST(DeviceSnapshot, FailedCopyFailsStagedAndDurableAndNothingCommits) {
  TempDir dir;
  HostCopier copier;
  auto ckpt = Checkpointer::Open(Options(dir.Sub("c"), &copier));
  ASSERT_OK(ckpt);
  copier.fail_next_copy = true;
  DeviceState s(1);
  auto h = (*ckpt)->Save(1, s.AsState());
  ASSERT_OK(h);
  EXPECT_FALSE(h->staged.get().ok());
  Status d = h->durable.get();
  EXPECT_FALSE(d.ok());
  EXPECT_NE(d.message().find("device-to-host copy"), std::string::npos) << d.ToString();
  EXPECT_TRUE((*ckpt)->ListCommitted()->empty());
  EXPECT_FALSE((*ckpt)->Flush().ok());  // reported once more
  auto h2 = (*ckpt)->Save(2, s.AsState());
  ASSERT_OK(h2);
  ASSERT_OK(h2->durable.get());
}

// A device copy that never completes (a wedged device): Flush() with a
// timeout says which step is stuck, the save fails by itself after
// copy_timeout, and the destructor returns. The copy lands later in the
// abandoned buffer, which stays mapped.
TEST(DeviceSnapshot, WedgedCopyFailsTheSaveAndNothingHangs) {
  TempDir dir;
  DeviceState s(1);  // outlives the copier, which copies from it when released
  HostCopier copier;
  copier.Hold();  // no copy completes until the copier is destroyed
  CheckpointOptions o = Options(dir.Sub("c"), &copier);
  o.copy_timeout = std::chrono::milliseconds(500);
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  auto h = (*ckpt)->Save(1, s.AsState());
  ASSERT_OK(h);
  Status flushed = (*ckpt)->Flush(std::chrono::milliseconds(1));
  if (flushed.code() == Code::kDeadlineExceeded) {
    EXPECT_NE(flushed.message().find("step 1"), std::string::npos) << flushed.ToString();
  }
  // Generous: the save gives up at copy_timeout by itself.
  ASSERT_EQ(h->durable.wait_for(std::chrono::minutes(2)), std::future_status::ready)
      << "the save waits for a wedged copy forever";
  Status d = h->durable.get();
  EXPECT_EQ(d.code(), Code::kDeadlineExceeded) << d.ToString();
  EXPECT_NE(d.message().find("copy_timeout"), std::string::npos) << d.ToString();
  EXPECT_EQ(h->staged.get().code(), Code::kDeadlineExceeded);
  EXPECT_EQ((*ckpt)->Flush().code(), Code::kDeadlineExceeded);  // reported once more
  EXPECT_TRUE((*ckpt)->ListCommitted()->empty());
  ckpt->reset();  // returns: nothing waits for the copy any more
  EXPECT_EQ(copier.copies_pending(), 1);
}

TEST(DeviceSnapshot, PinningFailureFailsTheSaveClearly) {
  TempDir dir;
  HostCopier copier;
  copier.fail_register = true;
  auto ckpt = Checkpointer::Open(Options(dir.Sub("c"), &copier));
  ASSERT_OK(ckpt);
  DeviceState s(1);
  auto h = (*ckpt)->Save(1, s.AsState());
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("cudaHostRegister"), std::string::npos)
      << h.status().ToString();
}

TEST(DeviceSnapshot, LoadIntoDeviceWithoutCopierIsRefused) {
  TempDir dir;
  HostCopier copier;
  {
    auto ckpt = Checkpointer::Open(Options(dir.Sub("c"), &copier));
    DeviceState s(1);
    auto h = (*ckpt)->Save(1, s.AsState());
    ASSERT_OK(h);
    ASSERT_OK(h->durable.get());
  }
  auto ckpt = Checkpointer::Open(Options(dir.Sub("c"), nullptr));
  DeviceState out(0);
  auto loaded = (*ckpt)->Load(out.Dests());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), Code::kFailedPrecondition);
}

}  // namespace
}  // namespace stint
