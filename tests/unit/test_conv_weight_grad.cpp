// ai.onyx ConvWeightGrad (kernels/cpu/conv_weight_grad.cpp) against a float64 direct sum and
// against the plain-ONNX pattern the Conv gradient rule writes; the fusion that puts it in
// training graphs (inference/fusions_conv_grad.cpp): where it fires, where it must not, the Cast it
// absorbs under bf16 autocast, and gradients equal to the unfused graph's.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "autodiff/training_graph.h"
#include "graph/autocast.h"
#include "graph/onnx_io.h"
#include "graph/shape_inference.h"
#include "test_util.h"

namespace onyx {
namespace {

using Ints = std::vector<int64_t>;

/// A forward convolution's geometry; dW's gradient reads X [N, C, in] and dY [N, M, out].
struct Geo {
  int64_t N, C, M;
  Ints in, k, s, d, pads;
  int64_t group = 1;
  size_t nsp() const { return in.size(); }
  Ints out() const {
    Ints o;
    for (size_t i = 0; i < nsp(); ++i)
      o.push_back((in[i] + pads[i] + pads[i + nsp()] - (k[i] - 1) * d[i] - 1) / s[i] + 1);
    return o;
  }
  Shape x_shape() const {
    Shape r{N, C};
    r.insert(r.end(), in.begin(), in.end());
    return r;
  }
  Shape dy_shape() const {
    Shape r{N, M};
    Ints o = out();
    r.insert(r.end(), o.begin(), o.end());
    return r;
  }
  Shape w_shape() const {
    Shape r{M, C / group};
    r.insert(r.end(), k.begin(), k.end());
    return r;
  }
};

/// Normal draws of `dt` (16-bit values rounded once; the references read the rounded ones).
Tensor randn(const Shape& shape, uint32_t seed, DataType dt) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = nd(rng);
  switch (dt) {
    case DataType::BFloat16:
      return test::T_<bfloat16>(shape, v);
    case DataType::Float16:
      return test::T_<float16>(shape, v);
    case DataType::Double:
      return test::T_<double>(shape, v);
    default:
      return test::T_<float>(shape, v);
  }
}

/// dW in float64, straight from the definition.
std::vector<double> direct(const Geo& g, const Tensor& X, const Tensor& dY) {
  auto x = X.to_double_vector(), dy = dY.to_double_vector();
  const Ints o = g.out();
  const int64_t Cg = g.C / g.group, Mg = g.M / g.group, K = shape_numel(g.k), O = shape_numel(o),
                I = shape_numel(g.in);
  std::vector<double> dw(static_cast<size_t>(g.M * Cg * K), 0.0);
  for (int64_t m = 0; m < g.M; ++m)
    for (int64_t c = 0; c < Cg; ++c)
      for (int64_t kk = 0; kk < K; ++kk)
        for (int64_t oo = 0; oo < O; ++oo) {
          int64_t pos = 0, rk = kk, ro = oo;
          bool inside = true;
          Ints ki(g.nsp()), oi(g.nsp());
          for (int64_t i = static_cast<int64_t>(g.nsp()) - 1; i >= 0; --i) {
            ki[i] = rk % g.k[i], rk /= g.k[i];
            oi[i] = ro % o[i], ro /= o[i];
          }
          for (size_t i = 0; i < g.nsp(); ++i) {
            int64_t p = oi[i] * g.s[i] + ki[i] * g.d[i] - g.pads[i];
            inside &= p >= 0 && p < g.in[i];
            pos = pos * g.in[i] + p;
          }
          if (!inside) continue;
          for (int64_t n = 0; n < g.N; ++n)
            dw[(m * Cg + c) * K + kk] +=
                dy[(n * g.M + m) * O + oo] * x[(n * g.C + (m / Mg) * Cg + c) * I + pos];
        }
  return dw;
}

std::vector<Attribute> attrs(const Geo& g) {
  return {test::attr_ints("kernel_shape", g.k), test::attr_ints("strides", g.s),
          test::attr_ints("dilations", g.d), test::attr_ints("pads", g.pads),
          test::attr_int("group", g.group)};
}

/// One ConvWeightGrad node run on X and dY; `to` Undefined leaves the attribute out.
Tensor run_fused(const Geo& g, const Tensor& X, const Tensor& dY,
                 DataType to = DataType::Undefined) {
  test::ModelBuilder b(17, "ai.onyx");
  b.input("x", X.dtype(), X.shape()).input("dy", dY.dtype(), dY.shape());
  Node& n = b.node("ConvWeightGrad", {"x", "dy"}, {"dw"}, "ai.onyx");
  test::set_attrs(n, attrs(g));
  if (to != DataType::Undefined) n.attrs["to"] = test::attr_int("to", static_cast<int64_t>(to));
  b.output("dw");
  return b.session().run({{"x", X}, {"dy", dY}}).at("dw");
}

Ints swap_perm(size_t nsp) {
  Ints p{1, 0};
  for (size_t i = 0; i < nsp; ++i) p.push_back(static_cast<int64_t>(i) + 2);
  return p;
}

/// The pattern weight_grad writes (group 1), as a graph from x, dy to dw; `extra` adds nodes.
void build_pattern(test::ModelBuilder& b, const Geo& g, DataType dt,
                   const std::function<void(test::ModelBuilder&)>& extra = {}) {
  Ints axes, zeros(g.nsp(), 0);
  for (size_t i = 0; i < g.nsp(); ++i) axes.push_back(static_cast<int64_t>(i) + 2);
  b.input("x", dt, g.x_shape()).input("dy", dt, g.dy_shape());
  b.initializer("starts", Tensor::from_vector<int64_t>({static_cast<int64_t>(g.nsp())}, zeros));
  b.initializer("ends", Tensor::from_vector<int64_t>({static_cast<int64_t>(g.nsp())}, g.k));
  b.initializer("axes", Tensor::from_vector<int64_t>({static_cast<int64_t>(g.nsp())}, axes));
  test::set_attrs(b.node("Transpose", {"x"}, {"xt"}),
                  {test::attr_ints("perm", swap_perm(g.nsp()))});
  test::set_attrs(b.node("Transpose", {"dy"}, {"dyt"}),
                  {test::attr_ints("perm", swap_perm(g.nsp()))});
  test::set_attrs(b.node("Conv", {"xt", "dyt"}, {"r"}),
                  {test::attr_ints("strides", g.d), test::attr_ints("dilations", g.s),
                   test::attr_ints("pads", g.pads), test::attr_int("group", 1)});
  b.node("Slice", {"r", "starts", "ends", "axes"}, {"rs"});
  test::set_attrs(b.node("Transpose", {"rs"}, {"dw"}),
                  {test::attr_ints("perm", swap_perm(g.nsp()))});
  b.output("dw");
  if (extra) extra(b);
}

Session pattern_session(const Geo& g, DataType dt, OptLevel level,
                        const std::function<void(test::ModelBuilder&)>& extra = {}) {
  test::ModelBuilder b(17);
  build_pattern(b, g, dt, extra);
  SessionOptions so;
  so.opt_level = level;
  return b.session(so);
}

size_t count_op(const Model& m, const std::string& op) {
  size_t k = 0;
  for (const auto& n : m.graph->nodes()) k += n->op_type == op;
  return k;
}

/// |got - want| <= rtol * max|want| elementwise.
void expect_close(const Tensor& got, const std::vector<double>& want, double rtol,
                  const std::string& what) {
  auto g = got.to_double_vector();
  ASSERT_EQ(g.size(), want.size()) << what;
  double scale = 1e-30;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], want[i], rtol * scale) << what << " at " << i;
}

std::string name(const Geo& g) {
  return fmt::format("N{} C{} M{} in {} k {} s {} d {} pads {} group {}", g.N, g.C, g.M,
                     fmt::join(g.in, "x"), fmt::join(g.k, "x"), fmt::join(g.s, "x"),
                     fmt::join(g.d, "x"), fmt::join(g.pads, ","), g.group);
}

const std::vector<Geo>& geometries() {
  static const std::vector<Geo> g = {
      {1, 3, 4, {9}, {3}, {1}, {1}, {1, 1}},
      {3, 2, 5, {12}, {3}, {2}, {2}, {2, 0}},
      {3, 4, 8, {7, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {3, 4, 8, {9, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 0, 2, 1}},
      {1, 3, 6, {10, 11}, {3, 3}, {1, 2}, {2, 1}, {0, 2, 1, 0}},
      {3, 8, 4, {8, 8}, {1, 1}, {2, 2}, {1, 1}, {0, 0, 0, 0}},
      {1, 3, 8, {16, 16}, {7, 7}, {2, 2}, {1, 1}, {3, 3, 3, 3}},
      {3, 5, 4, {10, 8}, {1, 1}, {2, 2}, {1, 1}, {0, 0, 0, 0}},  // X's last row never read
      {2, 3, 4, {2}, {1}, {3}, {1}, {1, 0}},                     // no X read at all: zeros
      {1, 2, 3, {5, 6, 4}, {3, 2, 1}, {1, 2, 1}, {1, 1, 1}, {1, 0, 0, 1, 1, 0}},
      // 64+ outputs per channel: oneDNN's backward-weights primitive (as for the 7x7 above; the
      // others treat the batch as channels).
      {2, 16, 8, {10, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 0, 2, 1}},
      {1, 16, 4, {20, 18}, {3, 3}, {2, 2}, {1, 2}, {1, 1, 1, 1}},
      {2, 16, 4, {18, 17}, {1, 1}, {2, 2}, {1, 1}, {0, 0, 0, 0}},
  };
  return g;
}

TEST(ConvWeightGrad, Float32MatchesDirectSumAndThePattern) {
  for (const Geo& g : geometries()) {
    Tensor X = randn(g.x_shape(), 1, DataType::Float), dY = randn(g.dy_shape(), 2, DataType::Float);
    Tensor dw = run_fused(g, X, dY);
    ASSERT_EQ(dw.shape(), g.w_shape()) << name(g);
    ASSERT_EQ(dw.dtype(), DataType::Float);
    expect_close(dw, direct(g, X, dY), 1e-5, name(g));
    Tensor pat =
        pattern_session(g, DataType::Float, OptLevel::None).run({{"x", X}, {"dy", dY}}).at("dw");
    expect_close(dw, pat.to_double_vector(), 1e-5, name(g) + " vs pattern");
  }
}

TEST(ConvWeightGrad, GroupsAndFloat64) {
  for (Geo g : {Geo{2, 4, 6, {8, 7}, {3, 3}, {1, 2}, {1, 1}, {1, 1, 0, 1}, 2},
                Geo{3, 6, 6, {9}, {3}, {2}, {1}, {1, 1}, 6}}) {
    for (DataType dt : {DataType::Float, DataType::Double}) {
      Tensor X = randn(g.x_shape(), 3, dt), dY = randn(g.dy_shape(), 4, dt);
      Tensor dw = run_fused(g, X, dY);
      ASSERT_EQ(dw.shape(), g.w_shape()) << name(g);
      expect_close(dw, direct(g, X, dY), dt == DataType::Double ? 1e-12 : 1e-5, name(g));
    }
  }
}

TEST(ConvWeightGrad, SixteenBitInputs) {
  for (const Geo& g : geometries()) {
    for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
      Tensor X = randn(g.x_shape(), 5, dt), dY = randn(g.dy_shape(), 6, dt);
      auto want = direct(g, X, dY);  // exact sums of the rounded inputs
      Tensor f = run_fused(g, X, dY, DataType::Float);
      ASSERT_EQ(f.dtype(), DataType::Float);
      expect_close(f, want, 1e-2, name(g) + " " + dtype_name(dt) + " to float");
      Tensor h = run_fused(g, X, dY);
      ASSERT_EQ(h.dtype(), dt);
      expect_close(h, want, 1e-2, name(g) + " " + dtype_name(dt));
    }
  }
}

TEST(ConvWeightGrad, KernelShapeBeyondTheReachIsClippedLikeSlice) {
  Geo g{2, 3, 4, {6}, {3}, {1}, {1}, {1, 1}};
  Tensor X = randn(g.x_shape(), 7, DataType::Float), dY = randn(g.dy_shape(), 8, DataType::Float);
  Geo wide = g;
  wide.k = {INT64_MAX};  // ends = INT64_MAX: the Slice keeps what the Conv produced (3 taps)
  Tensor dw = run_fused(wide, X, dY);
  EXPECT_EQ(dw.shape(), g.w_shape());
  expect_close(dw, direct(g, X, dY), 1e-5, "clipped");
}

TEST(ConvWeightGradFusion, ThePatternBecomesOneNode) {
  const Geo& g = geometries()[3];
  Tensor X = randn(g.x_shape(), 9, DataType::Float), dY = randn(g.dy_shape(), 10, DataType::Float);
  Session on = pattern_session(g, DataType::Float, OptLevel::Extended);
  EXPECT_EQ(count_op(on.model(), "ConvWeightGrad"), 1u);
  EXPECT_EQ(on.model().graph->num_nodes(), 1u);
  Tensor fused = on.run({{"x", X}, {"dy", dY}}).at("dw");
  expect_close(fused, direct(g, X, dY), 1e-5, "fused session");
}

TEST(ConvWeightGradFusion, NotWhenAnIntermediateHasAnotherReader) {
  const Geo& g = geometries()[2];
  auto conv_out_read = [](test::ModelBuilder& b) { b.output("r"); };
  auto slice_out_read = [](test::ModelBuilder& b) {
    b.node("Identity", {"rs"}, {"rs2"});
    b.output("rs2");
  };
  auto double_typed = [&](test::ModelBuilder&) {};
  for (const auto& extra : {std::function<void(test::ModelBuilder&)>(conv_out_read),
                            std::function<void(test::ModelBuilder&)>(slice_out_read)}) {
    Session s = pattern_session(g, DataType::Float, OptLevel::Extended, extra);
    EXPECT_EQ(count_op(s.model(), "ConvWeightGrad"), 0u);
  }
  // float64 keeps the pattern (its gemm convolution is faster than the fallback loops).
  Session d = pattern_session(g, DataType::Double, OptLevel::Extended, double_typed);
  EXPECT_EQ(count_op(d.model(), "ConvWeightGrad"), 0u);
  // A Transpose of X read elsewhere stays for that reader; the rest still fuses.
  Session t = pattern_session(g, DataType::Float, OptLevel::Extended,
                              [](test::ModelBuilder& b) { b.output("xt"); });
  EXPECT_EQ(count_op(t.model(), "ConvWeightGrad"), 1u);
  EXPECT_EQ(count_op(t.model(), "Transpose"), 1u);
  Tensor X = randn(g.x_shape(), 11, DataType::Float), dY = randn(g.dy_shape(), 12, DataType::Float);
  auto out = t.run({{"x", X}, {"dy", dY}});
  expect_close(out.at("dw"), direct(g, X, dY), 1e-5, "with xt read");
  EXPECT_EQ(out.at("xt").shape(), (Shape{g.C, g.N, g.in[0], g.in[1]}));
}

/// x [2, 3, 13, 11] -> Conv(w1, stride 2, asymmetric pads) -> Relu -> Conv(w2, 3x3 dilated) -> y,
/// mean squared error against labels.
std::unique_ptr<Model> two_convs() {
  test::ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{2, 3, 13, 11});
  b.initializer("w1", test::random_normal({8, 3, 3, 3}, 21, 0.3f));
  b.initializer("w2", test::random_normal({4, 8, 3, 3}, 22, 0.3f));
  test::set_attrs(b.node("Conv", {"x", "w1"}, {"h"}),
                  {test::attr_ints("strides", {2, 2}), test::attr_ints("pads", {1, 0, 2, 1})});
  b.node("Relu", {"h"}, {"hr"});
  test::set_attrs(b.node("Conv", {"hr", "w2"}, {"y"}), {test::attr_ints("dilations", {2, 2})});
  b.output("y");
  auto m = b.build();
  infer_types_and_shapes(*m);
  return m;
}

/// One training step's gradients of w1, w2 at `level`, and the ConvWeightGrad nodes run.
struct Step {
  NamedTensors grads;
  size_t fused = 0;
  std::vector<int64_t> to;       // each node's `to` (0: absent)
  std::vector<DataType> x_type;  // each node's X dtype
};

Step train_step(const Model& fwd, OptLevel level, Precision p) {
  auto m = clone_model(fwd);
  if (p != Precision::Float32) {
    autodiff::prepare_for_training(*m);
    infer_types_and_shapes(*m);
    autocast(*m, p);
  }
  auto tg = autodiff::build_training_graph(*m, {.kind = "mse", .output = "y"}, {"w1", "w2"});
  SessionOptions so;
  so.opt_level = level;
  so.intra_op_threads = 2;
  Session s(std::move(tg.model), so);
  NamedTensors feeds{{"x", randn({2, 3, 13, 11}, 23, DataType::Float)},
                     {"labels", randn({2, 4, 3, 1}, 24, DataType::Float)}};
  Step r{.grads = s.run(feeds, tg.grads)};
  for (const auto& n : s.model().graph->nodes()) {
    if (n->op_type != "ConvWeightGrad") continue;
    ++r.fused;
    r.to.push_back(n->attr_int("to", 0));
    r.x_type.push_back(n->inputs[0]->type.elem);
  }
  return r;
}

TEST(ConvWeightGradFusion, TrainingGraphGradientsMatchUnfused) {
  auto fwd = two_convs();
  Step want = train_step(*fwd, OptLevel::None, Precision::Float32);
  Step got = train_step(*fwd, OptLevel::All, Precision::Float32);
  EXPECT_EQ(want.fused, 0u);
  ASSERT_EQ(got.fused, 2u);
  EXPECT_EQ(got.to, (Ints{0, 0}));
  for (const auto& [name, t] : want.grads)
    expect_close(got.grads.at(name), t.to_double_vector(), 1e-5, name);
}

TEST(ConvWeightGradFusion, Bf16AutocastCastIsAbsorbed) {
  auto fwd = two_convs();
  Step want = train_step(*fwd, OptLevel::None, Precision::BFloat16);
  Step got = train_step(*fwd, OptLevel::All, Precision::BFloat16);
  EXPECT_EQ(want.fused, 0u);
  ASSERT_EQ(got.fused, 2u);
  const auto f32 = static_cast<int64_t>(DataType::Float);
  EXPECT_EQ(got.to, (Ints{f32, f32}));
  EXPECT_EQ(got.x_type, (std::vector<DataType>{DataType::BFloat16, DataType::BFloat16}));
  // The unfused graph rounds dW to bf16 before its Cast; the fused one does not.
  for (const auto& [name, t] : want.grads) {
    ASSERT_EQ(got.grads.at(name).dtype(), DataType::Float);
    expect_close(got.grads.at(name), t.to_double_vector(), 1e-2, name);
  }
}

}  // namespace
}  // namespace onyx
