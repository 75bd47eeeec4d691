// LibTorch <-> stint State (see stint_torch.h).
//
// Every public function body runs inside Guard(): LibTorch reports errors by
// throwing c10::Error, and stint's runtime never lets an exception escape, so
// this is where they become a Status, once.
#include "stint_torch.h"
#include "torch_device.h"
#include "torch_guard.h"

#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <cstring>
#include <exception>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <type_traits>
#include <utility>

namespace stint {
namespace {

using nlohmann::json;

// The checks shared by saving and loading a named tensor; returns its dtype.
Result<DType> CheckNewTensor(const std::string& name, const torch::Tensor& tensor,
                             const std::set<std::string>& taken) {
  if (taken.count(name) != 0) return Status::AlreadyExists("tensor '" + name + "' was added twice");
  if (tensor.layout() != c10::kStrided) {
    return Status::InvalidArgument("tensor '" + name +
                                   "': only dense (strided) tensors are supported");
  }
  Result<DType> dtype = DTypeFromTorch(tensor.scalar_type());
  if (!dtype.ok()) return dtype.status().WithContext("tensor '" + name + "'");
  return *dtype;
}

// A shard's box: `offsets` (one per dim, or empty with `global_shape` empty
// too: the whole tensor) and the tensor's sizes as extents, inside `global_shape`.
Status CheckBox(const std::string& name, const torch::Tensor& tensor,
                const std::vector<int64_t>& global_shape, const std::vector<int64_t>& offsets) {
  if (global_shape.empty() && offsets.empty()) return Status::OK();
  const auto sizes = tensor.sizes();
  if (global_shape.size() != sizes.size() || offsets.size() != sizes.size()) {
    return Status::InvalidArgument("tensor '" + name + "': a shard of " +
                                   std::to_string(sizes.size()) + " dims needs as many global " +
                                   "dims and offsets (got " + std::to_string(global_shape.size()) +
                                   " and " + std::to_string(offsets.size()) + ")");
  }
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (offsets[d] < 0 || global_shape[d] < 0 || offsets[d] + sizes[d] > global_shape[d]) {
      return Status::InvalidArgument(
          "tensor '" + name + "': the shard at offset " + std::to_string(offsets[d]) + " of size " +
          std::to_string(sizes[d]) + " leaves the global size " + std::to_string(global_shape[d]) +
          " in dim " + std::to_string(d));
    }
  }
  return Status::OK();
}

std::string Join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::string ShapeString(c10::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return ShapeString(c10::IntArrayRef(shape));
}

// The optimizer's state map is keyed by the parameter's TensorImpl: as a
// pointer in PyTorch 2.x, as that pointer printed to a string in 1.x (1.13,
// Debian's libtorch-dev). The key is built from the map's own key type so one
// source compiles against both.
using StateMap = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;
using StateKey = typename StateMap::key_type;

template <typename K>
K MakeStateKey(c10::TensorImpl* impl) {
  if constexpr (std::is_same_v<K, std::string>) {
    std::ostringstream os;  // what c10::guts::to_string did in 1.x
    os << impl;
    return os.str();
  } else {
    return static_cast<K>(impl);
  }
}

StateKey KeyOf(const torch::Tensor& param) {
  return MakeStateKey<StateKey>(param.unsafeGetTensorImpl());
}

// True when the reader may write straight into `t`'s memory.
bool IsDirectTarget(const torch::Tensor& t) {
  return t.device().is_cpu() && t.layout() == c10::kStrided && t.is_contiguous() && !t.is_conj() &&
         !t.is_neg();
}

// ---- optimizers -------------------------------------------------------------

enum class OptimizerKind { kAdam, kAdamW, kSgd };

const char* KindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdam:
      return "Adam";
    case OptimizerKind::kAdamW:
      return "AdamW";
    case OptimizerKind::kSgd:
      return "SGD";
  }
  return "?";
}

Result<OptimizerKind> KindOf(const torch::optim::Optimizer& optimizer, const std::string& prefix) {
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer) != nullptr) return OptimizerKind::kAdamW;
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer) != nullptr) return OptimizerKind::kAdam;
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer) != nullptr) return OptimizerKind::kSgd;
  return Status::Unimplemented("optimizer '" + prefix +
                               "': only Adam, AdamW and SGD optimizers are supported");
}

// Per-parameter state fields, in the order they are saved.
const std::vector<std::string>& StateFields(OptimizerKind kind) {
  static const std::vector<std::string> adam = {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  static const std::vector<std::string> sgd = {"momentum_buffer"};
  return kind == OptimizerKind::kSgd ? sgd : adam;
}

template <typename Options>
json AdamOptionsToJson(const Options& o) {
  return {{"lr", o.lr()},
          {"betas", {std::get<0>(o.betas()), std::get<1>(o.betas())}},
          {"eps", o.eps()},
          {"weight_decay", o.weight_decay()},
          {"amsgrad", o.amsgrad()}};
}

json SgdOptionsToJson(const torch::optim::SGDOptions& o) {
  return {{"lr", o.lr()},
          {"momentum", o.momentum()},
          {"dampening", o.dampening()},
          {"weight_decay", o.weight_decay()},
          {"nesterov", o.nesterov()}};
}

Result<json> OptionsToJson(OptimizerKind kind, const torch::optim::OptimizerOptions& options,
                           const std::string& what) {
  switch (kind) {
    case OptimizerKind::kAdam:
      if (auto* o = dynamic_cast<const torch::optim::AdamOptions*>(&options))
        return AdamOptionsToJson(*o);
      break;
    case OptimizerKind::kAdamW:
      if (auto* o = dynamic_cast<const torch::optim::AdamWOptions*>(&options))
        return AdamOptionsToJson(*o);
      break;
    case OptimizerKind::kSgd:
      if (auto* o = dynamic_cast<const torch::optim::SGDOptions*>(&options))
        return SgdOptionsToJson(*o);
      break;
  }
  return Status::Internal(what + ": options are not " + KindName(kind) + "Options");
}

// Checked reads from the stored JSON: a malformed blob is a damaged checkpoint.
Status GetNumber(const json& j, const char* key, const std::string& what, double* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) {
    return Status::DataLoss(what + ": '" + key + "' is missing or not a number");
  }
  *out = it->get<double>();
  return Status::OK();
}

Status GetBool(const json& j, const char* key, const std::string& what, bool* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_boolean()) {
    return Status::DataLoss(what + ": '" + key + "' is missing or not a boolean");
  }
  *out = it->get<bool>();
  return Status::OK();
}

template <typename Options>
Status AdamOptionsFromJson(const json& j, const std::string& what, Options* o) {
  double lr, eps, wd;
  bool amsgrad;
  STINT_RETURN_IF_ERROR(GetNumber(j, "lr", what, &lr));
  STINT_RETURN_IF_ERROR(GetNumber(j, "eps", what, &eps));
  STINT_RETURN_IF_ERROR(GetNumber(j, "weight_decay", what, &wd));
  STINT_RETURN_IF_ERROR(GetBool(j, "amsgrad", what, &amsgrad));
  auto betas = j.find("betas");
  if (betas == j.end() || !betas->is_array() || betas->size() != 2 || !(*betas)[0].is_number() ||
      !(*betas)[1].is_number()) {
    return Status::DataLoss(what + ": 'betas' is not a pair of numbers");
  }
  o->lr(lr).eps(eps).weight_decay(wd).amsgrad(amsgrad);
  o->betas(std::make_tuple((*betas)[0].get<double>(), (*betas)[1].get<double>()));
  return Status::OK();
}

Status SgdOptionsFromJson(const json& j, const std::string& what, torch::optim::SGDOptions* o) {
  double lr, momentum, dampening, wd;
  bool nesterov;
  STINT_RETURN_IF_ERROR(GetNumber(j, "lr", what, &lr));
  STINT_RETURN_IF_ERROR(GetNumber(j, "momentum", what, &momentum));
  STINT_RETURN_IF_ERROR(GetNumber(j, "dampening", what, &dampening));
  STINT_RETURN_IF_ERROR(GetNumber(j, "weight_decay", what, &wd));
  STINT_RETURN_IF_ERROR(GetBool(j, "nesterov", what, &nesterov));
  o->lr(lr).momentum(momentum).dampening(dampening).weight_decay(wd).nesterov(nesterov);
  return Status::OK();
}

// Overwrites `target` (an options object of `kind`, checked by the caller)
// with the stored values.
Status OptionsFromJson(OptimizerKind kind, const json& j, const std::string& what,
                       torch::optim::OptimizerOptions* target) {
  if (!j.is_object()) return Status::DataLoss(what + ": options are not a JSON object");
  switch (kind) {
    case OptimizerKind::kAdam:
      return AdamOptionsFromJson(j, what, static_cast<torch::optim::AdamOptions*>(target));
    case OptimizerKind::kAdamW:
      return AdamOptionsFromJson(j, what, static_cast<torch::optim::AdamWOptions*>(target));
    case OptimizerKind::kSgd:
      return SgdOptionsFromJson(j, what, static_cast<torch::optim::SGDOptions*>(target));
  }
  return Status::Internal(what + ": unknown optimizer kind");
}

std::string ParamGroupsBlobName(const std::string& prefix) {
  return Join(prefix, "param_groups.json");
}

std::string StateTensorName(const std::string& prefix, size_t group, size_t index,
                            const std::string& field) {
  return Join(prefix, "state." + std::to_string(group) + "." + std::to_string(index) + "." + field);
}

}  // namespace

// ---- dtypes -----------------------------------------------------------------

Result<DType> DTypeFromTorch(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float:
      return DType::kFloat32;
    case c10::ScalarType::Double:
      return DType::kFloat64;
    case c10::ScalarType::Half:
      return DType::kFloat16;
    case c10::ScalarType::BFloat16:
      return DType::kBFloat16;
    case c10::ScalarType::Char:
      return DType::kInt8;
    case c10::ScalarType::Byte:
      return DType::kUInt8;
    case c10::ScalarType::Short:
      return DType::kInt16;
    case c10::ScalarType::Int:
      return DType::kInt32;
    case c10::ScalarType::Long:
      return DType::kInt64;
    case c10::ScalarType::Bool:
      return DType::kBool;
    case c10::ScalarType::ComplexFloat:
      return DType::kComplex64;
    case c10::ScalarType::ComplexDouble:
      return DType::kComplex128;
    default:
      return Status::InvalidArgument(std::string("dtype ") + c10::toString(type) +
                                     " has no stint equivalent");
  }
}

c10::ScalarType TorchScalarType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return c10::ScalarType::Float;
    case DType::kFloat64:
      return c10::ScalarType::Double;
    case DType::kFloat16:
      return c10::ScalarType::Half;
    case DType::kBFloat16:
      return c10::ScalarType::BFloat16;
    case DType::kInt8:
      return c10::ScalarType::Char;
    case DType::kUInt8:
      return c10::ScalarType::Byte;
    case DType::kInt16:
      return c10::ScalarType::Short;
    case DType::kInt32:
      return c10::ScalarType::Int;
    case DType::kInt64:
      return c10::ScalarType::Long;
    case DType::kBool:
      return c10::ScalarType::Bool;
    case DType::kComplex64:
      return c10::ScalarType::ComplexFloat;
    case DType::kComplex128:
      return c10::ScalarType::ComplexDouble;
  }
  return c10::ScalarType::Undefined;
}

// ---- saving -----------------------------------------------------------------

TorchStateBuilder::TorchStateBuilder() : held_(std::make_shared<std::vector<torch::Tensor>>()) {
  state_.owner = held_;
}

Status TorchStateBuilder::AddTensor(const std::string& name, const torch::Tensor& tensor,
                                    WriteBarrier written_at) {
  return AddShard(name, tensor, {}, {}, written_at);
}

Status TorchStateBuilder::AddShard(const std::string& name, const torch::Tensor& tensor,
                                   std::vector<int64_t> global_shape, std::vector<int64_t> offsets,
                                   WriteBarrier written_at) {
  return Guard("tensor '" + name + "'", [&]() -> Status {
    if (!tensor.defined()) return Status::OK();
    // A whole tensor is added once; a sharded one may have any number of
    // boxes here (Save() checks they neither overlap nor leave a gap).
    const bool whole = global_shape.empty() && offsets.empty();
    STINT_ASSIGN_OR_RETURN(DType dtype,
                           CheckNewTensor(name, tensor, whole ? names_ : whole_names_));
    STINT_RETURN_IF_ERROR(CheckBox(name, tensor, global_shape, offsets));

    TensorShard shard;
    if (tensor.is_cuda()) {
      // Copied device-to-host on a copy stream after Save() returned.
      STINT_ASSIGN_OR_RETURN(shard, CudaShard(name, tensor, held_.get()));
    } else {
      torch::Tensor data = tensor;
      if (!IsDirectTarget(tensor)) {
        // A private contiguous CPU copy: the checkpoint format is row-major
        // and the snapshot copies from host memory. Not tracked by autograd.
        torch::NoGradGuard no_grad;
        data = tensor.detach().resolve_conj().resolve_neg().to(c10::kCPU).contiguous();
        held_->push_back(data);
      }
      shard.name = name;
      shard.dtype = dtype;
      shard.global_shape = data.sizes().vec();
      shard.data = data.numel() > 0 ? data.data_ptr() : nullptr;
    }
    // Held until the save's copies completed, whatever the caller does with it.
    held_->push_back(tensor);
    if (!global_shape.empty() || !offsets.empty()) {
      shard.extents = shard.global_shape;
      shard.global_shape = std::move(global_shape);
      shard.offsets = std::move(offsets);
    }
    shard.written_at = written_at;
    state_.tensors.push_back(std::move(shard));
    names_.insert(name);
    if (whole) whole_names_.insert(name);
    return Status::OK();
  });
}

Status TorchStateBuilder::AddModule(const std::string& prefix, const torch::nn::Module& module) {
  return Guard("module '" + prefix + "'", [&]() -> Status {
    for (const auto& item : module.named_parameters(/*recurse=*/true)) {
      STINT_RETURN_IF_ERROR(AddTensor(Join(prefix, item.key()), item.value()));
    }
    // Buffers (BatchNorm's running statistics) change in the forward pass.
    for (const auto& item : module.named_buffers(/*recurse=*/true)) {
      STINT_RETURN_IF_ERROR(
          AddTensor(Join(prefix, item.key()), item.value(), WriteBarrier::kForward));
    }
    return Status::OK();
  });
}

Status TorchStateBuilder::AddOptimizer(const std::string& prefix,
                                       const torch::optim::Optimizer& optimizer) {
  const std::string what = "optimizer '" + prefix + "'";
  return Guard(what, [&]() -> Status {
    STINT_ASSIGN_OR_RETURN(OptimizerKind kind, KindOf(optimizer, prefix));
    json doc;
    doc["format"] = 1;
    doc["type"] = KindName(kind);
    STINT_ASSIGN_OR_RETURN(doc["defaults"], OptionsToJson(kind, optimizer.defaults(), what));
    doc["param_groups"] = json::array();
    const auto& groups = optimizer.param_groups();
    for (size_t g = 0; g < groups.size(); ++g) {
      const std::string gwhat = what + " param group " + std::to_string(g);
      json group;
      group["params"] = groups[g].params().size();
      STINT_ASSIGN_OR_RETURN(group["options"], OptionsToJson(kind, groups[g].options(), gwhat));
      doc["param_groups"].push_back(std::move(group));

      const auto& params = groups[g].params();
      for (size_t i = 0; i < params.size(); ++i) {
        auto it = optimizer.state().find(KeyOf(params[i]));
        if (it == optimizer.state().end()) continue;  // no step taken for this parameter yet
        const torch::optim::OptimizerParamState* base = it->second.get();
        auto name = [&](const char* field) { return StateTensorName(prefix, g, i, field); };
        if (kind == OptimizerKind::kSgd) {
          auto* s = dynamic_cast<const torch::optim::SGDParamState*>(base);
          if (s == nullptr) return Status::Internal(gwhat + ": state is not SGDParamState");
          STINT_RETURN_IF_ERROR(AddTensor(name("momentum_buffer"), s->momentum_buffer()));
          continue;
        }
        // Adam and AdamW keep the same fields in two unrelated types.
        auto add_adam = [&](const auto* s) -> Status {
          // The step count is an int64_t field, not a tensor: keep a scalar alive.
          torch::Tensor step = at::scalar_tensor(c10::Scalar(static_cast<int64_t>(s->step())),
                                                 at::TensorOptions().dtype(c10::kLong));
          STINT_RETURN_IF_ERROR(AddTensor(name("step"), step));
          STINT_RETURN_IF_ERROR(AddTensor(name("exp_avg"), s->exp_avg()));
          STINT_RETURN_IF_ERROR(AddTensor(name("exp_avg_sq"), s->exp_avg_sq()));
          return AddTensor(name("max_exp_avg_sq"), s->max_exp_avg_sq());  // undefined: skipped
        };
        if (kind == OptimizerKind::kAdam) {
          auto* s = dynamic_cast<const torch::optim::AdamParamState*>(base);
          if (s == nullptr) return Status::Internal(gwhat + ": state is not AdamParamState");
          STINT_RETURN_IF_ERROR(add_adam(s));
        } else {
          auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(base);
          if (s == nullptr) return Status::Internal(gwhat + ": state is not AdamWParamState");
          STINT_RETURN_IF_ERROR(add_adam(s));
        }
      }
    }
    return AddBlob(ParamGroupsBlobName(prefix), doc.dump());
  });
}

Status TorchStateBuilder::AddBlob(const std::string& name, std::string bytes) {
  if (state_.blobs.count(name) != 0)
    return Status::AlreadyExists("blob '" + name + "' was added twice");
  state_.blobs.emplace(name, std::move(bytes));
  return Status::OK();
}

Status TorchStateBuilder::MarkFrozen(const std::string& name) {
  bool found = false;
  for (TensorShard& t : state_.tensors) {
    if (t.name != name) continue;
    t.frozen = true;
    found = true;
  }
  if (!found) return Status::NotFound("MarkFrozen: no tensor '" + name + "' was added");
  return Status::OK();
}

// ---- loading ----------------------------------------------------------------

namespace {

// The destinations one Plan() hands the reader, and the stored tensors they
// claim (TorchLoadOptions::strict refuses unclaimed ones under a prefix).
class DestPlan {
 public:
  explicit DestPlan(const CheckpointReader& reader) : where_(reader.dir() + ": ") {
    for (auto& info : reader.tensors()) stored_.emplace(info.name, info);
  }

  // "<checkpoint dir>: ", which every error starts with.
  const std::string& where() const { return where_; }
  // The stored tensor `name`; null if the checkpoint has none.
  const TensorInfo* Find(const std::string& name) const {
    auto it = stored_.find(name);
    return it == stored_.end() ? nullptr : &it->second;
  }
  // Reads `name` into `t`: the box at `offsets` of a tensor of
  // `global_shape`, or (both empty) the whole tensor of t's shape.
  void Add(const std::string& name, const torch::Tensor& t, DType dtype,
           const std::vector<int64_t>& global_shape = {},
           const std::vector<int64_t>& offsets = {}) {
    TensorDest d;
    d.name = name;
    d.dtype = dtype;
    d.global_shape = global_shape.empty() ? t.sizes().vec() : global_shape;
    if (!offsets.empty()) {
      d.offsets = offsets;
      d.extents = t.sizes().vec();
    }
    d.data = t.numel() > 0 ? t.data_ptr() : nullptr;
    Add(name, std::move(d));
  }
  void Add(const std::string& name, TensorDest d) {
    dests_.push_back(std::move(d));
    claimed_.insert(name);
  }
  // kInvalidArgument for a stored tensor under one of `prefixes` that no
  // destination claims.
  Status CheckStrict(const std::set<std::string>& prefixes) const {
    for (const auto& [name, info] : stored_) {
      if (claimed_.count(name) != 0) continue;
      for (const auto& prefix : prefixes) {
        if (name.compare(0, prefix.size() + 1, prefix + ".") == 0) {
          return Status::InvalidArgument(where_ + "tensor '" + name +
                                         "' in the checkpoint has no counterpart under '" + prefix +
                                         "' here (TorchLoadOptions::strict)");
        }
      }
    }
    return Status::OK();
  }
  std::vector<TensorDest> Take() { return std::move(dests_); }

 private:
  const std::string where_;
  std::map<std::string, TensorInfo> stored_;
  std::set<std::string> claimed_;
  std::vector<TensorDest> dests_;
};

}  // namespace

struct TorchStateLoader::Pending {
  // A tensor read into a CPU staging copy, copied into `target` by Finish().
  struct Copy {
    torch::Tensor staging;
    torch::Tensor target;
  };
  // State of one parameter as read from the checkpoint.
  struct ParamState {
    torch::Tensor param;
    std::map<std::string, torch::Tensor> fields;  // field -> CPU tensor (empty: no state)
  };
  struct Optimizer {
    torch::optim::Optimizer* optimizer;
    OptimizerKind kind;
    std::unique_ptr<torch::optim::OptimizerOptions> defaults;
    std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> group_options;
    std::vector<ParamState> params;
  };
  std::vector<Copy> copies;
  std::vector<torch::Tensor> direct;  // read in place: autograd's version bumped by Finish()
  std::vector<Optimizer> optimizers;

  // Plan()'s steps, one kind of target each: what Finish() needs goes here,
  // the destinations into `plan`.
  Status PlanTensor(const TensorTarget& target, const TorchLoadOptions& options, DestPlan* plan);
  Status PlanOptimizer(const OptimizerTarget& target, const CheckpointReader& reader,
                       DestPlan* plan);

 private:
  Status PlanParamGroup(const std::string& prefix, size_t g, const nlohmann::json& gj,
                        torch::optim::OptimizerParamGroup& group, Optimizer* po, DestPlan* plan);
  Result<ParamState> PlanParamState(const std::string& prefix, size_t g, size_t i,
                                    const torch::Tensor& param, const Optimizer& po,
                                    DestPlan* plan);
};

Status TorchStateLoader::AddTensor(const std::string& name, torch::Tensor tensor) {
  return AddShard(name, std::move(tensor), {}, {});
}

Status TorchStateLoader::AddShard(const std::string& name, torch::Tensor tensor,
                                  std::vector<int64_t> global_shape, std::vector<int64_t> offsets) {
  return Guard("tensor '" + name + "'", [&]() -> Status {
    if (!tensor.defined()) return Status::OK();
    STINT_RETURN_IF_ERROR(CheckNewTensor(name, tensor, names_).status());
    STINT_RETURN_IF_ERROR(CheckBox(name, tensor, global_shape, offsets));
    if (global_shape.empty() && offsets.empty()) global_shape = tensor.sizes().vec();
    if (offsets.empty()) offsets.assign(global_shape.size(), 0);
    tensors_.push_back({name, std::move(tensor), std::move(global_shape), std::move(offsets)});
    names_.insert(name);
    return Status::OK();
  });
}

Status TorchStateLoader::AddModule(const std::string& prefix, torch::nn::Module& module) {
  return Guard("module '" + prefix + "'", [&]() -> Status {
    for (const auto& item : module.named_parameters(/*recurse=*/true)) {
      STINT_RETURN_IF_ERROR(AddTensor(Join(prefix, item.key()), item.value()));
    }
    for (const auto& item : module.named_buffers(/*recurse=*/true)) {
      STINT_RETURN_IF_ERROR(AddTensor(Join(prefix, item.key()), item.value()));
    }
    if (!prefix.empty()) strict_prefixes_.insert(prefix);
    return Status::OK();
  });
}

Status TorchStateLoader::AddOptimizer(const std::string& prefix,
                                      torch::optim::Optimizer& optimizer) {
  return Guard("optimizer '" + prefix + "'", [&]() -> Status {
    STINT_RETURN_IF_ERROR(KindOf(optimizer, prefix).status());
    for (const auto& o : optimizers_) {
      if (o.prefix == prefix)
        return Status::AlreadyExists("optimizer '" + prefix + "' was added twice");
    }
    optimizers_.push_back({prefix, &optimizer});
    if (!prefix.empty()) strict_prefixes_.insert(prefix);
    return Status::OK();
  });
}

Result<std::vector<TensorDest>> TorchStateLoader::Plan(const CheckpointReader& reader) {
  pending_.reset();
  auto pending = std::make_shared<Pending>();
  DestPlan plan(reader);
  // Module tensors and single tensors: into their own storage where possible.
  for (const auto& target : tensors_) {
    STINT_RETURN_IF_ERROR(pending->PlanTensor(target, options_, &plan));
  }
  // Optimizers: check the stored layout against this optimizer, then read the
  // state into new tensors of the stored shape and dtype.
  for (const auto& target : optimizers_) {
    STINT_RETURN_IF_ERROR(pending->PlanOptimizer(target, reader, &plan));
  }
  if (options_.strict) STINT_RETURN_IF_ERROR(plan.CheckStrict(strict_prefixes_));
  pending_ = std::move(pending);
  return plan.Take();
}

// A whole tensor or a shard (the box at target.offsets) must match the
// stored tensor's dtype and global shape. It is read in place where its
// storage allows, else host-to-device (device_destinations), else into a
// CPU staging copy that Finish() copies in.
Status TorchStateLoader::Pending::PlanTensor(const TensorTarget& target,
                                             const TorchLoadOptions& options, DestPlan* plan) {
  const torch::Tensor& t = target.tensor;
  const std::string& where = plan->where();
  const TensorInfo* info = plan->Find(target.name);
  if (info == nullptr) {
    return Status::NotFound(where + "tensor '" + target.name + "' is not in the checkpoint");
  }
  STINT_ASSIGN_OR_RETURN(DType dtype, DTypeFromTorch(t.scalar_type()));
  if (info->dtype != dtype) {
    return Status::InvalidArgument(where + "tensor '" + target.name + "' is " +
                                   DTypeName(info->dtype) + " in the checkpoint, " +
                                   DTypeName(dtype) + " here");
  }
  if (info->shape != target.global_shape) {
    return Status::InvalidArgument(where + "tensor '" + target.name + "' has shape " +
                                   ShapeString(info->shape) + " in the checkpoint, " +
                                   ShapeString(target.global_shape) + " here");
  }
  if (IsDirectTarget(t)) {
    plan->Add(target.name, t, dtype, target.global_shape, target.offsets);
    direct.push_back(t);
  } else if (options.device_destinations && t.is_cuda() && t.is_contiguous()) {
    // Host-to-device on the copier's stream, ordered before the next use
    // on the tensor's current stream.
    STINT_ASSIGN_OR_RETURN(TensorDest d, CudaDest(target.name, t));
    d.global_shape = target.global_shape;
    d.offsets = target.offsets;
    d.extents = t.sizes().vec();
    plan->Add(target.name, std::move(d));
    direct.push_back(t);
  } else {
    torch::Tensor staging = torch::empty(t.sizes(), at::TensorOptions().dtype(t.scalar_type()));
    plan->Add(target.name, staging, dtype, target.global_shape, target.offsets);
    copies.push_back({staging, t});
  }
  return Status::OK();
}

// The optimizer's type and param groups against the stored ones (the
// param-groups blob), then each group's options and state.
Status TorchStateLoader::Pending::PlanOptimizer(const OptimizerTarget& target,
                                                const CheckpointReader& reader, DestPlan* plan) {
  const std::string& prefix = target.prefix;
  const std::string what = plan->where() + "optimizer '" + prefix + "'";
  torch::optim::Optimizer& optimizer = *target.optimizer;
  STINT_ASSIGN_OR_RETURN(OptimizerKind kind, KindOf(optimizer, prefix));
  Result<std::string> blob = reader.ReadBlob(ParamGroupsBlobName(prefix));
  if (!blob.ok()) {
    if (blob.status().code() != Code::kNotFound) return blob.status();
    return Status::NotFound(what +
                            ": the checkpoint has no optimizer state under this prefix (no blob '" +
                            ParamGroupsBlobName(prefix) + "')");
  }
  json doc = json::parse(*blob, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Status::DataLoss(what + ": '" + ParamGroupsBlobName(prefix) + "' is not valid JSON");
  }
  auto type = doc.find("type");
  if (type == doc.end() || !type->is_string())
    return Status::DataLoss(what + ": no optimizer type stored");
  if (type->get<std::string>() != KindName(kind)) {
    return Status::InvalidArgument(what + ": the checkpoint holds " + type->get<std::string>() +
                                   " state, the optimizer is " + KindName(kind));
  }
  auto groups_json = doc.find("param_groups");
  auto defaults_json = doc.find("defaults");
  if (groups_json == doc.end() || !groups_json->is_array() || defaults_json == doc.end()) {
    return Status::DataLoss(what + ": no param groups stored");
  }
  auto& groups = optimizer.param_groups();
  if (groups_json->size() != groups.size()) {
    return Status::InvalidArgument(what + ": the checkpoint has " +
                                   std::to_string(groups_json->size()) +
                                   " param groups, the optimizer " + std::to_string(groups.size()));
  }

  Optimizer po;
  po.optimizer = &optimizer;
  po.kind = kind;
  po.defaults = optimizer.defaults().clone();
  STINT_RETURN_IF_ERROR(
      OptionsFromJson(kind, *defaults_json, what + " defaults", po.defaults.get()));
  for (size_t g = 0; g < groups.size(); ++g) {
    STINT_RETURN_IF_ERROR(PlanParamGroup(prefix, g, (*groups_json)[g], groups[g], &po, plan));
  }
  optimizers.push_back(std::move(po));
  return Status::OK();
}

// Param group g: its parameter count and options against the stored group,
// then each parameter's state.
Status TorchStateLoader::Pending::PlanParamGroup(const std::string& prefix, size_t g,
                                                 const json& gj,
                                                 torch::optim::OptimizerParamGroup& group,
                                                 Optimizer* po, DestPlan* plan) {
  const OptimizerKind kind = po->kind;
  const std::string gwhat =
      plan->where() + "optimizer '" + prefix + "'" + " param group " + std::to_string(g);
  auto nparams = gj.find("params");
  auto opts = gj.find("options");
  if (!gj.is_object() || nparams == gj.end() || !nparams->is_number_unsigned() ||
      opts == gj.end()) {
    return Status::DataLoss(gwhat + ": malformed param group");
  }
  const auto& params = group.params();
  if (nparams->get<uint64_t>() != params.size()) {
    return Status::InvalidArgument(gwhat + " has " + std::to_string(nparams->get<uint64_t>()) +
                                   " parameters in the checkpoint, " +
                                   std::to_string(params.size()) + " here");
  }
  STINT_ASSIGN_OR_RETURN(json current, OptionsToJson(kind, group.options(), gwhat));
  (void)current;  // checks the group's options are of the optimizer's type
  po->group_options.push_back(group.options().clone());
  STINT_RETURN_IF_ERROR(OptionsFromJson(kind, *opts, gwhat, po->group_options.back().get()));

  for (size_t i = 0; i < params.size(); ++i) {
    STINT_ASSIGN_OR_RETURN(ParamState ps, PlanParamState(prefix, g, i, params[i], *po, plan));
    po->params.push_back(std::move(ps));
  }
  return Status::OK();
}

// Parameter i of group g: each stored state field (checked against the
// parameter) into a new CPU tensor; Adam's fields all or none.
Result<TorchStateLoader::Pending::ParamState> TorchStateLoader::Pending::PlanParamState(
    const std::string& prefix, size_t g, size_t i, const torch::Tensor& param, const Optimizer& po,
    DestPlan* plan) {
  const OptimizerKind kind = po.kind;
  const std::string& where = plan->where();
  ParamState ps;
  ps.param = param;
  for (const std::string& field : StateFields(kind)) {
    const std::string name = StateTensorName(prefix, g, i, field);
    const TensorInfo* info = plan->Find(name);
    if (info == nullptr) continue;
    if (field == "step") {
      if (info->dtype != DType::kInt64 || !info->shape.empty()) {
        return Status::InvalidArgument(where + "tensor '" + name + "' is not an int64 scalar");
      }
    } else if (info->shape != param.sizes().vec()) {
      return Status::InvalidArgument(
          where + "tensor '" + name + "' has shape " + ShapeString(info->shape) +
          " in the checkpoint, its parameter " + ShapeString(param.sizes()) + " here");
    }
    torch::Tensor t =
        torch::empty(info->shape, at::TensorOptions().dtype(TorchScalarType(info->dtype)));
    plan->Add(name, t, info->dtype);
    ps.fields.emplace(field, std::move(t));
  }
  if (!ps.fields.empty() && kind != OptimizerKind::kSgd) {
    // Adam's step() dereferences all three without checking.
    for (const char* required : {"step", "exp_avg", "exp_avg_sq"}) {
      if (ps.fields.count(required) == 0) {
        return Status::DataLoss(where + "tensor '" + StateTensorName(prefix, g, i, required) +
                                "' is missing while other state of its parameter is stored");
      }
    }
    const bool amsgrad =
        kind == OptimizerKind::kAdam
            ? static_cast<torch::optim::AdamOptions&>(*po.group_options.back()).amsgrad()
            : static_cast<torch::optim::AdamWOptions&>(*po.group_options.back()).amsgrad();
    if (amsgrad && ps.fields.count("max_exp_avg_sq") == 0) {
      return Status::DataLoss(where + "tensor '" + StateTensorName(prefix, g, i, "max_exp_avg_sq") +
                              "' is missing although the group uses amsgrad");
    }
  }
  return ps;
}

DestPlanner TorchStateLoader::Planner() {
  return [this](const CheckpointReader& reader) -> Result<std::vector<TensorDest>> {
    return Guard("planning the load of " + reader.dir(),
                 [&]() -> Result<std::vector<TensorDest>> { return Plan(reader); });
  };
}

Status TorchStateLoader::Finish() {
  if (pending_ == nullptr) return Status::FailedPrecondition("Finish() without a planned load");
  std::shared_ptr<Pending> pending = std::move(pending_);
  return Guard("finishing the load", [&]() -> Status {
    torch::NoGradGuard no_grad;  // in-place writes into leaves that require grad
    for (auto& c : pending->copies) c.target.copy_(c.staging);
    // The reader wrote behind autograd's back; a graph that saved these tensors
    // must now fail as it would after any in-place write.
    // (Inference tensors have no version counter to bump.)
    for (auto& t : pending->direct) {
      if (!t.is_inference()) t.unsafeGetTensorImpl()->bump_version();
    }

    for (auto& po : pending->optimizers) {
      torch::optim::Optimizer& optimizer = *po.optimizer;
      auto& groups = optimizer.param_groups();
      // Copy-assign through the concrete type: the optimizer keeps its objects.
      auto assign = [&](torch::optim::OptimizerOptions& dst,
                        const torch::optim::OptimizerOptions& src) {
        switch (po.kind) {
          case OptimizerKind::kAdam:
            static_cast<torch::optim::AdamOptions&>(dst) =
                static_cast<const torch::optim::AdamOptions&>(src);
            break;
          case OptimizerKind::kAdamW:
            static_cast<torch::optim::AdamWOptions&>(dst) =
                static_cast<const torch::optim::AdamWOptions&>(src);
            break;
          case OptimizerKind::kSgd:
            static_cast<torch::optim::SGDOptions&>(dst) =
                static_cast<const torch::optim::SGDOptions&>(src);
            break;
        }
      };
      assign(optimizer.defaults(), *po.defaults);
      for (size_t g = 0; g < groups.size() && g < po.group_options.size(); ++g) {
        assign(groups[g].options(), *po.group_options[g]);
      }
      auto& state = optimizer.state();
      for (auto& ps : po.params) {
        state.erase(KeyOf(ps.param));
        if (ps.fields.empty()) continue;
        auto on_device = [&](const char* field) -> torch::Tensor {
          auto it = ps.fields.find(field);
          if (it == ps.fields.end()) return torch::Tensor();
          return it->second.to(ps.param.device());
        };
        if (po.kind == OptimizerKind::kSgd) {
          auto s = std::make_unique<torch::optim::SGDParamState>();
          s->momentum_buffer(on_device("momentum_buffer"));
          state[KeyOf(ps.param)] = std::move(s);
          continue;
        }
        auto fill = [&](auto s) {
          s->step(ps.fields.at("step").item<int64_t>());
          s->exp_avg(on_device("exp_avg"));
          s->exp_avg_sq(on_device("exp_avg_sq"));
          torch::Tensor max_sq = on_device("max_exp_avg_sq");
          if (max_sq.defined()) s->max_exp_avg_sq(max_sq);
          state[KeyOf(ps.param)] = std::move(s);
        };
        if (po.kind == OptimizerKind::kAdam) {
          fill(std::make_unique<torch::optim::AdamParamState>());
        } else {
          fill(std::make_unique<torch::optim::AdamWParamState>());
        }
      }
    }
    return Status::OK();
  });
}

Result<LoadResult> TorchStateLoader::Load(Checkpointer& checkpointer, const LoadOptions& options) {
  options_.device_destinations = checkpointer.options().device_copier != nullptr;
  Result<LoadResult> result = checkpointer.Load(Planner(), options);
  if (!result.ok()) {
    pending_.reset();  // a later Finish() must not install a plan that was never read
    return result.status();
  }
  STINT_RETURN_IF_ERROR(Finish());
  return result;
}

Status TorchStateLoader::LoadFrom(const CheckpointReader& reader) {
  options_.device_destinations = false;  // a bare reader has no device copier
  STINT_ASSIGN_OR_RETURN(std::vector<TensorDest> dests, Planner()(reader));
  Status s = reader.Read(dests);
  if (!s.ok()) {
    pending_.reset();
    return s;
  }
  return Finish();
}

Result<LoadResult> LoadModule(Checkpointer& checkpointer, const std::string& prefix,
                              torch::nn::Module& module, const LoadOptions& options) {
  TorchStateLoader loader;
  STINT_RETURN_IF_ERROR(loader.AddModule(prefix, module));
  return loader.Load(checkpointer, options);
}

Result<LoadResult> LoadOptimizer(Checkpointer& checkpointer, const std::string& prefix,
                                 torch::optim::Optimizer& optimizer, const LoadOptions& options) {
  TorchStateLoader loader;
  STINT_RETURN_IF_ERROR(loader.AddOptimizer(prefix, optimizer));
  return loader.Load(checkpointer, options);
}

}  // namespace stint
