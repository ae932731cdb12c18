// blocked_sgemm (kernels/cpu/blocked_sgemm.h): every transpose combination, strides wider than
// the operands, edges of every block size (6-row and 16-column tiles, 256-deep K blocks, A
// blocks split over threads, 3072-column B blocks), a bias, against a double reference; and the
// MatMul and Gemm kernels on the shapes they hand it (weights that are not constants).
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/blocked_sgemm.h"
#include "kernels/cpu/isa.h"
#include "test_util.h"

namespace onyx {
namespace {

struct Case {
  int64_t M, N, K;
};

TEST(BlockedSgemm, MatchesTheDefinitionForEveryTransposeAndEdge) {
  const Case cases[] = {{1, 1, 1},    {7, 17, 5},     {64, 64, 64},    {97, 33, 300},
                        {150, 40, 513}, {13, 3100, 20}, {300, 70, 257}};
  for (const Case& c : cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool with_bias : {false, true})
          for (int threads : {1, 2, 3}) {
            SCOPED_TRACE(fmt::format("{}x{}x{} ta {} tb {} bias {} threads {}", c.M, c.N, c.K,
                                     ta, tb, with_bias, threads));
            // Row strides 3 floats wider than the operand, so a stride mix-up reads padding.
            const int64_t lda = (ta ? c.M : c.K) + 3, ldb = (tb ? c.K : c.N) + 3, ldc = c.N + 3;
            const Tensor a = test::randn({(ta ? c.K : c.M) * lda}, 1),
                         b = test::randn({(tb ? c.N : c.K) * ldb}, 2),
                         bias = test::randn({c.N}, 3);
            std::vector<float> y(c.M * ldc, -7.0f);
            cpu::blocked_sgemm(c.M, c.N, c.K, a.data<float>(), lda, ta, b.data<float>(), ldb, tb,
                               y.data(), ldc, with_bias ? bias.data<float>() : nullptr, threads);
            const float *ap = a.data<float>(), *bp = b.data<float>();
            double worst = 0;
            for (int64_t i = 0; i < c.M; ++i) {
              for (int64_t j = 0; j < c.N; ++j) {
                double want = with_bias ? bias.data<float>()[j] : 0.0, scale = std::abs(want);
                for (int64_t k = 0; k < c.K; ++k) {
                  const double t = double(ta ? ap[k * lda + i] : ap[i * lda + k]) *
                                   (tb ? bp[j * ldb + k] : bp[k * ldb + j]);
                  want += t, scale += std::abs(t);
                }
                worst = std::max(worst, std::abs(y[i * ldc + j] - want) / std::max(1.0, scale));
              }
              for (int64_t j = c.N; j < ldc; ++j)
                ASSERT_EQ(y[i * ldc + j], -7.0f) << "padding written";
            }
            EXPECT_LE(worst, 1e-6);  // float32 sums, relative to the sum of |terms|
          }
}

TEST(BlockedSgemm, TakesOnlyTheShapesWhereOneDnnMeasuredSlower) {
  const bool avx2 = cpu::active_isa() == cpu::Isa::Avx2;
  EXPECT_EQ(cpu::blocked_sgemm_suits(512, 512, 16384), avx2);  // GPT-2's LM head input gradient
  EXPECT_EQ(cpu::blocked_sgemm_suits(512, 512, 2048), avx2);
  EXPECT_FALSE(cpu::blocked_sgemm_suits(1024, 512, 2048));  // more rows: oneDNN's
  EXPECT_FALSE(cpu::blocked_sgemm_suits(512, 512, 512));    // K not deep
  EXPECT_EQ(cpu::blocked_sgemm_suits(512, 512, 1024), avx2);  // BERT-small's weight gradients
  EXPECT_FALSE(cpu::blocked_sgemm_suits(512, 600, 1024));    // K < 2N
  EXPECT_FALSE(cpu::blocked_sgemm_suits(512, 2048, 1024));   // K < N: oneDNN's
  EXPECT_FALSE(cpu::blocked_sgemm_suits(32, 64, 4096));     // few rows: panel_gemm / oneDNN
  // The kernel test's shapes below are in range.
  EXPECT_EQ(cpu::blocked_sgemm_suits(200, 64, 1200), avx2);
  EXPECT_EQ(cpu::blocked_sgemm_suits(96, 64, 1600), avx2);
}

/// y[i, j] = sum_k a(i, k) b(k, j) (+ c[j]) in double, a and b addressed by the callers.
template <typename A, typename B>
std::vector<double> reference(int64_t M, int64_t N, int64_t K, A a, B b, const float* c) {
  std::vector<double> y(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = c ? c[j] : 0.0;
      for (int64_t k = 0; k < K; ++k) s += double(a(i, k)) * b(k, j);
      y[i * N + j] = s;
    }
  return y;
}

void expect_near_all(const Tensor& got, const std::vector<double>& want) {
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size());
  const auto g = got.to_double_vector();
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(g[i] - want[i]));
  EXPECT_LE(worst, 1e-3);  // float32 sums of 1,200-1,600 products of N(0, 1) values
}

TEST(BlockedSgemm, MatMulAndGemmKernelsGiveTheProductOnItsShapes) {
  // MatMul of a batched A by a weight fed as an input (rows 2 x 100, K 1,200, N 64), and a
  // transposed-A Gemm with a C row (the weight gradient's form: M 96, K 1,600, N 64): both in
  // blocked_sgemm's range on AVX2, oneDNN's elsewhere; the same product either way.
  {
    test::ModelBuilder b(17);
    b.input("a", DataType::Float, Shape{2, 100, 1200});
    b.input("w", DataType::Float, Shape{1200, 64});
    b.node("MatMul", {"a", "w"}, {"y"});
    b.output("y");
    const Tensor a = test::randn({2, 100, 1200}, 5), w = test::randn({1200, 64}, 6);
    const Tensor y = b.session().run({{"a", a}, {"w", w}}).at("y");
    const float *ap = a.data<float>(), *wp = w.data<float>();
    expect_near_all(
        y, reference(200, 64, 1200, [&](int64_t i, int64_t k) { return ap[i * 1200 + k]; },
                     [&](int64_t k, int64_t j) { return wp[k * 64 + j]; }, nullptr));
  }
  {
    test::ModelBuilder b(17);
    b.input("a", DataType::Float, Shape{1600, 96});
    b.input("w", DataType::Float, Shape{1600, 64});
    b.initializer("c", test::randn({64}, 7));
    Node& n = b.node("Gemm", {"a", "w", "c"}, {"y"});
    n.attrs["transA"] = test::attr_int("transA", 1);
    b.output("y");
    const Tensor a = test::randn({1600, 96}, 8), w = test::randn({1600, 64}, 9),
                 c = test::randn({64}, 7);
    const Tensor y = b.session().run({{"a", a}, {"w", w}}).at("y");
    const float *ap = a.data<float>(), *wp = w.data<float>();
    expect_near_all(
        y, reference(96, 64, 1600, [&](int64_t i, int64_t k) { return ap[k * 96 + i]; },
                     [&](int64_t k, int64_t j) { return wp[k * 64 + j]; }, c.data<float>()));
  }
}

}  // namespace
}  // namespace onyx
