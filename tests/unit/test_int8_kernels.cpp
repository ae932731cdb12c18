// The int8 oneDNN paths, MatMulInteger (kernels/cpu/int8_matmul.h) and QLinearConv
// (int8_conv.h), against int64 sums of the zero-point-shifted operands, in the shapes int8
// models use and in the ones left to onyx's own loops; extreme values check exact int32 sums
// (no int16 pairs). Under ONYX_ISA=avx2 (CI's second pass) the same tests check the loops.
#include <random>

#include "kernels/cpu/int8_matmul.h"
#include "test_util.h"

using namespace onyx;
using onyx::test::run_op;

namespace {

template <typename T>
Tensor random_ints(const Shape& shape, uint32_t seed, int lo, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  Tensor t = Tensor::empty(std::is_same_v<T, uint8_t> ? DataType::UInt8 : DataType::Int8, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<T>()[i] = T(d(rng));
  return t;
}

/// (A - az) @ (B - bz) in int64, A [..., K], B [K, N], zero points per tensor.
std::vector<int64_t> expected(const Tensor& a, int64_t az, const Tensor& b, int64_t bz) {
  const std::vector<int64_t> av = a.to_int64_vector(), bv = b.to_int64_vector();
  const int64_t K = b.dim(0), N = b.dim(1), rows = a.numel() / K;
  std::vector<int64_t> y(rows * N, 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) y[r * N + n] += (av[r * K + k] - az) * (bv[k * N + n] - bz);
  return y;
}

void expect_product(const Tensor& a, const Tensor& az, const Tensor& b, const Tensor& bz,
                    int64_t az_v, int64_t bz_v) {
  auto y = run_op("MatMulInteger", {{"a", a}, {"b", b}, {"az", az}, {"bz", bz}});
  const Tensor& got = y.at("y0");
  ASSERT_EQ(got.dtype(), DataType::Int32);
  Shape want_shape = a.shape();
  want_shape.back() = b.dim(1);
  ASSERT_EQ(got.shape(), want_shape);
  EXPECT_EQ(got.to_int64_vector(), expected(a, az_v, b, bz_v));
}

}  // namespace

TEST(Int8MatMul, QuantizeDynamicShapesAreExact) {
  SCOPED_TRACE(cpu::exact_int8_dot_products() ? "oneDNN int8 path" : "onyx's loops (no VNNI)");
  const Tensor none;
  // uint8 activations [batch, seq, K] with a zero point, int8 weights without one (or zero).
  Tensor a = random_ints<uint8_t>({2, 5, 64}, 1, 0, 255);
  Tensor b = random_ints<int8_t>({64, 48}, 2, -128, 127);
  expect_product(a, test::T_<uint8_t>({}, {131}), b, none, 131, 0);
  expect_product(a, test::T_<uint8_t>({}, {0}), b, test::T_<int8_t>({}, {0}), 0, 0);
  expect_product(a, none, b, none, 0, 0);
  // int8 activations.
  Tensor s = random_ints<int8_t>({7, 33}, 3, -128, 127);
  expect_product(s, test::T_<int8_t>({}, {-5}), random_ints<int8_t>({33, 17}, 4, -128, 127), none, -5, 0);
  // The largest products: 255 * -128 summed over K = 256 overflows any int16 pair sum.
  Tensor big_a = Tensor::empty(DataType::UInt8, {3, 256});
  std::fill_n(big_a.data<uint8_t>(), big_a.numel(), uint8_t(255));
  Tensor big_b = Tensor::empty(DataType::Int8, {256, 4});
  for (int64_t i = 0; i < big_b.numel(); ++i) big_b.data<int8_t>()[i] = i % 2 ? int8_t(127) : int8_t(-128);
  expect_product(big_a, none, big_b, none, 0, 0);
}

TEST(Int8MatMul, ConstantWeightsArePackedOnceAndStayExact) {
  // B an initializer, as quantize_dynamic writes it: packed at the first run, reused after;
  // the activations' zero point applied after the product (column sums of B).
  Tensor b = random_ints<int8_t>({96, 40}, 11, -128, 127);
  b.data<int8_t>()[0] = -128;  // the extreme weights beside the extreme activations
  onyx::test::ModelBuilder mb(21);
  mb.input("a", DataType::UInt8, Shape{2, 6, 96});
  mb.input("az", DataType::UInt8, Shape{});
  mb.initializer("b", b);
  mb.node("MatMulInteger", {"a", "b", "az"}, {"y"});
  mb.output("y");
  Session session = mb.session({.intra_op_threads = 2});
  for (int round = 0; round < 3; ++round) {
    Tensor a = random_ints<uint8_t>({2, 6, 96}, 20 + round, 0, 255);
    a.data<uint8_t>()[0] = 255;
    const uint8_t z = round == 0 ? 0 : round == 1 ? 255 : 128;
    NamedTensors out = session.run({{"a", a}, {"az", test::T_<uint8_t>({}, {double(z)})}});
    EXPECT_EQ(out.at("y").to_int64_vector(), expected(a, z, b, 0)) << "round " << round;
  }
}

TEST(Int8MatMul, OtherFormsRunOnOnyxsLoops) {
  const Tensor none;
  Tensor a = random_ints<uint8_t>({4, 24}, 5, 0, 255);
  // Non-zero weight zero point, uint8 weights, a batched B: all exact through the loops.
  expect_product(a, test::T_<uint8_t>({}, {7}), random_ints<int8_t>({24, 9}, 6, -128, 127),
                 test::T_<int8_t>({}, {3}), 7, 3);
  expect_product(a, none, random_ints<uint8_t>({24, 9}, 7, 0, 255), test::T_<uint8_t>({}, {128}), 0, 128);
  auto y = run_op("MatMulInteger", {{"a", random_ints<uint8_t>({2, 3, 8}, 8, 0, 255)},
                                    {"b", random_ints<int8_t>({2, 8, 5}, 9, -128, 127)}});
  EXPECT_EQ(y.at("y0").shape(), (Shape{2, 3, 5}));
}

TEST(Int8MatMul, MismatchedInnerDimensionsAreAnError) {
  onyx::test::expect_error(
      [] {
        run_op("MatMulInteger", {{"a", random_ints<uint8_t>({2, 8}, 1, 0, 255)},
                                 {"b", random_ints<int8_t>({7, 3}, 2, -128, 127)}});
      },
      "inner dimensions differ");
}

namespace {

struct QConvCase {
  Shape x, w;
  int64_t stride = 1, pad = 0, dilation = 1, group = 1;
  int x_zp = 0, y_zp = 0;
  bool is_signed = false, bias = true, per_channel = false;
};

/// QLinearConv against int64 sums requantized in double, with power-of-two scales so that the
/// float requantization of oneDNN and the double one of onyx's loops agree exactly (halves
/// included: those are rounded to even in both).
void expect_qlinear_conv(const QConvCase& c, uint32_t seed) {
  const int64_t N = c.x[0], C = c.x[1], H = c.x[2], W = c.x[3], M = c.w[0], KH = c.w[2], KW = c.w[3];
  Tensor x = c.is_signed ? random_ints<int8_t>(c.x, seed, -128, 127) : random_ints<uint8_t>(c.x, seed, 0, 255);
  Tensor w = random_ints<int8_t>(c.w, seed + 1, -128, 127);
  std::vector<double> ws_v(c.per_channel ? M : 1);
  for (size_t i = 0; i < ws_v.size(); ++i) ws_v[i] = std::ldexp(1.0, -6 - int(i % 3));
  const double xs = 0.5, ys = 4.0;
  std::vector<double> b_v(M);
  for (int64_t m = 0; m < M; ++m) b_v[m] = double((m * 7919) % 20001 - 10000);
  auto zp = [&](int v) { return c.is_signed ? test::T_<int8_t>({}, {double(v)}) : test::T_<uint8_t>({}, {double(v)}); };
  onyx::test::Named in = {{"x", x}, {"xs", test::T_({}, {xs})}, {"xz", zp(c.x_zp)}, {"w", w},
                          {"ws", test::T_({int64_t(ws_v.size())}, ws_v)}, {"wz", Tensor()},
                          {"ys", test::T_({}, {ys})}, {"yz", zp(c.y_zp)}};
  if (c.bias) in.push_back({"b", test::T_<int32_t>({M}, b_v)});
  auto y = run_op("QLinearConv", in,
                  {onyx::test::attr_ints("strides", {c.stride, c.stride}),
                   onyx::test::attr_ints("pads", {c.pad, c.pad, c.pad, c.pad}),
                   onyx::test::attr_ints("dilations", {c.dilation, c.dilation}),
                   onyx::test::attr_int("group", c.group)});
  const Tensor& got = y.at("y0");
  const int64_t OH = (H + 2 * c.pad - (KH - 1) * c.dilation - 1) / c.stride + 1;
  const int64_t OW = (W + 2 * c.pad - (KW - 1) * c.dilation - 1) / c.stride + 1;
  ASSERT_EQ(got.shape(), (Shape{N, M, OH, OW}));
  const std::vector<int64_t> xv = x.to_int64_vector(), wv = w.to_int64_vector(), gv = got.to_int64_vector();
  const int64_t cg = C / c.group, mg = M / c.group;
  const double lo = c.is_signed ? -128 : 0, hi = c.is_signed ? 127 : 255;
  int64_t checked = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          int64_t acc = c.bias ? int64_t(b_v[m]) : 0;
          const int64_t g = m / mg;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t ih = oh * c.stride - c.pad + kh * c.dilation, iw = ow * c.stride - c.pad + kw * c.dilation;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += (xv[((n * C + g * cg + ci) * H + ih) * W + iw] - c.x_zp) * wv[((m * cg + ci) * KH + kh) * KW + kw];
              }
          const double r = xs * ws_v[c.per_channel ? m : 0] / ys;
          // As ONNX's reference: the zero point is added before rounding (half to even).
          const double want = std::clamp(std::nearbyint(double(acc) * r + c.y_zp), lo, hi);
          ASSERT_EQ(gv[((n * M + m) * OH + oh) * OW + ow], int64_t(want)) << "n " << n << " m " << m << " oh " << oh << " ow " << ow << " acc " << acc;
          ++checked;
        }
  EXPECT_EQ(checked, got.numel());
}

}  // namespace

TEST(Int8Conv, QLinearConvShapesOfInt8CNNsAreExact) {
  SCOPED_TRACE(cpu::exact_int8_dot_products() ? "oneDNN int8 path" : "onyx's loops (no VNNI)");
  expect_qlinear_conv({.x = {1, 8, 9, 9}, .w = {16, 8, 3, 3}, .pad = 1, .x_zp = 128, .y_zp = 100}, 1);
  expect_qlinear_conv({.x = {2, 16, 12, 12}, .w = {32, 16, 1, 1}, .stride = 2, .x_zp = 3, .y_zp = 0, .per_channel = true}, 2);
  expect_qlinear_conv({.x = {1, 12, 10, 10}, .w = {12, 1, 3, 3}, .pad = 1, .group = 12, .x_zp = 7, .y_zp = 9}, 3);  // depthwise
  expect_qlinear_conv({.x = {1, 4, 11, 11}, .w = {6, 2, 3, 3}, .stride = 2, .pad = 2, .dilation = 2, .group = 2, .x_zp = -5, .y_zp = 3, .is_signed = true, .bias = false}, 4);
  expect_qlinear_conv({.x = {1, 3, 16, 16}, .w = {8, 3, 7, 7}, .stride = 2, .pad = 3, .x_zp = 0, .y_zp = 255, .per_channel = true}, 5);  // a stem, saturating high
}

namespace {

/// x float -> Q -> DQ -> Conv(DQ(w int8, per-channel), bias) -> Q -> DQ, bias given as
/// `bias_form`: "int32" (DQ of int32 in x_scale * w_scale), "shared" (Identity of a DQ in
/// another scale, as torch exports share equal biases) or "float".
std::unique_ptr<Model> qdq_conv(const std::string& bias_form) {
  onyx::test::ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{1, 4, 9, 9});
  b.initializer("xs", test::T_({}, {0.02})).initializer("xz", test::T_<uint8_t>({}, {128}));
  b.initializer("ys", test::T_({}, {0.05})).initializer("yz", test::T_<uint8_t>({}, {120}));
  b.initializer("w", random_ints<int8_t>({6, 4, 3, 3}, 31, -128, 127));
  std::vector<double> ws = {0.01, 0.012, 0.008, 0.011, 0.009, 0.01};
  b.initializer("ws", test::T_({6}, ws)).initializer("wz", test::T_<int8_t>({6}, {0, 0, 0, 0, 0, 0}));
  b.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  b.node("DequantizeLinear", {"xq", "xs", "xz"}, {"xd"});
  onyx::test::set_attrs(b.node("DequantizeLinear", {"w", "ws", "wz"}, {"wd"}), {onyx::test::attr_int("axis", 0)});
  std::vector<double> bias = {-300, 7, 150, 0, 42, -9};
  if (bias_form == "float") {
    std::vector<double> f;
    for (size_t m = 0; m < bias.size(); ++m) f.push_back(bias[m] * 0.02 * ws[m] + 1e-5);
    b.initializer("bf", test::T_({6}, f));
    b.node("Identity", {"bf"}, {"bd"});
  } else {
    std::vector<double> bs;
    for (double w : ws) bs.push_back(0.02 * w * (bias_form == "shared" ? 1.5 : 1.0));
    b.initializer("bq", test::T_<int32_t>({6}, bias)).initializer("bs", test::T_({6}, bs));
    onyx::test::set_attrs(b.node("DequantizeLinear", {"bq", "bs"}, {bias_form == "shared" ? "bsh" : "bd"}),
                          {onyx::test::attr_int("axis", 0)});
    if (bias_form == "shared") b.node("Identity", {"bsh"}, {"bd"});
  }
  onyx::test::set_attrs(b.node("Conv", {"xd", "wd", "bd"}, {"c"}),
                        {onyx::test::attr_ints("pads", {1, 1, 1, 1})});
  b.node("QuantizeLinear", {"c", "ys", "yz"}, {"cq"});
  b.node("DequantizeLinear", {"cq", "ys", "yz"}, {"y"});
  b.output("y");
  return b.build();
}

}  // namespace

TEST(Int8Conv, QdqConvolutionsRunAsQLinearConvWithinOneStep) {
  for (const std::string form : {"int32", "shared", "float"}) {
    SCOPED_TRACE(form);
    Session fused(qdq_conv(form), {.intra_op_threads = 1});
    Session plain(qdq_conv(form), {.intra_op_threads = 1, .opt_level = OptLevel::None});
    size_t qlinear = 0;
    for (const Node* n : fused.model().graph->topological_order()) qlinear += n->op_type == "QLinearConv";
    EXPECT_EQ(qlinear, cpu::exact_int8_dot_products() ? 1u : 0u);
    Tensor x = Tensor::empty(DataType::Float, {1, 4, 9, 9});
    std::mt19937 rng(7);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = d(rng);
    const std::vector<double> a = fused.run({{"x", x}}).at("y").to_double_vector();
    const std::vector<double> p = plain.run({{"x", x}}).at("y").to_double_vector();
    ASSERT_EQ(a.size(), p.size());
    size_t equal = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_LE(std::abs(a[i] - p[i]), 0.05 + 1e-6) << i;  // at most one output step
      equal += a[i] == p[i];
    }
    EXPECT_GE(double(equal) / double(a.size()), 0.95);
  }
}

namespace {

/// quantize_dynamic's Linear: DynamicQuantizeLinear(x) -> MatMulInteger(xq, W int8, xz, 0) ->
/// Cast(float) -> Mul(Mul(x_scale, w_scale)) [-> Add(bias)]; `cast_read_twice` gives the Cast's
/// output a second reader (a graph output), which keeps the chain apart.
std::unique_ptr<Model> dynamic_linear(bool with_bias, bool cast_read_twice) {
  onyx::test::ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{3, 5, 40});
  b.initializer("w", random_ints<int8_t>({40, 24}, 41, -128, 127));
  b.initializer("wz", test::T_<int8_t>({}, {0})).initializer("ws", test::T_({}, {0.013}));
  std::vector<double> bias(24);
  for (int i = 0; i < 24; ++i) bias[i] = 0.1 * i - 1.0;
  b.initializer("bias", test::T_({24}, bias));
  b.node("DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xz"});
  b.node("MatMulInteger", {"xq", "w", "xz", "wz"}, {"acc"});
  onyx::test::set_attrs(b.node("Cast", {"acc"}, {"accf"}), {onyx::test::attr_int("to", int64_t(DataType::Float))});
  b.node("Mul", {"xs", "ws"}, {"s"});
  b.node("Mul", {"accf", "s"}, {with_bias ? "scaled" : "y"});
  if (with_bias) b.node("Add", {"scaled", "bias"}, {"y"});
  b.output("y");
  if (cast_read_twice) b.output("accf");
  return b.build();
}

}  // namespace

TEST(Int8MatMul, DynamicQuantizedLinearFusesWithTheSameBits) {
  Tensor x = Tensor::empty(DataType::Float, {3, 5, 40});
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 2.0f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = d(rng);
  for (bool with_bias : {true, false})
    for (bool read_twice : {false, true}) {
      SCOPED_TRACE(fmt::format("bias {} cast read twice {}", with_bias, read_twice));
      Session fused(dynamic_linear(with_bias, read_twice), {.intra_op_threads = 2});
      Session plain(dynamic_linear(with_bias, read_twice), {.intra_op_threads = 2, .opt_level = OptLevel::None});
      size_t n = 0;
      for (const Node* node : fused.model().graph->topological_order()) n += node->op_type == "MatMulIntegerToFloat";
      EXPECT_EQ(n, read_twice ? 0u : 1u);
      const NamedTensors a = fused.run({{"x", x}}), p = plain.run({{"x", x}});
      EXPECT_EQ(a.at("y").shape(), (Shape{3, 5, 24}));
      EXPECT_EQ(a.at("y").to_double_vector(), p.at("y").to_double_vector());
    }
}
