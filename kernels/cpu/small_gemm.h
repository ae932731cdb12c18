// Row-major GEMM for kernels that multiply many small matrices in loops (Attention, RNN,
// GRU, LSTM, Einsum, SoftmaxAttentionGrad): float goes through oneDNN's sgemm (or, where it is
// unavailable, a loop nest), double through a loop nest that vectorises.
#pragma once

#include <cstdint>

namespace onyx::cpu {

/// Row-major C[M, N] = op(A) op(B) + beta C, op(X) = X or, with ta / tb, X^T (A stored [K, M],
/// B stored [N, K]); with beta == 0 C is only written. On the calling thread's OpenMP budget
/// (one thread inside a parallel region). oneDNN's sgemm, unless it answers "unimplemented":
/// in a process that also loaded PyTorch, libtorch_cpu's own oneDNN exports the one-time JIT
/// set-up of sgemm's kernels under the same names and the dynamic linker binds the system
/// oneDNN's to it (status 3). keep_onednn_gemm_setup_per_library (dnnl_symbols.h) undoes that
/// binding before oneDNN's first use; where it could not, the process multiplies with
/// sgemm_loops from then on. Other failures are onyx::Errors naming `who`.
void sgemm(const char* who, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

/// The loop nest sgemm falls back to (exposed for its tests): the same contract.
void sgemm_loops(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

/// C[M,N] = A[M,K] * op(B) + beta * C, row-major with leading dimensions lda/ldb/ldc.
/// op(B) is B ([K,N]) or, with trans_b, B^T (B stored [N,K]). With beta == 0, C is only
/// written. Uses the calling thread's OpenMP budget (one thread inside a parallel region).
inline void gemm(bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  sgemm("gemm", false, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
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
