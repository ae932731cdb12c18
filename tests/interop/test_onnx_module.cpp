// OnnxModule (interop/onnx_module.h) on the torch-exported models of tests/data/torch: torch's
// parameter and buffer names, state saved by a torch module of the same structure, forward
// against onyx::Session, gradients against torch's own autograd and TrainingSession, train/eval
// and BatchNormalization, no-grad and frozen parameters, and bad inputs.
#include <ATen/ops/allclose.h>
#include <ATen/ops/batch_norm.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/max_pool2d.h>
#include <ATen/ops/relu.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>
#include <torch/serialize.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <sstream>
#include <tuple>

#include "graph/onnx_io.h"
#include "inference/session.h"
#include "interop/onnx_module.h"
#include "torch_data.h"
#include "training/autograd_session.h"
#include "training/training_session.h"

namespace onyx::torch::test {
namespace {

std::shared_ptr<OnnxModule> load(const std::string& model, OnnxModuleOptions options = {.threads = 1}) {
  return std::make_shared<OnnxModule>(torch_data(model, "model.onnx"), options);
}

template <typename Dict>
std::vector<std::string> sorted_keys(const Dict& d) {
  std::vector<std::string> keys = d.keys();
  std::sort(keys.begin(), keys.end());
  return keys;
}

/// Mean cross-entropy over the last axis, as tools/gen_torch_models.py trains.
at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& labels) {
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), labels.reshape({-1}));
}

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no onyx::Error thrown)";
}

/// tools/gen_torch_models.py's Mlp in the C++ frontend: same structure, so the same names.
struct TorchMlp : ::torch::nn::Module {
  TorchMlp() {
    fc1 = register_module("fc1", ::torch::nn::Linear(16, 32));
    fc2 = register_module("fc2", ::torch::nn::Linear(32, 5));
  }
  at::Tensor forward(const at::Tensor& x) { return fc2(at::relu(fc1(x))); }
  ::torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

TEST(OnnxModule, ParametersAndBuffersCarryTorchsNames) {
  for (const std::string model : {"mlp", "cnn_bn", "gpt2"}) {
    SCOPED_TRACE(model);
    auto net = load(model);
    const auto want = read_json(torch_data(model, "losses.json")).at("params").at("model.onnx");
    EXPECT_EQ(sorted_keys(net->named_parameters()), want.get<std::vector<std::string>>());
    std::vector<std::string> names = net->parameter_names();
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, want.get<std::vector<std::string>>());
    // Each parameter starts as a copy of the model's value.
    for (const auto& item : net->named_parameters()) {
      at::Tensor init = to_torch(net->session()->initializer(item.key()));
      EXPECT_TRUE(at::equal(item.value(), init)) << item.key();
      EXPECT_NE(item.value().data_ptr(), init.data_ptr()) << item.key();
      EXPECT_TRUE(item.value().requires_grad()) << item.key();
    }
  }
  // Declaration order for the MLP; dotted names are submodules, as in torch.
  auto mlp = load("mlp");
  EXPECT_EQ(mlp->parameter_names(), (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  EXPECT_EQ(mlp->named_children().keys(), (std::vector<std::string>{"fc1", "fc2"}));
  EXPECT_EQ(mlp->named_children()["fc1"]->named_parameters(false).keys(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_TRUE(mlp->named_buffers().is_empty());
  auto cnn = load("cnn_bn");
  EXPECT_EQ(cnn->named_buffers().keys(), (std::vector<std::string>{"bn.running_mean", "bn.running_var"}));
  // gpt2's causal mask ("h.0.attn.bias", read through Equal) stays a constant of the model.
  auto gpt2 = load("gpt2");
  EXPECT_EQ(gpt2->named_parameters().find("h.0.attn.bias"), nullptr);
  std::ostringstream printed;
  printed << *mlp;
  EXPECT_NE(printed.str().find("inputs [x], outputs [logits], 4 parameters, 0 buffers"), std::string::npos)
      << printed.str();
}

TEST(OnnxModule, StateSavedFromATorchModuleOfTheSameStructureLoadsAndBack) {
  auto reference = std::make_shared<TorchMlp>();
  std::stringstream saved;
  ::torch::save(reference, saved);
  auto net = load("mlp");
  ::torch::load(net, saved);
  at::Tensor x = load_npy("mlp", "x")[0];
  EXPECT_TRUE(at::allclose(net->forward({x})[0], reference->forward(x), 1e-5, 1e-6));
  // And the other way: the ONNX file's weights into the torch module.
  std::stringstream back;
  ::torch::save(load("mlp"), back);
  ::torch::load(reference, back);
  EXPECT_TRUE(at::allclose(load("mlp")->forward({x})[0], reference->forward(x), 1e-5, 1e-6));
}

TEST(OnnxModule, ForwardEqualsOnyxSessionInBothModes) {
  // cnn_bn was exported in training mode (BatchNormalization on batch statistics): Session runs
  // it as the training-mode module does; its eval mode is checked against torch below.
  for (const auto& [model, input, modes] :
       std::vector<std::tuple<std::string, std::string, std::vector<bool>>>{
           {"mlp", "x", {true, false}}, {"gpt2", "tokens", {true, false}}, {"cnn_bn", "x", {true}}}) {
    SCOPED_TRACE(model);
    Session session(torch_data(model, "model.onnx"), {.intra_op_threads = 1});
    at::Tensor x = load_npy(model, input)[0];
    at::Tensor want = to_torch(session.run({{input, from_torch(x)}}).at("logits"));
    auto net = load(model);
    for (bool training : modes) {
      net->train(training);
      at::Tensor got = net->forward({x})[0];
      EXPECT_EQ(got.sizes(), want.sizes());
      EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-5)) << "training " << training << ": max difference "
                                                       << (got - want).abs().max().item<float>();
    }
  }
}

TEST(OnnxModule, GradientsEqualTorchAutogradOnTheSameModule) {
  auto net = load("mlp");
  auto reference = std::make_shared<TorchMlp>();
  std::stringstream state;
  ::torch::save(net, state);
  ::torch::load(reference, state);
  at::Tensor x = load_npy("mlp", "x")[0];
  at::Tensor labels = load_npy("mlp", "labels")[0];
  at::Tensor x1 = x.clone().requires_grad_(true), x2 = x.clone().requires_grad_(true);
  at::Tensor out = net->forward({x1})[0];
  ASSERT_TRUE(out.requires_grad());
  cross_entropy(out, labels).backward();
  cross_entropy(reference->forward(x2), labels).backward();
  auto mine = net->named_parameters(), theirs = reference->named_parameters();
  for (const auto& item : theirs) {
    const at::Tensor& g = mine[item.key()].grad();
    ASSERT_TRUE(g.defined()) << item.key();
    EXPECT_TRUE(at::allclose(g, item.value().grad(), 1e-4, 1e-6)) << item.key();
  }
  ASSERT_TRUE(x1.grad().defined());
  EXPECT_TRUE(at::allclose(x1.grad(), x2.grad(), 1e-4, 1e-7));
}

/// dL/dp from TrainingSession: one plain SGD step with lr 1 moves each parameter by -grad.
std::map<std::string, at::Tensor> training_session_gradients(const std::string& model,
                                                             const NamedTensors& batch) {
  TrainingConfig cfg;
  cfg.loss.kind = "softmax_cross_entropy";
  cfg.loss.class_axis = -1;
  cfg.optimizer = {.name = "sgd", .lr = 1.0};
  cfg.threads = 1;
  TrainingSession ts(torch_data(model, "model.onnx"), cfg);
  std::map<std::string, at::Tensor> before;
  for (const auto& name : ts.parameter_names()) before[name] = to_torch(ts.parameter(name)).clone();
  ts.train_step(batch);
  std::map<std::string, at::Tensor> grads;
  for (auto& [name, b] : before) grads[name] = b - to_torch(ts.parameter(name));
  return grads;
}

TEST(OnnxModule, GradientsEqualTrainingSessionsOnBatchNormAndTransformerModels) {
  for (const auto& [model, input] : std::vector<std::pair<std::string, std::string>>{{"cnn_bn", "x"}, {"gpt2", "tokens"}}) {
    SCOPED_TRACE(model);
    at::Tensor x = load_npy(model, input)[0], labels = load_npy(model, "labels")[0];
    auto want = training_session_gradients(model, {{input, from_torch(x)}, {"labels", from_torch(labels)}});
    auto net = load(model);
    net->train();
    cross_entropy(net->forward({x})[0], labels).backward();
    ASSERT_EQ(want.size(), net->parameters().size());
    for (const auto& item : net->named_parameters()) {
      ASSERT_TRUE(want.count(item.key())) << item.key();
      const at::Tensor& g = item.value().grad();
      ASSERT_TRUE(g.defined()) << item.key();
      EXPECT_TRUE(at::allclose(g, want[item.key()], 1e-3, 1e-6))
          << item.key() << ": max difference " << (g - want[item.key()]).abs().max().item<float>();
    }
  }
}

/// cnn_bn in torch ops with the module's parameters and buffers (gen_torch_models.py's CnnBn).
at::Tensor torch_cnn(OnnxModule& net, const at::Tensor& x, at::Tensor running_mean, at::Tensor running_var,
                     bool training) {
  auto p = net.named_parameters();
  at::Tensor h = at::conv2d(x, p["conv.weight"], p["conv.bias"], 1, 1);
  h = at::batch_norm(h, p["bn.weight"], p["bn.bias"], running_mean, running_var, training, 0.1, 1e-5, false);
  h = at::max_pool2d(at::relu(h), 2);
  return at::linear(h.reshape({h.size(0), -1}), p["fc.weight"], p["fc.bias"]);
}

TEST(OnnxModule, TrainAndEvalSwitchBatchNormalizationAsTorchDoes) {
  auto net = load("cnn_bn");
  at::Tensor x = load_npy("cnn_bn", "x")[0];
  ::torch::NoGradGuard no_grad;
  at::Tensor mean0 = net->named_buffers()["bn.running_mean"].clone();
  at::Tensor var0 = net->named_buffers()["bn.running_var"].clone();

  // eval(): running statistics; a sample's output does not depend on its batch.
  net->eval();
  ASSERT_FALSE(net->is_training());
  at::Tensor eval_out = net->forward({x})[0];
  EXPECT_TRUE(at::allclose(eval_out, torch_cnn(*net, x, mean0.clone(), var0.clone(), false), 1e-4, 1e-5));
  EXPECT_TRUE(at::allclose(net->forward({x.narrow(0, 0, 2)})[0], eval_out.narrow(0, 0, 2), 1e-5, 1e-6));
  EXPECT_TRUE(at::equal(net->named_buffers()["bn.running_mean"], mean0)) << "eval() changed the statistics";

  // train(): batch statistics, and the running statistics move as torch moves them
  // (momentum 0.1; the running variance takes the unbiased batch variance, where ONNX's rule
  // takes the biased one).
  net->train();
  at::Tensor torch_mean = mean0.clone(), torch_var = var0.clone();
  at::Tensor want = torch_cnn(*net, x, torch_mean, torch_var, true);
  at::Tensor train_out = net->forward({x})[0];
  EXPECT_TRUE(at::allclose(train_out, want, 1e-4, 1e-5));
  EXPECT_FALSE(at::allclose(train_out, eval_out, 1e-3, 1e-3)) << "train() did not change BatchNormalization";
  EXPECT_FALSE(at::allclose(net->forward({x.narrow(0, 0, 2)})[0], train_out.narrow(0, 0, 2), 1e-3, 1e-3));
  // Two training forwards have run (the full batch, then two samples): replay the second in torch.
  torch_cnn(*net, x.narrow(0, 0, 2), torch_mean, torch_var, true);
  EXPECT_TRUE(at::allclose(net->named_buffers()["bn.running_mean"], torch_mean, 1e-4, 1e-6))
      << net->named_buffers()["bn.running_mean"] << torch_mean;
  EXPECT_TRUE(at::allclose(net->named_buffers()["bn.running_var"], torch_var, 1e-4, 1e-6))
      << net->named_buffers()["bn.running_var"] << torch_var;
  // The next eval() forward normalises with the moved statistics.
  net->eval();
  EXPECT_TRUE(at::allclose(net->forward({x})[0], torch_cnn(*net, x, torch_mean, torch_var, false), 1e-4, 1e-5));
}

TEST(OnnxModule, NoGradAndFrozenParametersRunWithoutAutograd) {
  auto net = load("mlp");
  at::Tensor x = load_npy("mlp", "x")[0];
  at::Tensor with_grad = net->forward({x})[0];
  EXPECT_TRUE(with_grad.requires_grad());
  {
    ::torch::NoGradGuard no_grad;
    at::Tensor out = net->forward({x})[0];
    EXPECT_FALSE(out.requires_grad());
    EXPECT_TRUE(at::equal(out, with_grad.detach()));
  }
  for (auto& p : net->parameters()) p.requires_grad_(false);
  EXPECT_FALSE(net->forward({x})[0].requires_grad());
  // A differentiable input alone is enough to record the call.
  at::Tensor xg = x.clone().requires_grad_(true);
  net->forward({xg})[0].sum().backward();
  EXPECT_TRUE(xg.grad().defined());
  EXPECT_FALSE(net->parameters()[0].grad().defined());
}

TEST(OnnxModule, TrainableOptionChoosesTheParameters) {
  auto full = load("mlp");
  auto head = load("mlp", {.threads = 1, .trainable = {"fc2.weight", "fc2.bias"}});
  EXPECT_EQ(head->named_parameters().keys(), (std::vector<std::string>{"fc2.weight", "fc2.bias"}));
  at::Tensor x = load_npy("mlp", "x")[0];
  at::Tensor out = head->forward({x})[0];
  EXPECT_TRUE(at::allclose(out, full->forward({x})[0], 1e-6, 1e-7));  // fc1 stays in the model
  out.sum().backward();
  for (const auto& p : head->parameters()) EXPECT_TRUE(p.grad().defined());
  const std::string msg = message_of([] { load("mlp", {.trainable = {"fc3.weight"}}); });
  EXPECT_NE(msg.find("fc3.weight"), std::string::npos) << msg;
}

TEST(OnnxModule, RunsAModelWithoutTrainableParameters) {
  // y = x * 2 with an initializer that reaches nothing: no parameter by OnnxModule's rule, so
  // the module takes what AutogradSession then feeds (its default set), and runs.
  Model m;
  m.ir_version = 8;
  m.opsets = {{"", 17}};
  m.graph = std::make_unique<Graph>("double");
  Graph& g = *m.graph;
  Value* x = g.get_or_add_value("x");
  x->type = ValueType::tensor(DataType::Float, SymShape{Dim::fixed(3)});
  g.inputs.push_back(x);
  g.add_initializer("unused", Tensor::from_vector<float>({2}, {1.f, 2.f}));
  Value* two = g.add_initializer("two", Tensor::scalar<float>(2.f));
  Value* y = g.get_or_add_value("y");
  g.add_node("Mul", {x, two}, {y});
  g.outputs.push_back(y);
  const std::string bytes = serialize_model(m);
  OnnxModule net(bytes.data(), bytes.size(), {.threads = 1});
  EXPECT_EQ(net.parameters().size(), net.parameter_names().size());
  at::Tensor in = to_torch(Tensor::from_vector<float>({3}, {1.f, 2.f, 3.f})).requires_grad_(true);
  at::Tensor out = net.forward({in})[0];
  EXPECT_EQ(to_torch(from_torch(out.detach())).sum().item<float>(), 12.f);
  out.sum().backward();
  EXPECT_TRUE(at::allclose(in.grad(), to_torch(Tensor::from_vector<float>({3}, {2.f, 2.f, 2.f}))));
}

TEST(OnnxModule, IntegerOutputsAreReturnedWithoutGradients) {
  // scores = x * w, best = ArgMax(scores, axis 1): the int64 output carries no autograd history
  // and backward through the float one reaches w.
  Model m;
  m.ir_version = 8;
  m.opsets = {{"", 17}};
  m.graph = std::make_unique<Graph>("argmax");
  Graph& g = *m.graph;
  Value* x = g.get_or_add_value("x");
  x->type = ValueType::tensor(DataType::Float, SymShape{Dim::symbol("N"), Dim::fixed(3)});
  g.inputs.push_back(x);
  Value* w = g.add_initializer("w", Tensor::from_vector<float>({3}, {1.f, -1.f, 2.f}));
  Value* scores = g.get_or_add_value("scores");
  Value* best = g.get_or_add_value("best");
  g.add_node("Mul", {x, w}, {scores});
  Node* argmax = g.add_node("ArgMax", {scores}, {best});
  argmax->attrs["axis"] = Attribute::of_int("axis", 1);
  argmax->attrs["keepdims"] = Attribute::of_int("keepdims", 0);
  g.outputs = {scores, best};
  const std::string bytes = serialize_model(m);
  OnnxModule net(bytes.data(), bytes.size(), {.threads = 1});
  ASSERT_EQ(net.parameter_names(), (std::vector<std::string>{"w"}));
  at::Tensor in = to_torch(Tensor::from_vector<float>({2, 3}, {1.f, 2.f, 3.f, 4.f, 5.f, -6.f}));
  std::vector<at::Tensor> out = net.forward({in});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].requires_grad());
  EXPECT_FALSE(out[1].requires_grad());
  EXPECT_EQ(out[1].scalar_type(), at::kLong);
  EXPECT_EQ(std::vector<int64_t>(out[1].data_ptr<int64_t>(), out[1].data_ptr<int64_t>() + 2),
            (std::vector<int64_t>{2, 0}));  // scores [1, -2, 6] and [4, -5, -12]
  out[0].sum().backward();
  EXPECT_TRUE(at::allclose(net.parameters()[0].grad(), to_torch(Tensor::from_vector<float>({3}, {5.f, 7.f, -3.f}))));
}

TEST(OnnxModule, LoadsFromBytes) {
  std::ifstream f(torch_data("mlp", "model.onnx"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  OnnxModule from_bytes(bytes.data(), bytes.size(), {.threads = 1});
  at::Tensor x = load_npy("mlp", "x")[0];
  EXPECT_TRUE(at::equal(from_bytes.forward({x})[0], load("mlp")->forward({x})[0]));
  EXPECT_NE(message_of([] { OnnxModule("not a model", 11); }).find("["), std::string::npos);
}

TEST(OnnxModule, BadInputsThrowClearErrorsAndTheModuleStaysUsable) {
  auto net = load("mlp");
  at::Tensor x = load_npy("mlp", "x")[0];
  const at::Tensor good = net->forward({x})[0].detach().clone();
  std::string msg = message_of([&] { net->forward({x, x}); });
  EXPECT_NE(msg.find("expected 1 input(s) (x) but got 2"), std::string::npos) << msg;
  msg = message_of([&] { net->forward({}); });
  EXPECT_NE(msg.find("expected 1 input(s) (x) but got 0"), std::string::npos) << msg;
  msg = message_of([&] { net->forward({x.to(at::kLong)}); });
  EXPECT_NE(msg.find("int64"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'x'"), std::string::npos) << msg;
  msg = message_of([&] { net->forward({x.reshape({-1})}); });
  EXPECT_NE(msg.find("'x'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank"), std::string::npos) << msg;
  msg = message_of([&] { net->forward({x.narrow(1, 0, 8)}); });
  EXPECT_NE(msg.find("'x'"), std::string::npos) << msg;
  msg = message_of([&] { net->forward({at::Tensor()}); });
  EXPECT_NE(msg.find("input 0 ('x') is an undefined tensor"), std::string::npos) << msg;
  msg = message_of([] { load("mlp", {.threads = -1}); });
  EXPECT_NE(msg.find("threads must be >= 0"), std::string::npos) << msg;
  // Still usable, with and without autograd.
  EXPECT_TRUE(at::equal(net->forward({x})[0], good));
  net->forward({x})[0].sum().backward();
  EXPECT_TRUE(net->parameters()[0].grad().defined());
}

}  // namespace
}  // namespace onyx::torch::test
