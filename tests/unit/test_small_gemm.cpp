// The small-matrix GEMM of Attention, the RNNs, Einsum and SoftmaxAttentionGrad
// (kernels/cpu/small_gemm.h): oneDNN's sgemm and the loop nest it falls back to in a process
// where PyTorch's own oneDNN took sgemm's set-up (the interop tests run that case through
// whole models) against float64 sums, for every orientation, strided leading dimensions, beta
// 0 and 1 and empty sums.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/small_gemm.h"

namespace onyx {
namespace {

std::vector<float> uniform(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

TEST(SmallGemm, BothPathsMatchTheDefinitionInEveryOrientation) {
  struct Dims {
    int64_t M, N, K;
  };
  for (const Dims d : {Dims{1, 1, 1}, Dims{5, 7, 3}, Dims{17, 33, 65}, Dims{64, 128, 128}, Dims{3, 4, 0}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (float beta : {0.f, 1.f}) {
          // Leading dimensions wider than the rows (strided views, as the head Transposes give).
          const int64_t lda = (ta ? d.M : d.K) + 3, ldb = (tb ? d.K : d.N) + 2, ldc = d.N + 5;
          const auto A = uniform(static_cast<size_t>((ta ? d.K : d.M) * lda) + 1, 1);
          const auto B = uniform(static_cast<size_t>((tb ? d.N : d.K) * ldb) + 1, 2);
          const auto C0 = uniform(static_cast<size_t>(d.M * ldc), 3);
          auto a = [&](int64_t i, int64_t k) { return double(ta ? A[k * lda + i] : A[i * lda + k]); };
          auto b = [&](int64_t k, int64_t j) { return double(tb ? B[j * ldb + k] : B[k * ldb + j]); };
          std::vector<float> fast = C0, loops = C0;
          cpu::sgemm("test", ta, tb, d.M, d.N, d.K, A.data(), lda, B.data(), ldb, beta, fast.data(), ldc);
          cpu::sgemm_loops(ta, tb, d.M, d.N, d.K, A.data(), lda, B.data(), ldb, beta, loops.data(), ldc);
          const std::string what = "M=" + std::to_string(d.M) + " N=" + std::to_string(d.N) +
                                   " K=" + std::to_string(d.K) + " ta=" + std::to_string(ta) +
                                   " tb=" + std::to_string(tb) + " beta=" + std::to_string(beta);
          for (int64_t i = 0; i < d.M; ++i)
            for (int64_t j = 0; j < ldc; ++j) {
              const size_t at = static_cast<size_t>(i * ldc + j);
              if (j >= d.N) {  // past the row: untouched
                EXPECT_EQ(fast[at], C0[at]) << what;
                EXPECT_EQ(loops[at], C0[at]) << what;
                continue;
              }
              double want = beta * double(C0[at]);
              for (int64_t k = 0; k < d.K; ++k) want += a(i, k) * b(k, j);
              const double tol = 1e-5 * (1.0 + std::sqrt(double(d.K)));
              EXPECT_NEAR(fast[at], want, tol) << what << " at " << i << "," << j;
              EXPECT_NEAR(loops[at], want, tol) << what << " at " << i << "," << j;
            }
        }
}

}  // namespace
}  // namespace onyx
