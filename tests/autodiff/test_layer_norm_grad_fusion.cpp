// The optimizer's fuse_layer_norm_grad (inference/fusions_layer_norm_grad.cpp) on training
// graphs the LayerNormalization rule builds, and its kernel ai.onyx LayerNormalizationGrad
// (kernels/cpu/layer_norm_grad.cpp): it fires whatever the axis and X's rank, on static and
// symbolic shapes, with and without a bias; the gradients equal the unfused graph's; it leaves
// the graph alone where the rule writes something else (statistics in a different dtype, the
// Mean output read by the loss); the kernel refuses inputs that do not fit, naming them.
#include <gtest/gtest.h>

#include <cmath>

#include "grad_check.h"

namespace onyx {
namespace {

using test::add;
using test::attr_int;

struct Case {
  Shape x;
  int64_t axis;
  DataType dt;
  bool symbolic = false;     // X's leading dims are named symbols, not numbers
  bool bias = true;          // LayerNormalization has B
  bool mean_in_loss = false;  // the Mean output feeds the loss too (the rule adds terms)
  int64_t stash = 0;          // stash_type; 0: X's dtype (1 is the default: float32)
};

/// sum(LayerNormalization(in * w0) * R) (+ 0.3 * sum(Mean)), with w0 [last dim], scale and B
/// trained; scale and B have X.shape[axis:]'s shape.
autodiff::TrainingGraph ln_training_graph(const Case& c) {
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 17});
  m->graph = std::make_unique<Graph>("ln");
  Graph& g = *m->graph;
  const int64_t rank = static_cast<int64_t>(c.x.size());
  const int64_t a = c.axis < 0 ? c.axis + rank : c.axis;
  const Shape inner(c.x.begin() + a, c.x.end());
  auto values = [&](const Shape& s, double phase, double base) {
    std::vector<double> v(static_cast<size_t>(shape_numel(s)));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = std::sin(phase + 0.37 * static_cast<double>(i)) * 0.5 + base;
    return test::float_tensor(c.dt, s, v);
  };
  SymShape xs;
  for (int64_t i = 0; i < rank; ++i)
    xs.push_back(c.symbolic && i < a ? Dim::symbol(fmt::format("d{}", i)) : Dim::fixed(c.x[i]));
  for (const char* name : {"in", "r"}) {
    Value* v = g.get_or_add_value(name);
    v->type = ValueType::tensor(c.dt, xs);
    g.inputs.push_back(v);
  }
  g.add_initializer("w0", values({c.x.back()}, 0.2, 1.0));
  g.add_initializer("scale", values(inner, 0.3, 1.0));
  std::vector<Value*> ins{add(g, "Mul", {g.find_value("in"), g.find_value("w0")}),
                          g.find_value("scale")};
  if (c.bias) ins.push_back(g.add_initializer("b", values(inner, 1.1, 0.0)));
  Value* y = g.get_or_add_value("y");
  Value* mean = g.get_or_add_value("mean");
  Value* inv = g.get_or_add_value("inv_std");
  Node* ln = g.add_node("LayerNormalization", ins, {y, mean, inv}, "", "ln");
  ln->attrs["axis"] = attr_int("axis", c.axis);
  ln->attrs["epsilon"] = test::attr_float("epsilon", 1e-3f);
  ln->attrs["stash_type"] =
      attr_int("stash_type", c.stash != 0 ? c.stash : static_cast<int64_t>(c.dt));
  Value* loss =
      add(g, "ReduceSum", {add(g, "Mul", {y, g.find_value("r")})}, {attr_int("keepdims", 0)});
  if (c.mean_in_loss) {
    Value* k = g.add_initializer("k", test::float_tensor(c.dt, {}, {0.3}));
    loss = add(g, "Add",
               {loss, add(g, "Mul", {add(g, "ReduceSum", {mean}, {attr_int("keepdims", 0)}), k})});
  }
  g.outputs.push_back(loss);
  std::vector<std::string> params{"w0", "scale"};
  if (c.bias) params.push_back("b");
  return autodiff::build_training_graph(*m, {.kind = "output", .output = loss->name}, params);
}

/// Runs the case fused and unfused; returns how many LayerNormalizationGrad nodes the fused
/// session holds after checking every gradient against the unfused graph's.
size_t check(const Case& c) {
  SCOPED_TRACE(fmt::format("X {} axis {} {}{}{}{}{}", shape_str(c.x), c.axis, dtype_name(c.dt),
                           c.symbolic ? " symbolic" : "", c.bias ? "" : " no bias",
                           c.mean_in_loss ? " Mean in the loss" : "",
                           c.stash ? fmt::format(" stash_type {}", c.stash) : ""));
  NamedTensors feeds = test::in_and_r_feeds(c.x, c.dt);
  SessionOptions plain, fused;
  plain.opt_level = OptLevel::None;
  fused.opt_level = OptLevel::Extended;
  auto tg = ln_training_graph(c), tg2 = ln_training_graph(c);
  for (const std::string& p : tg.params) feeds[p] = tg.model->graph->initializers.at(p);
  Session a(std::move(tg.model), plain), b(std::move(tg2.model), fused);
  auto want = a.run(feeds), got = b.run(feeds);
  const double tol = c.dt == DataType::Double ? 1e-10 : 3e-5;
  for (const auto& name : tg2.grads) {
    EXPECT_EQ(got.at(name).shape(), want.at(name).shape()) << name;
    if (got.at(name).shape() != want.at(name).shape()) continue;
    EXPECT_EQ(got.at(name).dtype(), c.dt) << name;
    auto w = want.at(name).to_double_vector(), h = got.at(name).to_double_vector();
    double scale = 0;
    for (double v : w) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < w.size(); ++i)
      EXPECT_NEAR(h[i], w[i], tol * std::max(1.0, scale)) << name << "[" << i << "]";
  }
  return test::count_ops(b, "LayerNormalizationGrad");
}

TEST(LayerNormGradFusion, FusedGradientsEqualTheRulesNodes) {
  for (DataType dt : {DataType::Float, DataType::Double})
    for (bool symbolic : {false, true})
      for (bool bias : {true, false}) {
        // The rule's last-axis view of a transformer's activations, a 2-D X, and views of more
        // than one axis (scale and B of X.shape[axis:]).
        for (const auto& [x, axis] : std::vector<std::pair<Shape, int64_t>>{
                 {{2, 5, 16}, -1}, {{3, 37}, 1}, {{2, 3, 4, 5}, -2}, {{2, 3, 8}, 1}})
          EXPECT_EQ(check({x, axis, dt, symbolic, bias}), 1u)
              << "X " << shape_str(x) << " axis " << axis << " " << dtype_name(dt)
              << (symbolic ? " symbolic" : "") << (bias ? "" : " no bias");
      }
}

TEST(LayerNormGradFusion, ParameterGradientsAreTheFusedNodesRowSums) {
  // Nothing of the rule's xhat survives: dX and both parameter gradients come from the kernel.
  Case c{{4, 6, 32}, -1, DataType::Float};
  auto tg = ln_training_graph(c);
  SessionOptions fused;
  fused.opt_level = OptLevel::Extended;
  Session s(std::move(tg.model), fused);
  EXPECT_EQ(test::count_ops(s, "LayerNormalizationGrad"), 1u);
  EXPECT_EQ(test::count_ops(s, "Sub"), 0u);
  EXPECT_EQ(test::count_ops(s, "ReduceMean"), 0u);
}

TEST(LayerNormGradFusion, OtherSpellingsStayUnfused) {
  // Mean read by the loss: the rule adds the statistics' own gradient terms.
  EXPECT_EQ(check({{2, 5, 16}, -1, DataType::Float, false, true, true}), 0u);
  // Statistics stashed in another dtype than X's (double for a float X; float, the default,
  // for a double X): the rule recomputes them instead of reading the forward node's outputs.
  EXPECT_EQ(check({{2, 5, 16}, -1, DataType::Float, false, true, false, 11}), 0u);
  EXPECT_EQ(check({{2, 5, 16}, -1, DataType::Double, true, true, false, 1}), 0u);
}

/// A session over the kernel alone, as a graph could spell it.
Session kernel_session() {
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 17});
  m->opsets.push_back({"ai.onyx", 1});
  m->graph = std::make_unique<Graph>("k");
  Graph& g = *m->graph;
  std::vector<Value*> ins, outs;
  for (const char* n : {"dy", "x", "s", "mean", "inv"}) {
    ins.push_back(g.get_or_add_value(n));
    g.inputs.push_back(ins.back());
  }
  for (const char* n : {"dx", "sdyxh", "sdy"}) outs.push_back(g.get_or_add_value(n));
  g.add_node("LayerNormalizationGrad", ins, outs, "ai.onyx", "k")->attrs["axis"] =
      attr_int("axis", -1);
  g.outputs = outs;
  SessionOptions so;
  so.opt_level = OptLevel::None;
  return Session(std::move(m), so);
}

TEST(LayerNormGradFusion, KernelMatchesTheFormula) {
  // Rows of 3 with hand-picked statistics: dx = inv * (g - mean(g) - xh * mean(g * xh)).
  Session s = kernel_session();
  const std::vector<double> x{1, 2, 4, -1, 0, 3}, dy{0.5, -1, 2, 1, 1, -3}, sc{2, 1, 0.5};
  const std::vector<double> mu{2, 0.5}, iv{0.75, 1.5};
  auto out = s.run({{"dy", test::T_<double>({2, 3}, dy)},
                    {"x", test::T_<double>({2, 3}, x)},
                    {"s", test::T_<double>({3}, sc)},
                    {"mean", test::T_<double>({2, 1}, mu)},
                    {"inv", test::T_<double>({2, 1}, iv)}});
  auto dx = out.at("dx").to_double_vector(), sdyxh = out.at("sdyxh").to_double_vector(),
       sdy = out.at("sdy").to_double_vector();
  for (int r = 0; r < 2; ++r) {
    double a = 0, b = 0;
    for (int j = 0; j < 3; ++j) {
      const double xh = (x[r * 3 + j] - mu[r]) * iv[r], g = dy[r * 3 + j] * sc[j];
      a += g / 3;
      b += g * xh / 3;
    }
    for (int j = 0; j < 3; ++j) {
      const double xh = (x[r * 3 + j] - mu[r]) * iv[r], g = dy[r * 3 + j] * sc[j];
      EXPECT_NEAR(dx[r * 3 + j], iv[r] * (g - a - xh * b), 1e-12);
    }
  }
  for (int j = 0; j < 3; ++j) {
    EXPECT_NEAR(sdy[j], dy[j] + dy[3 + j], 1e-12);
    EXPECT_NEAR(sdyxh[j], dy[j] * (x[j] - mu[0]) * iv[0] + dy[3 + j] * (x[3 + j] - mu[1]) * iv[1],
                1e-12);
  }
}

TEST(LayerNormGradFusion, WrongInputsAreErrors) {
  Session s = kernel_session();
  Tensor x = Tensor::from_vector<float>({2, 3}, std::vector<float>(6, 1.0f));
  Tensor stats = Tensor::from_vector<float>({2, 1}, {0, 1});
  auto expect_error = [&](const NamedTensors& feeds, const std::string& says) {
    try {
      s.run(feeds);
      ADD_FAILURE() << "expected onyx::Error saying '" << says << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  expect_error({{"dy", x}, {"x", x}, {"s", Tensor::from_vector<float>({2}, {1, 1})},
                {"mean", stats}, {"inv", stats}},
               "scale must hold the 3 values of X.shape[1:] = [3]");
  expect_error({{"dy", x}, {"x", x}, {"s", Tensor::from_vector<float>({3}, {1, 1, 1})},
                {"mean", Tensor::from_vector<float>({3}, {0, 0, 0})}, {"inv", stats}},
               "Mean and InvStdDev must hold one value per row");
  expect_error({{"dy", Tensor::from_vector<float>({3, 2}, std::vector<float>(6, 1.0f))},
                {"x", x}, {"s", Tensor::from_vector<float>({3}, {1, 1, 1})},
                {"mean", stats}, {"inv", stats}},
               "dY and X must have one shape");
  // The session stays usable.
  auto out = s.run({{"dy", x}, {"x", x}, {"s", Tensor::from_vector<float>({3}, {1, 1, 1})},
                    {"mean", stats}, {"inv", stats}});
  EXPECT_EQ(out.at("dx").shape(), x.shape());
  EXPECT_EQ(out.at("sdy").shape(), Shape{3});
}

}  // namespace
}  // namespace onyx
