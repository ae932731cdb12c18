// Row-major GEMM for kernels that multiply many small matrices in loops (Attention, RNN,
// GRU, LSTM): float goes through oneDNN's sgemm, double through a loop nest that vectorises.
#pragma once

#include <oneapi/dnnl/dnnl.h>

#include <cstdint>

#include "graph/error.h"

namespace onyx::cpu {

/// C[M,N] = A[M,K] * op(B) + beta * C, row-major with leading dimensions lda/ldb/ldc.
/// op(B) is B ([K,N]) or, with trans_b, B^T (B stored [N,K]). With beta == 0, C is only
/// written. Uses the calling thread's OpenMP budget (one thread inside a parallel region).
inline void gemm(bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.f ? 0.f : beta * C[i * ldc + j];
    return;
  }
  const dnnl_status_t st =
      dnnl_sgemm('N', trans_b ? 'T' : 'N', M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc);
  ONYX_CHECK(st == dnnl_success, "[gemm] oneDNN sgemm failed with status {} (M={} N={} K={})",
             static_cast<int>(st), M, N, K);
}

inline void gemm(bool trans_b, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda,
                 const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    double* c = C + i * ldc;
    const double* a = A + i * lda;
    for (int64_t j = 0; j < N; ++j) c[j] = beta == 0.0 ? 0.0 : beta * c[j];
    if (trans_b) {
      for (int64_t j = 0; j < N; ++j) {
        const double* b = B + j * ldb;
        double s = 0.0;
        for (int64_t k = 0; k < K; ++k) s += a[k] * b[k];
        c[j] += s;
      }
    } else {
      for (int64_t k = 0; k < K; ++k) {
        const double av = a[k];
        const double* b = B + k * ldb;
        for (int64_t j = 0; j < N; ++j) c[j] += av * b[j];
      }
    }
  }
}

}  // namespace onyx::cpu
