// Finite-difference checks of the activation gradient rules (float64).
#include <cmath>
#include <map>
#include <optional>
#include <random>

#include "autodiff/training_graph.h"
#include "grad_check.h"
#include "graph/error.h"
#include "graph/onnx_io.h"
#include "save_reload_check.h"

namespace onyx::test {

namespace {

using test::attr_float;
using test::attr_int;
using test::attr_string;
using autodiff::Attrs;

/// `n` values in [-2, 2] at least 0.1 away from 0 (the kink of Relu-like ops).
std::vector<double> away_from_zero(int64_t n, uint64_t seed = 5) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.1, 2.0);
  std::vector<double> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 3 ? -1 : 1) * u(rng);
  return v;
}

}  // namespace

TEST(GradActivation, ReluAndLeakyRelu) {
  auto x = PV("x", {3, 4}, away_from_zero(12));
  check_gradient({.op = "Relu", .inputs = {x}});
  check_gradient({.op = "LeakyRelu", .inputs = {x}});
  check_gradient({.op = "LeakyRelu", .inputs = {x}, .attrs = {attr_float("alpha", 0.3)}});
  check_gradient({.op = "LeakyRelu", .inputs = {x}, .attrs = {attr_float("alpha", -0.5)}});
  check_gradient({.op = "LeakyRelu", .inputs = {x}, .attrs = {attr_float("alpha", 0.0)}});
}

TEST(GradActivation, SmoothUnary) {
  for (const char* op : {"Sigmoid", "Tanh", "Erf", "Softplus"}) {
    SCOPED_TRACE(op);
    check_gradient({.op = op, .inputs = {P("x", {2, 3, 2}, -2.5, 2.5)}});
  }
}

TEST(GradActivation, GeluExactAndTanh) {
  auto x = P("x", {3, 5}, -3, 3);
  check_gradient({.op = "Gelu", .inputs = {x}, .opset = 20});
  check_gradient(
      {.op = "Gelu", .inputs = {x}, .attrs = {attr_string("approximate", "none")}, .opset = 20});
  check_gradient(
      {.op = "Gelu", .inputs = {x}, .attrs = {attr_string("approximate", "tanh")}, .opset = 20});
}

namespace {

/// The Erf spellings of GELU exporters write (graph/gelu_pattern.h), over input "x" and the
/// scalar constants "c_sqrt2", "c_inv_sqrt2", "c_one", "c_half".
enum class GeluSpelling { TorchScript, HalfFirst, InvSqrt2Nested };

Value* erf_gelu(Graph& g, Value* x, GeluSpelling s) {
  Value* one = g.find_value("c_one");
  Value* half = g.find_value("c_half");
  Value* scaled = s == GeluSpelling::InvSqrt2Nested ? add(g, "Mul", {g.find_value("c_inv_sqrt2"), x})
                                                    : add(g, "Div", {x, g.find_value("c_sqrt2")});
  Value* a = add(g, "Add", {one, add(g, "Erf", {scaled})});
  switch (s) {
    case GeluSpelling::TorchScript: return add(g, "Mul", {add(g, "Mul", {x, a}), half});
    case GeluSpelling::HalfFirst: return add(g, "Mul", {add(g, "Mul", {x, half}), a});
    default: return add(g, "Mul", {x, add(g, "Mul", {a, half})});
  }
}

std::vector<GradInput> gelu_constants() {
  return {C("c_sqrt2", {}, {std::sqrt(2.0)}, DataType::Double),
          C("c_inv_sqrt2", {}, {1 / std::sqrt(2.0)}, DataType::Double),
          C("c_one", {}, {1.0}, DataType::Double), C("c_half", {}, {0.5}, DataType::Double)};
}

}  // namespace

// An Erf spelling of GELU is differentiated as one Gelu: its gradient reads only x, so the
// training graph carries none of the spelling's own rules (Div, Erf, Add, Mul gradients) and
// execution fuses the forward into com.microsoft Gelu and the gradient into ai.onyx GeluGrad.
TEST(GradActivation, ErfGeluSpellingsDifferentiateAsOneGelu) {
  for (GeluSpelling s : {GeluSpelling::TorchScript, GeluSpelling::HalfFirst,
                         GeluSpelling::InvSqrt2Nested}) {
    SCOPED_TRACE(static_cast<int>(s));
    std::vector<GradInput> inputs = gelu_constants();
    inputs.insert(inputs.begin(), P("x", {3, 5}, -3, 3));
    auto build = [s](Graph& g) -> std::vector<Value*> {
      // x feeds another consumer too, as a residual does.
      Value* x = g.find_value("x");
      return {add(g, "Add", {erf_gelu(g, x, s), x})};
    };
    check_gradient({.op = "graph", .inputs = inputs, .build = build});

    auto m = std::make_unique<Model>();
    m->ir_version = 8;
    m->opsets.push_back({"", 17});
    m->graph = std::make_unique<Graph>("gelu");
    Graph& g = *m->graph;
    g.add_initializer("x", Tensor::from_vector<float>({2, 3}, {-2, -0.5f, 0, 0.3f, 1, 2.5f}));
    for (const GradInput& c : gelu_constants())
      g.add_initializer(c.name, Tensor::scalar<float>(static_cast<float>(c.values[0])));
    Value* y = build(g)[0];
    g.outputs = {add(g, "ReduceSum", {y}, {attr_int("keepdims", 0)})};
    auto tg = autodiff::build_training_graph(*m, {.kind = "output"}, {"x"});
    std::map<std::string, int> ops;
    for (const auto& n : tg.model->graph->nodes()) {
      ++ops[n->op_type];
      // The spelling's nodes are 0-4 (add() names them op_index); only the last one's name
      // may prefix gradient nodes.
      for (const char* inner : {"Div_0_grad", "Mul_0_grad", "Erf_1_grad", "Add_2_grad", "Mul_3_grad"})
        EXPECT_NE(n->name.rfind(inner, 0), 0u) << n->name << ": a rule of the spelling ran";
    }
    EXPECT_EQ(ops["Erf"], 2);  // the forward's and the Gelu rule's
    for (const auto& n : tg.model->graph->nodes()) EXPECT_EQ(n.get()->domain, "") << n->name;

    SessionOptions fused, plain;
    plain.opt_level = OptLevel::None;
    Session a(clone_model(*tg.model), fused), b(clone_model(*tg.model), plain);
    std::map<std::string, int> run_ops;
    for (const auto& n : a.model().graph->nodes()) ++run_ops[n->domain + ":" + n->op_type];
    EXPECT_EQ(run_ops["com.microsoft:Gelu"], 1);
    EXPECT_EQ(run_ops["ai.onyx:GeluGrad"], 1);
    EXPECT_EQ(run_ops[":Erf"], 0);
    NamedTensors ra = a.run({}), rb = b.run({});
    for (const std::string& name : {tg.loss, tg.grads[0]}) {
      auto va = ra.at(name).to_double_vector(), vb = rb.at(name).to_double_vector();
      ASSERT_EQ(va.size(), vb.size());
      for (size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(va[i], vb[i], 2e-6) << name << " " << i;
    }
  }
}

// The tanh spelling (GPT-2's gelu_new, nanoGPT's GELU(approximate="tanh") as torch exports it)
// is differentiated as one Gelu(approximate="tanh") too: its gradient is right (finite
// differences in float64), reads only x, and execution runs it as one ai.onyx GeluGrad with
// approximate="tanh" (the forward keeps its nodes in training: SessionOptions::approximate_fusions).
TEST(GradActivation, TanhGeluSpellingDifferentiatesAsOneGelu) {
  const std::vector<GradInput> constants = {
      C("c_three", {}, {3.0}, DataType::Double), C("c_a", {}, {0.044715}, DataType::Double),
      C("c_k", {}, {std::sqrt(2 / M_PI)}, DataType::Double), C("c_one", {}, {1.0}, DataType::Double),
      C("c_half", {}, {0.5}, DataType::Double)};
  for (bool cube_as_muls : {false, true}) {
    SCOPED_TRACE(cube_as_muls ? "x * (x * x)" : "Pow(x, 3)");
    auto build = [cube_as_muls](Graph& g) -> std::vector<Value*> {
      Value* x = g.find_value("x");
      Value* x3 = cube_as_muls ? add(g, "Mul", {x, add(g, "Mul", {x, x})})
                               : add(g, "Pow", {x, g.find_value("c_three")});
      Value* inner = add(g, "Add", {x, add(g, "Mul", {g.find_value("c_a"), x3})});
      Value* t = add(g, "Tanh", {add(g, "Mul", {inner, g.find_value("c_k")})});
      Value* y = add(g, "Mul", {add(g, "Mul", {g.find_value("c_half"), x}),
                                add(g, "Add", {g.find_value("c_one"), t})});
      return {add(g, "Add", {y, x})};  // x read elsewhere too, as a residual does
    };
    std::vector<GradInput> inputs = constants;
    inputs.insert(inputs.begin(), P("x", {3, 5}, -3, 3));
    check_gradient({.op = "graph", .inputs = inputs, .build = build});

    auto m = std::make_unique<Model>();
    m->ir_version = 8;
    m->opsets.push_back({"", 17});
    m->graph = std::make_unique<Graph>("gelu_tanh");
    Graph& g = *m->graph;
    g.add_initializer("x", Tensor::from_vector<float>({2, 3}, {-2, -0.5f, 0, 0.3f, 1, 2.5f}));
    for (const GradInput& c : constants)
      g.add_initializer(c.name, Tensor::scalar<float>(static_cast<float>(c.values[0])));
    Value* y = build(g)[0];
    g.outputs = {add(g, "ReduceSum", {y}, {attr_int("keepdims", 0)})};
    auto tg = autodiff::build_training_graph(*m, {.kind = "output"}, {"x"});
    std::map<std::string, int> ops;
    for (const auto& n : tg.model->graph->nodes()) ++ops[n->op_type];
    EXPECT_EQ(ops["Pow"], cube_as_muls ? 0 : 1);  // the forward's only: Pow's rule did not run
    EXPECT_EQ(ops["Tanh"], 2);                      // the forward's and the Gelu rule's

    SessionOptions plain;
    plain.opt_level = OptLevel::None;
    Session a(clone_model(*tg.model)), b(clone_model(*tg.model), plain);
    int grads = 0;
    for (const auto& n : a.model().graph->nodes())
      if (n->op_type == "GeluGrad") {
        ++grads;
        EXPECT_EQ(n->attr_string("approximate", "none"), "tanh");
      }
    EXPECT_EQ(grads, 1);
    NamedTensors ra = a.run({}), rb = b.run({});
    for (const std::string& name : {tg.loss, tg.grads[0]}) {
      auto va = ra.at(name).to_double_vector(), vb = rb.at(name).to_double_vector();
      ASSERT_EQ(va.size(), vb.size());
      for (size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(va[i], vb[i], 2e-6) << name << " " << i;
    }
  }
}

// Where the spelling's values are read elsewhere, or a constant is not GELU's, each node keeps
// its own rule (and nothing is fused).
TEST(GradActivation, ErfGeluLookalikesKeepTheirRules) {
  for (int variant : {0, 1}) {
    SCOPED_TRACE(variant);
    std::vector<GradInput> inputs = gelu_constants();
    inputs.insert(inputs.begin(), P("x", {2, 4}, -3, 3));
    inputs.push_back(C("c_other", {}, {0.6}, DataType::Double));
    auto build = [variant](Graph& g) -> std::vector<Value*> {
      Value* x = g.find_value("x");
      Value* erf = add(g, "Erf", {add(g, "Div", {x, g.find_value("c_sqrt2")})});
      Value* a = add(g, "Add", {erf, g.find_value("c_one")});
      Value* factor = g.find_value(variant == 0 ? "c_half" : "c_other");
      Value* y = add(g, "Mul", {add(g, "Mul", {x, a}), factor});
      // variant 0: the Erf is also read by the loss.
      return variant == 0 ? std::vector<Value*>{y, erf} : std::vector<Value*>{y};
    };
    check_gradient({.op = "graph", .inputs = inputs, .build = build});
  }
}

TEST(GradActivation, SoftmaxAndLogSoftmaxEveryAxis) {
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    SCOPED_TRACE(op);
    auto x = P("x", {2, 3, 4}, -2, 2);
    check_gradient({.op = op, .inputs = {x}});  // default axis -1
    for (int64_t axis : {0, 1, 2, -1, -2, -3}) {
      SCOPED_TRACE(axis);
      check_gradient({.op = op, .inputs = {x}, .attrs = {attr_int("axis", axis)}});
    }
    check_gradient({.op = op, .inputs = {x}, .attrs = {attr_int("axis", 1)}, .opset = 13});
    check_gradient({.op = op, .inputs = {P("v", {5}, -2, 2)}});
  }
}

TEST(GradActivation, HardSigmoidEluSelu) {
  // Kinks of HardSigmoid at x = (0 - beta)/alpha and (1 - beta)/alpha: -2.5, 2.5 by default,
  // -0.8, 1.2 with alpha 0.5, beta 0.4; the values stay clear of both.
  auto xh = PV("x", {8}, {-3.1, -2.0, -1.1, 0.05, 0.7, 1.5, 2.1, 3.3});
  check_gradient({.op = "HardSigmoid", .inputs = {xh}});
  check_gradient(
      {.op = "HardSigmoid", .inputs = {xh}, .attrs = {attr_float("alpha", 0.5), attr_float("beta", 0.4)}});
  auto x = PV("x", {3, 4}, away_from_zero(12, 9));
  check_gradient({.op = "Elu", .inputs = {x}});
  check_gradient({.op = "Elu", .inputs = {x}, .attrs = {attr_float("alpha", 0.4)}});
  check_gradient({.op = "Selu", .inputs = {x}});
  check_gradient(
      {.op = "Selu", .inputs = {x}, .attrs = {attr_float("alpha", 1.3), attr_float("gamma", 0.9)}});
}

TEST(GradActivation, HardSwishMishSoftsign) {
  // HardSwish's kinks at -3 and 3: values on both outer sides and inside, none near them.
  auto xh = PV("x", {2, 5}, {-4.5, -3.4, -2.6, -1.0, -0.2, 0.3, 1.7, 2.8, 3.3, 5.0});
  check_gradient({.op = "HardSwish", .inputs = {xh}, .opset = 14});
  auto x = P("x", {2, 3, 2}, -3, 3);
  check_gradient({.op = "Mish", .inputs = {x}, .opset = 18});
  check_gradient({.op = "Softsign", .inputs = {PV("x", {3, 4}, away_from_zero(12, 3))}});
}

TEST(GradActivation, CeluInFloat32) {
  // Celu-12 takes float32 only: x (float64) -> Cast -> Celu -> Cast, with steps and tolerances
  // sized for float32 rounding. Celu is smooth at 0 (slope 1 on both sides); alpha scales the
  // negative branch's exp(x / alpha).
  for (std::optional<double> alpha : {std::optional<double>(), {1.0}, {0.5}, {2.5}}) {
    SCOPED_TRACE(alpha.value_or(-1));
    check_gradient({.op = "Celu",
                    .inputs = {P("x", {2, 3, 2}, -3, 3)},
                    .eps = 1e-3,
                    .rtol = 1e-3,
                    .atol = 1e-4,
                    .build = [alpha](Graph& g) -> std::vector<Value*> {
                      Value* f = add(g, "Cast", {g.find_value("x")},
                                     {attr_int("to", int64_t(DataType::Float))});
                      Attrs a;
                      if (alpha) a.push_back(attr_float("alpha", *alpha));
                      Value* y = add(g, "Celu", {f}, a);
                      return {add(g, "Cast", {y}, {attr_int("to", int64_t(DataType::Double))})};
                    }});
  }
}

TEST(GradActivation, ThresholdedReluAndShrink) {
  // Thresholds at alpha (1 by default, 0.3, -0.5); values at least 0.05 away from each.
  auto x = PV("x", {2, 6}, {-1.4, -0.8, -0.2, 0.1, 0.4, 0.7, 0.95, 1.1, 1.6, -0.6, 0.25, 2.0});
  check_gradient({.op = "ThresholdedRelu", .inputs = {x}});
  for (double alpha : {0.3, -0.5}) {
    SCOPED_TRACE(alpha);
    check_gradient({.op = "ThresholdedRelu", .inputs = {x}, .attrs = {attr_float("alpha", alpha)}});
  }
  // Shrink: kinks at +-lambd (0.5 by default, 0.9); bias shifts but does not change the slope.
  check_gradient({.op = "Shrink", .inputs = {x}});
  check_gradient({.op = "Shrink",
                  .inputs = {x},
                  .attrs = {attr_float("lambd", 0.9), attr_float("bias", 0.3)}});
}

TEST(GradActivation, PReluSlopeBroadcasting) {
  // Slope shapes: same as x, one per channel ([C, 1, 1] for NCHW), a trailing vector, a scalar.
  auto x = PV("x", {2, 3, 2, 2}, away_from_zero(24, 21));
  for (Shape ss :
       {Shape{2, 3, 2, 2}, Shape{3, 1, 1}, Shape{2}, Shape{1}, Shape{}, Shape{1, 3, 1, 2}}) {
    SCOPED_TRACE(shape_str(ss));
    check_gradient({.op = "PRelu", .inputs = {x, P("slope", ss, -0.5, 0.8)}});
  }
  // Only one input trained at a time: the other gradient is pruned.
  check_gradient(
      {.op = "PRelu", .inputs = {x, C("slope", {3, 1, 1}, {0.2, -0.3, 0.5}, DataType::Double)}});
  GradInput xc = x;
  xc.param = false;
  check_gradient({.op = "PRelu", .inputs = {xc, P("slope", {3, 1, 1}, 0.1, 0.4)}});
}

TEST(GradActivation, SwishAndSwiGLU) {
  auto a = P("a", {2, 3, 2}, -3, 3);
  for (std::optional<double> alpha : {std::optional<double>(), {0.5}, {1.7}}) {
    SCOPED_TRACE(alpha.value_or(-1));
    Attrs at;
    if (alpha) at.push_back(attr_float("alpha", *alpha));
    check_gradient({.op = "Swish", .inputs = {a}, .attrs = at, .opset = 24});
    check_gradient({.op = "SwiGLU", .inputs = {a, P("b", {2, 3, 2})}, .attrs = at, .opset = 28});
  }
}

TEST(GradActivation, HardmaxIsPiecewiseConstant) {
  // Random values (no ties): the one-hot does not move under small steps, so the gradient is 0;
  // y = Hardmax(x) * x checks that the zero is added to the Mul's x * 1 path correctly.
  for (int64_t axis : {-1, 0, 1}) {
    SCOPED_TRACE(axis);
    check_gradient(
        {.op = "Hardmax", .inputs = {P("x", {3, 4})}, .attrs = {attr_int("axis", axis)}});
  }
  check_gradient(
      {.op = "Hardmax", .inputs = {P("x", {3, 4})}, .build = [](Graph& g) -> std::vector<Value*> {
         Value* x = g.find_value("x");
         return {add(g, "Mul", {add(g, "Hardmax", {x}), x})};
       }});
}

TEST(GradActivation, DropoutTrainingModeReusesTheMask) {
  auto x = P("x", {4, 5});
  auto on = C("training", {}, {1}, DataType::Bool);
  for (double ratio : {0.0, 0.3, 0.75}) {
    SCOPED_TRACE(ratio);
    check_gradient({.op = "Dropout",
                    .inputs = {x, C("ratio", {}, {ratio}, DataType::Double), on},
                    .run_seed = 7});
  }
  // Ratio omitted (0.5), and a float ratio for a double input.
  check_gradient({.op = "Dropout", .inputs = {x, None(), on}, .run_seed = 11});
  check_gradient({.op = "Dropout",
                  .inputs = {x, C("ratio", {}, {0.4}, DataType::Float), on},
                  .outputs = 2,
                  .run_seed = 3});
  // A ratio computed at run time: the scale is built in the graph.
  check_gradient({.op = "Dropout",
                  .inputs = {x, C("r0", {}, {0.25}, DataType::Double), on},
                  .run_seed = 5,
                  .build = [](Graph& g) -> std::vector<Value*> {
                    Value* r = add(g, "Identity", {g.find_value("r0")});
                    return {add(g, "Dropout", {g.find_value("x"), r, g.find_value("training")})};
                  }});
}

TEST(GradActivation, DropoutBackwardMatchesMaskAndRunTimeFlag) {
  // build_backward_graphs keeps the flag as the model has it: a graph input here, so the
  // rule must choose the scale at run time. Reference: dx = dy * mask / (1 - r), or dy.
  const double r = 0.4;
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 17});
  m->graph = std::make_unique<Graph>("dropout");
  Graph& g = *m->graph;
  Value* x = g.get_or_add_value("x");
  x->type = ValueType::tensor(DataType::Double, SymShape{Dim::fixed(3), Dim::fixed(4)});
  Value* t = g.get_or_add_value("t");
  t->type = ValueType::tensor(DataType::Bool, SymShape{});
  g.inputs = {x, t};
  Value* ratio = g.add_initializer("ratio", Tensor::scalar<double>(r));
  Value* y = g.get_or_add_value("y");
  Value* mask = g.get_or_add_value("mask");
  g.add_node("Dropout", {x, ratio, t}, {y, mask}, "", "drop");
  g.outputs = {y, mask};
  auto bg = autodiff::build_backward_graphs(*m, {"x"});
  SessionOptions so;
  so.intra_op_threads = 1;
  Session fwd(std::move(bg.forward), so);
  Session bwd(std::move(bg.backward), so);
  std::vector<double> xv(12), dyv(12);
  for (int i = 0; i < 12; ++i) xv[i] = 0.1 * i - 0.5, dyv[i] = 1.0 - 0.15 * i;
  for (bool training : {true, false}) {
    SCOPED_TRACE(training);
    NamedTensors feeds = {{"x", Tensor::from_vector<double>({3, 4}, xv)},
                          {"t", Tensor::scalar<bool>(training)}};
    RunOptions ro;
    ro.seed = 42;
    auto f = fwd.run(feeds, {}, ro);
    NamedTensors bfeeds = {{"y_grad", Tensor::from_vector<double>({3, 4}, dyv)},
                           {"mask_grad", f.at("mask")}};
    for (const auto& s : bg.saved) bfeeds[s] = f.at(s);
    auto dx = bwd.run(bfeeds).at(bg.grads[0]).to_double_vector();
    const bool* mk = f.at("mask").data<bool>();
    int kept = 0;
    for (int i = 0; i < 12; ++i) {
      double want = training ? (mk[i] ? dyv[i] / (1 - r) : 0.0) : dyv[i];
      EXPECT_NEAR(dx[i], want, 1e-12) << i;
      kept += mk[i];
    }
    if (training) {
      EXPECT_LT(kept, 12) << "a 0.4 dropout of 12 elements kept all of them";
    }
  }
}

TEST(GradActivation, UnknownGeluApproximationIsAnError) {
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 20});
  m->graph = std::make_unique<Graph>("gelu");
  Graph& g = *m->graph;
  g.add_initializer("w", Tensor::from_vector<double>({3}, {0.1, 0.2, 0.3}));
  Value* y = add(g, "Gelu", {g.find_value("w")}, {attr_string("approximate", "cubic")});
  g.outputs = {add(g, "ReduceSum", {y}, {attr_int("keepdims", 0)})};
  try {
    autodiff::build_training_graph(*m, {.kind = "output"}, {"w"});
    FAIL() << "expected onyx::Error";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(what.rfind("[autodiff]", 0), 0u) << what;
    EXPECT_NE(what.find("approximate"), std::string::npos) << what;
    EXPECT_NE(what.find("cubic"), std::string::npos) << what;
  }
}

namespace {

/// x -> Gelu(tanh) -> Dropout -> Softmax(axis 0) * Sigmoid(x) + LogSoftmax(LeakyRelu(x), axis 1)
std::vector<Value*> activation_graph(Graph& g) {
  Value* x = g.find_value("x");
  Value* on = g.find_value("training");
  Value* ratio = g.find_value("ratio");
  Value* ge = add(g, "Gelu", {x}, {attr_string("approximate", "tanh")});
  Value* dr = add(g, "Dropout", {ge, ratio, on});
  Value* sm = add(g, "Softmax", {dr}, {attr_int("axis", 0)});
  Value* lr = add(g, "LeakyRelu", {x}, {attr_float("alpha", 0.2)});
  Value* ls = add(g, "LogSoftmax", {lr}, {attr_int("axis", 1)});
  Value* th = add(g, "Tanh", {add(g, "Elu", {x})});
  Value* prod = add(g, "Mul", {sm, add(g, "Sigmoid", {x})});
  return {add(g, "Add", {add(g, "Add", {prod, ls}), th})};
}

}  // namespace

TEST(GradActivation, MultiOpGraphSurvivesSaveReload) {
  auto x = PV("x", {3, 4}, away_from_zero(12, 17));
  auto ratio = C("ratio", {}, {0.25}, DataType::Double);
  auto on = C("training", {}, {1}, DataType::Bool);
  check_gradient({.op = "graph",
                  .inputs = {x, ratio, on},
                  .opset = 20,
                  .run_seed = 9,
                  .build = activation_graph});
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 20});
  m->graph = std::make_unique<Graph>("activation");
  Graph& g = *m->graph;
  g.add_initializer("x", Tensor::from_vector<double>({3, 4}, x.values));
  g.add_initializer("ratio", Tensor::scalar<double>(0.25));
  g.add_initializer("training", Tensor::scalar<bool>(true));
  Value* y = activation_graph(g)[0];
  Value* L = add(g, "ReduceSum", {y}, {attr_int("keepdims", 0)});
  g.outputs = {L};
  expect_same_after_save_reload(*m, {.kind = "output", .output = L->name}, {"x"}, 9);
}

}  // namespace onyx::test
