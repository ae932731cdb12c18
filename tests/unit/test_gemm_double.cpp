// The float64 gemm (kernels/cpu/gemm_f64.cpp) through MatMul and Gemm against a plain triple
// loop: shapes that are not multiples of its 4 x 8 register tile or 64 x 256 x 256 cache
// blocks, batched and broadcast MatMul, and Gemm's transposed operands (strided reads).
#include <gtest/gtest.h>

#include <random>

#include "test_util.h"

namespace onyx {
namespace {

using test::attr_float;
using test::attr_int;

Tensor random_double(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  for (double& x : v) x = u(rng);
  return Tensor::from_vector<double>(s, v);
}

/// C = A B for row-major A [M, K] (or its transpose stored [K, M]) and B [K, N] (or [N, K]).
std::vector<double> reference(const std::vector<double>& a, const std::vector<double>& b, int64_t M,
                              int64_t N, int64_t K, bool ta, bool tb) {
  std::vector<double> c(static_cast<size_t>(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += a[ta ? k * M + i : i * K + k] * b[tb ? j * K + k : k * N + j];
      c[i * N + j] = s;
    }
  return c;
}

TEST(GemmDouble, MatMulOddShapesAndBlocks) {
  struct Dims { int64_t M, N, K; };
  uint32_t seed = 3;
  for (Dims d : {Dims{1, 1, 1}, Dims{3, 5, 7}, Dims{4, 8, 256}, Dims{65, 257, 300}, Dims{130, 9, 513},
                 Dims{7, 600, 3}}) {
    Tensor a = random_double({d.M, d.K}, seed++), b = random_double({d.K, d.N}, seed++);
    Tensor c = test::run_op("MatMul", {{"a", a}, {"b", b}}, {}, 1, 17).at("y0");
    ASSERT_EQ(c.shape(), (Shape{d.M, d.N}));
    test::expect_near(c, reference(a.to_double_vector(), b.to_double_vector(), d.M, d.N, d.K, false, false),
                      1e-12);
  }
}

TEST(GemmDouble, BatchedBroadcastMatMul) {
  Tensor a = random_double({3, 1, 6, 5}, 40), b = random_double({2, 5, 9}, 41);
  Tensor c = test::run_op("MatMul", {{"a", a}, {"b", b}}, {}, 1, 17).at("y0");
  ASSERT_EQ(c.shape(), (Shape{3, 2, 6, 9}));
  auto av = a.to_double_vector(), bv = b.to_double_vector(), cv = c.to_double_vector();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j) {
      std::vector<double> ai(av.begin() + i * 30, av.begin() + (i + 1) * 30);
      std::vector<double> bj(bv.begin() + j * 45, bv.begin() + (j + 1) * 45);
      auto want = reference(ai, bj, 6, 9, 5, false, false);
      for (size_t k = 0; k < want.size(); ++k)
        EXPECT_NEAR(cv[(i * 2 + j) * 54 + k], want[k], 1e-12) << i << " " << j << " " << k;
    }
}

TEST(GemmDouble, GemmTransposedOperands) {
  const int64_t M = 37, N = 70, K = 261;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      Tensor a = random_double(ta ? Shape{K, M} : Shape{M, K}, 50 + ta);
      Tensor b = random_double(tb ? Shape{N, K} : Shape{K, N}, 60 + tb);
      Tensor c = random_double({M, N}, 70);
      Tensor y = test::run_op("Gemm", {{"a", a}, {"b", b}, {"c", c}},
                              {attr_int("transA", ta), attr_int("transB", tb), attr_float("alpha", 0.5),
                               attr_float("beta", 2.0)},
                              1, 17)
                     .at("y0");
      auto want = reference(a.to_double_vector(), b.to_double_vector(), M, N, K, ta, tb);
      auto cv = c.to_double_vector();
      for (size_t i = 0; i < want.size(); ++i) want[i] = 0.5 * want[i] + 2.0 * cv[i];
      test::expect_near(y, want, 1e-12);
    }
}

}  // namespace
}  // namespace onyx
