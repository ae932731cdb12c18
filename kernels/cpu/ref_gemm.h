// Our own blocked gemm, for the types oneDNN does not multiply (double, integers): MatMul and
// Gemm (matmul.cpp) and the double convolutions (conv_gemm.cpp) run on it. Double has its own
// register-tiled kernel (gemm_f64.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "graph/dtype.h"
#include "kernels/cpu/wrap_int.h"
#include "kernels/parallel.h"

namespace onyx::cpu {

/// ref_gemm for double: packed panels and a register tile (gemm_f64.cpp).
void gemm_f64(int64_t M, int64_t N, int64_t K, const double* A, int64_t a_rs, int64_t a_cs,
              const double* B, int64_t b_rs, int64_t b_cs, double* C, int threads);

/// C[M,N] = A[M,K] * B[K,N], A and B read through (row, column) strides, C contiguous.
/// Tiles of rows x columns x depth keep B's tile in cache; accumulates in acc_t<T>.
template <typename T>
void ref_gemm(int64_t M, int64_t N, int64_t K, const T* A, int64_t a_rs, int64_t a_cs, const T* B,
              int64_t b_rs, int64_t b_cs, T* C, int threads) {
  if constexpr (std::is_same_v<T, double>) {
    gemm_f64(M, N, K, A, a_rs, a_cs, B, b_rs, b_cs, C, threads);
    return;
  }
  // Signed integers accumulate in their unsigned twin: products and sums wrap around (as
  // numpy's and ONNX Runtime's int matmuls do) instead of overflowing, which is undefined; the
  // final conversion back is modular.
  using Acc = typename wrapping_acc<acc_t<T>>::type;
  constexpr int64_t kRows = 16, kCols = 256, kDepth = 256;
  int64_t row_blocks = (M + kRows - 1) / kRows, col_blocks = (N + kCols - 1) / kCols;
  parallel_for(row_blocks * col_blocks, threads, 1, [&](int64_t tb, int64_t te) {
    Acc acc[kRows * kCols];
    Acc brow[kCols];
    for (int64_t t = tb; t < te; ++t) {
      int64_t i0 = (t / col_blocks) * kRows, j0 = (t % col_blocks) * kCols;
      int64_t mi = std::min(kRows, M - i0), nj = std::min(kCols, N - j0);
      std::fill(acc, acc + kRows * kCols, Acc(0));
      for (int64_t k0 = 0; k0 < K; k0 += kDepth) {
        int64_t kk = std::min(kDepth, K - k0);
        for (int64_t k = k0; k < k0 + kk; ++k) {
          const T* b = B + k * b_rs + j0 * b_cs;
          // A contiguous row of B in the accumulation type is read in place: copying it for
          // every k cost a fifth of a float64 BERT forward pass (in memcpy).
          const Acc* row = brow;
          if constexpr (std::is_same_v<T, Acc>) {
            if (b_cs == 1) row = b;
          }
          if (row == brow)
            for (int64_t j = 0; j < nj; ++j) brow[j] = static_cast<Acc>(b[j * b_cs]);
          for (int64_t i = 0; i < mi; ++i) {
            Acc a = static_cast<Acc>(A[(i0 + i) * a_rs + k * a_cs]);
            Acc* c = acc + i * kCols;
            for (int64_t j = 0; j < nj; ++j) c[j] += a * row[j];
          }
        }
      }
      for (int64_t i = 0; i < mi; ++i)
        for (int64_t j = 0; j < nj; ++j)
          C[(i0 + i) * N + j0 + j] = static_cast<T>(acc[i * kCols + j]);
    }
  });
}

}  // namespace onyx::cpu
