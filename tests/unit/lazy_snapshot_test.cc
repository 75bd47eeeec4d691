// The snapshot rule on CPU: lazy host snapshots (SnapshotMode::kLazy) and
// the barrier (Checkpointer::BeforeWrite) for host tensors and, through the
// HostCopier double whose copies run late (a gate the test opens), for
// device tensors. A "training step" here writes the saved tensors right
// after the barrier; the checkpoint must still hold the values of the save.
#include <gtest/gtest.h>

#include <future>
#include <numeric>
#include <set>
#include <utility>
#include <thread>

#include "stint/checkpointer.h"
#include "stint/env.h"
#include "util/host_copier.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

using std::chrono::milliseconds;

bool Ready(const std::shared_future<Status>& f) {
  return f.wait_for(milliseconds(0)) == std::future_status::ready;
}

// A model's state: parameters (written by the optimizer step) and a
// BatchNorm-like buffer (written by the forward pass).
struct Model {
  explicit Model(size_t n) : weight(n), running_mean(4099) {
    std::iota(weight.begin(), weight.end(), 1.0f);
    std::iota(running_mean.begin(), running_mean.end(), -5.0f);
  }
  State AsState(int device = kHostDevice) {
    State s;
    TensorShard w{"weight", DType::kFloat32, {int64_t(weight.size())}, {}, {}, weight.data(),
                  device};
    TensorShard b{"running_mean", DType::kFloat32, {int64_t(running_mean.size())}, {}, {},
                  running_mean.data(), device};
    b.written_at = WriteBarrier::kForward;
    s.tensors = {w, b};
    s.blobs["step"] = "7";
    return s;
  }
  std::vector<TensorDest> Dests() {
    return {{"weight", DType::kFloat32, {int64_t(weight.size())}, {}, {}, weight.data()},
            {"running_mean", DType::kFloat32, {int64_t(running_mean.size())}, {}, {},
             running_mean.data()}};
  }
  void Forward() {
    for (auto& v : running_mean) v = v * 0.9f + 0.1f;
  }
  void OptimizerStep() {
    for (auto& v : weight) v -= 0.5f;
  }
  std::vector<float> weight, running_mean;
};

CheckpointOptions Options(const std::string& root, SnapshotMode mode, DeviceCopier* copier) {
  CheckpointOptions o;
  o.root = root;
  o.snapshot = mode;
  o.device_copier = copier;
  o.chunk_size = 256 << 10;
  o.io_engine = "posix";
  o.threads = 2;
  return o;
}

Model LoadStep(Checkpointer& ckpt, uint64_t step, size_t n) {
  Model out(n);
  std::fill(out.weight.begin(), out.weight.end(), 0.0f);
  std::fill(out.running_mean.begin(), out.running_mean.end(), 0.0f);
  EXPECT_OK(ckpt.Load(out.Dests(), LoadOptions{step}));
  return out;
}

TEST(LazySnapshot, HostSaveReturnsFirstAndTheBarrierWaitsForTheCopies) {
  TempDir dir;
  auto ckpt = Checkpointer::Open(Options(dir.Sub("c"), SnapshotMode::kLazy, nullptr));
  ASSERT_OK(ckpt);
  const size_t n = 8u << 20;  // 32 MiB: the copy is still running when Save() returns
  Model m(n);
  const Model at_save = m;
  auto h = (*ckpt)->Save(1, m.AsState());
  ASSERT_OK(h);
  ASSERT_OK((*ckpt)->BeforeWrite(WriteBarrier::kForward));
  m.Forward();
  ASSERT_OK((*ckpt)->BeforeWrite(WriteBarrier::kOptimizerStep));
  // Host copies are done once the optimizer-step barrier returned.
  EXPECT_TRUE(Ready(h->staged));
  EXPECT_OK(h->staged.get());
  m.OptimizerStep();
  ASSERT_OK(h->durable.get());
  Model loaded = LoadStep(**ckpt, 1, n);
  EXPECT_EQ(loaded.weight, at_save.weight);
  EXPECT_EQ(loaded.running_mean, at_save.running_mean);
  auto stats = (*ckpt)->stats();
  ASSERT_TRUE(stats.last.has_value());
  EXPECT_GE(stats.last->staged_seconds, stats.last->snapshot_seconds);
}

TEST(LazySnapshot, LazyFilesAreBitIdenticalToEagerOnes) {
  TempDir dir;
  const size_t n = (3u << 20) + 17;  // odd: the last chunk is not 4 KiB aligned
  Model m(n);
  std::string files[2];
  int i = 0;
  for (SnapshotMode mode : {SnapshotMode::kEager, SnapshotMode::kLazy}) {
    const std::string root = dir.Sub(mode == SnapshotMode::kLazy ? "lazy" : "eager");
    auto ckpt = Checkpointer::Open(Options(root, mode, nullptr));
    ASSERT_OK(ckpt);
    for (uint64_t step = 1; step <= 3; ++step) {
      auto h = (*ckpt)->Save(step, m.AsState());
      ASSERT_OK(h);
      ASSERT_OK((*ckpt)->BeforeWrite(WriteBarrier::kOptimizerStep));
      if (step < 3) m.OptimizerStep();
    }
    ASSERT_OK((*ckpt)->Flush());
    auto bytes = ReadFileToString(Env::Default(), root + "/step-00000003/rank-00000.stint");
    ASSERT_OK(bytes);
    files[i++] = std::move(*bytes);
    m.weight.assign(n, 0);
    std::iota(m.weight.begin(), m.weight.end(), 1.0f);
  }
  ASSERT_FALSE(files[0].empty());
  EXPECT_TRUE(files[0] == files[1]) << "a lazy snapshot wrote other bytes than an eager one";
}

TEST(LazySnapshot, ManySavesInFlightEachHoldTheirOwnValues) {
  TempDir dir;
  CheckpointOptions o = Options(dir.Sub("c"), SnapshotMode::kLazy, nullptr);
  o.keep_last = 0;
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  const size_t n = 1u << 20;
  Model m(n);
  std::vector<Model> expected;
  std::vector<SaveHandle> handles;
  for (uint64_t step = 1; step <= 4; ++step) {
    expected.push_back(m);
    auto h = (*ckpt)->Save(step, m.AsState());
    ASSERT_OK(h);
    handles.push_back(*h);
    ASSERT_OK((*ckpt)->BeforeWrite(WriteBarrier::kForward));
    m.Forward();
    ASSERT_OK((*ckpt)->BeforeWrite(WriteBarrier::kOptimizerStep));
    m.OptimizerStep();
  }
  for (auto& h : handles) ASSERT_OK(h.durable.get());
  for (uint64_t step = 1; step <= 4; ++step) {
    Model loaded = LoadStep(**ckpt, step, n);
    EXPECT_EQ(loaded.weight, expected[step - 1].weight) << "step " << step;
    EXPECT_EQ(loaded.running_mean, expected[step - 1].running_mean) << "step " << step;
  }
}

TEST(LazySnapshot, DeviceForwardBarrierWaitsForBuffersOnlyAndTheStepForEverything) {
  TempDir dir;
  HostCopier copier;
  auto ckpt = Checkpointer::Open(Options(dir.Sub("c"), SnapshotMode::kLazy, &copier));
  ASSERT_OK(ckpt);
  const size_t n = 1u << 20;
  Model m(n);
  const Model at_save = m;
  // The buffers' copy is ticket 1 (kForward first); hold ticket 2, the parameters'.
  copier.Hold(2);
  auto h = (*ckpt)->Save(1, m.AsState(/*device=*/0));
  ASSERT_OK(h);
  EXPECT_EQ(copier.d2h_calls.load(), 2);
  ASSERT_OK((*ckpt)->BeforeWrite(WriteBarrier::kForward));  // returns: ticket 1 is not held
  m.Forward();
  EXPECT_FALSE(Ready(h->staged));

  auto step_barrier = std::async(std::launch::async, [&] {
    return (*ckpt)->BeforeWrite(WriteBarrier::kOptimizerStep);
  });
  // The optimizer step must not go ahead while the parameters' copy is held.
  EXPECT_EQ(step_barrier.wait_for(milliseconds(200)), std::future_status::timeout);
  copier.Release();
  ASSERT_OK(step_barrier.get());
  m.OptimizerStep();
  ASSERT_OK(h->staged.get());
  ASSERT_OK(h->durable.get());
  Model loaded = LoadStep(**ckpt, 1, n);
  EXPECT_EQ(loaded.weight, at_save.weight);
  EXPECT_EQ(loaded.running_mean, at_save.running_mean);
}

// The optimizer writes on whatever stream is current at the barrier, not
// on the one the tensors were saved from: that stream must wait.
TEST(LazySnapshot, DeviceBarrierOrdersTheStreamCurrentAtTheBarrier) {
  TempDir dir;
  HostCopier copier;
  auto ckpt = Checkpointer::Open(Options(dir.Sub("c"), SnapshotMode::kLazy, &copier));
  ASSERT_OK(ckpt);
  Model m(4096);
  int saved_on = 0, optimizer_on = 0;  // two streams' identities
  State state = m.AsState(/*device=*/0);
  for (auto& t : state.tensors) t.stream = &saved_on;
  copier.Hold();  // the copies are still in flight at the barrier
  auto h = (*ckpt)->Save(1, state);
  ASSERT_OK(h);
  std::vector<int> asked;
  std::promise<void> first_ask;
  // The double's OrderAfter holds the calling thread as the device would
  // hold the stream: the barrier returns once the copies ran.
  auto barrier = std::async(std::launch::async, [&] {
    return (*ckpt)->BeforeWrite(WriteBarrier::kOptimizerStep, std::chrono::minutes(1),
                                [&](int device) -> Result<void*> {
                                  if (asked.empty()) first_ask.set_value();
                                  asked.push_back(device);
                                  return static_cast<void*>(&optimizer_on);
                                });
  });
  // Released once the barrier asked for the stream, so the copies were in flight then.
  const bool was_asked =
      first_ask.get_future().wait_for(std::chrono::minutes(1)) == std::future_status::ready;
  copier.Release();
  ASSERT_TRUE(was_asked);
  ASSERT_OK(barrier.get());
  EXPECT_FALSE(asked.empty());
  for (int d : asked) EXPECT_EQ(d, 0);
  const std::set<std::pair<int, void*>> want = {{0, &optimizer_on}};
  EXPECT_EQ(copier.barrier_streams(), want);
  ASSERT_OK(h->durable.get());

  // An error finding the writing stream is the barrier's error.
  copier.Hold(3);  // save 2's copies (tickets 3 and 4) stay in flight
  auto h2 = (*ckpt)->Save(2, m.AsState(/*device=*/0));
  ASSERT_OK(h2);
  Status s = (*ckpt)->BeforeWrite(WriteBarrier::kOptimizerStep, std::chrono::minutes(1),
                                  [](int) -> Result<void*> { return Status::Unavailable("no"); });
  copier.Release();
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_NE(s.message().find("device 0"), std::string::npos) << s.ToString();
  ASSERT_OK(h2->durable.get());
}

TEST(LazySnapshot, BatchNormBufferIsConsistentWhenTheForwardRacesTheCopy) {
  // Eager host mode, device tensors: the copies outlast Save() anyway; the
  // forward barrier keeps the forward from updating the buffer under them.
  TempDir dir;
  HostCopier copier;
  copier.copy_delay = milliseconds(30);
  auto ckpt = Checkpointer::Open(Options(dir.Sub("c"), SnapshotMode::kEager, &copier));
  ASSERT_OK(ckpt);
  Model m(4096);
  const Model at_save = m;
  auto h = (*ckpt)->Save(1, m.AsState(/*device=*/0));
  ASSERT_OK(h);
  ASSERT_OK((*ckpt)->BeforeWrite(WriteBarrier::kForward));
  m.Forward();
  ASSERT_OK((*ckpt)->BeforeWrite(WriteBarrier::kOptimizerStep));
  m.OptimizerStep();
  ASSERT_OK(h->durable.get());
  Model loaded = LoadStep(**ckpt, 1, 4096);
  EXPECT_EQ(loaded.running_mean, at_save.running_mean);
  EXPECT_EQ(loaded.weight, at_save.weight);
}

TEST(LazySnapshot, OwnerIsReleasedOnTheCallingThreadAfterTheCopies) {
  TempDir dir;
  HostCopier copier;
  auto ckpt = Checkpointer::Open(Options(dir.Sub("c"), SnapshotMode::kLazy, &copier));
  ASSERT_OK(ckpt);
  Model m(1u << 20);
  std::promise<std::thread::id> released_on;
  {
    State s = m.AsState(/*device=*/0);
    s.owner = std::shared_ptr<const void>(
        new int(0), [&](const int* p) {
          released_on.set_value(std::this_thread::get_id());
          delete p;
        });
    copier.Hold();
    auto h = (*ckpt)->Save(1, s);
    ASSERT_OK(h);
  }  // the caller's State is gone; the save still holds the owner
  auto released = released_on.get_future();
  EXPECT_EQ(released.wait_for(milliseconds(0)), std::future_status::timeout);
  copier.Release();
  ASSERT_OK((*ckpt)->WaitStaged());
  ASSERT_EQ(released.wait_for(milliseconds(0)), std::future_status::ready);
  EXPECT_EQ(released.get(), std::this_thread::get_id());
  ASSERT_OK((*ckpt)->Flush());
}

TEST(LazySnapshot, TheNextSaveReleasesWhatFinishedSavesBorrowed) {
  // A loop that never calls a barrier (eager host mode, device copies) must
  // not pile up every save's borrowed tensors.
  TempDir dir;
  HostCopier copier;
  auto ckpt = Checkpointer::Open(Options(dir.Sub("c"), SnapshotMode::kEager, &copier));
  ASSERT_OK(ckpt);
  Model m(1u << 16);
  std::weak_ptr<const void> first;
  {
    State s = m.AsState(/*device=*/0);
    auto owner = std::make_shared<int>(1);
    first = owner;
    s.owner = std::move(owner);
    auto h = (*ckpt)->Save(1, s);
    ASSERT_OK(h);
    ASSERT_OK(h->staged.get());
  }
  EXPECT_FALSE(first.expired());  // held until a call on this thread
  auto h2 = (*ckpt)->Save(2, m.AsState(/*device=*/0));
  ASSERT_OK(h2);
  EXPECT_TRUE(first.expired());
  ASSERT_OK((*ckpt)->Flush());
}

TEST(LazySnapshot, FailedDeviceCopyFailsTheSaveNotTheBarrier) {
  TempDir dir;
  HostCopier copier;
  copier.fail_next_copy = true;  // the buffers' ticket
  auto ckpt = Checkpointer::Open(Options(dir.Sub("c"), SnapshotMode::kLazy, &copier));
  ASSERT_OK(ckpt);
  Model m(1u << 16);
  auto h = (*ckpt)->Save(1, m.AsState(/*device=*/0));
  ASSERT_OK(h);
  ASSERT_OK((*ckpt)->BeforeWrite(WriteBarrier::kOptimizerStep));
  EXPECT_FALSE(h->staged.get().ok());
  EXPECT_FALSE(h->durable.get().ok());
  EXPECT_FALSE((*ckpt)->Flush().ok());  // the background error, once
  auto committed = (*ckpt)->ListCommitted();
  ASSERT_OK(committed);
  EXPECT_TRUE(committed->empty());
  // The next save goes through.
  auto h2 = (*ckpt)->Save(2, m.AsState(/*device=*/0));
  ASSERT_OK(h2);
  ASSERT_OK((*ckpt)->WaitStaged());
  ASSERT_OK(h2->durable.get());
}

TEST(LazySnapshot, WaitStagedHasADeadline) {
  TempDir dir;
  HostCopier copier;
  auto ckpt = Checkpointer::Open(Options(dir.Sub("c"), SnapshotMode::kLazy, &copier));
  ASSERT_OK(ckpt);
  Model m(1u << 16);
  copier.Hold();
  auto h = (*ckpt)->Save(1, m.AsState(/*device=*/0));
  ASSERT_OK(h);
  Status s = (*ckpt)->WaitStaged(milliseconds(20));
  EXPECT_EQ(s.code(), Code::kDeadlineExceeded) << s.ToString();
  copier.Release();
  ASSERT_OK((*ckpt)->WaitStaged());
  ASSERT_OK(h->durable.get());
}

TEST(LazySnapshot, NothingInFlightMakesTheBarrierFree) {
  TempDir dir;
  auto ckpt = Checkpointer::Open(Options(dir.Sub("c"), SnapshotMode::kLazy, nullptr));
  ASSERT_OK(ckpt);
  ASSERT_OK((*ckpt)->BeforeWrite(WriteBarrier::kForward, milliseconds(0)));
  ASSERT_OK((*ckpt)->BeforeWrite(WriteBarrier::kOptimizerStep, milliseconds(0)));
  ASSERT_OK((*ckpt)->WaitStaged(milliseconds(0)));
}

}  // namespace
}  // namespace stint
