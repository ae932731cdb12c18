#include "kernels/cpu/small_gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include <atomic>

#include "graph/error.h"

namespace onyx::cpu {
namespace {

// Set once dnnl_sgemm has answered "unimplemented" in this process (see small_gemm.h).
std::atomic<bool> sgemm_unavailable{false};

}  // namespace

void sgemm_loops(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  auto a = [&](int64_t i, int64_t k) { return ta ? A[k * lda + i] : A[i * lda + k]; };
  for (int64_t i = 0; i < M; ++i) {
    float* c = C + i * ldc;
    if (beta == 0.f) {
      for (int64_t j = 0; j < N; ++j) c[j] = 0.f;
    } else {
      for (int64_t j = 0; j < N; ++j) c[j] *= beta;
    }
    if (!tb) {  // rows of B are contiguous: axpy over them
      for (int64_t k = 0; k < K; ++k) {
        const float av = a(i, k);
        const float* b = B + k * ldb;
#pragma omp simd
        for (int64_t j = 0; j < N; ++j) c[j] += av * b[j];
      }
    } else {  // B^T: column j of op(B) is row j of B, a dot product with A's row
      for (int64_t j = 0; j < N; ++j) {
        const float* b = B + j * ldb;
        float sum = 0.f;
        if (!ta) {
          const float* ar = A + i * lda;
#pragma omp simd reduction(+ : sum)
          for (int64_t k = 0; k < K; ++k) sum += ar[k] * b[k];
        } else {
          for (int64_t k = 0; k < K; ++k) sum += A[k * lda + i] * b[k];
        }
        c[j] += sum;
      }
    }
  }
}

void sgemm(const char* who, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // an empty sum
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.f ? 0.f : beta * C[i * ldc + j];
    return;
  }
  if (!sgemm_unavailable.load(std::memory_order_relaxed)) {
    const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.f, A, lda, B,
                                        ldb, beta, C, ldc);
    if (st == dnnl_success) return;
    ONYX_CHECK(st == dnnl_unimplemented, "[{}] oneDNN sgemm failed with status {} (M={} N={} K={})",
               who, static_cast<int>(st), M, N, K);
    sgemm_unavailable.store(true, std::memory_order_relaxed);
  }
  sgemm_loops(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace onyx::cpu
