// The optimizer's fuse_batch_norm_grad (inference/fusions_norm_grad.cpp) on training graphs
// the gradient rule builds, and its kernel ai.onyx BatchNormTrainingGrad
// (kernels/cpu/batch_norm_grad.cpp): it fires on the rule's nodes whatever X's rank and
// whether X's shape is static or symbolic, gradients equal the unfused graph's, and it leaves
// the graph alone where the rule writes more (running statistics in the loss).
#include <gtest/gtest.h>

#include <cmath>

#include "grad_check.h"

namespace onyx {
namespace {

using test::add;
using test::attr_float;
using test::attr_int;

/// t (float or double) as `dt`.
Tensor as(const Tensor& t, DataType dt) {
  return test::float_tensor(dt, t.shape(), t.to_double_vector());
}

struct Case {
  Shape x;
  DataType dt;
  bool symbolic_batch;      // X's batch dimension is a named symbol, not a number
  bool running_in_loss;     // the running mean also feeds the loss (the rule adds terms)
};

/// loss = sum(BatchNormalization(X) * R) (+ sum(running_mean) * 0.3), training mode, where
/// X = in * w0 (w0 [C, 1, ...] so X's gradient is needed); w0, scale and B are trained.
autodiff::TrainingGraph bn_training_graph(const Case& c) {
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 17});
  m->graph = std::make_unique<Graph>("bn");
  Graph& g = *m->graph;
  const int64_t C = c.x[1];
  auto values = [&](int64_t n, double phase) {
    std::vector<double> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = std::sin(phase + 0.37 * static_cast<double>(i)) * 2.0 + 0.5;
    return test::float_tensor(c.dt, {n}, v);
  };
  Value* in = g.get_or_add_value("in");
  SymShape xs;
  for (size_t i = 0; i < c.x.size(); ++i)
    xs.push_back(i == 0 && c.symbolic_batch ? Dim::symbol("batch") : Dim::fixed(c.x[i]));
  in->type = ValueType::tensor(c.dt, xs);
  g.inputs.push_back(in);
  Shape ws(c.x.size() - 1, 1);
  ws[0] = C;
  std::vector<double> wv(static_cast<size_t>(C));
  for (int64_t i = 0; i < C; ++i) wv[i] = 0.8 + 0.1 * static_cast<double>(i);
  g.add_initializer("w0", test::float_tensor(c.dt, ws, wv));
  Value* x = add(g, "Mul", {in, g.find_value("w0")});
  g.add_initializer("scale", values(C, 0.3));
  g.add_initializer("b", values(C, 1.1));
  g.add_initializer("mean", values(C, 0.7));
  g.add_initializer("var", test::float_tensor(c.dt, {C}, std::vector<double>(static_cast<size_t>(C), 1.5)));
  Value* r = g.get_or_add_value("r");
  r->type = in->type;
  g.inputs.push_back(r);
  Value* y = g.get_or_add_value("y");
  Value* rm = g.get_or_add_value("running_mean");
  Value* rv = g.get_or_add_value("running_var");
  Node* bn = g.add_node("BatchNormalization",
                        {x, g.find_value("scale"), g.find_value("b"), g.find_value("mean"),
                         g.find_value("var")},
                        {y, rm, rv}, "", "bn");
  bn->attrs["training_mode"] = attr_int("training_mode", 1);
  bn->attrs["epsilon"] = attr_float("epsilon", 1e-3f);
  Value* loss = add(g, "ReduceSum", {add(g, "Mul", {y, r})}, {attr_int("keepdims", 0)});
  if (c.running_in_loss) {
    Value* k = g.add_initializer("k", test::float_tensor(c.dt, {}, {0.3}));
    loss = add(g, "Add", {loss, add(g, "Mul", {add(g, "ReduceSum", {rm}, {attr_int("keepdims", 0)}), k})});
  }
  g.outputs.push_back(loss);
  return autodiff::build_training_graph(*m, {.kind = "output", .output = loss->name},
                                        {"w0", "scale", "b"});
}

void check(const Case& c) {
  SCOPED_TRACE(fmt::format("X {} {}{}{}", shape_str(c.x), dtype_name(c.dt),
                           c.symbolic_batch ? " symbolic batch" : "",
                           c.running_in_loss ? " running mean in the loss" : ""));
  NamedTensors feeds = test::in_and_r_feeds(c.x, c.dt);
  SessionOptions plain, fused;
  plain.opt_level = OptLevel::None;
  fused.opt_level = OptLevel::Extended;
  auto tg = bn_training_graph(c);
  for (const char* p : {"w0", "scale", "b"}) feeds[p] = tg.model->graph->initializers.at(p);
  auto tg2 = bn_training_graph(c);
  Session a(std::move(tg.model), plain), b(std::move(tg2.model), fused);
  EXPECT_EQ(test::count_ops(b, "BatchNormTrainingGrad"), c.running_in_loss ? 0u : 1u);
  if (!c.running_in_loss) {
    EXPECT_EQ(test::count_ops(b, "Reciprocal"), 0u);
  }
  auto want = a.run(feeds), got = b.run(feeds);
  const double tol = c.dt == DataType::Double ? 1e-10 : 2e-5;
  for (const auto& name : tg2.grads) {
    auto w = want.at(name).to_double_vector(), h = got.at(name).to_double_vector();
    ASSERT_EQ(got.at(name).shape(), want.at(name).shape()) << name;
    ASSERT_EQ(got.at(name).dtype(), c.dt) << name;
    double scale = 0;
    for (double v : w) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_NEAR(h[i], w[i], tol * std::max(1.0, scale)) << name << "[" << i << "]";
  }
}

TEST(BatchNormGradFusion, FusedGradientsEqualTheRulesNodes) {
  for (DataType dt : {DataType::Float, DataType::Double})
    for (const Shape& x : {Shape{4, 3, 5, 6}, Shape{1, 8, 17}, Shape{6, 2}, Shape{2, 3, 2, 2, 3}})
      for (bool symbolic : {false, true}) check({x, dt, symbolic, false});
}

TEST(BatchNormGradFusion, RunningStatisticsInTheLossStayUnfused) {
  check({{4, 3, 5}, DataType::Float, false, true});
  check({{4, 3, 5}, DataType::Double, true, true});
}

// The kernel's statistics are sums in double: a channel with a large mean and a small spread
// over 64k elements gives the parameter gradients of the float64 graph. (w0's gradient, a float32
// ReduceSum of dX * in ~ 1000 that cancels to almost nothing, is left out: no float32 graph
// gets it right.)
TEST(BatchNormGradFusion, LargeMeanSmallSpread) {
  Case c{{16, 2, 64, 64}, DataType::Float, false, false};
  SCOPED_TRACE("large mean");
  auto tg = bn_training_graph(c);
  SessionOptions fused;
  fused.opt_level = OptLevel::Extended;
  NamedTensors feeds;
  std::vector<double> xv(static_cast<size_t>(shape_numel(c.x))), rv(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    xv[i] = 1000.0 + std::sin(0.1 * static_cast<double>(i));
    rv[i] = std::cos(0.3 * static_cast<double>(i));
  }
  feeds["in"] = test::float_tensor(DataType::Float, c.x, xv);
  feeds["r"] = test::float_tensor(DataType::Float, c.x, rv);
  for (const char* p : {"w0", "scale", "b"}) feeds[p] = tg.model->graph->initializers.at(p);
  // Reference: the rule's nodes in float64.
  Case d = c;
  d.dt = DataType::Double;
  auto tgd = bn_training_graph(d);
  SessionOptions plain;
  plain.opt_level = OptLevel::None;
  NamedTensors dfeeds;
  for (const auto& [k, v] : feeds) dfeeds[k] = as(v, DataType::Double);
  auto tgu = bn_training_graph(c);
  Session ref(std::move(tgd.model), plain), s(std::move(tg.model), fused),
      unfused(std::move(tgu.model), plain);
  auto want = ref.run(dfeeds), got = s.run(feeds), was = unfused.run(feeds);
  for (size_t i = 1; i < tg.grads.size(); ++i) {  // scale and B
    auto w = want.at(tgd.grads[i]).to_double_vector(), h = got.at(tg.grads[i]).to_double_vector(),
         u = was.at(tg.grads[i]).to_double_vector();
    double scale = 0, err = 0, err_unfused = 0;
    for (double v : w) scale = std::max(scale, std::abs(v));
    for (size_t j = 0; j < w.size(); ++j) {
      err = std::max(err, std::abs(h[j] - w[j]));
      err_unfused = std::max(err_unfused, std::abs(u[j] - w[j]));
    }
    // X itself is rounded to float32 (~6e-5 at 800 over a spread of ~1), so neither graph is
    // exact; the fused one must be within that and no worse than the nodes it replaces.
    EXPECT_LE(err, 1e-3 * std::max(1.0, scale)) << tg.grads[i];
    EXPECT_LE(err, err_unfused * 1.01 + 1e-6 * scale) << tg.grads[i] << ": unfused error " << err_unfused;
  }
}

TEST(BatchNormGradFusion, WrongInputsAreErrors) {
  // The kernel on its own, as a graph could spell it: scale of the wrong length.
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 17});
  m->opsets.push_back({"ai.onyx", 1});
  m->graph = std::make_unique<Graph>("k");
  Graph& g = *m->graph;
  for (const char* n : {"dy", "x", "s"}) g.inputs.push_back(g.get_or_add_value(n));
  std::vector<Value*> outs;
  for (const char* n : {"dx", "sdy", "sdx"}) outs.push_back(g.get_or_add_value(n));
  g.add_node("BatchNormTrainingGrad", {g.find_value("dy"), g.find_value("x"), g.find_value("s")},
             outs, "ai.onyx", "k");
  g.outputs = outs;
  SessionOptions so;
  so.opt_level = OptLevel::None;
  Session s(std::move(m), so);
  Tensor x = Tensor::from_vector<float>({2, 3, 2}, std::vector<float>(12, 1.0f));
  try {
    s.run({{"dy", x}, {"x", x}, {"s", Tensor::from_vector<float>({2}, {1, 1})}});
    FAIL() << "expected onyx::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scale must be float with 3 values"), std::string::npos)
        << e.what();
  }
  // The session stays usable.
  auto out = s.run({{"dy", x}, {"x", x}, {"s", Tensor::from_vector<float>({3}, {1, 1, 1})}});
  EXPECT_EQ(out.at("dx").shape(), x.shape());
}

}  // namespace
}  // namespace onyx
