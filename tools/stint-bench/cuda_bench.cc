// stint-cuda-bench: the CUDA checkpoint path against its targets, on one GPU.
//
//   stint-cuda-bench --root /nvme/bench [--state-gb 10] [--tensors 64] [--replica /shared/bench]
//
// Prints, for a state of --state-gb spread over --tensors device tensors:
//   pinned memcpy   cudaMemcpyAsync D2H into pinned memory (the ceiling)
//   snapshot        Save() to all device copies done, warm (pinned buffer reused)
//   ratio           snapshot / pinned memcpy bandwidth        target >= 0.8
//   stall           extra time of a training step that checkpoints, against one
//                   that does not: Save() + the lazy barrier before the
//                   "optimizer step"                           target < 1 s for 10 GB
//   durable         Save() to committed on --root (and on --replica)
//   durable / fio   Save() -> durable bandwidth (median over the steps) over
//                   fio's O_DIRECT sequential write of the same bytes in --root
//                                                              target >= 0.9
// Compute is simulated with cudaMemsetAsync on a scratch buffer (no kernels
// needed); its length per step is --step-ms.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/stats.h"
#include "cuda_copier.h"
#include "device_probe.h"
#include "pinned_host.h"
#include "references.h"
#include "stint/checkpointer.h"

namespace {

using Clock = std::chrono::steady_clock;
using stint::SecondsSince;

#define CHECK_CUDA(call)                                               \
  do {                                                                 \
    cudaError_t e_ = (call);                                           \
    if (e_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                    \
    }                                                                  \
  } while (0)

void Check(const stint::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

struct Flags {
  double state_gb = 10;
  int tensors = 64;
  std::string root, replica;
  int step_ms = 400;
  int steps = 3;
};

Flags Parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--state-gb")
      f.state_gb = std::atof(v.c_str());
    else if (k == "--tensors")
      f.tensors = std::atoi(v.c_str());
    else if (k == "--root")
      f.root = v;
    else if (k == "--replica")
      f.replica = v;
    else if (k == "--step-ms")
      f.step_ms = std::atoi(v.c_str());
    else if (k == "--steps")
      f.steps = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      std::exit(2);
    }
  }
  if (f.root.empty()) {
    std::fprintf(
        stderr,
        "usage: stint-cuda-bench --root DIR [--state-gb G] [--tensors N] [--replica DIR]\n");
    std::exit(2);
  }
  return f;
}

// One simulated forward+backward: memsets of a scratch buffer on `stream`
// calibrated to about `ms` milliseconds.
struct FakeCompute {
  void* scratch = nullptr;
  size_t bytes = 1ull << 30;
  int reps = 1;
  void Calibrate(cudaStream_t s, int ms) {
    CHECK_CUDA(cudaMalloc(&scratch, bytes));
    auto t = Clock::now();
    for (int i = 0; i < 20; ++i) CHECK_CUDA(cudaMemsetAsync(scratch, i, bytes, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    double per = SecondsSince(t) / 20;
    reps = std::max(1, int(ms / 1e3 / per));
  }
  void Run(cudaStream_t s) {
    for (int i = 0; i < reps; ++i) CHECK_CUDA(cudaMemsetAsync(scratch, i, bytes, s));
  }
};

}  // namespace

int main(int argc, char** argv) {
  Flags f = Parse(argc, argv);
  auto count = stint::CudaDeviceCount();
  if (!count.ok()) {
    std::fprintf(stderr, "%s\n", count.status().ToString().c_str());
    return 77;  // skip
  }
  std::printf("device: %s\n", stint::CudaDeviceSummary(0).value().c_str());
  CHECK_CUDA(cudaSetDevice(0));
  const size_t per_tensor = size_t(f.state_gb * (1ull << 30) / f.tensors) / 4096 * 4096;
  const size_t total = per_tensor * size_t(f.tensors);
  std::vector<void*> params(size_t(f.tensors));
  for (auto& p : params) {
    CHECK_CUDA(cudaMalloc(&p, per_tensor));
    CHECK_CUDA(cudaMemset(p, 0x3c, per_tensor));
  }
  cudaStream_t compute;
  CHECK_CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));

  // 1. The ceiling: pinned cudaMemcpyAsync, the same bytes, one stream.
  double memcpy_gbs = 0;
  {
    auto pinned = stint::PinnedHostBuffer::Allocate(total, stint::NumaNodeOfDevice(0)).value();
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    double best = 1e9;
    for (int rep = 0; rep < 3; ++rep) {
      auto t = Clock::now();
      for (size_t i = 0; i < params.size(); ++i) {
        CHECK_CUDA(cudaMemcpyAsync(pinned->data() + i * per_tensor, params[i], per_tensor,
                                   cudaMemcpyDeviceToHost, s));
      }
      CHECK_CUDA(cudaStreamSynchronize(s));
      best = std::min(best, SecondsSince(t));
    }
    memcpy_gbs = total / best / 1e9;
    CHECK_CUDA(cudaStreamDestroy(s));
  }

  // 2-4. The checkpointer.
  auto copier = stint::NewCudaDeviceCopier().value();
  stint::CheckpointOptions o;
  o.root = f.root;
  o.device_copier = copier.get();
  o.keep_last = 1;
  o.replica_root = f.replica;
  o.replica_keep_last = 1;
  auto ckpt = std::move(stint::Checkpointer::Open(o).value());
  stint::State state;
  for (size_t i = 0; i < params.size(); ++i) {
    state.tensors.push_back({"p" + std::to_string(i),
                             stint::DType::kUInt8,
                             {int64_t(per_tensor)},
                             {},
                             {},
                             params[i],
                             0,
                             compute});
  }
  FakeCompute fake;
  fake.Calibrate(compute, f.step_ms);
  auto step = [&](bool checkpoint, uint64_t n, stint::SaveHandle* handle, double* save_call) {
    auto t = Clock::now();
    if (checkpoint) {
      auto t_save = Clock::now();
      auto h = ckpt->Save(n, state);
      Check(h.status(), "save");
      *save_call = SecondsSince(t_save);
      *handle = *h;
    }
    fake.Run(compute);  // forward + backward, overlapping the copy
    Check(copier->OrderBeforeWrite(0, compute), "barrier");  // the lazy barrier
    for (auto* p : params)
      CHECK_CUDA(cudaMemsetAsync(p, int(n), per_tensor, compute));  // optimizer step
    CHECK_CUDA(cudaStreamSynchronize(compute));
    return SecondsSince(t);
  };
  stint::SaveHandle h;
  double save_call = 0;
  // Cold save: maps and pins the staging buffer (once per buffer, not per save).
  auto cold = Clock::now();
  step(true, 1, &h, &save_call);
  Check(h.staged.get(), "staged");
  Check(h.durable.get(), "durable");
  double cold_s = SecondsSince(cold);
  double base = 1e9;
  for (int i = 0; i < f.steps; ++i) base = std::min(base, step(false, 0, nullptr, nullptr));
  double worst_stall = 0, snapshot_s = 1e9, durable_s = 0, replica_s = 0, worst_call = 0;
  std::vector<double> durables;
  for (int i = 0; i < f.steps; ++i) {
    uint64_t n = uint64_t(i) + 2;
    auto t0 = Clock::now();
    double with = step(true, n, &h, &save_call);
    worst_stall = std::max(worst_stall, with - base);
    worst_call = std::max(worst_call, save_call);
    Check(h.staged.get(), "staged");
    Check(h.durable.get(), "durable");
    durables.push_back(SecondsSince(t0));
    durable_s = std::max(durable_s, durables.back());
    auto stats = ckpt->stats();
    if (stats.last) snapshot_s = std::min(snapshot_s, stats.last->device_copy_seconds);
    if (!f.replica.empty()) {
      Check(h.replicated.get(), "replicated");
      replica_s = std::max(replica_s, SecondsSince(t0));
    }
  }
  double snapshot_gbs = total / snapshot_s / 1e9;
  double ratio = snapshot_gbs / memcpy_gbs;
  std::printf("state              %.2f GB in %d device tensors\n", total / 1e9, f.tensors);
  std::printf("pinned memcpy      %.1f GB/s\n", memcpy_gbs);
  std::printf("snapshot (warm)    %.1f GB/s  (%.3f s)\n", snapshot_gbs, snapshot_s);
  std::printf("ratio              %.2f  target >= 0.80  %s\n", ratio,
              ratio >= 0.8 ? "PASS" : "FAIL");
  std::printf(
      "first save (cold)  %.2f s to durable, incl. mapping and pinning the staging buffer\n",
      cold_s);
  std::printf("Save() call        %.4f s (worst)\n", worst_call);
  std::printf("step               %.3f s without checkpoint\n", base);
  std::printf("stall              %.3f s per checkpoint (worst of %d)  target < 1 s  %s\n",
              worst_stall, f.steps, worst_stall < 1.0 ? "PASS" : "FAIL");
  const std::string engine = ckpt->stats().last->engine;
  std::printf("time to durable    %.2f s (tier 1, %s)\n", durable_s, engine.c_str());
  if (!f.replica.empty()) std::printf("time to durable    %.2f s (tier 2)\n", replica_s);
  ckpt.reset();
  copier.reset();

  // 4. The disk's ceiling for time to durable: fio, the same bytes, same directory.
  stint::bench::FioReference fio;
  fio.engine = "io_uring";
  stint::Status fio_status = stint::bench::RunFioRound(f.root, total, /*drop=*/false, &fio);
  bool durable_ok = true;
  if (fio.write_bw.empty()) {
    std::printf("durable / fio      not measured: %s\n", fio_status.ToString().c_str());
  } else {
    const double durable_gbs = total / stint::Median(durables) / 1e9;
    const double fio_gbs = fio.write_bw[0] / 1e9;
    durable_ok = durable_gbs / fio_gbs >= 0.9;
    std::printf(
        "durable / fio      %.2f  target >= 0.90  %s  (Save() -> durable %.2f GB/s, median of %zu, "
        "%s; fio %s O_DIRECT write %.2f GB/s)\n",
        durable_gbs / fio_gbs, durable_ok ? "PASS" : "FAIL", durable_gbs, durables.size(),
        engine.c_str(), fio.engine.c_str(), fio_gbs);
  }
  return ratio >= 0.8 && worst_stall < 1.0 && durable_ok ? 0 : 3;
}
