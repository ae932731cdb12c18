// AutogradSession: the forward/backward pair the libtorch and Python front doors run.
// Its gradients are checked against TrainingSession's (the path every trajectory test
// already holds to PyTorch) on the torch exports in tests/data/torch, by hand on a Gemm,
// and its errors and modes (training/inference, buffers, no-grad) one by one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "graph/error.h"
#include "graph/onnx_io.h"
#include "launcher/npy.h"
#include "test_util.h"
#include "training/autograd_session.h"
#include "training/training_session.h"

namespace onyx::test {

namespace {

std::string torch_data(const std::string& model, const std::string& file) {
  return std::string(ONYX_TORCH_TEST_DATA) + "/" + model + "/" + file;
}

/// Batch 0 of a stacked [NB, ...] array.
Tensor first(const Tensor& stacked) {
  Shape s(stacked.shape().begin() + 1, stacked.shape().end());
  Tensor t = Tensor::empty(stacked.dtype(), s);
  std::memcpy(t.raw(), stacked.raw(), t.nbytes());
  return t;
}

/// d(mean softmax cross-entropy)/d(logits) over the last axis: (softmax - onehot) / rows.
Tensor cross_entropy_grad(const Tensor& logits, const Tensor& labels) {
  int64_t c = logits.shape().back(), rows = logits.numel() / c;
  Tensor g = Tensor::empty(DataType::Float, logits.shape());
  const float* z = logits.data<float>();
  const int64_t* y = labels.data<int64_t>();
  float* d = g.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    float mx = z[r * c];
    for (int64_t k = 1; k < c; ++k) mx = std::max(mx, z[r * c + k]);
    double sum = 0;
    for (int64_t k = 0; k < c; ++k) sum += std::exp(double(z[r * c + k] - mx));
    for (int64_t k = 0; k < c; ++k)
      d[r * c + k] = float((std::exp(double(z[r * c + k] - mx)) / sum - (k == y[r] ? 1 : 0)) / rows);
  }
  return g;
}

/// max |a - b| / max(max |b|, floor): the floor keeps gradients that are zero in exact
/// arithmetic (a convolution bias under BatchNorm) from comparing rounding noise with itself.
double max_rel_diff(const Tensor& a, const Tensor& b, double floor = 1e-6) {
  EXPECT_EQ(a.shape(), b.shape());
  double scale = floor, diff = 0;
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  for (int64_t i = 0; i < a.numel(); ++i) scale = std::max(scale, double(std::fabs(y[i])));
  for (int64_t i = 0; i < a.numel(); ++i) diff = std::max(diff, double(std::fabs(x[i] - y[i])));
  return diff / scale;
}

struct TorchCase {
  std::string model;
  std::vector<std::string> inputs;  // .npy files, stacked over batches, in input order
  std::vector<std::string> buffers;
};

class AutogradTorchExport : public ::testing::TestWithParam<TorchCase> {};

// One micro-batch of an accumulation group leaves TrainingSession's summed gradient in its flat
// buffer untouched by the optimizer: the reference for AutogradSession's backward fed with
// dL/dlogits of the same loss.
TEST_P(AutogradTorchExport, GradientsEqualTrainingSession) {
  const TorchCase& c = GetParam();
  TrainingConfig cfg;
  cfg.loss.kind = "softmax_cross_entropy";
  cfg.loss.class_axis = -1;
  cfg.optimizer = {.name = "sgd", .lr = 0.1};
  cfg.accumulation_steps = 2;
  cfg.threads = 1;
  TrainingSession ts(torch_data(c.model, "model.onnx"), cfg);

  NamedTensors batch;
  std::vector<Tensor> inputs;
  for (const auto& f : c.inputs) {
    inputs.push_back(first(npy::load(torch_data(c.model, f + ".npy"))));
    batch[f] = inputs.back();
  }
  Tensor labels = first(npy::load(torch_data(c.model, "labels.npy")));
  batch["labels"] = labels;

  AutogradSession fn(load_model(torch_data(c.model, "model.onnx")),
                     {.parameters = ts.parameter_names(), .buffers = c.buffers, .threads = 1});
  ASSERT_TRUE(fn.missing_gradients().empty());
  std::vector<Tensor> params;
  for (const auto& p : fn.parameter_names()) params.push_back(ts.parameter(p).clone());
  std::vector<Tensor> buffers;
  for (const auto& b : fn.buffer_names()) buffers.push_back(fn.initializer(b).clone());

  auto fwd = fn.forward(inputs, params, buffers, {.training = true, .need_grad = true});
  ASSERT_TRUE(fwd.saved);
  ASSERT_EQ(fwd.outputs.size(), 1u);
  EXPECT_EQ(fwd.state_updates.size(), c.buffers.size());
  auto grads = fn.backward(*fwd.saved, {cross_entropy_grad(fwd.outputs[0], labels)});

  ts.train_step(batch);  // micro-batch 1 of 2: gradients summed, no step
  const char* flat_p = static_cast<const char*>(ts.flat_parameters().raw());
  const char* flat_g = static_cast<const char*>(ts.flat_gradients().raw());
  ASSERT_EQ(grads.params.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor view = ts.parameter(fn.parameter_names()[i]);
    size_t offset = static_cast<const char*>(view.raw()) - flat_p;
    Tensor want = Tensor::wrap(DataType::Float, view.shape(), const_cast<char*>(flat_g) + offset);
    EXPECT_LT(max_rel_diff(grads.params[i], want, 1e-3), 1e-4) << fn.parameter_names()[i];
  }
  // Data gradients exist exactly for float inputs.
  ASSERT_EQ(grads.inputs.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    EXPECT_EQ(bool(grads.inputs[i].storage()), inputs[i].dtype() == DataType::Float) << c.inputs[i];
}

INSTANTIATE_TEST_SUITE_P(
    TorchExports, AutogradTorchExport,
    ::testing::Values(TorchCase{"mlp", {"x"}, {}},
                      TorchCase{"cnn_bn", {"x"}, {"bn.running_mean", "bn.running_var"}},
                      TorchCase{"gpt2", {"tokens"}, {}}),
    [](const auto& info) { return info.param.model; });

/// y = x W^T + b as a Gemm with W and b initializers.
std::unique_ptr<Model> gemm_model() {
  ModelBuilder b(17);
  b.input("x", DataType::Float, SymShape{Dim::symbol("n"), Dim::fixed(3)});
  b.initializer("W", Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6}));
  b.initializer("b", Tensor::from_vector<float>({2}, {0.5f, -0.5f}));
  set_attrs(b.node("Gemm", {"x", "W", "b"}, {"y"}), {attr_int("transB", 1)});
  b.output("y");
  return b.build();
}

TEST(AutogradSession, GemmGradientsByHand) {
  AutogradSession fn(gemm_model(), {.parameters = {"W", "b"}});
  Tensor x = Tensor::from_vector<float>({2, 3}, {1, 0, -1, 2, 1, 0});
  Tensor W = Tensor::from_vector<float>({2, 3}, {1, 1, 1, 0, 1, 0});
  Tensor b = Tensor::from_vector<float>({2}, {1, 2});
  auto fwd = fn.forward({x}, {W, b}, {});
  expect_near(fwd.outputs[0], {1, 2, 4, 3});  // x W^T + b
  Tensor dy = Tensor::from_vector<float>({2, 2}, {1, 0, 2, 1});
  auto g = fn.backward(*fwd.saved, {dy});
  expect_near(g.params[0], {5, 2, -1, 2, 1, 0});  // dy^T x
  expect_near(g.params[1], {3, 1});               // column sums of dy
  expect_near(g.inputs[0], {1, 1, 1, 2, 3, 2});   // dy W
  // An omitted output gradient means zeros.
  auto z = fn.backward(*fwd.saved, {Tensor()});
  expect_near(z.params[0], {0, 0, 0, 0, 0, 0});
  // The parameter views are read at call time: the caller's optimizer updates them in place.
  W.data<float>()[0] = 3;
  expect_near(fn.forward({x}, {W, b}, {}, {.need_grad = false}).outputs[0], {3, 2, 8, 3});
}

// bf16/fp16: the Gemm runs in the low format (values exact in bf16 here, so the results are
// the float32 ones), and inputs, outputs and gradients stay float32.
TEST(AutogradSession, MixedPrecisionKeepsFloat32AtTheBoundary) {
  for (Precision p : {Precision::BFloat16, Precision::Float16}) {
    AutogradSession fn(gemm_model(), {.parameters = {"W", "b"}, .precision = p});
    Tensor x = Tensor::from_vector<float>({2, 3}, {1, 0, -1, 2, 1, 0});
    Tensor W = Tensor::from_vector<float>({2, 3}, {1, 1, 1, 0, 1, 0});
    Tensor b = Tensor::from_vector<float>({2}, {1, 2});
    auto fwd = fn.forward({x}, {W, b}, {});
    ASSERT_EQ(fwd.outputs[0].dtype(), DataType::Float);
    expect_near(fwd.outputs[0], {1, 2, 4, 3});
    auto g = fn.backward(*fwd.saved, {Tensor::from_vector<float>({2, 2}, {1, 0, 2, 1})});
    ASSERT_EQ(g.params[0].dtype(), DataType::Float);
    ASSERT_EQ(g.inputs[0].dtype(), DataType::Float);
    expect_near(g.params[0], {5, 2, -1, 2, 1, 0});
    expect_near(g.params[1], {3, 1});
    expect_near(g.inputs[0], {1, 1, 1, 2, 3, 2});
    // A weight bf16 cannot hold shows the format: 1 + 2^-9 is 1 in bf16 (8 significant bits)
    // and exact in fp16 (11), as is the output 2 + 2^-9.
    Tensor W2 = Tensor::from_vector<float>({2, 3}, {1.0f + 1.0f / 512, 0, 0, 0, 0, 0});
    float y0 = fn.forward({x}, {W2, b}, {}, {.need_grad = false}).outputs[0].data<float>()[0];
    EXPECT_EQ(y0, p == Precision::BFloat16 ? 2.0f : 2.0f + 1.0f / 512);
  }
}

TEST(AutogradSession, DefaultParametersAreFloatInitializers) {
  AutogradSession fn(gemm_model());
  EXPECT_EQ(fn.parameter_names(), (std::vector<std::string>{"W", "b"}));
  auto out = fn.forward({Tensor::from_vector<float>({1, 3}, {1, 1, 1})},
                        {fn.initializer("W"), fn.initializer("b")}, {}, {.need_grad = false});
  EXPECT_FALSE(out.saved);
  expect_near(out.outputs[0], {6.5, 14.5});
}

TEST(AutogradSession, BadInputsNameWhatWasExpected) {
  EXPECT_THROW(AutogradSession(gemm_model(), {.parameters = {"nope"}}), Error);
  EXPECT_THROW(AutogradSession(gemm_model(), {.parameters = {"W", "W"}}), Error);
  AutogradSession fn(gemm_model(), {.parameters = {"W", "b"}});
  Tensor x = Tensor::from_vector<float>({1, 3}, {1, 1, 1});
  Tensor W = fn.initializer("W"), b = fn.initializer("b");
  auto message = [&](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { fn.forward({x}, {W}, {}); }).find("expected 2 parameters but got 1"),
            std::string::npos);
  Tensor Wd = Tensor::zeros(DataType::Double, {2, 3});
  EXPECT_NE(message([&] { fn.forward({x}, {Wd, b}, {}); }).find("parameter 'W': expected float"),
            std::string::npos);
  Tensor x4 = Tensor::zeros(DataType::Float, {1, 4});
  EXPECT_NE(message([&] { fn.forward({x4}, {W, b}, {}); }), "no error");
  auto fwd = fn.forward({x}, {W, b}, {});
  EXPECT_NE(message([&] { fn.backward(*fwd.saved, {Tensor::zeros(DataType::Float, {3, 2})}); })
                .find("expected float [1, 2]"),
            std::string::npos);
  // Still usable after every error.
  expect_near(fn.forward({x}, {W, b}, {}).outputs[0], {6.5, 14.5});
}

TEST(AutogradSession, MissingGradientRefusesOnlyWhenGradientsAreWanted) {
  ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{2, 2});
  b.initializer("W", Tensor::from_vector<float>({2, 2}, {1, 0, 0, 1}));
  b.node("MatMul", {"x", "W"}, {"h"});
  b.node("Det", {"h"}, {"y"});
  b.output("y");
  AutogradSession fn(b.build(), {.parameters = {"W"}});
  ASSERT_EQ(fn.missing_gradients().size(), 1u);
  EXPECT_EQ(fn.missing_gradients()[0].op_type, "Det");
  Tensor x = Tensor::from_vector<float>({2, 2}, {2, 0, 0, 3});
  try {
    fn.forward({x}, {fn.initializer("W")}, {});
    FAIL() << "need_grad through Det should be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Det"), std::string::npos) << e.what();
  }
  expect_near(fn.forward({x}, {fn.initializer("W")}, {}, {.need_grad = false}).outputs[0], {6});
}

// Training mode normalises with batch statistics and returns new running statistics; inference
// mode reads the buffers the caller feeds (not the model's initial ones).
TEST(AutogradSession, BatchNormModesAndBuffers) {
  const std::string path = torch_data("cnn_bn", "model.onnx");
  AutogradSession fn(load_model(path), {.buffers = {"bn.running_mean", "bn.running_var"}, .threads = 1});
  std::vector<Tensor> params;
  for (const auto& p : fn.parameter_names()) params.push_back(fn.initializer(p));
  Tensor x = first(npy::load(torch_data("cnn_bn", "x.npy")));
  std::vector<Tensor> buffers = {fn.initializer("bn.running_mean").clone(),
                                 fn.initializer("bn.running_var").clone()};
  auto train = fn.forward({x}, params, buffers, {.training = true, .need_grad = false});
  ASSERT_EQ(train.state_updates.size(), 2u);
  EXPECT_EQ(train.state_updates[0].first, "bn.running_mean");
  EXPECT_GT(max_rel_diff(train.state_updates[0].second, buffers[0]), 1e-3);

  // The file was exported in training mode (as tools/gen_torch_models.py trains it), so a
  // plain Session is the training-mode reference; the inference-mode one switches it.
  Session as_exported(path);
  EXPECT_LT(max_rel_diff(train.outputs[0], as_exported.run({{"x", x}}).begin()->second), 1e-5);
  auto inference_model = load_model(path);
  autodiff::set_training_mode(*inference_model->graph, false);
  Tensor want = Session(std::move(inference_model)).run({{"x", x}}).begin()->second;
  auto eval = fn.forward({x}, params, buffers, {.training = false, .need_grad = false});
  EXPECT_LT(max_rel_diff(eval.outputs[0], want), 1e-5);
  EXPECT_GT(max_rel_diff(train.outputs[0], want), 1e-3);
  // The caller's updated buffers are what inference mode uses.
  std::vector<Tensor> updated = {train.state_updates[0].second, train.state_updates[1].second};
  auto eval2 = fn.forward({x}, params, updated, {.training = false, .need_grad = false});
  EXPECT_GT(max_rel_diff(eval2.outputs[0], want), 1e-4);
  // ... also in the backward, which reads the running variance.
  auto fwd = fn.forward({x}, params, updated, {.training = false, .need_grad = true});
  EXPECT_LT(max_rel_diff(fwd.outputs[0], eval2.outputs[0]), 1e-6);
  Tensor seed = Tensor::zeros(DataType::Float, fwd.outputs[0].shape());
  for (int64_t i = 0; i < seed.numel(); ++i) seed.data<float>()[i] = 1;
  auto g1 = fn.backward(*fwd.saved, {seed});
  auto fwd0 = fn.forward({x}, params, buffers, {.training = false, .need_grad = true});
  auto g0 = fn.backward(*fwd0.saved, {seed});
  EXPECT_GT(max_rel_diff(g1.inputs[0], g0.inputs[0]), 1e-4);
}

}  // namespace

}  // namespace onyx::test
