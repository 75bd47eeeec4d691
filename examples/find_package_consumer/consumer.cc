// A program outside the stint tree, built against an installed stint.
// Saves a raw tensor and, when stint::torch is linked, a LibTorch module;
// loads both back. Exit 0 only if everything round-trips.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "stint/checkpointer.h"
#ifdef STINT_CONSUMER_WITH_TORCH
#include <torch/torch.h>

#include "stint_torch.h"
#include "torch_device.h"
#endif

namespace {

bool Failed(const char* what, const stint::Status& status) {
  if (status.ok()) return false;
  std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
  return true;
}

// stint::stint: a raw float tensor at step 7.
bool RoundTripRaw(stint::Checkpointer& ckpt) {
  std::vector<float> weight(4096);
  for (size_t i = 0; i < weight.size(); ++i) weight[i] = static_cast<float>(i) * 0.5f;
  stint::State state;
  state.tensors.push_back({"fc.weight", stint::DType::kFloat32, {64, 64}, {}, {}, weight.data()});
  auto handle = ckpt.Save(7, state);
  if (Failed("save", handle.status()) || Failed("durable", handle->durable.get())) return false;
  std::vector<float> loaded(weight.size());
  auto result = ckpt.Load({{"fc.weight", stint::DType::kFloat32, {64, 64}, {}, {}, loaded.data()}});
  if (Failed("load", result.status())) return false;
  if (result->step != 7 || loaded != weight) {
    std::fprintf(stderr, "the loaded tensor differs from the saved one\n");
    return false;
  }
  std::printf("consumer: a raw tensor round-tripped through stint::stint\n");
  return true;
}

#ifdef STINT_CONSUMER_WITH_TORCH
// stint::torch: a torch::nn::Linear at step 8, restored into another one.
bool RoundTripTorch(stint::Checkpointer& ckpt) {
  torch::manual_seed(1);
  torch::nn::Linear saved(16, 8);
  stint::TorchStateBuilder builder;
  if (Failed("add module", builder.AddModule("model", *saved))) return false;
  auto handle = ckpt.Save(8, builder.state());
  if (Failed("save", handle.status()) || Failed("durable", handle->durable.get())) return false;
  torch::manual_seed(2);
  torch::nn::Linear restored(16, 8);
  stint::TorchStateLoader loader;
  if (Failed("register module", loader.AddModule("model", *restored))) return false;
  if (Failed("load", loader.Load(ckpt).status())) return false;
  if (!torch::equal(saved->weight, restored->weight) ||
      !torch::equal(saved->bias, restored->bias)) {
    std::fprintf(stderr, "the restored parameters differ from the saved ones\n");
    return false;
  }
  std::printf("consumer: a LibTorch module round-tripped through stint::torch\n");
  // The CUDA copier links in with stint::torch; without a device it says why.
  auto copier = stint::NewTorchDeviceCopier();
  std::printf("consumer: CUDA device copier: %s\n",
              copier.ok() ? (*copier)->name() : copier.status().ToString().c_str());
  return true;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer CHECKPOINT_DIR\n");
    return 2;
  }
  stint::CheckpointOptions options;
  options.root = argv[1];
  auto ckpt = stint::Checkpointer::Open(options);
  if (Failed("open", ckpt.status())) return 1;
  if (!RoundTripRaw(**ckpt)) return 1;
#ifdef STINT_CONSUMER_WITH_TORCH
  if (!RoundTripTorch(**ckpt)) return 1;
#endif
  return 0;
}
