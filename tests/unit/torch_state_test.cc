// LibTorch adapter: modules, optimizers and odd tensors through a real
// Checkpointer and back, bit for bit.
#include "stint_torch.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <memory>
#include <sstream>
#include <string>
#include <functional>
#include <thread>
#include <type_traits>
#include <vector>

#include "stint/checkpoint_reader.h"
#include "stint/checkpointer.h"
#include "stint/env.h"
#include "c10d_commit_channel.h"
#include "resumable_training.h"
#include "torch_elastic.h"
#include "util/optimizer_state.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

namespace nn = torch::nn;
namespace optim = torch::optim;

constexpr int64_t kIn = 8, kHidden = 16, kOut = 4, kBatch = 32;

// Linear + BatchNorm1d (buffers, including the int64 num_batches_tracked) +
// LayerNorm + Dropout (draws from the default CPU generator).
nn::Sequential MakeMlp(uint64_t seed, int64_t hidden = kHidden, bool with_head = true) {
  torch::manual_seed(seed);
  nn::Sequential mlp(nn::Linear(kIn, hidden), nn::BatchNorm1d(hidden), nn::ReLU(),
                     nn::Dropout(0.25), nn::Linear(hidden, hidden),
                     nn::LayerNorm(nn::LayerNormOptions({hidden})), nn::ReLU());
  if (with_head) mlp->push_back(nn::Linear(hidden, kOut));
  return mlp;
}

struct Data {
  torch::Tensor x, y;
};

Data MakeData() {
  torch::manual_seed(1234);
  Data d;
  d.x = torch::randn({kBatch, kIn});
  d.y = torch::randn({kBatch, kOut});
  return d;
}

void Train(nn::Sequential& model, optim::Optimizer& opt, const Data& d, int steps) {
  model->train();
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    torch::Tensor loss = torch::mse_loss(model->forward(d.x), d.y);
    loss.backward();
    opt.step();
  }
}

// Two groups: no weight decay for biases and norm parameters.
std::vector<optim::OptimizerParamGroup> Groups(nn::Sequential& model) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : model->named_parameters()) {
    (p.key().find("weight") != std::string::npos && p.value().dim() == 2 ? decay : no_decay)
        .push_back(p.value());
  }
  std::vector<optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay);
  groups.emplace_back(
      no_decay, std::make_unique<optim::AdamWOptions>(optim::AdamWOptions(2e-3).weight_decay(0)));
  return groups;
}

void ExpectSameTensors(const torch::OrderedDict<std::string, torch::Tensor>& a,
                       const torch::OrderedDict<std::string, torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& item : a) {
    const torch::Tensor* other = b.find(item.key());
    ASSERT_NE(other, nullptr) << item.key();
    EXPECT_EQ(item.value().scalar_type(), other->scalar_type()) << item.key();
    EXPECT_TRUE(torch::equal(item.value(), *other)) << item.key();
  }
}

void ExpectSameModule(nn::Sequential& a, nn::Sequential& b) {
  ExpectSameTensors(a->named_parameters(), b->named_parameters());
  ExpectSameTensors(a->named_buffers(), b->named_buffers());
}

void ExpectEqualOrBothUndefined(const torch::Tensor& a, const torch::Tensor& b,
                                const std::string& what) {
  ASSERT_EQ(a.defined(), b.defined()) << what;
  if (a.defined()) {
    EXPECT_TRUE(torch::equal(a, b)) << what;
  }
}

template <typename ParamState>
void ExpectSameAdamState(optim::Optimizer& a, optim::Optimizer& b) {
  ASSERT_EQ(a.param_groups().size(), b.param_groups().size());
  size_t with_state = 0;
  for (size_t g = 0; g < a.param_groups().size(); ++g) {
    const auto& pa = a.param_groups()[g].params();
    const auto& pb = b.param_groups()[g].params();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      auto* sa = dynamic_cast<const ParamState*>(FindState(a.state(), pa[i]));
      auto* sb = dynamic_cast<const ParamState*>(FindState(b.state(), pb[i]));
      ASSERT_EQ(sa == nullptr, sb == nullptr) << g << "." << i;
      if (sa == nullptr) continue;
      ++with_state;
      std::string what = std::to_string(g) + "." + std::to_string(i);
      EXPECT_EQ(sa->step(), sb->step()) << what;
      ExpectEqualOrBothUndefined(sa->exp_avg(), sb->exp_avg(), what + " exp_avg");
      ExpectEqualOrBothUndefined(sa->exp_avg_sq(), sb->exp_avg_sq(), what + " exp_avg_sq");
      ExpectEqualOrBothUndefined(sa->max_exp_avg_sq(), sb->max_exp_avg_sq(),
                                 what + " max_exp_avg_sq");
    }
  }
  EXPECT_GT(with_state, 0u);
}

class TorchStateTest : public ::testing::Test {
 protected:
  std::unique_ptr<Checkpointer> Open() {
    CheckpointOptions o;
    o.root = dir_.Sub("ckpt");
    o.chunk_size = 4096;  // several chunks even for this small model
    auto ckpt = Checkpointer::Open(o);
    EXPECT_OK(ckpt);
    return ckpt.ok() ? std::move(*ckpt) : nullptr;
  }

  // Saves `b` as `step` and waits until it is durable.
  // Opens a checkpointer and saves `model` (as "model") and `opt` durably.
  std::unique_ptr<Checkpointer> SaveModelAndOptimizer(
      const torch::nn::Module& model, const torch::optim::Optimizer& opt, uint64_t step,
      const std::string& optimizer_prefix = "optim") {
    auto ckpt = Open();
    TorchStateBuilder b;
    if (ckpt == nullptr || !b.AddModule("model", model).ok() ||
        !b.AddOptimizer(optimizer_prefix, opt).ok()) {
      ADD_FAILURE() << "cannot build the state to save";
      return nullptr;
    }
    SaveDurable(*ckpt, step, b);
    return HasFailure() ? nullptr : std::move(ckpt);
  }

  void SaveDurable(Checkpointer& ckpt, uint64_t step, const TorchStateBuilder& b) {
    auto h = ckpt.Save(step, b.state());
    ASSERT_OK(h);
    Status durable = h->durable.get();
    ASSERT_OK(durable);
  }

  TempDir dir_;
};

// LibTorch with incremental saves: a module's frozen part, MarkFrozen, is
// referenced by the second save without being copied; it loads back intact.
TEST_F(TorchStateTest, MarkFrozenModuleIsReferencedByTheNextIncrementalSave) {
  torch::manual_seed(3);
  torch::nn::Linear base(64, 64), head(64, 4);
  CheckpointOptions o;
  o.root = dir_.Sub("incremental");
  o.chunk_size = 4096;
  o.incremental = true;
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  for (uint64_t step = 1; step <= 2; ++step) {
    torch::NoGradGuard no_grad;
    head->weight.add_(1.0);  // trained between the saves; the base is frozen
    TorchStateBuilder b;
    ASSERT_OK(b.AddModule("base", *base));
    ASSERT_OK(b.AddModule("head", *head));
    ASSERT_OK(b.MarkFrozen("base.weight"));
    ASSERT_OK(b.MarkFrozen("base.bias"));
    EXPECT_EQ(b.MarkFrozen("base.nope").code(), Code::kNotFound);
    SaveDurable(**ckpt, step, b);
    ASSERT_OK((*ckpt)->Flush());
    const SaveStats last = *(*ckpt)->stats().last;
    // Step 2: the frozen base, and the head's bias, unchanged and found by its hash.
    EXPECT_EQ(last.referenced_bytes, step == 1 ? 0u : uint64_t(64 * 64 + 64 + 4) * 4);
  }
  torch::nn::Linear base2(64, 64), head2(64, 4);
  TorchStateLoader loader;
  ASSERT_OK(loader.AddModule("base", *base2));
  ASSERT_OK(loader.AddModule("head", *head2));
  auto loaded = loader.Load(**ckpt);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->step, 2u);
  EXPECT_TRUE(torch::equal(base2->weight, base->weight));
  EXPECT_TRUE(torch::equal(head2->weight, head->weight));
}

TEST_F(TorchStateTest, DTypeMapping) {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt8,
                  DType::kUInt8, DType::kInt16, DType::kInt32, DType::kInt64, DType::kBool,
                  DType::kComplex64, DType::kComplex128}) {
    auto back = DTypeFromTorch(TorchScalarType(d));
    ASSERT_OK(back) << DTypeName(d);
    EXPECT_EQ(*back, d);
    EXPECT_EQ(c10::elementSize(TorchScalarType(d)), DTypeSize(d)) << DTypeName(d);
  }
  EXPECT_EQ(DTypeFromTorch(c10::ScalarType::QInt8).status().code(), Code::kInvalidArgument);
}

TEST_F(TorchStateTest, AdamWModuleAndOptimizerRoundTripAndContinue) {
  Data data = MakeData();
  nn::Sequential model = MakeMlp(1);
  optim::AdamW opt(Groups(model), optim::AdamWOptions(1e-2).weight_decay(0.05));
  Train(model, opt, data, 5);
  // Hyper-parameters changed after construction (an LR schedule) must come back.
  static_cast<optim::AdamWOptions&>(opt.param_groups()[0].options()).lr(3.5e-3);

  auto ckpt = SaveModelAndOptimizer(*model, opt, 5);

  ASSERT_NE(ckpt, nullptr);
  auto rng = GetTorchCpuRngState();
  ASSERT_OK(rng);

  // A fresh model (other initial weights) and optimizer without state.
  nn::Sequential fresh = MakeMlp(2);
  optim::AdamW fresh_opt(Groups(fresh), optim::AdamWOptions(1e-2).weight_decay(0.05));
  std::vector<void*> storage;
  for (const auto& p : fresh->parameters()) storage.push_back(p.data_ptr());
  TorchStateLoader loader;
  ASSERT_OK(loader.AddModule("model", *fresh));
  ASSERT_OK(loader.AddOptimizer("optim", fresh_opt));
  auto r = loader.Load(*ckpt);
  ASSERT_OK(r);
  EXPECT_EQ(r->step, 5u);
  // Read in place: the parameters the optimizer holds are still the module's.
  for (size_t i = 0; i < storage.size(); ++i)
    EXPECT_EQ(fresh->parameters()[i].data_ptr(), storage[i]);

  ExpectSameModule(model, fresh);
  ExpectSameAdamState<optim::AdamWParamState>(opt, fresh_opt);
  for (size_t g = 0; g < 2; ++g) {
    auto& a = static_cast<optim::AdamWOptions&>(opt.param_groups()[g].options());
    auto& b = static_cast<optim::AdamWOptions&>(fresh_opt.param_groups()[g].options());
    EXPECT_TRUE(a == b) << "group " << g;
  }
  EXPECT_EQ(static_cast<optim::AdamWOptions&>(fresh_opt.param_groups()[0].options()).lr(), 3.5e-3);
  EXPECT_EQ(static_cast<optim::AdamWOptions&>(fresh_opt.param_groups()[1].options()).weight_decay(),
            0.0);

  // Same RNG stream for dropout: three more steps stay bit-identical.
  ASSERT_OK(SetTorchCpuRngState(*rng));
  Train(model, opt, data, 3);
  ASSERT_OK(SetTorchCpuRngState(*rng));
  Train(fresh, fresh_opt, data, 3);
  ExpectSameModule(model, fresh);
  ExpectSameAdamState<optim::AdamWParamState>(opt, fresh_opt);
}

TEST_F(TorchStateTest, AdamAmsgradRoundTrip) {
  Data data = MakeData();
  nn::Sequential model = MakeMlp(3);
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2).amsgrad(true).betas({0.8, 0.95}));
  Train(model, opt, data, 4);
  auto ckpt = Open();
  ASSERT_NE(ckpt, nullptr);
  TorchStateBuilder b;
  ASSERT_OK(b.AddModule("m", *model));
  ASSERT_OK(b.AddOptimizer("o", opt));
  SaveDurable(*ckpt, 4, b);

  nn::Sequential fresh = MakeMlp(4);
  optim::Adam fresh_opt(fresh->parameters(), optim::AdamOptions(1e-3));  // other hyper-parameters
  TorchStateLoader loader;
  ASSERT_OK(loader.AddModule("m", *fresh));
  ASSERT_OK(loader.AddOptimizer("o", fresh_opt));
  auto r = loader.Load(*ckpt);
  ASSERT_OK(r);
  ExpectSameModule(model, fresh);
  ExpectSameAdamState<optim::AdamParamState>(opt, fresh_opt);
  auto& o = static_cast<optim::AdamOptions&>(fresh_opt.param_groups()[0].options());
  EXPECT_TRUE(o.amsgrad());
  EXPECT_EQ(std::get<0>(o.betas()), 0.8);
  EXPECT_EQ(o.lr(), 1e-2);
  EXPECT_TRUE(static_cast<optim::AdamOptions&>(fresh_opt.defaults()).amsgrad());
}

TEST_F(TorchStateTest, SgdMomentumRoundTripAndContinue) {
  Data data = MakeData();
  nn::Sequential model = MakeMlp(5);
  optim::SGD opt(model->parameters(),
                 optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-4));
  Train(model, opt, data, 4);
  auto ckpt = SaveModelAndOptimizer(*model, opt, 4, "sgd");
  ASSERT_NE(ckpt, nullptr);
  auto rng = GetTorchCpuRngState();
  ASSERT_OK(rng);

  nn::Sequential fresh = MakeMlp(6);
  optim::SGD fresh_opt(fresh->parameters(), optim::SGDOptions(0.5));
  // The module and the optimizer separately, each with its own Load().
  ASSERT_OK(LoadModule(*ckpt, "model", *fresh));
  auto r = LoadOptimizer(*ckpt, "sgd", fresh_opt);
  ASSERT_OK(r);

  ExpectSameModule(model, fresh);
  const auto& params = opt.param_groups()[0].params();
  const auto& fresh_params = fresh_opt.param_groups()[0].params();
  for (size_t i = 0; i < params.size(); ++i) {
    auto* a = dynamic_cast<const optim::SGDParamState*>(FindState(opt.state(), params[i]));
    auto* b =
        dynamic_cast<const optim::SGDParamState*>(FindState(fresh_opt.state(), fresh_params[i]));
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_TRUE(torch::equal(a->momentum_buffer(), b->momentum_buffer())) << i;
  }
  EXPECT_TRUE(static_cast<optim::SGDOptions&>(fresh_opt.param_groups()[0].options()) ==
              static_cast<optim::SGDOptions&>(opt.param_groups()[0].options()));

  ASSERT_OK(SetTorchCpuRngState(*rng));
  Train(model, opt, data, 3);
  ASSERT_OK(SetTorchCpuRngState(*rng));
  Train(fresh, fresh_opt, data, 3);
  ExpectSameModule(model, fresh);
}

TEST_F(TorchStateTest, ParameterWithoutStateLoadsWithoutState) {
  Data data = MakeData();
  nn::Sequential model = MakeMlp(7);
  // The last layer is frozen: AdamW never creates state for it.
  auto last = model->ptr<nn::LinearImpl>(7);
  for (auto& p : last->parameters()) p.set_requires_grad(false);
  optim::AdamW opt(model->parameters());
  Train(model, opt, data, 2);
  auto ckpt = SaveModelAndOptimizer(*model, opt, 2);
  ASSERT_NE(ckpt, nullptr);

  // The target has (stale) state for every parameter; loading removes the frozen layer's.
  nn::Sequential fresh = MakeMlp(8);
  optim::AdamW fresh_opt(fresh->parameters());
  Train(fresh, fresh_opt, data, 1);
  TorchStateLoader loader;
  ASSERT_OK(loader.AddModule("model", *fresh));
  ASSERT_OK(loader.AddOptimizer("optim", fresh_opt));
  ASSERT_OK(loader.Load(*ckpt));
  ExpectSameModule(model, fresh);
  ExpectSameAdamState<optim::AdamWParamState>(opt, fresh_opt);
  EXPECT_EQ(FindState(fresh_opt.state(), fresh->ptr<nn::LinearImpl>(7)->weight), nullptr);
}

TEST_F(TorchStateTest, NonContiguousTensorsRoundTrip) {
  torch::manual_seed(9);
  torch::Tensor base = torch::randn({5, 7});
  torch::Tensor transposed = base.t();                             // strides (1, 7)
  torch::Tensor sliced = torch::randn({6, 10}).slice(1, 2, 8, 2);  // every other column
  auto complex = torch::randn({3, 4}, torch::kComplexFloat);
  torch::Tensor conj = complex.conj();  // lazy conj bit on most versions
  ASSERT_FALSE(transposed.is_contiguous());
  ASSERT_FALSE(sliced.is_contiguous());

  auto ckpt = Open();
  ASSERT_NE(ckpt, nullptr);
  {
    TorchStateBuilder b;
    ASSERT_OK(b.AddTensor("t", transposed));
    ASSERT_OK(b.AddTensor("s", sliced));
    ASSERT_OK(b.AddTensor("c", conj));
    SaveDurable(*ckpt, 1, b);
  }
  auto reader = CheckpointReader::Open(dir_.Sub("ckpt") + "/step-00000001");
  ASSERT_OK(reader);
  for (const auto& info : (*reader)->tensors()) {
    if (info.name == "t") {
      EXPECT_EQ(info.shape, (std::vector<int64_t>{7, 5}));
    }
  }

  // Into contiguous tensors, and into non-contiguous views of another buffer.
  torch::Tensor t_out = torch::zeros({7, 5});
  torch::Tensor backing = torch::zeros({5, 7});
  torch::Tensor t_view = backing.t();
  torch::Tensor s_out = torch::zeros({6, 3});
  torch::Tensor c_out = torch::zeros({3, 4}, torch::kComplexFloat);
  TorchStateLoader loader;
  ASSERT_OK(loader.AddTensor("t", t_out));
  ASSERT_OK(loader.AddTensor("s", s_out));
  ASSERT_OK(loader.AddTensor("c", c_out));
  ASSERT_OK(loader.LoadFrom(**reader));
  EXPECT_TRUE(torch::equal(t_out, transposed));
  EXPECT_TRUE(torch::equal(s_out, sliced));
  EXPECT_TRUE(torch::equal(c_out, conj.resolve_conj()));

  TorchStateLoader view_loader;
  ASSERT_OK(view_loader.AddTensor("t", t_view));
  auto r = view_loader.Load(*ckpt);
  ASSERT_OK(r);
  EXPECT_TRUE(torch::equal(backing, base));
}

TEST_F(TorchStateTest, EveryDTypeRoundTrips) {
  torch::manual_seed(10);
  torch::Tensor f = torch::randn({4, 3});
  std::vector<std::pair<std::string, torch::Tensor>> tensors = {
      {"f32", f},
      {"f64", f.to(torch::kDouble)},
      {"f16", f.to(torch::kHalf)},
      {"bf16", f.to(torch::kBFloat16)},
      {"i8", (f * 50).clamp(-128, 127).to(torch::kChar)},
      {"u8", (f.abs() * 50).clamp(0, 255).to(torch::kByte)},
      {"i16", (f * 1000).to(torch::kShort)},
      {"i32", (f * 1e6).to(torch::kInt)},
      {"i64", (f * 1e9).to(torch::kLong)},
      {"bool", f > 0},
      {"c64", torch::randn({2, 2}, torch::kComplexFloat)},
      {"c128", torch::randn({2, 2}, torch::kComplexDouble)},
      {"scalar", torch::scalar_tensor(7, torch::kLong)},
      {"empty", torch::zeros({0, 3})},
  };
  auto ckpt = Open();
  ASSERT_NE(ckpt, nullptr);
  {
    TorchStateBuilder b;
    for (auto& [name, t] : tensors) ASSERT_OK(b.AddTensor(name, t)) << name;
    EXPECT_EQ(b.AddTensor("f32", f).code(), Code::kAlreadyExists);
    SaveDurable(*ckpt, 1, b);
  }
  TorchStateLoader loader;
  std::vector<torch::Tensor> outs;
  for (auto& [name, t] : tensors) {
    outs.push_back(torch::zeros_like(t));
    ASSERT_OK(loader.AddTensor(name, outs.back())) << name;
  }
  auto r = loader.Load(*ckpt);
  ASSERT_OK(r);
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(outs[i].scalar_type(), tensors[i].second.scalar_type()) << tensors[i].first;
    EXPECT_TRUE(torch::equal(outs[i], tensors[i].second)) << tensors[i].first;
  }
}

TEST_F(TorchStateTest, UnsupportedDTypeNamesTheTensor) {
  // complex32 exists in LibTorch (1.13 and 2.x) but not in stint's format.
  torch::Tensor half_complex = torch::empty({4}, torch::kComplexHalf);
  TorchStateBuilder b;
  Status s = b.AddTensor("model.q", half_complex);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("model.q"), std::string::npos) << s.ToString();
  TorchStateLoader l;
  s = l.AddTensor("model.q", half_complex);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("model.q"), std::string::npos) << s.ToString();
}

TEST_F(TorchStateTest, MismatchedModuleIsAClearError) {
  nn::Sequential model = MakeMlp(11);
  optim::AdamW opt(model->parameters());
  Train(model, opt, MakeData(), 1);
  auto ckpt = SaveModelAndOptimizer(*model, opt, 1);
  ASSERT_NE(ckpt, nullptr);

  // Wrong shape: a wider hidden layer.
  nn::Sequential wide = MakeMlp(12, kHidden + 1);
  torch::Tensor before = wide->named_parameters()["0.weight"].clone();
  auto r = LoadModule(*ckpt, "model", *wide);
  ASSERT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find(
                "'model.0.weight' has shape [16, 8] in the checkpoint, [17, 8] here"),
            std::string::npos)
      << r.status().ToString();
  EXPECT_TRUE(torch::equal(before, wide->named_parameters()["0.weight"]));  // nothing was read

  // Wrong dtype.
  nn::Sequential dbl = MakeMlp(13);
  dbl->to(torch::kDouble);
  r = LoadModule(*ckpt, "model", *dbl);
  ASSERT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(
      r.status().message().find("'model.0.weight' is float32 in the checkpoint, float64 here"),
      std::string::npos)
      << r.status().ToString();

  // Missing tensor: a module with one more layer.
  nn::Sequential longer = MakeMlp(14);
  longer->push_back(nn::Linear(kOut, kOut));
  r = LoadModule(*ckpt, "model", *longer);
  ASSERT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_NE(r.status().message().find("'model.8.weight' is not in the checkpoint"),
            std::string::npos)
      << r.status().ToString();

  // Unexpected tensor: a module with the last layer missing (strict by default).
  nn::Sequential trimmed = MakeMlp(15, kHidden, /*with_head=*/false);
  r = LoadModule(*ckpt, "model", *trimmed);
  ASSERT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'model.7."), std::string::npos) << r.status().ToString();
  TorchLoadOptions lenient;
  lenient.strict = false;
  TorchStateLoader lenient_loader(lenient);
  ASSERT_OK(lenient_loader.AddModule("model", *trimmed));
  EXPECT_OK(lenient_loader.Load(*ckpt));

  // Wrong prefix.
  r = LoadModule(*ckpt, "net", *MakeMlp(16));
  EXPECT_EQ(r.status().code(), Code::kNotFound);

  // Wrong optimizer type, and an optimizer over other parameters.
  nn::Sequential same = MakeMlp(17);
  optim::SGD sgd(same->parameters(), optim::SGDOptions(0.1));
  r = LoadOptimizer(*ckpt, "optim", sgd);
  ASSERT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("holds AdamW state, the optimizer is SGD"), std::string::npos)
      << r.status().ToString();
  optim::AdamW wide_opt(wide->parameters());
  r = LoadOptimizer(*ckpt, "optim", wide_opt);
  ASSERT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("optim.state.0.0.exp_avg"), std::string::npos)
      << r.status().ToString();
  optim::AdamW fewer(same->ptr<nn::LinearImpl>(0)->parameters());
  r = LoadOptimizer(*ckpt, "optim", fewer);
  ASSERT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("parameters in the checkpoint"), std::string::npos)
      << r.status().ToString();
  r = LoadOptimizer(*ckpt, "adam", wide_opt);
  EXPECT_EQ(r.status().code(), Code::kNotFound);
}

TEST_F(TorchStateTest, UnsupportedOptimizerIsUnimplemented) {
  nn::Linear lin(2, 2);
  optim::RMSprop rms(lin->parameters());
  TorchStateBuilder b;
  EXPECT_EQ(b.AddOptimizer("o", rms).code(), Code::kUnimplemented);
  TorchStateLoader l;
  EXPECT_EQ(l.AddOptimizer("o", rms).code(), Code::kUnimplemented);
}

TEST_F(TorchStateTest, CpuRngStateRoundTrip) {
  torch::manual_seed(42);
  auto state = GetTorchCpuRngState();
  ASSERT_OK(state);
  torch::Tensor a = torch::randn({16});
  torch::Tensor noise = torch::randn({100});  // move the generator on
  ASSERT_OK(SetTorchCpuRngState(*state));
  EXPECT_TRUE(torch::equal(a, torch::randn({16})));
  EXPECT_EQ(SetTorchCpuRngState("not a generator state").code(), Code::kInvalidArgument);
}

TEST_F(TorchStateTest, CudaTensorsAreCopiedToHost) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  nn::Sequential model = MakeMlp(18);
  model->to(torch::kCUDA);
  optim::AdamW opt(model->parameters());
  Data d = MakeData();
  d.x = d.x.cuda();
  d.y = d.y.cuda();
  Train(model, opt, d, 2);
  auto ckpt = SaveModelAndOptimizer(*model, opt, 2);
  ASSERT_NE(ckpt, nullptr);
  nn::Sequential fresh = MakeMlp(19);
  fresh->to(torch::kCUDA);
  optim::AdamW fresh_opt(fresh->parameters());
  TorchStateLoader loader;
  ASSERT_OK(loader.AddModule("model", *fresh));
  ASSERT_OK(loader.AddOptimizer("optim", fresh_opt));
  ASSERT_OK(loader.Load(*ckpt));
  ExpectSameModule(model, fresh);
  ExpectSameAdamState<optim::AdamWParamState>(opt, fresh_opt);
  auto* s = dynamic_cast<const optim::AdamWParamState*>(
      FindState(fresh_opt.state(), fresh_opt.param_groups()[0].params()[0]));
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->exp_avg().is_cuda());
}


TEST(TorchRng, CaptureRestoreEveryGenerator) {
  torch::manual_seed(5);
  torch::randn({3});  // leaves a cached normal sample in the generator state
  auto states = CaptureTorchRng();
  ASSERT_OK(states);
  ASSERT_EQ(states->count("cpu"), 1u);
  const size_t cuda = torch::cuda::is_available() ? torch::cuda::device_count() : 0;
  EXPECT_EQ(states->size(), 1 + cuda);
  torch::Tensor first = torch::randn({16});
  ASSERT_OK(RestoreTorchRng(*states));
  EXPECT_TRUE(torch::equal(first, torch::randn({16})));

  auto bad = *states;
  bad["cuda:" + std::to_string(cuda)] = "x";  // a device this process does not have
  EXPECT_EQ(RestoreTorchRng(bad).code(), Code::kInvalidArgument);
  bad = *states;
  bad["tpu:0"] = "x";
  EXPECT_EQ(RestoreTorchRng(bad).code(), Code::kInvalidArgument);
  bad = *states;
  bad["cpu"] = "too short";
  EXPECT_EQ(RestoreTorchRng(bad).code(), Code::kInvalidArgument);
  EXPECT_EQ(RestoreTorchRng({}).code(), Code::kInvalidArgument);
}


// Two ranks (threads here; rank_commit_test runs processes) save the row
// halves of one parameter with AddShard through a real c10d store; one
// process then loads any box of it, or all of it.
TEST_F(TorchStateTest, ShardsFromTwoRanksLoadIntoAnyBox) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  C10dCommitChannel channel(store, "c10d HashStore");
  torch::Tensor full = torch::arange(24, torch::kFloat32).reshape({4, 6});
  std::unique_ptr<Checkpointer> ranks[2];
  std::vector<std::thread> threads;
  Status durable[2];
  for (int r = 0; r < 2; ++r) {
    CheckpointOptions o;
    o.root = dir_.Sub("ckpt");
    o.rank = r;
    o.world_size = 2;
    o.commit_channel = &channel;
    auto ckpt = Checkpointer::Open(o);
    ASSERT_OK(ckpt);
    ranks[r] = std::move(*ckpt);
  }
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      TorchStateBuilder b;
      Status s = b.AddShard("w", full.slice(0, 2 * r, 2 * r + 2), {4, 6}, {2 * r, 0});
      if (s.ok()) {
        auto h = ranks[r]->Save(1, b.state());
        s = h.ok() ? h->durable.get() : h.status();
      }
      durable[r] = s;
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_OK(durable[0]);
  ASSERT_OK(durable[1]);

  for (auto& rank : ranks) rank.reset();  // rank 0 holds the root's writer lock
  auto one = Open();  // world size 1 reads what two ranks wrote
  ASSERT_NE(one, nullptr);
  torch::Tensor box = torch::zeros({3, 4}), whole = torch::zeros({4, 6});
  TorchStateLoader loader;
  ASSERT_OK(loader.AddShard("w", box, {4, 6}, {1, 2}));
  ASSERT_OK(loader.Load(*one).status());
  EXPECT_TRUE(torch::equal(box, full.slice(0, 1, 4).slice(1, 2, 6)));
  TorchStateLoader whole_loader;
  ASSERT_OK(whole_loader.AddTensor("w", whole));
  ASSERT_OK(whole_loader.Load(*one).status());
  EXPECT_TRUE(torch::equal(whole, full));

  // A box that leaves the shape is refused before anything is read.
  TorchStateLoader bad;
  EXPECT_EQ(bad.AddShard("w", torch::zeros({2, 6}), {4, 6}, {3, 0}).code(), Code::kInvalidArgument);
}

// A rank whose builder fails abandons that save: the other rank's save of
// the step fails at once naming it (not after the commit deadline), and the
// next save commits on both (the ranks still count saves alike).
TEST_F(TorchStateTest, ABuilderFailureOnOneRankFailsThatSaveOnBothAndTheNextCommits) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  C10dCommitChannel channel(store, "c10d HashStore");
  torch::Tensor full = torch::arange(24, torch::kFloat32).reshape({4, 6});
  std::unique_ptr<Checkpointer> ranks[2];
  for (int r = 0; r < 2; ++r) {
    CheckpointOptions o;
    o.root = dir_.Sub("ckpt");
    o.rank = r;
    o.world_size = 2;
    o.commit_channel = &channel;
    o.commit_timeout = std::chrono::minutes(2);  // a rank that never reports shows as a deadline
    auto ckpt = Checkpointer::Open(o);
    ASSERT_OK(ckpt);
    ranks[r] = std::move(*ckpt);
  }
  auto save_both = [&](uint64_t step, bool rank1_builds) {
    std::vector<Status> durable(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        TorchStateBuilder b;
        // Rank 1's broken builder: a box that leaves the tensor.
        Status s = b.AddShard("w", full.slice(0, 2 * r, 2 * r + 2), {4, 6},
                              {r == 1 && !rank1_builds ? 3 : 2 * r, 0});
        if (!s.ok()) {
          durable[r] = ranks[r]->AbandonSave(step, s);
          return;
        }
        auto h = ranks[r]->Save(step, b.state());
        durable[r] = h.ok() ? h->durable.get() : h.status();
      });
    }
    for (auto& t : threads) t.join();
    return durable;
  };
  auto failed = save_both(1, false);
  EXPECT_EQ(failed[1].code(), Code::kInvalidArgument) << failed[1].ToString();
  EXPECT_EQ(failed[0].code(), Code::kInvalidArgument) << failed[0].ToString();
  EXPECT_NE(failed[0].message().find("rank 1 failed its part"), std::string::npos)
      << failed[0].ToString();
  // The failed save's background error is taken here, not by the next Save().
  for (auto& rank : ranks) rank->Flush().IgnoreError();
  auto next = save_both(2, true);
  ASSERT_OK(next[0]);
  ASSERT_OK(next[1]);
  EXPECT_EQ(ranks[0]->ListCommitted().value(), std::vector<uint64_t>{2});
}

ResumableTrainingOptions RunOptions(const std::string& root, const std::string& replica) {
  ResumableTrainingOptions o;
  o.checkpoint.root = root;
  o.checkpoint.replica_root = replica;
  o.checkpoint.chunk_size = 4096;
  o.save_every = 0;
  o.watch_signals = false;
  return o;
}

// A node whose local directory is empty resumes from tier 2, not from step 0.
TEST_F(TorchStateTest, ResumesFromTier2WhenTheLocalDirectoryIsEmpty) {
  Data data = MakeData();
  nn::Sequential model = MakeMlp(5);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  Train(model, opt, data, 3);
  {
    auto run = ResumableTraining::Create(RunOptions(dir_.Sub("node-a"), dir_.Sub("shared")), *model,
                                         opt, nullptr);
    ASSERT_OK(run);
    ASSERT_OK((*run)->Finish(3));
    ASSERT_OK((*run)->checkpointer().FlushReplication());
  }
  nn::Sequential fresh = MakeMlp(6);
  optim::SGD fresh_opt(fresh->parameters(), optim::SGDOptions(0.5));
  auto run = ResumableTraining::Create(RunOptions(dir_.Sub("node-b"), dir_.Sub("shared")), *fresh,
                                       fresh_opt, nullptr);
  ASSERT_OK(run);
  auto step = (*run)->Resume();
  ASSERT_OK(step);
  EXPECT_EQ(*step, 3u);
  ExpectSameModule(model, fresh);
}

// A damaged newest checkpoint is quarantined by the first resume; a second
// resume (a second restart) loads the same older one again, skipping nothing.
TEST_F(TorchStateTest, ASecondResumeAfterAQuarantineWorks) {
  Data data = MakeData();
  nn::Sequential model = MakeMlp(5);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.05));
  const std::string root = dir_.Sub("run");
  {
    auto run = ResumableTraining::Create(RunOptions(root, ""), *model, opt, nullptr);
    ASSERT_OK(run);
    ASSERT_OK((*run)->SaveNow(1, true));
    Train(model, opt, data, 1);
    ASSERT_OK((*run)->Finish(2));
  }
  const std::string file = root + "/step-00000002/rank-00000.stint";
  auto bytes = ReadFileToString(Env::Default(), file);
  ASSERT_OK(bytes.status());
  (*bytes)[10] ^= 0x10;
  ASSERT_OK(WriteStringToFileSync(Env::Default(), file, *bytes));
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto run = ResumableTraining::Create(RunOptions(root, ""), *model, opt, nullptr);
    ASSERT_OK(run);
    auto step = (*run)->Resume();
    ASSERT_OK(step) << "resume " << attempt;
    EXPECT_EQ(*step, 1u);
    EXPECT_EQ((*run)->resume_skipped().size(), attempt == 0 ? 1u : 0u);
  }
}


// Lazy snapshots under ResumableTraining on the CPU: saves return before the
// copies, BeforeOptimizerStep() and StepBoundary's forward barrier keep
// training from writing under them, and every checkpoint holds exactly the
// state of its step (the one a copy taken at the step holds).
TEST_F(TorchStateTest, LazyResumableTrainingCheckpointsHoldTheirStep) {
  Data data = MakeData();
  nn::Sequential model = MakeMlp(5, /*hidden=*/512);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(1e-3));
  ResumableTrainingOptions o = RunOptions(dir_.Sub("lazy"), "");
  o.checkpoint.snapshot = SnapshotMode::kLazy;
  o.checkpoint.keep_last = 0;
  o.save_every = 2;
  std::map<uint64_t, nn::Sequential> expected;
  {
    auto run = ResumableTraining::Create(o, *model, opt, nullptr);
    ASSERT_OK(run);
    model->train();
    for (uint64_t step = 1; step <= 6; ++step) {
      opt.zero_grad();
      torch::mse_loss(model->forward(data.x), data.y).backward();
      ASSERT_OK((*run)->BeforeOptimizerStep());
      opt.step();
      if (step % 2 == 0) {
        // What the checkpoint of this step must hold, copied before it is taken.
        nn::Sequential copy = MakeMlp(0, 512);
        {
          torch::NoGradGuard no_grad;
          auto src = model->named_parameters();
          for (auto& p : copy->named_parameters()) p.value().copy_(src[p.key()]);
          auto bsrc = model->named_buffers();
          for (auto& b : copy->named_buffers()) b.value().copy_(bsrc[b.key()]);
        }
        expected.emplace(step, copy);
      }
      ASSERT_OK((*run)->StepBoundary(step));
    }
    ASSERT_OK((*run)->checkpointer().Flush());
  }
  for (auto& [step, want] : expected) {
    nn::Sequential back = MakeMlp(9, 512);
    optim::AdamW back_opt(back->parameters(), optim::AdamWOptions(1e-3));
    ResumableTrainingOptions ro = RunOptions(dir_.Sub("lazy"), "");
    auto ckpt = Checkpointer::Open(ro.checkpoint);
    ASSERT_OK(ckpt);
    auto loaded = LoadModule(**ckpt, "model", *back, LoadOptions{step});
    ASSERT_OK(loaded) << "step " << step;
    ExpectSameModule(want, back);
  }
}

TEST(TorchNccl, TheLibTorchFactoryIsNcclWhenStintHasNccl) {
  auto factory = NewTorchNcclCommunicatorFactory(CommunicatorOptions{});
#if defined(STINT_HAVE_NCCL) && STINT_HAVE_NCCL
  ASSERT_OK(factory);
  EXPECT_STREQ((*factory)->Name(), "nccl");
#else
  EXPECT_EQ(factory.status().code(), Code::kUnavailable);
#endif
}

// Data parallel under ResumableTraining with a channel: every rank saves (its
// own user state; rank 0 alone the module and optimizer) and resumes the same
// step, with the module on every rank and each rank's own user state back.
TEST_F(TorchStateTest, ResumableTrainingSavesAndResumesOnEveryRank) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  C10dCommitChannel channel(store, "c10d HashStore");
  Data data = MakeData();
  nn::Sequential model = MakeMlp(5);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(0.01));
  Train(model, opt, data, 2);
  auto options = [&](int rank) {
    ResumableTrainingOptions o = RunOptions(dir_.Sub("dp"), "");
    o.checkpoint.rank = rank;
    o.checkpoint.world_size = 2;
    o.checkpoint.commit_channel = &channel;
    return o;
  };
  auto on_both_ranks = [](const std::function<void(int)>& body) {
    std::thread other(body, 1);
    body(0);
    other.join();
  };
  on_both_ranks([&](int rank) {
    auto run = ResumableTraining::Create(options(rank), *model, opt, nullptr);
    ASSERT_OK(run);
    (*run)->SetUserState("who", "rank " + std::to_string(rank));
    ASSERT_OK((*run)->Finish(2));
  });
  auto reader = CheckpointReader::Open(dir_.Sub("dp") + "/step-00000002");
  ASSERT_OK(reader.status());
  for (const auto& t : (*reader)->tensors()) EXPECT_EQ(t.shards, 1u) << t.name;  // written once

  nn::Sequential fresh[2] = {MakeMlp(6), MakeMlp(7)};
  std::vector<std::unique_ptr<optim::AdamW>> fresh_opt;
  for (auto& m : fresh) fresh_opt.push_back(std::make_unique<optim::AdamW>(m->parameters()));
  std::string who[2];
  on_both_ranks([&](int rank) {
    auto run = ResumableTraining::Create(options(rank), *fresh[rank], *fresh_opt[rank], nullptr);
    ASSERT_OK(run);
    auto step = (*run)->Resume();
    ASSERT_OK(step);
    EXPECT_EQ(*step, 2u);
    who[rank] = (*run)->UserState("who").value_or("");
  });
  ExpectSameModule(model, fresh[0]);
  ExpectSameModule(model, fresh[1]);
  EXPECT_EQ(who[0], "rank 0");
  EXPECT_EQ(who[1], "rank 1");
}

}  // namespace
}  // namespace stint
