// CNN inference fusions (inference/fusions_conv.cpp), the NCHWc layout pass
// (inference/layout_nchwc.cpp) and their kernels (com.microsoft FusedConv, ai.onyx ConvNchwc /
// ToNchwc / FromNchwc): each rewrite fires where it should, not where it must not, and the
// results equal the unfused graph's.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <random>
#include <thread>

#include "inference/optimizer.h"
#include "kernels/cpu/dnnl_util.h"
#include "test_util.h"

namespace onyx {
namespace {

using Build = std::function<void(test::ModelBuilder&)>;

using test::randn;

/// Positive values in [lo, hi) (variances, scales).
Tensor uniform(const Shape& shape, uint32_t seed, double lo, double hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = dist(rng);
  return test::T_<float>(shape, v);
}

Session make_session(const Build& build, OptLevel level) {
  // The layouts below are the direct kernels'; Winograd's choice has its own tests
  // (test_conv_winograd.cpp).
  return test::session_at(build, level, /*winograd=*/false);
}

/// Outputs and nodes run of `build` at `level`.
std::pair<NamedTensors, size_t> run_at(const Build& build, OptLevel level,
                                       const NamedTensors& feeds) {
  Session s = make_session(build, level);
  RunStats stats;
  NamedTensors out = s.run(feeds, {}, &stats);
  return {out, stats.nodes_run};
}

/// Op types of the graph a session runs at `level`, in order.
std::vector<std::string> ops_at(const Build& build, OptLevel level) {
  Session s = make_session(build, level);
  std::vector<std::string> ops;
  for (const Node* n : s.model().graph->topological_order()) ops.push_back(n->op_type);
  return ops;
}

int count(const std::vector<std::string>& ops, const std::string& op) {
  return static_cast<int>(std::count(ops.begin(), ops.end(), op));
}

/// |got - want| <= tol * max(1, |want|) elementwise, same names, dtypes and shapes.
void expect_close(const NamedTensors& got, const NamedTensors& want, double tol = 1e-5) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    ASSERT_EQ(got.at(name).dtype(), t.dtype()) << name;
    ASSERT_EQ(got.at(name).shape(), t.shape()) << name;
    auto g = got.at(name).to_double_vector(), w = t.to_double_vector();
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_NEAR(g[i], w[i], tol * std::max(1.0, std::abs(w[i]))) << name << " at " << i;
  }
}

void set_conv_attrs(Node& n, int64_t k, int64_t stride = 1, int64_t group = 1) {
  test::set_attrs(
      n, {test::attr_ints("kernel_shape", {k, k}), test::attr_ints("strides", {stride, stride}),
          test::attr_ints("pads", {k / 2, k / 2, k / 2, k / 2})});
  if (group != 1) n.attrs["group"] = test::attr_int("group", group);
}

/// Conv(x, w [, b]) -> name, with constant weights of [m, c/group, k, k].
void conv(test::ModelBuilder& b, const std::string& x, const std::string& name, int64_t c,
          int64_t m, int64_t k, uint32_t seed, bool bias = true, int64_t stride = 1,
          int64_t group = 1) {
  b.initializer(name + "_w",
                randn({m, c / group, k, k}, seed, std::sqrt(2.0 / double(c / group * k * k))));
  if (bias) b.initializer(name + "_b", randn({m}, seed + 1, 0.1));
  set_conv_attrs(b.node("Conv", {x, name + "_w", bias ? name + "_b" : ""}, {name}), k, stride,
                 group);
}

/// BatchNormalization(x) -> name with constant statistics of `c` channels.
Node& batchnorm(test::ModelBuilder& b, const std::string& x, const std::string& name, int64_t c,
                uint32_t seed) {
  b.initializer(name + "_s", uniform({c}, seed, 0.5, 1.5));
  b.initializer(name + "_b", randn({c}, seed + 1, 0.1));
  b.initializer(name + "_m", randn({c}, seed + 2, 0.1));
  b.initializer(name + "_v", uniform({c}, seed + 3, 0.5, 1.5));
  return b.node("BatchNormalization", {x, name + "_s", name + "_b", name + "_m", name + "_v"},
                {name});
}

// ---- com.microsoft FusedConv ----

struct ActCase {
  std::string name;
  std::vector<float> params;
  double (*fn)(double, const std::vector<float>&);
};

const std::vector<ActCase>& activations() {
  static const std::vector<ActCase> cases = {
      {"Relu", {}, [](double x, const std::vector<float>&) { return std::max(0.0, x); }},
      {"LeakyRelu",
       {0.1f},
       [](double x, const std::vector<float>& p) { return x >= 0 ? x : p[0] * x; }},
      {"Sigmoid", {}, [](double x, const std::vector<float>&) { return 1 / (1 + std::exp(-x)); }},
      {"Tanh", {}, [](double x, const std::vector<float>&) { return std::tanh(x); }},
      {"Clip",
       {-0.3f, 0.4f},
       [](double x, const std::vector<float>& p) {
         return std::min<double>(std::max<double>(x, p[0]), p[1]);
       }},
      {"HardSigmoid",
       {0.3f, 0.4f},
       [](double x, const std::vector<float>& p) { return std::clamp(p[0] * x + p[1], 0.0, 1.0); }},
  };
  return cases;
}

TEST(FusedConv, EachActivationWithAndWithoutBiasAndZ) {
  // float32 and float16 (run in float32) on oneDNN, Z by a sum post-op through a reorder to its
  // blocked layout; double on our loops.
  for (DataType dt : {DataType::Float, DataType::Float16, DataType::Double}) {
    Tensor x = randn({2, 5, 7, 6}, 1, 1.0, dt), w = randn({8, 5, 3, 3}, 2, 0.3, dt),
           bias = randn({8}, 3, 0.5, dt), z = randn({2, 8, 4, 3}, 4, 1.0, dt);
    for (bool has_b : {false, true}) {
      // The plain convolution (Conv's kernel) is the reference the fused part is added to.
      auto plain = [&](test::ModelBuilder& b) {
        b.input("x", dt, x.shape()).input("w", dt, w.shape());
        if (has_b) b.input("b", dt, bias.shape());
        Node& n = b.node("Conv", {"x", "w", has_b ? "b" : ""}, {"y"});
        test::set_attrs(
            n, {test::attr_ints("pads", {1, 0, 1, 1}), test::attr_ints("strides", {2, 2})});
        b.output("y");
      };
      NamedTensors feeds{{"x", x}, {"w", w}};
      if (has_b) feeds["b"] = bias;
      std::vector<double> y = run_at(plain, OptLevel::None, feeds).first.at("y").to_double_vector();
      for (bool has_z : {false, true}) {
        for (const ActCase& a : activations()) {
          test::ModelBuilder b(17, "com.microsoft");
          b.input("x", dt, x.shape()).input("w", dt, w.shape());
          if (has_b) b.input("b", dt, bias.shape());
          if (has_z) b.input("z", dt, z.shape());
          Node& n = b.node("FusedConv", {"x", "w", has_b ? "b" : "", has_z ? "z" : ""}, {"y"},
                           "com.microsoft");
          test::set_attrs(
              n, {test::attr_ints("pads", {1, 0, 1, 1}), test::attr_ints("strides", {2, 2}),
                  test::attr_string("activation", a.name)});
          if (!a.params.empty())
            n.attrs["activation_params"] = test::attr_floats("activation_params", a.params);
          b.output("y");
          NamedTensors f = feeds;
          if (has_z) f["z"] = z;
          Tensor got = b.session().run(f).at("y");
          ASSERT_EQ(got.shape(), (Shape{2, 8, 4, 3}));
          std::vector<double> want = y, zv = z.to_double_vector();
          for (size_t i = 0; i < want.size(); ++i)
            want[i] = a.fn(want[i] + (has_z ? zv[i] : 0.0), a.params);
          SCOPED_TRACE(fmt::format("{} {} bias {} z {}", dtype_name(dt), a.name, has_b, has_z));
          test::expect_near(got, want,
                            dt == DataType::Double  ? 1e-12
                            : dt == DataType::Float ? 1e-5
                                                    : 1e-2);
        }
      }
    }
  }
}

TEST(FusedConv, OneTwoAndThreeSpatialDims) {
  // Two output channels in 2-D: a destination padded to oneDNN's channel block.
  for (const Shape& xs : {Shape{2, 4, 9}, Shape{1, 4, 7, 6}, Shape{1, 4, 5, 6, 5}}) {
    const size_t nsp = xs.size() - 2;
    const int64_t m = xs.size() == 4 ? 2 : 6;
    Shape ws{m, 4}, ys{xs[0], m};
    ws.insert(ws.end(), nsp, 3);
    ys.insert(ys.end(), xs.begin() + 2, xs.end());
    Tensor x = randn(xs, 1), w = randn(ws, 2, 0.3), z = randn(ys, 3);
    auto build = [&](const std::string& op, test::ModelBuilder& b) {
      b.input("x", DataType::Float, xs)
          .input("w", DataType::Float, ws)
          .input("z", DataType::Float, ys);
      Node& n = op == "FusedConv" ? b.node(op, {"x", "w", "", "z"}, {"y"}, "com.microsoft")
                                  : b.node(op, {"x", "w"}, {"c"});
      n.attrs["pads"] = test::attr_ints("pads", Shape(2 * nsp, 1));
      if (op == "FusedConv") {
        n.attrs["activation"] = test::attr_string("activation", "Tanh");
      } else {
        b.node("Add", {"c", "z"}, {"s"});
        b.node("Tanh", {"s"}, {"y"});
      }
      b.output("y");
    };
    test::ModelBuilder fb(17, "com.microsoft"), pb(17);
    build("FusedConv", fb);
    build("Conv", pb);
    NamedTensors feeds{{"x", x}, {"w", w}, {"z", z}};
    expect_close(fb.session().run(feeds), pb.session().run(feeds));
  }
}

TEST(FusedConv, UnknownActivationOrWrongParamsIsAnError) {
  auto build = [](const std::string& act, std::vector<float> params) {
    test::ModelBuilder b(17, "com.microsoft");
    b.input("x", DataType::Float, Shape{1, 2, 4, 4}).input("w", DataType::Float, Shape{2, 2, 1, 1});
    Node& n = b.node("FusedConv", {"x", "w"}, {"y"}, "com.microsoft");
    n.attrs["activation"] = test::attr_string("activation", act);
    if (!params.empty()) n.attrs["activation_params"] = test::attr_floats("activation_params", params);
    b.output("y");
    return b.session();
  };
  EXPECT_THROW(build("Swish", {}), Error);
  EXPECT_THROW(build("Clip", {1.0f}), Error);
  try {
    build("Gelu", {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'Gelu'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("FusedConv"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(build("LeakyRelu", {0.2f}));
}

// ---- Conv + BatchNormalization ----

TEST(ConvFusions, BatchNormFoldsIntoConv) {
  for (bool bias : {false, true}) {
    auto build = [bias](test::ModelBuilder& b) {
      b.input("x", DataType::Float, Shape{2, 3, 9, 9});
      conv(b, "x", "c", 3, 6, 3, 10, bias, 2);
      batchnorm(b, "c", "y", 6, 20).attrs["epsilon"] = test::attr_float("epsilon", 1e-3f);
      b.output("y");
    };
    NamedTensors feeds{{"x", randn({2, 3, 9, 9}, 5)}};
    auto [plain, plain_nodes] = run_at(build, OptLevel::Basic, feeds);
    auto [fused, fused_nodes] = run_at(build, OptLevel::Extended, feeds);
    EXPECT_EQ(plain_nodes, 2u);
    EXPECT_EQ(fused_nodes, 1u);
    expect_close(fused, plain);
    EXPECT_EQ(ops_at(build, OptLevel::Extended), std::vector<std::string>{"Conv"});
  }
}

TEST(ConvFusions, BatchNormStaysWhereItMustNot) {
  NamedTensors feeds{{"x", randn({2, 3, 6, 6}, 5)}};
  // Training mode: the batch's statistics, not the constants.
  auto training = [](test::ModelBuilder& b) {
    b.input("x", DataType::Float, Shape{2, 3, 6, 6});
    conv(b, "x", "c", 3, 4, 3, 10);
    batchnorm(b, "c", "y", 4, 20).attrs["training_mode"] = test::attr_int("training_mode", 1);
    b.output("y");
  };
  // W is fed at run time.
  auto fed_weights = [](test::ModelBuilder& b) {
    b.input("x", DataType::Float, Shape{2, 3, 6, 6}).input("w", DataType::Float, Shape{4, 3, 3, 3});
    set_conv_attrs(b.node("Conv", {"x", "w"}, {"c"}), 3);
    batchnorm(b, "c", "y", 4, 20);
    b.output("y");
  };
  // The conv output is a graph output too.
  auto conv_is_output = [](test::ModelBuilder& b) {
    b.input("x", DataType::Float, Shape{2, 3, 6, 6});
    conv(b, "x", "c", 3, 4, 3, 10);
    batchnorm(b, "c", "y", 4, 20);
    b.output("y").output("c");
  };
  // The conv output is read twice.
  auto read_twice = [](test::ModelBuilder& b) {
    b.input("x", DataType::Float, Shape{2, 3, 6, 6});
    conv(b, "x", "c", 3, 4, 3, 10);
    batchnorm(b, "c", "y", 4, 20);
    b.node("Sigmoid", {"c"}, {"s"});
    b.output("y").output("s");
  };
  NamedTensors with_w = feeds;
  with_w["w"] = randn({4, 3, 3, 3}, 7, 0.3);
  for (auto [build, f] :
       {std::pair{Build(training), feeds}, std::pair{Build(fed_weights), with_w},
        std::pair{Build(conv_is_output), feeds}, std::pair{Build(read_twice), feeds}}) {
    auto [plain, plain_nodes] = run_at(build, OptLevel::Basic, f);
    auto [fused, fused_nodes] = run_at(build, OptLevel::Extended, f);
    EXPECT_EQ(fused_nodes, plain_nodes);
    EXPECT_EQ(count(ops_at(build, OptLevel::Extended), "BatchNormalization"), 1);
    expect_close(fused, plain);
  }
}

TEST(ConvFusions, BatchNormFoldScalesTheWeightsInPlaceOnlyWhenNothingElseHoldsThem) {
  enum class Holder { None, ModelCopy, LentBuffer };
  auto floats = [](const Tensor& t) {
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
  };
  for (Holder holder : {Holder::None, Holder::ModelCopy, Holder::LentBuffer}) {
    test::ModelBuilder b;
    b.input("x", DataType::Float, Shape{1, 3, 6, 6});
    conv(b, "x", "c", 3, 4, 3, 10, /*bias=*/false);
    batchnorm(b, "c", "y", 4, 20);
    b.output("y");
    auto model = b.build();
    Graph& g = *model->graph;
    const std::vector<float> before = floats(g.initializers.at("c_w"));
    // What the fold must give, W[m] * scale[m] / sqrt(var[m] + eps) in double, rounded once.
    const auto scale = floats(g.initializers.at("y_s"));
    const auto var = floats(g.initializers.at("y_v"));
    std::vector<float> expected(before.size());
    const size_t per_m = before.size() / scale.size();
    for (size_t i = 0; i < before.size(); ++i) {
      const size_t m = i / per_m;
      expected[i] = static_cast<float>(static_cast<double>(before[i]) * (double(scale[m]) /
                                       std::sqrt(double(var[m]) + double(1e-5f))));
    }
    Tensor copy;                   // another copy of the model's W (shares its memory)
    std::vector<float> lent = before;  // a caller's buffer onyx was given
    if (holder == Holder::ModelCopy) copy = g.initializers.at("c_w");
    if (holder == Holder::LentBuffer)
      g.initializers.at("c_w") = Tensor::wrap(DataType::Float, {4, 3, 3, 3}, lent.data());
    const void* w_memory = g.initializers.at("c_w").raw();

    ASSERT_EQ(fuse_batchnorm_into_conv(*model), 1u);
    const Node* folded = nullptr;
    for (const Node* n : g.topological_order())
      if (n->op_type == "Conv") folded = n;
    ASSERT_NE(folded, nullptr);
    const Tensor& w = *g.initializer(folded->inputs[1]);
    EXPECT_EQ(floats(w), expected);
    if (holder == Holder::None) {
      EXPECT_EQ(folded->inputs[1]->name, "c_w");
      EXPECT_EQ(w.raw(), w_memory) << "scaled in a second buffer although nothing else held W";
    } else {
      EXPECT_NE(w.raw(), w_memory);
    }
    if (holder == Holder::ModelCopy) {
      EXPECT_EQ(floats(copy), before);
    }
    if (holder == Holder::LentBuffer) {
      EXPECT_EQ(lent, before);
    }
  }
}

// ---- Conv + Add (residual) ----

TEST(ConvFusions, ResidualAddBecomesFusedConvZ) {
  auto build = [](test::ModelBuilder& b) {
    b.input("x", DataType::Float, Shape{1, 8, 10, 10});
    conv(b, "x", "c", 8, 8, 3, 10);
    b.node("Add", {"x", "c"}, {"y"});  // the conv output is Add's second operand
    b.output("y");
  };
  NamedTensors feeds{{"x", randn({1, 8, 10, 10}, 5)}};
  auto [plain, plain_nodes] = run_at(build, OptLevel::Basic, feeds);
  auto [fused, fused_nodes] = run_at(build, OptLevel::Extended, feeds);
  EXPECT_EQ(plain_nodes, 2u);
  EXPECT_EQ(fused_nodes, 1u);
  expect_close(fused, plain);
  EXPECT_EQ(ops_at(build, OptLevel::Extended), std::vector<std::string>{"FusedConv"});
}

TEST(ConvFusions, AddStaysWithBroadcastingOrUnknownShapes) {
  NamedTensors feeds{{"x", randn({2, 4, 6, 6}, 5)}, {"z", randn({1, 4, 1, 1}, 6)}};
  // Z broadcasts over the conv output.
  auto broadcast = [](test::ModelBuilder& b) {
    b.input("x", DataType::Float, Shape{2, 4, 6, 6}).input("z", DataType::Float, Shape{1, 4, 1, 1});
    conv(b, "x", "c", 4, 4, 3, 10);
    b.node("Add", {"c", "z"}, {"y"});
    b.output("y");
  };
  // The conv output broadcasts up to Z's shape.
  NamedTensors feeds2{{"x", randn({1, 4, 6, 6}, 5)}, {"z", randn({3, 4, 6, 6}, 6)}};
  auto broadcast_conv = [](test::ModelBuilder& b) {
    b.input("x", DataType::Float, Shape{1, 4, 6, 6}).input("z", DataType::Float, Shape{3, 4, 6, 6});
    conv(b, "x", "c", 4, 4, 3, 10);
    b.node("Add", {"c", "z"}, {"y"});
    b.output("y");
  };
  // Spatial dims unknown statically.
  auto unknown = [](test::ModelBuilder& b) {
    b.input("x", DataType::Float,
            SymShape{Dim::fixed(2), Dim::fixed(4), Dim::symbol("h"), Dim::symbol("w")});
    b.input("z", DataType::Float,
            SymShape{Dim::fixed(2), Dim::fixed(4), Dim::symbol("h"), Dim::symbol("w")});
    conv(b, "x", "c", 4, 4, 3, 10);
    b.node("Add", {"c", "z"}, {"y"});
    b.output("y");
  };
  NamedTensors feeds3{{"x", randn({2, 4, 6, 6}, 5)}, {"z", randn({2, 4, 6, 6}, 6)}};
  for (auto [build, f] :
       {std::pair{Build(broadcast), feeds}, std::pair{Build(broadcast_conv), feeds2},
        std::pair{Build(unknown), feeds3}}) {
    auto [plain, plain_nodes] = run_at(build, OptLevel::Basic, f);
    auto [fused, fused_nodes] = run_at(build, OptLevel::Extended, f);
    EXPECT_EQ(fused_nodes, plain_nodes);
    expect_close(fused, plain);
  }
}

// ---- Conv + activation ----

TEST(ConvFusions, EachActivationFuses) {
  struct Case {
    std::string op;
    std::vector<Attribute> attrs;
    std::vector<std::string> extra_inputs;  // Clip-11 bounds
  };
  std::vector<Case> cases = {
      {"Relu", {}, {}},
      {"LeakyRelu", {test::attr_float("alpha", 0.2f)}, {}},
      {"Sigmoid", {}, {}},
      {"Tanh", {}, {}},
      {"HardSigmoid", {test::attr_float("alpha", 0.3f), test::attr_float("beta", 0.6f)}, {}},
      {"Clip", {}, {"lo", "hi"}},
      {"Clip", {}, {"", "hi"}}};
  for (const Case& c : cases) {
    auto build = [&c](test::ModelBuilder& b) {
      b.input("x", DataType::Float, Shape{2, 3, 7, 7});
      conv(b, "x", "c", 3, 5, 3, 10);
      b.initializer("lo", Tensor::scalar<float>(-0.25f))
          .initializer("hi", Tensor::scalar<float>(0.5f));
      std::vector<std::string> ins{"c"};
      ins.insert(ins.end(), c.extra_inputs.begin(), c.extra_inputs.end());
      test::set_attrs(b.node(c.op, ins, {"y"}), c.attrs);
      b.output("y");
    };
    NamedTensors feeds{{"x", randn({2, 3, 7, 7}, 5)}};
    auto [plain, plain_nodes] = run_at(build, OptLevel::Basic, feeds);
    auto [fused, fused_nodes] = run_at(build, OptLevel::Extended, feeds);
    SCOPED_TRACE(c.op);
    EXPECT_EQ(plain_nodes, 2u);
    EXPECT_EQ(fused_nodes, 1u);
    expect_close(fused, plain);
  }
}

TEST(ConvFusions, ActivationStaysWhereItMustNot) {
  // Relu of a value also read elsewhere.
  auto read_elsewhere = [](test::ModelBuilder& b) {
    b.input("x", DataType::Float, Shape{1, 3, 6, 6});
    conv(b, "x", "c", 3, 4, 3, 10);
    b.node("Relu", {"c"}, {"r"});
    b.node("Sigmoid", {"c"}, {"s"});
    b.output("r").output("s");
  };
  // Clip whose bound is fed at run time.
  auto fed_bound = [](test::ModelBuilder& b) {
    b.input("x", DataType::Float, Shape{1, 3, 6, 6}).input("hi", DataType::Float, Shape{});
    conv(b, "x", "c", 3, 4, 3, 10);
    b.node("Clip", {"c", "", "hi"}, {"y"});
    b.output("y");
  };
  // The activation's input is a graph output.
  auto conv_is_output = [](test::ModelBuilder& b) {
    b.input("x", DataType::Float, Shape{1, 3, 6, 6});
    conv(b, "x", "c", 3, 4, 3, 10);
    b.node("Relu", {"c"}, {"y"});
    b.output("y").output("c");
  };
  // Clip with min > max (everything becomes max).
  auto empty_clip = [](test::ModelBuilder& b) {
    b.input("x", DataType::Float, Shape{1, 3, 6, 6});
    conv(b, "x", "c", 3, 4, 3, 10);
    b.initializer("lo", Tensor::scalar<float>(0.5f))
        .initializer("hi", Tensor::scalar<float>(-0.5f));
    b.node("Clip", {"c", "lo", "hi"}, {"y"});
    b.output("y");
  };
  NamedTensors feeds{{"x", randn({1, 3, 6, 6}, 5)}};
  NamedTensors fed = feeds;
  fed["hi"] = Tensor::scalar<float>(0.3f);
  for (auto [build, f] :
       {std::pair{Build(read_elsewhere), feeds}, std::pair{Build(fed_bound), fed},
        std::pair{Build(conv_is_output), feeds}, std::pair{Build(empty_clip), feeds}}) {
    auto [plain, plain_nodes] = run_at(build, OptLevel::Basic, f);
    auto [fused, fused_nodes] = run_at(build, OptLevel::Extended, f);
    EXPECT_EQ(fused_nodes, plain_nodes);
    expect_close(fused, plain);
  }
}

TEST(ConvFusions, BatchNormAddReluChainBecomesOneNode) {
  // conv -> bn -> add(x) -> relu: one FusedConv with Z and Relu, named after the Conv.
  auto build = [](test::ModelBuilder& b) {
    b.input("x", DataType::Float,
            SymShape{Dim::symbol("batch"), Dim::fixed(8), Dim::fixed(6), Dim::fixed(6)});
    conv(b, "x", "c", 8, 8, 3, 10, false);
    batchnorm(b, "c", "bn", 8, 20);
    b.node("Add", {"bn", "x"}, {"sum"});
    b.node("Relu", {"sum"}, {"y"});
    b.output("y");
  };
  for (int64_t n : {1, 3}) {
    NamedTensors feeds{{"x", randn({n, 8, 6, 6}, 5)}};
    auto [plain, plain_nodes] = run_at(build, OptLevel::Basic, feeds);
    auto [fused, fused_nodes] = run_at(build, OptLevel::Extended, feeds);
    EXPECT_EQ(plain_nodes, 4u);
    EXPECT_EQ(fused_nodes, 1u);
    expect_close(fused, plain);
  }
  Session s = make_session(build, OptLevel::Extended);
  ASSERT_EQ(s.model().graph->num_nodes(), 1u);
  const Node& n = *s.model().graph->nodes()[0];
  EXPECT_EQ(n.op_type, "FusedConv");
  EXPECT_EQ(n.name, "Conv_0");
  EXPECT_EQ(n.attr_string("activation", ""), "Relu");
  EXPECT_EQ(n.outputs[0]->name, "y");
}

// ---- NCHWc layout ----

/// True where the CPU's layout is channels-last (AVX-512: oneDNN's brgconv), which converts the
/// first convolution's input too (blocks of 8 or 16 let it read NCHW).
bool channels_last() { return cpu::dnnl_util::nchwc_block() == cpu::dnnl_util::kChannelsLast; }

/// `ops` with the ToNchwc of the graph's input in front where the layout is channels-last.
std::vector<std::string> with_input_reorder(std::vector<std::string> ops) {
  if (channels_last()) ops.insert(ops.begin(), "ToNchwc");
  return ops;
}

/// conv(3 -> 16) relu, conv(16 -> 16) relu, conv(16 -> 16) + residual, relu: a ResNet stem and
/// block.
void conv_chain(test::ModelBuilder& b, const SymShape& x) {
  b.input("x", DataType::Float, x);
  conv(b, "x", "c1", 3, 16, 3, 10, true, 2);
  b.node("Relu", {"c1"}, {"r1"});
  conv(b, "r1", "c2", 16, 16, 3, 20);
  b.node("Relu", {"c2"}, {"r2"});
  conv(b, "r2", "c3", 16, 16, 1, 30);
  b.node("Add", {"c3", "r1"}, {"s3"});
  b.node("Relu", {"s3"}, {"y"});
  b.output("y");
}

TEST(Nchwc, ConvChainStaysBlocked) {
  Build build = [](test::ModelBuilder& b) {
    conv_chain(b, SymShape{Dim::fixed(2), Dim::fixed(3), Dim::fixed(17), Dim::fixed(16)});
  };
  NamedTensors feeds{{"x", randn({2, 3, 17, 16}, 5)}};
  auto [plain, plain_nodes] = run_at(build, OptLevel::Basic, feeds);
  auto [fused, fused_nodes] = run_at(build, OptLevel::Extended, feeds);
  auto [blocked, blocked_nodes] = run_at(build, OptLevel::All, feeds);
  EXPECT_EQ(plain_nodes, 7u);
  EXPECT_EQ(fused_nodes, 3u);
  // Three ConvNchwc (the first reads NCHW unless channels-last) and one FromNchwc.
  EXPECT_EQ(blocked_nodes, channels_last() ? 5u : 4u);
  EXPECT_EQ(ops_at(build, OptLevel::All),
            with_input_reorder({"ConvNchwc", "ConvNchwc", "ConvNchwc", "FromNchwc"}));
  expect_close(fused, plain);
  expect_close(blocked, plain);
}

TEST(Nchwc, SymbolicBatchFedOneAndThree) {
  Build build = [](test::ModelBuilder& b) {
    conv_chain(b, SymShape{Dim::symbol("batch"), Dim::fixed(3), Dim::fixed(12), Dim::fixed(12)});
  };
  Session plain = make_session(build, OptLevel::Basic),
          blocked = make_session(build, OptLevel::All);
  for (int64_t n : {1, 3, 1}) {
    NamedTensors feeds{{"x", randn({n, 3, 12, 12}, static_cast<uint32_t>(n))}};
    expect_close(blocked.run(feeds), plain.run(feeds));
  }
}

TEST(Nchwc, ConcurrentRunsOfMixedBatches) {
  // One session, three threads, batches 1..3: per-shape primitives are shared, scratch is not.
  Build build = [](test::ModelBuilder& b) {
    conv_chain(b, SymShape{Dim::symbol("batch"), Dim::fixed(3), Dim::fixed(10), Dim::fixed(10)});
  };
  SessionOptions opts;
  opts.opt_level = OptLevel::All;
  opts.intra_op_threads = 1;
  test::ModelBuilder b(17);
  build(b);
  Session blocked(b.build(), opts);
  Session plain = make_session(build, OptLevel::Basic);
  std::vector<NamedTensors> feeds, want;
  for (int64_t n = 1; n <= 3; ++n) {
    feeds.push_back({{"x", randn({n, 3, 10, 10}, static_cast<uint32_t>(n))}});
    want.push_back(plain.run(feeds.back()));
  }
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        size_t k = static_cast<size_t>(t + i) % 3;
        auto got = blocked.run(feeds[k]).at("y").to_double_vector();
        auto w = want[k].at("y").to_double_vector();
        bool good = got.size() == w.size();
        for (size_t j = 0; good && j < w.size(); ++j)
          good = std::abs(got[j] - w[j]) <= 1e-5 * std::max(1.0, std::abs(w[j]));
        ok += good;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 60);
}

TEST(Nchwc, IntermediateOutputsAndSharedInputs) {
  // c1 is a graph output (its FromNchwc stays); r1 feeds two convs through one ToNchwc.
  auto build = [](test::ModelBuilder& b) {
    b.input("x", DataType::Float, Shape{1, 8, 9, 9});
    conv(b, "x", "c1", 8, 8, 3, 10);
    b.node("Sigmoid", {"c1"}, {"r1"});
    conv(b, "r1", "c2", 8, 16, 3, 20);
    conv(b, "r1", "c3", 8, 16, 1, 30);
    b.node("Add", {"c2", "c3"}, {"y"});
    b.node("Relu", {"c3"}, {"r3"});
    b.output("y").output("c1").output("r3");
  };
  NamedTensors feeds{{"x", randn({1, 8, 9, 9}, 5)}};
  auto [plain, plain_nodes] = run_at(build, OptLevel::Basic, feeds);
  auto [blocked, blocked_nodes] = run_at(build, OptLevel::All, feeds);
  expect_close(blocked, plain);
  // The channel block is the CPU's (channels-last with AVX-512, 8 with AVX2 or
  // ONYX_ISA=avx2; 16 by ONYX_CONV_LAYOUT=nchw16c), and the graph depends on it: 8-channel
  // tensors are not blocked by 16.
  struct Expected {
    int convs, to, from;
  };
  const int64_t block = cpu::dnnl_util::nchwc_block();
  ASSERT_TRUE(block == 8 || block == 16 || block == cpu::dnnl_util::kChannelsLast) << block;
  // Block 8 or channels-last: every conv blocked; x and r1 blocked once each; c1 (output and
  // Sigmoid), c3 (Relu) and y back to NCHW. Block 16: c1 (8 channels out) stays plain; c2 and
  // c3 read the 8-channel r1 as NCHW; c2 and c3 back to NCHW for the Add and the Relu.
  const Expected want = block != 16 ? Expected{3, 2, 3} : Expected{2, 0, 2};
  auto ops = ops_at(build, OptLevel::All);
  EXPECT_EQ(count(ops, "ConvNchwc"), want.convs) << "block " << block;
  EXPECT_EQ(count(ops, "ToNchwc"), want.to) << "block " << block;
  EXPECT_EQ(count(ops, "FromNchwc"), want.from) << "block " << block;
}

TEST(Nchwc, OtherConvsStayPlainAndCorrect) {
  struct Case {
    std::string what;
    Shape x;
    int64_t m, k, group;
  };
  // Grouped, depthwise, 1-D and 3-D: none becomes ConvNchwc; M % 8 != 0 neither, unless
  // channels-last (any channel count), checked below.
  std::vector<Case> cases = {{"grouped", {2, 8, 7, 7}, 16, 3, 2},
                             {"depthwise", {2, 8, 7, 7}, 8, 3, 8},
                             {"1-D", {2, 8, 11}, 16, 3, 1},
                             {"3-D", {2, 8, 5, 5, 5}, 16, 3, 1}};
  if (!channels_last()) cases.push_back({"M % 8 != 0", {2, 8, 7, 7}, 12, 3, 1});
  for (const Case& c : cases) {
    auto build = [&c](test::ModelBuilder& b) {
      b.input("x", DataType::Float, c.x);
      size_t nsp = c.x.size() - 2;
      Shape wshape{c.m, c.x[1] / c.group};
      wshape.insert(wshape.end(), nsp, c.k);
      b.initializer("w", randn(wshape, 3, 0.3));
      Node& n = b.node("Conv", {"x", "w"}, {"c"});
      n.attrs["pads"] = test::attr_ints("pads", Shape(2 * nsp, 1));
      n.attrs["group"] = test::attr_int("group", c.group);
      b.node("Relu", {"c"}, {"y"});
      b.output("y");
    };
    SCOPED_TRACE(c.what);
    NamedTensors feeds{{"x", randn(c.x, 5)}};
    auto [plain, plain_nodes] = run_at(build, OptLevel::Basic, feeds);
    auto [all, all_nodes] = run_at(build, OptLevel::All, feeds);
    EXPECT_EQ(all_nodes, 1u);  // the Relu still fuses
    EXPECT_EQ(ops_at(build, OptLevel::All), std::vector<std::string>{"FusedConv"});
    expect_close(all, plain);
  }
}

/// conv_chain, then a max pooling and a global average of its output: every op the pass
/// rewrites. Channels: 3 -> 16 -> 16 -> 16, or 3 -> 12 -> 12 -> 12 (`m` 12, channels-last only).
void conv_chain_pooled(test::ModelBuilder& b, int64_t m = 16) {
  b.input("x", DataType::Float,
          SymShape{Dim::symbol("batch"), Dim::fixed(3), Dim::fixed(15), Dim::fixed(15)});
  conv(b, "x", "c1", 3, m, 3, 10, true, 2);
  b.node("Relu", {"c1"}, {"r1"});
  conv(b, "r1", "c2", m, m, 3, 20);
  b.node("Relu", {"c2"}, {"r2"});
  conv(b, "r2", "c3", m, m, 1, 30);
  b.node("Add", {"c3", "r1"}, {"s3"});
  b.node("Relu", {"s3"}, {"y"});
  test::set_attrs(b.node("MaxPool", {"y"}, {"p"}),
                  {test::attr_ints("kernel_shape", {3, 3}), test::attr_ints("strides", {2, 2}),
                   test::attr_ints("pads", {1, 1, 1, 1})});
  b.node("GlobalAveragePool", {"p"}, {"gap"});
  b.output("y").output("p").output("gap");
}

TEST(Nchwc, EveryLayoutOnEveryCpu) {
  // Blocks 8 and 16 and channels-last work whatever the CPU (oneDNN reorders to the layout its
  // kernels want where they differ); channels-last also takes channel counts no block divides.
  struct Case {
    int64_t block, m;
  };
  const int64_t last = cpu::dnnl_util::kChannelsLast;
  for (Case c : {Case{8, 16}, Case{16, 16}, Case{last, 16}, Case{last, 12}}) {
    const int64_t block = c.block;
    test::ModelBuilder b(17);
    conv_chain_pooled(b, c.m);
    std::unique_ptr<Model> model = b.build();
    EXPECT_EQ(fuse_add_into_conv(*model), 1u);
    EXPECT_EQ(fuse_activation_into_conv(*model), 3u);
    EXPECT_EQ(convert_convs_to_nchwc(*model, block), 5u);  // 3 convs, MaxPool, GAP
    SessionOptions opts;
    opts.intra_op_threads = 2;
    Session blocked(std::move(model), opts);
    Session plain = make_session(
        [&c](test::ModelBuilder& m) { conv_chain_pooled(m, c.m); }, OptLevel::Basic);
    for (int64_t n : {1, 2}) {
      NamedTensors feeds{{"x", randn({n, 3, 15, 15}, 9)}};
      SCOPED_TRACE(fmt::format("block {} channels {} batch {}", block, c.m, n));
      expect_close(blocked.run(feeds), plain.run(feeds));
    }
  }
}

// ---- A small ResNet ----

TEST(ConvFusions, ResNetBlockEqualAtEveryLevel) {
  auto build = [](test::ModelBuilder& b) {
    b.input("x", DataType::Float,
            SymShape{Dim::symbol("batch"), Dim::fixed(3), Dim::fixed(32), Dim::fixed(32)});
    conv(b, "x", "stem", 3, 16, 7, 10, false, 2);
    batchnorm(b, "stem", "stem_bn", 16, 11);
    b.node("Relu", {"stem_bn"}, {"stem_r"});
    test::set_attrs(b.node("MaxPool", {"stem_r"}, {"pool"}),
                    {test::attr_ints("kernel_shape", {3, 3}), test::attr_ints("strides", {2, 2}),
                     test::attr_ints("pads", {1, 1, 1, 1})});
    conv(b, "pool", "a", 16, 16, 3, 20, false);
    batchnorm(b, "a", "a_bn", 16, 21);
    b.node("Relu", {"a_bn"}, {"a_r"});
    conv(b, "a_r", "b", 16, 16, 3, 30, false);
    batchnorm(b, "b", "b_bn", 16, 31);
    b.node("Add", {"b_bn", "pool"}, {"sum"});
    b.node("Relu", {"sum"}, {"block"});
    b.node("GlobalAveragePool", {"block"}, {"gap"});
    b.node("Flatten", {"gap"}, {"flat"});
    b.initializer("fc_w", randn({10, 16}, 40, 0.3)).initializer("fc_b", randn({10}, 41, 0.1));
    b.node("Gemm", {"flat", "fc_w", "fc_b"}, {"logits"}).attrs["transB"] =
        test::attr_int("transB", 1);
    b.output("logits");
  };
  for (int64_t n : {1, 2}) {
    NamedTensors feeds{{"x", randn({n, 3, 32, 32}, 5)}};
    auto [none, none_nodes] = run_at(build, OptLevel::None, feeds);
    auto [basic, basic_nodes] = run_at(build, OptLevel::Basic, feeds);
    auto [ext, ext_nodes] = run_at(build, OptLevel::Extended, feeds);
    auto [all, all_nodes] = run_at(build, OptLevel::All, feeds);
    EXPECT_EQ(none_nodes, 14u);
    EXPECT_EQ(basic_nodes, 14u);
    EXPECT_EQ(ext_nodes, 7u);  // 3 FusedConv, MaxPool, GAP, Flatten, Gemm
    // The same on blocked tensors, no reorder left (but the input's, for channels-last).
    EXPECT_EQ(all_nodes, channels_last() ? 8u : 7u);
    expect_close(basic, none);
    expect_close(ext, none);
    expect_close(all, none);
  }
  EXPECT_EQ(ops_at(build, OptLevel::All),
            with_input_reorder({"ConvNchwc", "MaxPoolNchwc", "ConvNchwc", "ConvNchwc",
                                "GlobalAveragePoolNchwc", "Flatten", "Gemm"}));
}

TEST(Nchwc, PoolingOnBlockedTensors) {
  struct Case {
    std::string what;
    std::vector<Attribute> attrs;
    bool indices;
  };
  // Blocked where the window allows it; MaxPool whose Indices are read stays NCHW.
  std::vector<Case> cases = {
      {"k3 s2 p1",
       {test::attr_ints("kernel_shape", {3, 3}), test::attr_ints("strides", {2, 2}),
        test::attr_ints("pads", {1, 1, 1, 1})},
       false},
      {"ceil_mode",
       {test::attr_ints("kernel_shape", {3, 2}), test::attr_ints("strides", {2, 2}),
        test::attr_int("ceil_mode", 1)},
       false},
      {"SAME_UPPER",
       {test::attr_ints("kernel_shape", {2, 3}), test::attr_string("auto_pad", "SAME_UPPER")},
       false},
      {"indices read",
       {test::attr_ints("kernel_shape", {2, 2}), test::attr_ints("strides", {2, 2})},
       true},
  };
  for (const Case& c : cases) {
    auto build = [&c](test::ModelBuilder& b) {
      b.input("x", DataType::Float,
              SymShape{Dim::symbol("batch"), Dim::fixed(3), Dim::fixed(13), Dim::fixed(12)});
      conv(b, "x", "c", 3, 16, 3, 10);
      test::set_attrs(b.node("MaxPool", {"c"}, {"p", c.indices ? "i" : ""}), c.attrs);
      b.node("GlobalAveragePool", {"p"}, {"gap"});
      b.output("gap").output("p");
      if (c.indices) b.output("i");
    };
    SCOPED_TRACE(c.what);
    auto ops = ops_at(build, OptLevel::All);
    EXPECT_EQ(count(ops, "MaxPoolNchwc"), c.indices ? 0 : 1);
    EXPECT_EQ(count(ops, "GlobalAveragePoolNchwc"), c.indices ? 0 : 1);
    for (int64_t n : {1, 2}) {
      NamedTensors feeds{{"x", randn({n, 3, 13, 12}, 5)}};
      expect_close(run_at(build, OptLevel::All, feeds).first,
                   run_at(build, OptLevel::Basic, feeds).first);
    }
  }
}

}  // namespace
}  // namespace onyx
