// MatMulInteger's oneDNN int8 path (kernels/cpu/int8_matmul.h) against int64 sums of the
// zero-point-shifted operands, in the shapes onnxruntime's quantize_dynamic writes and in the
// ones it leaves to onyx's own loops; extreme values check exact int32 sums (no int16 pairs).
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
