#include "gloo_communicator.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/types.h>
#include <unistd.h>

#include <atomic>
#include <string>

#include "stint_torch.h"
#include "torch_guard.h"

namespace stint {
namespace {

Status FromException(const std::exception& e, const std::string& what) {
  return StatusFromC10dError(e, "gloo " + what);
}

c10d::ReduceOp ToC10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return c10d::ReduceOp::SUM;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(GroupMembership membership, c10::intrusive_ptr<c10d::Store> store,
                   c10::intrusive_ptr<c10d::ProcessGroupGloo> pg)
      : membership_(std::move(membership)), store_(std::move(store)), pg_(std::move(pg)) {}

  const char* backend() const override { return "gloo"; }
  const GroupMembership& membership() const override { return membership_; }

  Status AllReduce(void* data, size_t count, DType dtype, ReduceOp op) override {
    if (dtype == DType::kBool || dtype == DType::kComplex64 || dtype == DType::kComplex128) {
      return Status::InvalidArgument(std::string("gloo allreduce does not reduce ") +
                                     DTypeName(dtype));
    }
    std::vector<at::Tensor> tensors{torch::from_blob(
        data, {static_cast<int64_t>(count)}, torch::TensorOptions().dtype(TorchScalarType(dtype)))};
    c10d::AllreduceOptions opts;
    opts.reduceOp = ToC10d(op);
    return Run("allreduce", [&] { return pg_->allreduce(tensors, opts); });
  }

  Status Broadcast(void* data, size_t bytes, int root) override {
    if (root < 0 || root >= membership_.world_size) {
      return Status::InvalidArgument("broadcast root " + std::to_string(root) +
                                     " is not a rank of " + std::to_string(membership_.world_size));
    }
    std::vector<at::Tensor> tensors{torch::from_blob(data, {static_cast<int64_t>(bytes)},
                                                     torch::TensorOptions().dtype(torch::kUInt8))};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    return Run("broadcast", [&] { return pg_->broadcast(tensors, opts); });
  }

  Status Barrier() override {
    return Run("barrier", [&] { return pg_->barrier(c10d::BarrierOptions()); });
  }

  void Abort() override { aborted_ = true; }
  bool aborted() const override { return aborted_; }

 private:
  template <typename Start>
  Status Run(const char* what, Start start) {
    if (aborted_) {
      return Status::Aborted(std::string("gloo ") + what + ": the communicator of generation " +
                             std::to_string(membership_.generation) + " was aborted");
    }
    try {
      c10::intrusive_ptr<c10d::Work> work = start();
      work->wait();
      return Status::OK();
    } catch (const std::exception& e) {
      // A failed collective leaves the mesh in an unknown state.
      aborted_ = true;
      return FromException(e, std::string(what) + " (generation " +
                                  std::to_string(membership_.generation) + ", rank " +
                                  std::to_string(membership_.rank) + " of " +
                                  std::to_string(membership_.world_size) + ")");
    }
  }

  const GroupMembership membership_;
  c10::intrusive_ptr<c10d::Store> store_;  // kept: rank 0 serves the others' store
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  std::atomic<bool> aborted_{false};
};

}  // namespace

Result<std::unique_ptr<Communicator>> GlooCommunicatorFactory::Form(const GroupMembership& m,
                                                                    GroupKv&) {
  int listen_fd = m.master_listen_fd;
  if (m.rank < 0 || m.rank >= m.world_size || m.generation == 0) {
    if (listen_fd >= 0) close(listen_fd);
    return Status::InvalidArgument("gloo: membership rank " + std::to_string(m.rank) + " of " +
                                   std::to_string(m.world_size) + ", generation " +
                                   std::to_string(m.generation) + " is not a formed group");
  }
  const std::string where = "generation " + std::to_string(m.generation) + " rank " +
                            std::to_string(m.rank) + " of " + std::to_string(m.world_size) +
                            " (store " + m.master_host + ":" + std::to_string(m.master_port) + ")";
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(m.master_port);
    so.isServer = m.rank == 0;
    so.numWorkers = m.world_size;
    so.waitWorkers = false;
    so.timeout = options_.timeout;
    if (m.rank == 0) {
      if (listen_fd < 0)
        return Status::InvalidArgument("gloo: rank 0 needs its store's listening socket");
      so.masterListenFd = listen_fd;
      listen_fd = -1;  // the store owns it now
    }
    auto tcp = c10::make_intrusive<c10d::TCPStore>(m.master_host, so);
    // A per-generation prefix: nothing of an older group's keys is read.
    c10::intrusive_ptr<c10d::Store> store =
        c10::make_intrusive<c10d::PrefixStore>("stint/g" + std::to_string(m.generation), tcp);
    auto opts = c10d::ProcessGroupGloo::Options::create(options_.timeout);
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(options_.local_host));
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, m.rank, m.world_size, opts);
    return std::unique_ptr<Communicator>(new GlooCommunicator(m, tcp, pg));
  } catch (const std::exception& e) {
    if (listen_fd >= 0) close(listen_fd);
    return FromException(e, "form " + where);
  }
}

}  // namespace stint
