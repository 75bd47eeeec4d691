// The CUDA copier on a real device: pinned registration, D2H on the copy
// stream ordered after the producer stream, the lazy barrier, H2D restore,
// and a Checkpointer save/load of device memory. Skips with the driver's
// reason without a GPU.
#include "cuda_copier.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda_handles.h"
#include "device_probe.h"
#include "pinned_host.h"
#include "stint/checkpointer.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

#define SKIP_WITHOUT_GPU()                              \
  do {                                                  \
    auto n = CudaDeviceCount();                         \
    if (!n.ok()) GTEST_SKIP() << n.status().ToString(); \
  } while (0)

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) : bytes(n) { cudaMalloc(&ptr, n); }
  ~DeviceBuffer() { cudaFree(ptr); }
  void* ptr = nullptr;
  size_t bytes;
};

TEST(CudaCopier, NoDeviceGivesAClearReason) {
  auto n = CudaDeviceCount();
  if (n.ok()) GTEST_SKIP() << "a device is present";
  auto copier = NewCudaDeviceCopier();
  ASSERT_FALSE(copier.ok());
  EXPECT_EQ(copier.status().code(), Code::kUnavailable);
  EXPECT_NE(copier.status().message().find("no CUDA device"), std::string::npos);
}

TEST(CudaCopier, PinnedBufferIsExactSizeAndRegistered) {
  SKIP_WITHOUT_GPU();
  auto buf = PinnedHostBuffer::Allocate(3 * 4096 + 1, NumaNodeOfDevice(0));
  ASSERT_OK(buf);
  EXPECT_EQ((*buf)->size(), 4u * 4096);  // the page, never a power-of-two bucket
  cudaPointerAttributes attr;
  CUDA_OK(cudaPointerGetAttributes(&attr, (*buf)->data()));
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
}

TEST(CudaCopier, CopyIsOrderedAfterTheProducerStreamAndBarrierOrdersTheWrite) {
  SKIP_WITHOUT_GPU();
  auto copier = NewCudaDeviceCopier();
  ASSERT_OK(copier);
  const size_t n = 64 << 20;
  DeviceBuffer dev(n);
  ASSERT_NE(dev.ptr, nullptr);
  auto host = PinnedHostBuffer::Allocate(n);
  ASSERT_OK(host);
  cudaStream_t compute;
  CUDA_OK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CUDA_OK(cudaMemsetAsync(dev.ptr, 0x11, n, compute));
  CUDA_OK(cudaMemsetAsync(dev.ptr, 0x5a, n, compute));  // the copy must see this one
  bool done = false;
  auto ticket = (*copier)->CopyToHostAsync({DeviceCopy{0, compute, (*host)->data(), dev.ptr, n}},
                                           [&done] { done = true; });
  ASSERT_OK(ticket);
  // The lazy barrier, then a write on the compute stream: the copy never sees it.
  ASSERT_OK((*copier)->OrderBeforeWrite(0, compute));
  CUDA_OK(cudaMemsetAsync(dev.ptr, 0x77, n, compute));
  ASSERT_OK((*copier)->Wait(*ticket, std::chrono::seconds(30)));
  CUDA_OK(cudaStreamSynchronize(compute));
  EXPECT_TRUE(done);
  std::vector<char> expect(n, 0x5a);
  EXPECT_EQ(std::memcmp((*host)->data(), expect.data(), n), 0);
  EXPECT_EQ((*copier)->Wait(*ticket, std::chrono::seconds(1)).code(), Code::kNotFound);

  // Host to device, ordered before later work on the consumer stream.
  std::memset((*host)->data(), 0x33, n);
  ASSERT_OK((*copier)->CopyToDevice({DeviceCopy{0, compute, dev.ptr, (*host)->data(), n}},
                                    std::chrono::seconds(30)));
  std::vector<char> back(n);
  CUDA_OK(cudaMemcpyAsync(back.data(), dev.ptr, n, cudaMemcpyDeviceToHost, compute));
  CUDA_OK(cudaStreamSynchronize(compute));
  EXPECT_EQ(back, std::vector<char>(n, 0x33));
  CUDA_OK(cudaStreamDestroy(compute));
}

TEST(CudaCopier, CheckpointerRoundTripOfDeviceTensors) {
  SKIP_WITHOUT_GPU();
  auto copier = NewCudaDeviceCopier();
  ASSERT_OK(copier);
  const int64_t rows = 1024, cols = 4096;
  const size_t n = size_t(rows * cols) * sizeof(float);
  DeviceBuffer w(n), w2(n);
  std::vector<float> pattern(size_t(rows * cols));
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = float(i % 9973) * 0.5f;
  CUDA_OK(cudaMemcpy(w.ptr, pattern.data(), n, cudaMemcpyHostToDevice));
  cudaStream_t compute;
  CUDA_OK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));

  TempDir dir;
  CheckpointOptions o;
  o.root = dir.Sub("ckpt");
  o.device_copier = copier->get();
  o.keep_in_memory = true;
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  State state;
  state.tensors.push_back({"w", DType::kFloat32, {rows, cols}, {}, {}, w.ptr, 0, compute});
  auto h = (*ckpt)->Save(1, state);
  ASSERT_OK(h);
  ASSERT_OK((*copier)->OrderBeforeWrite(0, compute));
  CUDA_OK(cudaMemsetAsync(w.ptr, 0, n, compute));  // the "optimizer step"
  ASSERT_OK(h->staged.get());
  ASSERT_OK(h->durable.get());
  ASSERT_OK((*ckpt)->Flush());

  auto load_and_check = [&](Checkpointer* from, int tier) {
    CUDA_OK(cudaMemset(w2.ptr, 0, n));
    auto loaded = from->Load({{"w", DType::kFloat32, {rows, cols}, {}, {}, w2.ptr, 0, compute}});
    ASSERT_OK(loaded);
    EXPECT_EQ(loaded->tier, tier);
    std::vector<float> back(pattern.size());
    CUDA_OK(cudaStreamSynchronize(compute));
    CUDA_OK(cudaMemcpy(back.data(), w2.ptr, n, cudaMemcpyDeviceToHost));
    EXPECT_EQ(back, pattern) << "tier " << tier;
  };
  load_and_check(ckpt->get(), 0);  // from memory, H2D on the copy stream
  ckpt->reset();
  o.keep_in_memory = false;
  auto fresh = Checkpointer::Open(o);
  ASSERT_OK(fresh);
  load_and_check(fresh->get(), 1);  // from disk
  CUDA_OK(cudaStreamDestroy(compute));
}

// The optimizer writes on another stream than the one the tensor was saved
// from: BeforeWrite with the writer's stream must make that stream wait.
// Without it (the saved-from stream waiting) the memset below, much faster
// than a 512 MB device-to-host copy, lands in the checkpoint.
// (device-unverified when written)
TEST(CudaCopier, BarrierOrdersTheWritersStreamNotTheSavedFromOne) {
  SKIP_WITHOUT_GPU();
  auto copier = NewCudaDeviceCopier();
  ASSERT_OK(copier);
  const size_t n = 512 << 20;
  DeviceBuffer w(n);
  ASSERT_NE(w.ptr, nullptr);
  cudaStream_t saved_from, optimizer;
  CUDA_OK(cudaStreamCreateWithFlags(&saved_from, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&optimizer, cudaStreamNonBlocking));
  CUDA_OK(cudaMemsetAsync(w.ptr, 0x5a, n, saved_from));
  TempDir dir;
  CheckpointOptions o;
  o.root = dir.Sub("ckpt");
  o.device_copier = copier->get();
  o.snapshot = SnapshotMode::kLazy;
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  State state;
  state.tensors.push_back({"w", DType::kUInt8, {int64_t(n)}, {}, {}, w.ptr, 0, saved_from});
  auto h = (*ckpt)->Save(1, state);
  ASSERT_OK(h);
  ASSERT_OK((*ckpt)->BeforeWrite(WriteBarrier::kOptimizerStep, std::chrono::minutes(1),
                                 [&](int) -> Result<void*> { return optimizer; }));
  CUDA_OK(cudaMemsetAsync(w.ptr, 0x77, n, optimizer));  // the optimizer step
  ASSERT_OK(h->durable.get());
  CUDA_OK(cudaStreamSynchronize(optimizer));
  std::vector<uint8_t> back(n);
  ASSERT_OK((*ckpt)->Load({{"w", DType::kUInt8, {int64_t(n)}, {}, {}, back.data()}},
                          LoadOptions{1}));
  EXPECT_EQ(back, std::vector<uint8_t>(n, 0x5a));
  CUDA_OK(cudaStreamDestroy(saved_from));
  CUDA_OK(cudaStreamDestroy(optimizer));
}

// A copier made while device 0 is current (a rank before set_device), used
// for device 1's memory, on this thread and on the Checkpointer's own
// threads, creates no context on device 0. ctest runs each test in its own
// process, so device 0 starts without one. (device-unverified when written)
TEST(CudaCopier, CopierMadeBeforeSetDeviceLeavesDevice0Alone) {
  SKIP_WITHOUT_GPU();
  if (*CudaDeviceCount() < 2) GTEST_SKIP() << "needs 2 CUDA devices";
  if (CudaPrimaryContextActive(0)) GTEST_SKIP() << "device 0 already has a context";
  auto copier = NewCudaDeviceCopier();  // device 0 current, no context
  ASSERT_OK(copier);
  CUDA_OK(cudaSetDevice(1));
  const size_t n = 8 << 20;
  DeviceBuffer w(n), w2(n);
  CUDA_OK(cudaMemset(w.ptr, 0x21, n));
  TempDir dir;
  CheckpointOptions o;
  o.root = dir.Sub("ckpt");
  o.device_copier = copier->get();
  {
    auto ckpt = Checkpointer::Open(o);
    ASSERT_OK(ckpt);
    State state;
    state.tensors.push_back({"w", DType::kUInt8, {int64_t(n)}, {}, {}, w.ptr, 1, nullptr});
    auto h = (*ckpt)->Save(1, state);
    ASSERT_OK(h);
    ASSERT_OK(h->durable.get());
    ASSERT_OK((*ckpt)->Load({{"w", DType::kUInt8, {int64_t(n)}, {}, {}, w2.ptr, 1, nullptr}}));
  }
  std::vector<uint8_t> back(n);
  CUDA_OK(cudaMemcpy(back.data(), w2.ptr, n, cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, std::vector<uint8_t>(n, 0x21));
  copier->reset();
  EXPECT_FALSE(CudaPrimaryContextActive(0));
}

}  // namespace
}  // namespace stint
