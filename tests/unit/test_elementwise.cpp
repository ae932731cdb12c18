// Elementwise kernels (unary, binary with broadcasting, Where, Cast) and the float8
// conversions, checked against hand-computed values.
#include <cmath>
#include <limits>

#include "graph/float8.h"
#include "test_util.h"

namespace onyx::test {
namespace {

using V = std::vector<double>;

// Runs a one-node model with the given inputs and attributes; returns output "y".
Tensor run1(const std::string& op, const std::vector<std::pair<std::string, Tensor>>& ins,
            std::vector<Attribute> attrs = {}, int64_t opset = 21, int threads = 2) {
  ModelBuilder b(opset);
  std::vector<std::string> names;
  NamedTensors feeds;
  for (const auto& [name, t] : ins) {
    names.push_back(name);
    if (name.empty()) continue;
    b.input(name, t.dtype(), t.shape());
    feeds[name] = t;
  }
  set_attrs(b.node(op, names, {"y"}), std::move(attrs));
  b.output("y");
  SessionOptions opts;
  opts.intra_op_threads = threads;
  Session s = b.session(opts);
  return s.run(feeds).at("y");
}

Tensor f32(const Shape& s, std::vector<float> v) { return Tensor::from_vector<float>(s, v); }

TEST(Elementwise, ReluLeakyReluAndGelu) {
  Tensor x = f32({4}, {-2, -0.5f, 0, 3});
  expect_near(run1("Relu", {{"x", x}}), {0, 0, 0, 3});
  expect_near(run1("LeakyRelu", {{"x", x}}, {attr_float("alpha", 0.1f)}), {-0.2, -0.05, 0, 3});
  // 0.5 x (1 + erf(x / sqrt 2)) and the tanh form at x = 1: 0.841345 and 0.841192.
  Tensor one = f32({1}, {1});
  expect_near(run1("Gelu", {{"x", one}}), {0.8413447}, 1e-6);
  expect_near(run1("Gelu", {{"x", one}}, {attr_string("approximate", "tanh")}), {0.8411920}, 1e-6);
}

TEST(Elementwise, RoundIsHalfToEvenAndSignKeepsNaN) {
  Tensor x = f32({6}, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.6f});
  expect_near(run1("Round", {{"x", x}}), {0, 2, 2, 0, -2, 3});
  Tensor y = run1("Sign", {{"x", f32({3}, {-3, 0, NAN})}});
  EXPECT_EQ(y.data<float>()[0], -1);
  EXPECT_EQ(y.data<float>()[1], 0);
  EXPECT_TRUE(std::isnan(y.data<float>()[2]));
}

// Found by the model fuzz target: Shrink on uint16 with bias 1e28 cast 7e27 to uint16
// (undefined). Integer results saturate to the type; PRelu on int64 wraps (a signed product
// past int64 was undefined too).
TEST(Elementwise, IntegerShrinkSaturatesAndPReluWraps) {
  Tensor u = Tensor::from_vector<uint16_t>({4}, {0, 1, 3, 65535});
  Tensor y = run1("Shrink", {{"x", u}}, {attr_float("bias", -1e28f), attr_float("lambd", 0.5f)});
  EXPECT_EQ(y.to_int64_vector(), (std::vector<int64_t>{0, 65535, 65535, 65535}));
  y = run1("Shrink", {{"x", u}}, {attr_float("bias", 1e28f), attr_float("lambd", 0.5f)});
  EXPECT_EQ(y.to_int64_vector(), (std::vector<int64_t>{0, 0, 0, 0}));
  Tensor i8 = Tensor::from_vector<int8_t>({3}, {-100, 0, 100});
  y = run1("Shrink", {{"x", i8}}, {attr_float("bias", 50.0f), attr_float("lambd", 1.0f)});
  EXPECT_EQ(y.to_int64_vector(), (std::vector<int64_t>{-50, 0, 50}));
  y = run1("Shrink", {{"x", i8}}, {attr_float("bias", -100.0f), attr_float("lambd", 1.0f)});
  EXPECT_EQ(y.to_int64_vector(), (std::vector<int64_t>{-128, 0, 127}));
  const int64_t big = int64_t{1} << 62;
  Tensor x = Tensor::from_vector<int64_t>({2}, {-big, 5});
  Tensor slope = Tensor::from_vector<int64_t>({2}, {4, 3});
  y = run1("PRelu", {{"x", x}, {"slope", slope}});
  EXPECT_EQ(y.to_int64_vector(), (std::vector<int64_t>{0, 5}));  // -2^64 wraps to 0
}

TEST(Elementwise, Float16ComputesThroughFloat) {
  Tensor x = Tensor::from_vector<float16>({3}, {float16(-1.0f), float16(0.0f), float16(2.0f)});
  Tensor y = run1("Sigmoid", {{"x", x}});
  ASSERT_EQ(y.dtype(), DataType::Float16);
  expect_near(y, {0.26894142, 0.5, 0.88079708}, 1e-3);
}

TEST(Elementwise, ClipWithOnlyMin) {
  Tensor x = f32({4}, {-3, -1, 1, 3});
  expect_near(run1("Clip", {{"x", x}, {"lo", Tensor::scalar<float>(-2)}}), {-2, -1, 1, 3});
  expect_near(run1("Clip", {{"x", x}, {"", Tensor()}, {"hi", Tensor::scalar<float>(0)}}),
              {-3, -1, 0, 0});
}

TEST(Elementwise, IsInfDetectsOneSide) {
  float inf = std::numeric_limits<float>::infinity();
  Tensor x = f32({4}, {inf, -inf, NAN, 1});
  expect_near(run1("IsInf", {{"x", x}}, {attr_int("detect_negative", 0)}), {1, 0, 0, 0});
  expect_near(run1("IsNaN", {{"x", x}}), {0, 0, 1, 0});
}

TEST(Binary, AddBroadcastsRowsColumnsAndScalars) {
  Tensor a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  expect_near(run1("Add", {{"a", a}, {"b", f32({3}, {10, 20, 30})}}), {11, 22, 33, 14, 25, 36});
  expect_near(run1("Add", {{"a", a}, {"b", f32({2, 1}, {100, 200})}}),
              {101, 102, 103, 204, 205, 206});
  expect_near(run1("Mul", {{"a", a}, {"b", Tensor::scalar<float>(2)}}), {2, 4, 6, 8, 10, 12});
  expect_near(run1("Sub", {{"a", f32({3, 1}, {1, 2, 3})}, {"b", f32({1, 2}, {10, 20})}}),
              {-9, -19, -8, -18, -7, -17});
}

TEST(Binary, LargeBroadcastOnManyThreadsMatchesLoop) {
  const int64_t A = 37, B = 29, C = 17;
  std::vector<float> x(A * B * C), z(B);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 97) - 40;
  for (int64_t j = 0; j < B; ++j) z[j] = float(j) * 0.5f;
  Tensor y = run1("Add", {{"a", f32({A, B, C}, x)}, {"b", f32({B, 1}, z)}}, {}, 21, 4);
  ASSERT_EQ(y.shape(), (Shape{A, B, C}));
  const float* p = y.data<float>();
  for (int64_t i = 0; i < A; ++i)
    for (int64_t j = 0; j < B; ++j)
      for (int64_t k = 0; k < C; ++k) {
        int64_t o = (i * B + j) * C + k;
        ASSERT_EQ(p[o], x[o] + z[j]) << "at " << i << "," << j << "," << k;
      }
}

TEST(Binary, IntegerDivisionTruncatesAndModFollowsFmod) {
  auto i32 = [](std::vector<int32_t> v) { return Tensor::from_vector<int32_t>({4}, v); };
  Tensor a = i32({7, -7, 7, -7}), b = i32({2, 2, -2, -2});
  expect_near(run1("Div", {{"a", a}, {"b", b}}), {3, -3, -3, 3});
  expect_near(run1("Mod", {{"a", a}, {"b", b}}), {1, 1, -1, -1});
  expect_near(run1("Mod", {{"a", a}, {"b", b}}, {attr_int("fmod", 1)}), {1, -1, 1, -1});
  expect_near(run1("Div", {{"a", a}, {"b", i32({0, 1, 1, 1})}}), {0, -7, 7, -7});
}

TEST(Binary, PowMixesBaseAndExponentTypes) {
  Tensor base = Tensor::from_vector<int64_t>({3}, {2, 3, -2});
  expect_near(run1("Pow", {{"a", base}, {"b", Tensor::from_vector<int64_t>({3}, {3, 2, 3})}}),
              {8, 9, -8});
  Tensor y = run1("Pow", {{"a", f32({2}, {4, 9})}, {"b", Tensor::scalar<double>(0.5)}});
  ASSERT_EQ(y.dtype(), DataType::Float);
  expect_near(y, {2, 3});
}

// Scalar exponents 2 and 3 take a product fast path: same values as std::pow, signs kept,
// infinities and NaN propagate, 16-bit floats too.
TEST(Binary, PowSquaresAndCubesAsProducts) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {-1.5f, 0.1f, 3.0f, -0.0f, 1e20f, -inf, 7.25f};
  for (double e : {2.0, 3.0}) {
    Tensor y = run1("Pow", {{"a", f32({7}, x)}, {"b", Tensor::scalar<float>(static_cast<float>(e))}});
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_EQ(y.data<float>()[i], static_cast<float>(std::pow(double(x[i]), e))) << x[i] << "^" << e;
    Tensor n = run1("Pow", {{"a", f32({1}, {std::nanf("")})}, {"b", Tensor::scalar<double>(e)}});
    EXPECT_TRUE(std::isnan(n.data<float>()[0]));
  }
  Tensor h = Tensor::from_vector<float16>({2}, {float16(-2.0f), float16(0.5f)});
  expect_near(run1("Pow", {{"a", h}, {"b", Tensor::scalar<float16>(float16(3.0f))}}), {-8, 0.125});
}

TEST(Binary, ComparisonsLogicAndBitShift) {
  Tensor a = f32({3}, {1, 2, 3});
  Tensor b = f32({3}, {3, 2, 1});
  Tensor y = run1("Less", {{"a", a}, {"b", b}});
  ASSERT_EQ(y.dtype(), DataType::Bool);
  expect_near(y, {1, 0, 0});
  expect_near(run1("GreaterOrEqual", {{"a", a}, {"b", b}}), {0, 1, 1});
  Tensor s = Tensor::from_vector<std::string>({2}, {"ab", "cd"});
  expect_near(run1("Equal", {{"a", s}, {"b", Tensor::from_vector<std::string>({1}, {"cd"})}}),
              {0, 1});
  Tensor u = Tensor::from_vector<uint8_t>({3}, {1, 16, 255});
  expect_near(run1("BitShift", {{"a", u}, {"b", Tensor::from_vector<uint8_t>({3}, {2, 2, 8})}},
                   {attr_string("direction", "LEFT")}),
              {4, 64, 0});
}

TEST(Binary, VariadicSumMeanMax) {
  Tensor a = f32({2}, {1, 2}), b = f32({1}, {10}), c = f32({2}, {100, 200});
  expect_near(run1("Sum", {{"a", a}, {"b", b}, {"c", c}}), {111, 212});
  expect_near(run1("Mean", {{"a", a}, {"b", b}, {"c", c}}), {37, 212.0 / 3});
  expect_near(run1("Max", {{"a", a}, {"b", b}}), {10, 10});
  expect_near(run1("Sum", {{"a", a}}), {1, 2});
}

// Found by tests/fuzz/fuzz_model.cpp: Sum of [1], [1] and [3] folded its first two operands
// (equal shapes) with a flat run over Y's three elements, reading past both (ASan:
// heap-buffer-overflow); every later operand then saw garbage.
TEST(Binary, VariadicEqualSmallOperandsBroadcastToTheOutput) {
  Tensor one = f32({1}, {1}), two = f32({1}, {2}), row = f32({3}, {10, 20, 30});
  expect_near(run1("Sum", {{"a", one}, {"b", two}, {"c", row}}), {13, 23, 33});
  expect_near(run1("Max", {{"a", one}, {"b", two}, {"c", row}}), {10, 20, 30});
  expect_near(run1("Mean", {{"a", one}, {"b", two}, {"c", row}}), {13.0 / 3, 23.0 / 3, 11});
  expect_near(run1("Min", {{"a", row}, {"b", one}, {"c", two}}), {1, 1, 1});
}

TEST(Binary, WhereBroadcastsStrings) {
  Tensor c = Tensor::from_vector<bool>({2, 1}, {true, false});
  Tensor x = Tensor::from_vector<std::string>({2}, {"a", "b"});
  Tensor y = Tensor::from_vector<std::string>({}, {"z"});
  Tensor out = run1("Where", {{"c", c}, {"x", x}, {"z", y}});
  ASSERT_EQ(out.shape(), (Shape{2, 2}));
  const std::string* p = out.data<std::string>();
  EXPECT_EQ(p[0], "a");
  EXPECT_EQ(p[1], "b");
  EXPECT_EQ(p[2], "z");
  EXPECT_EQ(p[3], "z");
}

TEST(Binary, MismatchedDtypesAndShapesThrow) {
  Tensor a = f32({3}, {1, 2, 3});
  EXPECT_THROW(run1("Add", {{"a", a}, {"b", Tensor::from_vector<int32_t>({3}, {1, 2, 3})}}),
               onyx::Error);
  // Symbolic dims so that the clash shows only when the kernel runs.
  ModelBuilder b(21);
  b.input("a", DataType::Float, SymShape{Dim::symbol("n")});
  b.input("b", DataType::Float, SymShape{Dim::symbol("m")});
  b.node("Add", {"a", "b"}, {"y"});
  b.output("y");
  Session s = b.session();
  try {
    s.run({{"a", a}, {"b", f32({2}, {1, 2})}});
    FAIL() << "expected onyx::Error";
  } catch (const onyx::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be broadcast"), std::string::npos) << e.what();
    EXPECT_EQ(e.what()[0], '[');
  }
}

TEST(Cast, Float8SaturationAndRounding) {
  // 0.48 rounds to 0.46875 (0x2f); 1e6 saturates to 448 (0x7e) or becomes NaN (0x7f).
  Tensor x = f32({4}, {0.48f, 1e6f, -1e-7f, std::numeric_limits<float>::infinity()});
  Tensor y = run1("Cast", {{"x", x}}, {attr_int("to", int64_t(DataType::Float8E4M3FN))});
  ASSERT_EQ(y.dtype(), DataType::Float8E4M3FN);
  const uint8_t* p = y.data_as<uint8_t>();
  EXPECT_EQ(p[0], 0x2f);
  EXPECT_EQ(p[1], 0x7e);
  EXPECT_EQ(p[2], 0x80);
  EXPECT_EQ(p[3], 0x7e);
  Tensor n = run1("Cast", {{"x", x}},
                  {attr_int("to", int64_t(DataType::Float8E4M3FN)), attr_int("saturate", 0)});
  EXPECT_EQ(n.data_as<uint8_t>()[1], 0x7f);
  EXPECT_EQ(float_to_float8(57344.0f * 2, DataType::Float8E5M2, false), 0x7c);  // inf
  EXPECT_EQ(float_to_float8(-0.0f, DataType::Float8E4M3FNUZ), 0x00);            // no -0
  EXPECT_EQ(float8_to_float(0x7b, DataType::Float8E5M2), 57344.0f);
  EXPECT_EQ(float_to_float8(0.25f, DataType::Float4E2M1), 0x0);  // tie to even: 0
  EXPECT_EQ(float_to_float8(0.75f, DataType::Float4E2M1), 0x2);  // tie to even: 1.0
  EXPECT_EQ(float_to_float8e8m0(1.1f, true, E8M0Round::Up), 128);
  EXPECT_EQ(float_to_float8e8m0(1.1f, true, E8M0Round::Down), 127);
}

TEST(Cast, FloatToFloat16RoundsToNearestEven) {
  // Nine values so that both the 8-wide block and the scalar tail run.
  Tensor x = f32({9}, {0.1f, 65520.0f, 1e-7f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, -2.0f,
                       65504.0f, 0.0f, 3.0f});
  Tensor h = run1("Cast", {{"x", x}}, {attr_int("to", int64_t(DataType::Float16))});
  ASSERT_EQ(h.dtype(), DataType::Float16);
  Tensor back = run1("Cast", {{"x", h}}, {attr_int("to", int64_t(DataType::Float))});
  const float* p = back.data<float>();
  EXPECT_EQ(p[0], 0.0999755859375f);
  EXPECT_TRUE(std::isinf(p[1]));             // rounds past the largest half
  EXPECT_EQ(p[2], 1.1920928955078125e-07f);  // nearest subnormal, 2 * 2^-24
  EXPECT_EQ(p[3], 1.0f);                     // tie to even
  EXPECT_EQ(p[4], 1.0f + 4.0f / 2048);       // tie to even
  EXPECT_EQ(p[5], -2.0f);
  EXPECT_EQ(p[6], 65504.0f);
  EXPECT_EQ(p[7], 0.0f);
  EXPECT_EQ(p[8], 3.0f);
}

TEST(Cast, SubByteIntegersWrap) {
  Tensor x = f32({4}, {-9, 7, 8, 15});
  Tensor y = run1("Cast", {{"x", x}}, {attr_int("to", int64_t(DataType::Int4))});
  const int8_t* p = y.data_as<int8_t>();
  EXPECT_EQ(p[0], 7);
  EXPECT_EQ(p[1], 7);
  EXPECT_EQ(p[2], -8);
  EXPECT_EQ(p[3], -1);
  Tensor back = run1("Cast", {{"x", y}}, {attr_int("to", int64_t(DataType::Float))});
  expect_near(back, {7, 7, -8, -1});
}

TEST(Cast, NumbersAndStrings) {
  Tensor x = f32({5}, {0.1f, 1e6f, 1e-5f, -2.5f, std::numeric_limits<float>::infinity()});
  Tensor s = run1("Cast", {{"x", x}}, {attr_int("to", int64_t(DataType::String))});
  const std::string* p = s.data<std::string>();
  EXPECT_EQ(p[0], "0.1");
  EXPECT_EQ(p[1], "1000000.0");
  EXPECT_EQ(p[2], "1e-05");
  EXPECT_EQ(p[3], "-2.5");
  EXPECT_EQ(p[4], "inf");
  Tensor in = Tensor::from_vector<std::string>({4}, {"3.5", "-INF", "1E2", "NaN"});
  Tensor f = run1("Cast", {{"x", in}}, {attr_int("to", int64_t(DataType::Float))});
  EXPECT_EQ(f.data<float>()[0], 3.5f);
  EXPECT_EQ(f.data<float>()[1], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(f.data<float>()[2], 100.0f);
  EXPECT_TRUE(std::isnan(f.data<float>()[3]));
  Tensor bad = Tensor::from_vector<std::string>({1}, {"hello"});
  EXPECT_THROW(run1("Cast", {{"x", bad}}, {attr_int("to", int64_t(DataType::Float))}), onyx::Error);
}

TEST(Cast, FloatToIntTruncatesAndCastLikeTakesTheTargetType) {
  Tensor x = f32({4}, {2.7f, -2.7f, 300, -1});
  Tensor y = run1("Cast", {{"x", x}}, {attr_int("to", int64_t(DataType::Int32))});
  expect_near(y, {2, -2, 300, -1});
  Tensor u8 = run1("Cast", {{"x", x}}, {attr_int("to", int64_t(DataType::UInt8))});
  expect_near(u8, {2, 254, 44, 255});  // wraps like numpy
  Tensor like = run1("CastLike", {{"x", x}, {"t", Tensor::from_vector<double>({1}, {0})}});
  ASSERT_EQ(like.dtype(), DataType::Double);
  expect_near(like, {2.7, -2.7, 300, -1}, 1e-6);
}

}  // namespace
}  // namespace onyx::test
