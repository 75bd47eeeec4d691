#include "torch_elastic.h"

#include <torch/serialize.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <optional>
#include <sstream>
#include <utility>

#include "stint_torch.h"
#include "torch_device.h"
#include "torch_guard.h"
#if defined(STINT_HAVE_NCCL) && STINT_HAVE_NCCL  // stint_cuda's define
#include "nccl_communicator.h"
#define STINT_TORCH_HAVE_NCCL 1
#endif

namespace stint {

TorchElasticState::TorchElasticState(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                     ResumableSampler* sampler, uint64_t* step)
    : model_(model), optimizer_(optimizer), sampler_(sampler), step_(step) {}

Result<std::string> TorchElasticState::Serialize() const {
  return Guard("serialize the elastic state", [&]() -> Result<std::string> {
    torch::serialize::OutputArchive archive;
    torch::serialize::OutputArchive model_archive, optimizer_archive;
    model_.save(model_archive);
    optimizer_.save(optimizer_archive);
    archive.write("model", model_archive);
    archive.write("optimizer", optimizer_archive);
    archive.write("step", torch::tensor(static_cast<int64_t>(*step_)));
    if (sampler_ != nullptr) {
      const std::string cursor = sampler_->SaveState();
      archive.write("sampler",
                    torch::from_blob(const_cast<char*>(cursor.data()),
                                     {static_cast<int64_t>(cursor.size())}, torch::kUInt8)
                        .clone());
    }
    std::ostringstream out;
    archive.save_to(out);
    return out.str();
  });
}

Status TorchElasticState::Deserialize(const std::string& bytes) {
  STINT_RETURN_IF_ERROR(Guard("load the elastic state from rank 0", [&]() -> Status {
    std::istringstream in(bytes);
    torch::serialize::InputArchive archive;
    // Rank 0's tensors come tagged with rank 0's device (cuda:0); loading
    // them as they are would move this rank's parameters there (Module::load
    // adopts a tensor of another device). Map them to this model's device.
    std::optional<torch::Device> device;
    for (const torch::Tensor& p : model_.parameters()) {
      device = p.device();
      break;
    }
    archive.load_from(in, device);
    torch::serialize::InputArchive model_archive, optimizer_archive;
    archive.read("model", model_archive);
    archive.read("optimizer", optimizer_archive);
    model_.load(model_archive);
    optimizer_.load(optimizer_archive);
    torch::Tensor step;
    archive.read("step", step);
    *step_ = static_cast<uint64_t>(step.item<int64_t>());
    if (sampler_ != nullptr) {
      torch::Tensor cursor;
      archive.read("sampler", cursor);
      cursor = cursor.to(torch::kCPU).contiguous();  // mapped to the model's device above
      const std::string text(static_cast<const char*>(cursor.data_ptr()),
                             static_cast<size_t>(cursor.numel()));
      return sampler_->LoadState(text);
    }
    return Status::OK();
  }));
  return Status::OK();
}

Status TorchElasticState::Synchronize(Communicator& comm) {
  if (comm.world_size() == 1) return Status::OK();
  std::string bytes;
  if (comm.rank() == 0) {
    STINT_ASSIGN_OR_RETURN(bytes, Serialize());
  }
  uint64_t size = bytes.size();
  STINT_RETURN_IF_ERROR(comm.Broadcast(&size, sizeof(size), 0));
  bytes.resize(size);
  STINT_RETURN_IF_ERROR(comm.Broadcast(bytes.data(), bytes.size(), 0));
  if (comm.rank() == 0) return Status::OK();
  return Deserialize(bytes);
}

Status AllReduceGradients(Communicator& comm, torch::nn::Module& model, torch::Tensor* extra) {
  return Guard("allreduce gradients", [&]() -> Status {
    // One flat buffer per (device, dtype): torch::cat needs one device, and
    // the NCCL backend takes host buffers too (staged), so a CPU `extra`
    // next to CUDA parameters is one more collective, not an error.
    std::map<std::pair<std::string, c10::ScalarType>, std::vector<torch::Tensor>> by_dtype;
    for (torch::Tensor& p : model.parameters()) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      by_dtype[{p.device().str(), p.scalar_type()}].push_back(p.grad());
    }
    if (extra != nullptr) by_dtype[{extra->device().str(), extra->scalar_type()}].push_back(*extra);
    for (auto& [key, tensors] : by_dtype) {
      const c10::ScalarType type = key.second;
      std::vector<torch::Tensor> flat_parts;
      for (const torch::Tensor& t : tensors) flat_parts.push_back(t.reshape({-1}));
      torch::Tensor flat = torch::cat(flat_parts).contiguous();
      STINT_ASSIGN_OR_RETURN(DType dtype, DTypeFromTorch(type));
      STINT_RETURN_IF_ERROR(comm.AllReduce(flat.data_ptr(), static_cast<size_t>(flat.numel()),
                                           dtype, ReduceOp::kSum));
      int64_t at = 0;
      for (torch::Tensor& t : tensors) {
        const int64_t n = t.numel();
        t.copy_(flat.slice(0, at, at + n).view_as(t));
        at += n;
      }
    }
    return Status::OK();
  });
}

Result<std::unique_ptr<CommunicatorFactory>> NewTorchNcclCommunicatorFactory(
    const CommunicatorOptions& comm, int device) {
#ifdef STINT_TORCH_HAVE_NCCL
  NcclCommunicatorOptions options;
  options.comm = comm;
  options.device = device;
  options.current_stream = CurrentCudaStream;
  return std::unique_ptr<CommunicatorFactory>(new NcclCommunicatorFactory(std::move(options)));
#else
  (void)comm;
  (void)device;
  return Status::Unavailable("no NCCL communicator: stint was built without NCCL");
#endif
}

}  // namespace stint
