// A float32 product of two activations (training's products: weights change every step, so
// nothing is packed ahead) blocked for the caches, on a 6 x 16 AVX2 register tile: B packed in
// KC x NC blocks (L3), A in MC x KC blocks (L2), one 16-column panel of B (L1) per tile.
// oneDNN 2.6's jit sgemm (gemm:jit, what its matmul runs on AVX2) reached 110-117 GFLOP/s at 2
// threads on GPT-2-style training's [512, 16384] x [16384, 512], [512, 2048] x [2048, 512] and
// [512, 512] x [512, 512] on an AVX2 EPYC, where PyTorch's MKL reached 135-160 (bench/README.md).
#pragma once

#include <cstdint>

namespace onyx::cpu {

/// Whether blocked_sgemm runs an M x N x K product here: the active ISA is AVX2 (where it was
/// measured against oneDNN) and the shape is one where oneDNN's was measured slower (at most 512
/// rows, K at least 1,024 and three times N: a training step's input gradients of wide layers).
bool blocked_sgemm_suits(int64_t M, int64_t N, int64_t K);

/// C [M, N] (row stride ldc) = op(A) [M, K] x op(B) [K, N] (+ bias[j] when bias is not null),
/// where op(A)(i, k) = ta ? A[k * lda + i] : A[i * lda + k] and op(B)(k, j) = tb ? B[j * ldb + k]
/// : B[k * ldb + j]; on at most `threads` threads.
void blocked_sgemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta,
                   const float* B, int64_t ldb, bool tb, float* C, int64_t ldc,
                   const float* bias, int threads);

}  // namespace onyx::cpu
