// The loss builder end to end: every LossSpec kind and reduction appended to a tiny Gemm
// model by build_training_graph; the loss against a float64 reference computed here, and the
// gradients of W and B against central differences of that reference. Bad specs throw.
#include <gtest/gtest.h>

#include <cmath>

#include "autodiff/gradient_rules.h"
#include "autodiff/loss.h"
#include "autodiff/training_graph.h"
#include "graph/error.h"
#include "inference/session.h"

namespace onyx::test {

namespace {

constexpr int64_t kN = 4, kIn = 3, kC = 5;

struct Data {
  std::vector<double> x, w, b;  // x [N, In], W [In, C], B [C]
  std::vector<double> y;        // regression targets [N, C]
  std::vector<int64_t> t;       // class targets [N]
  std::vector<double> cw;       // class weights [C]
};

Data make_data(bool zero_params = false) {
  Data d;
  for (int64_t i = 0; i < kN * kIn; ++i)
    d.x.push_back(std::sin(0.9 * static_cast<double>(i) + 0.3));
  for (int64_t i = 0; i < kIn * kC; ++i)
    d.w.push_back(zero_params ? 0.0 : std::cos(1.7 * static_cast<double>(i)));
  for (int64_t i = 0; i < kC; ++i)
    d.b.push_back(zero_params ? 0.0 : 0.2 * static_cast<double>(i) - 0.3);
  for (int64_t i = 0; i < kN * kC; ++i)
    d.y.push_back(0.5 + 0.45 * std::sin(2.3 * static_cast<double>(i)));
  d.t = {1, 4, 0, 1};
  d.cw = {0.5, 2.0, 1.0, 0.25, 1.5};
  return d;
}

/// logits = x @ W + B as a Gemm model (x an input; W, B and the class weights initializers).
std::unique_ptr<Model> gemm_model(const Data& d) {
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 17});
  m->graph = std::make_unique<Graph>("gemm");
  Graph& g = *m->graph;
  Value* x = g.get_or_add_value("x");
  x->type = ValueType::tensor(DataType::Double, SymShape{Dim::fixed(kN), Dim::fixed(kIn)});
  g.inputs.push_back(x);
  Value* w = g.add_initializer("W", Tensor::from_vector<double>({kIn, kC}, d.w));
  Value* b = g.add_initializer("B", Tensor::from_vector<double>({kC}, d.b));
  g.add_initializer("class_w", Tensor::from_vector<double>({kC}, d.cw));
  Value* y = g.get_or_add_value("logits");
  g.add_node("Gemm", {x, w, b}, {y}, "", "gemm");
  g.outputs.push_back(y);
  return m;
}

std::vector<double> logits_of(const Data& d, const std::vector<double>& w,
                              const std::vector<double>& b) {
  std::vector<double> z(kN * kC);
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t c = 0; c < kC; ++c) {
      double s = b[c];
      for (int64_t k = 0; k < kIn; ++k) s += d.x[n * kIn + k] * w[k * kC + c];
      z[n * kC + c] = s;
    }
  return z;
}

/// The loss in float64, straight from the definitions ("none" is summed, as the builder does).
double reference_loss(const autodiff::LossSpec& s, const Data& d, const std::vector<double>& w,
                      const std::vector<double>& b) {
  std::vector<double> z = logits_of(d, w, b);
  double total = 0, denom = 0;
  if (s.kind == "softmax_cross_entropy" || s.kind == "nll") {
    for (int64_t n = 0; n < kN; ++n) {
      int64_t t = d.t[n];
      if (s.ignore_index && t == *s.ignore_index) continue;
      double lp = z[n * kC + t];
      if (s.kind == "softmax_cross_entropy") {
        double mx = -1e300, se = 0;
        for (int64_t c = 0; c < kC; ++c) mx = std::max(mx, z[n * kC + c]);
        for (int64_t c = 0; c < kC; ++c) se += std::exp(z[n * kC + c] - mx);
        lp -= mx + std::log(se);
      }
      double wt = s.weight.empty() ? 1.0 : d.cw[t];
      total += -wt * lp;
      denom += wt;
    }
    return s.reduction == "mean" ? total / denom : total;
  }
  for (int64_t i = 0; i < kN * kC; ++i) {
    double x = z[i], y = d.y[i], r = x - y, l;
    if (s.kind == "mse")
      l = r * r;
    else if (s.kind == "l1")
      l = std::abs(r);
    else if (s.kind == "huber")
      l = std::abs(r) < s.delta ? 0.5 * r * r : s.delta * (std::abs(r) - 0.5 * s.delta);
    else
      l = std::max(x, 0.0) - x * y + std::log1p(std::exp(-std::abs(x)));  // bce_with_logits
    total += l;
  }
  return s.reduction == "mean" ? total / static_cast<double>(kN * kC) : total;
}

/// Builds the training graph, runs it, and checks loss and gradients against the reference.
void check_loss(const autodiff::LossSpec& spec, bool zero_params = false) {
  SCOPED_TRACE(fmt::format(
      "kind {} reduction {} weight '{}' ignore {} delta {}", spec.kind, spec.reduction, spec.weight,
      spec.ignore_index ? std::to_string(*spec.ignore_index) : "-", spec.delta));
  Data d = make_data(zero_params);
  if (spec.ignore_index && *spec.ignore_index < 0) d.t[2] = *spec.ignore_index;
  auto tg = autodiff::build_training_graph(*gemm_model(d), spec, {});
  ASSERT_EQ(tg.params, (std::vector<std::string>{"B", "W"}));
  ASSERT_EQ(tg.labels, std::vector<std::string>{spec.labels});
  bool classify = spec.kind == "softmax_cross_entropy" || spec.kind == "nll";
  NamedTensors feeds = {{"x", Tensor::from_vector<double>({kN, kIn}, d.x)}};
  feeds[spec.labels] = classify ? Tensor::from_vector<int64_t>({kN}, d.t)
                                : Tensor::from_vector<double>({kN, kC}, d.y);
  SessionOptions so;
  so.opt_level = OptLevel::None;
  auto out = Session(std::move(tg.model), so).run(feeds);
  auto loss = out.at(tg.loss).to_double_vector();
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_NEAR(loss[0], reference_loss(spec, d, d.w, d.b), 1e-12 * (1 + std::abs(loss[0])));
  // Central differences of the reference, per element of B and W.
  const double eps = 1e-6;
  for (size_t p = 0; p < 2; ++p) {
    bool is_b = tg.params[p] == "B";
    auto grad = out.at(tg.grads[p]).to_double_vector();
    std::vector<double> base = is_b ? d.b : d.w;
    ASSERT_EQ(grad.size(), base.size());
    for (size_t i = 0; i < base.size(); ++i) {
      auto at = [&](double delta) {
        std::vector<double> v = base;
        v[i] += delta;
        return is_b ? reference_loss(spec, d, d.w, v) : reference_loss(spec, d, v, d.b);
      };
      double numeric = (at(eps) - at(-eps)) / (2 * eps);
      EXPECT_NEAR(grad[i], numeric, 1e-7 + 1e-6 * std::abs(numeric))
          << tg.params[p] << "[" << i << "]";
    }
  }
}

}  // namespace

TEST(Losses, SoftmaxCrossEntropyAndNll) {
  for (const char* kind : {"softmax_cross_entropy", "nll"})
    for (const char* red : {"mean", "sum", "none"}) {
      check_loss({.kind = kind, .reduction = red});
      check_loss({.kind = kind, .reduction = red, .weight = "class_w"});
      check_loss({.kind = kind, .reduction = red, .ignore_index = 1});
      check_loss({.kind = kind, .reduction = red, .ignore_index = -7, .weight = "class_w"});
    }
}

TEST(Losses, Regression) {
  for (const char* red : {"mean", "sum", "none"}) {
    check_loss({.kind = "mse", .reduction = red});
    check_loss({.kind = "l1", .reduction = red});
    check_loss({.kind = "huber", .reduction = red});
    check_loss({.kind = "huber", .reduction = red, .delta = 0.4});
    check_loss({.kind = "bce_with_logits", .reduction = red});
  }
}

// Zero-initialized weights give logits of exactly 0, where the gradient must be sigmoid(0) - y.
TEST(Losses, BceWithLogitsAtZeroLogits) {
  check_loss({.kind = "bce_with_logits", .reduction = "mean"}, true);
  check_loss({.kind = "bce_with_logits", .reduction = "sum"}, true);
}

TEST(Losses, OwnLabelsName) {
  check_loss({.kind = "mse", .labels = "targets"});
  check_loss({.kind = "softmax_cross_entropy", .labels = "classes"});
}

// "output": the model's scalar output is the loss itself.
TEST(Losses, OutputKind) {
  Data d = make_data();
  auto m = gemm_model(d);
  Graph& g = *m->graph;
  Value* s = g.get_or_add_value("s");
  g.add_node("ReduceSum", {g.outputs[0]}, {s}, "", "s")->attrs["keepdims"] =
      Attribute::of_int("keepdims", 0);
  g.outputs = {s};
  auto tg = autodiff::build_training_graph(*m, {.kind = "output"}, {"W"});
  EXPECT_TRUE(tg.labels.empty());
  SessionOptions so;
  so.opt_level = OptLevel::None;
  auto out =
      Session(std::move(tg.model), so).run({{"x", Tensor::from_vector<double>({kN, kIn}, d.x)}});
  double want = 0;
  for (double z : logits_of(d, d.w, d.b)) want += z;
  EXPECT_NEAR(out.at(tg.loss).to_double_vector()[0], want, 1e-12);
  auto gw = out.at(tg.grads[0]).to_double_vector();
  for (int64_t k = 0; k < kIn; ++k)
    for (int64_t c = 0; c < kC; ++c) {
      double col = 0;
      for (int64_t n = 0; n < kN; ++n) col += d.x[n * kIn + k];
      EXPECT_NEAR(gw[k * kC + c], col, 1e-12);
    }
}

// Language-model logits [N, S, C] with labels [N, S]: class_axis -1 reads the classes from the
// last axis. The same 4 rows as the flat [4, C] Gemm, so loss and gradients equal the flat
// reference; class axis 1 would read S as the classes, and 3 is out of range.
TEST(Losses, ClassAxisLastForSequenceLogits) {
  Data d = make_data();
  auto m = gemm_model(d);
  Graph& g = *m->graph;
  g.add_initializer("seq_shape", Tensor::from_vector<int64_t>({3}, {2, 2, kC}));
  Value* z3 = g.get_or_add_value("logits3");
  g.add_node("Reshape", {g.outputs[0], g.find_value("seq_shape")}, {z3}, "", "to_seq");
  g.outputs = {z3};
  for (const char* red : {"mean", "sum"}) {
    SCOPED_TRACE(red);
    autodiff::LossSpec spec{.kind = "softmax_cross_entropy", .reduction = red, .class_axis = -1};
    auto tg = autodiff::build_training_graph(*m, spec, {});
    ASSERT_EQ(tg.params, (std::vector<std::string>{"B", "W"}));
    // Classes last with a fixed count: the loss reads rows of [N * S, C] (a Reshape), not a
    // transposed copy whose classes lie S apart.
    size_t transposes = 0;
    for (const Node* n : tg.model->graph->topological_order()) transposes += n->op_type == "Transpose";
    EXPECT_EQ(transposes, 0u);
    NamedTensors feeds = {{"x", Tensor::from_vector<double>({kN, kIn}, d.x)},
                          {"labels", Tensor::from_vector<int64_t>({2, 2}, d.t)}};
    SessionOptions so;
    so.opt_level = OptLevel::None;
    auto out = Session(std::move(tg.model), so).run(feeds);
    autodiff::LossSpec flat{.kind = "softmax_cross_entropy", .reduction = red};
    EXPECT_NEAR(out.at(tg.loss).to_double_vector()[0], reference_loss(flat, d, d.w, d.b), 1e-12);
    auto gb = out.at(tg.grads[0]).to_double_vector();
    const double eps = 1e-6;
    for (size_t i = 0; i < d.b.size(); ++i) {
      auto at = [&](double delta) {
        std::vector<double> v = d.b;
        v[i] += delta;
        return reference_loss(flat, d, d.w, v);
      };
      EXPECT_NEAR(gb[i], (at(eps) - at(-eps)) / (2 * eps), 1e-7) << "B[" << i << "]";
    }
  }
  try {
    autodiff::build_training_graph(*m, {.kind = "nll", .class_axis = 3}, {});
    ADD_FAILURE() << "class axis 3 of a rank-3 output must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("class axis 3 is out of range"), std::string::npos)
        << e.what();
  }
}

TEST(Losses, BadSpecsThrow) {
  auto m = gemm_model(make_data());
  auto expect_error = [&](const autodiff::LossSpec& spec, const std::string& needle) {
    try {
      autodiff::build_training_graph(*m, spec, {});
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.rfind("[loss]", 0), 0u) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    }
  };
  expect_error({.kind = "cross_entropy"}, "unknown loss 'cross_entropy'");
  expect_error({.kind = "mse", .output = "probs"}, "no output 'probs'");
  expect_error({.kind = "mse", .labels = "x"}, "'x' is already used");
  expect_error({.kind = "softmax_cross_entropy", .labels = "W"}, "'W' is already used");
  expect_error({.kind = "mse", .labels = ""}, "needs a name");
  expect_error({.kind = "mse", .reduction = "avg"}, "reduction should be");
  expect_error({.kind = "nll", .weight = "missing"}, "'missing' are not an initializer");
  expect_error({.kind = "softmax_cross_entropy", .weight = "W"}, "should be a 1-D");
  expect_error({.kind = "huber", .delta = 0}, "delta should be positive");
  expect_error({.kind = "output"}, "should be a scalar");
}

}  // namespace onyx::test
