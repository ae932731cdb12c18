#include "kernels/cpu/blocked_sgemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

constexpr int64_t kMR = 6, kNR = 16;  // register tile: 6 x 2 accumulators + 2 of B + 1 of A
constexpr int64_t kKC = 256;          // depth of a block: a 16-column B panel is 16 KB (L1)
constexpr int64_t kMCMax = 144;       // rows of an A block: 144 KB (L2)
constexpr int64_t kNC = 3072;         // columns of a B block: 3 MB (L3)

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// B [kc x nc] from (pc, jc) into panels of kNR columns ([panel][k][16], zero past nc).
void pack_b(const float* B, int64_t ldb, bool tb, int64_t pc, int64_t jc, int64_t kc,
            int64_t nc, float* out, int threads) {
  const int64_t panels = ceil_div(nc, kNR);
  parallel_for(panels, threads, 4, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t j0 = jc + p * kNR, cols = std::min(kNR, nc - p * kNR);
      float* dst = out + p * kc * kNR;
      for (int64_t k = 0; k < kc; ++k) {
        float* row = dst + k * kNR;
        if (tb) {
          for (int64_t j = 0; j < cols; ++j) row[j] = B[(j0 + j) * ldb + pc + k];
        } else {
          std::memcpy(row, B + (pc + k) * ldb + j0, static_cast<size_t>(cols) * sizeof(float));
        }
        for (int64_t j = cols; j < kNR; ++j) row[j] = 0.0f;
      }
    }
  });
}

/// A [mc x kc] from (ic, pc) into panels of kMR rows ([panel][k][6], zero past mc).
void pack_a(const float* A, int64_t lda, bool ta, int64_t ic, int64_t pc, int64_t mc, int64_t kc,
            float* out) {
  for (int64_t p = 0; p < ceil_div(mc, kMR); ++p) {
    const int64_t i0 = ic + p * kMR, rows = std::min(kMR, mc - p * kMR);
    float* dst = out + p * kc * kMR;
    for (int64_t k = 0; k < kc; ++k) {
      float* col = dst + k * kMR;
      if (ta) {
        std::memcpy(col, A + (pc + k) * lda + i0, static_cast<size_t>(rows) * sizeof(float));
      } else {
        for (int64_t r = 0; r < rows; ++r) col[r] = A[(i0 + r) * lda + pc + k];
      }
      for (int64_t r = rows; r < kMR; ++r) col[r] = 0.0f;
    }
  }
}

/// C[0..rows, 0..cols] (+)= the kc-deep product of one A panel by one B panel; the first block
/// of K writes (adding `bias` when given), the later ones accumulate.
void tile(int64_t kc, const float* ap, const float* bp, float* C, int64_t ldc, int64_t rows,
          int64_t cols, bool first, const float* bias) {
  // Every loop over the tile's rows is unrolled, so the 12 accumulators stay in registers (with
  // one rolled loop GCC keeps them on the stack and stores all 12 every k step: 3x slower).
  __m256 acc[kMR][2];
#pragma GCC unroll 6
  for (int r = 0; r < kMR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(bp + k * kNR), b1 = _mm256_load_ps(bp + k * kNR + 8);
#pragma GCC unroll 6
    for (int r = 0; r < kMR; ++r) {
      const __m256 a = _mm256_broadcast_ss(ap + k * kMR + r);
      acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
    }
  }
  if (rows == kMR && cols == kNR) {
    __m256 add0 = _mm256_setzero_ps(), add1 = _mm256_setzero_ps();
    if (first && bias) add0 = _mm256_loadu_ps(bias), add1 = _mm256_loadu_ps(bias + 8);
#pragma GCC unroll 6
    for (int r = 0; r < kMR; ++r) {
      float* c = C + r * ldc;
      const __m256 base0 = first ? add0 : _mm256_loadu_ps(c),
                   base1 = first ? add1 : _mm256_loadu_ps(c + 8);
      _mm256_storeu_ps(c, _mm256_add_ps(base0, acc[r][0]));
      _mm256_storeu_ps(c + 8, _mm256_add_ps(base1, acc[r][1]));
    }
    return;
  }
  alignas(32) float out[kMR][kNR];
#pragma GCC unroll 6
  for (int r = 0; r < kMR; ++r) {
    _mm256_store_ps(out[r], acc[r][0]);
    _mm256_store_ps(out[r] + 8, acc[r][1]);
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      float& c = C[r * ldc + j];
      c = (first ? (bias ? bias[j] : 0.0f) : c) + out[r][j];
    }
}

/// Scratch that lives as long as its thread: the blocks are the same size every call, so a
/// training step's products reuse the pages instead of faulting fresh ones in.
float* thread_buffer(std::vector<float>& v, int64_t floats) {
  if (v.size() < static_cast<size_t>(floats + 8)) v.resize(floats + 8);
  // 32-byte aligned for the tile's aligned loads.
  const auto at = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<float*>((at + 31) & ~uintptr_t{31});
}

}  // namespace

bool blocked_sgemm_suits(int64_t M, int64_t N, int64_t K) {
  if (active_isa() != Isa::Avx2) return false;
  // Where oneDNN 2.6's gemm:jit measured weak (2 threads, AVX2 EPYC, inside training steps): up
  // to 512 rows by a deep K - [512, 16384] x [16384, 512] 117 GFLOP/s against 142 here, [512,
  // 2048] x [2048, 512] 114 / 150, [512, 1536] x [1536, 512] 116 / 151. At 1,024 rows oneDNN
  // reached 158-170 (BERT-small) against 146-156 here, and with K <= N the two were level.
  // BERT-small's weight gradients [1024, 512]^T x [1024, 512] (K = 2N): oneDNN 117, here 152;
  // its [1024, 512]^T x [1024, 2048] (K = N / 2): oneDNN 178, here 154.
  return M >= 64 && M <= 512 && N >= 64 && K >= 1024 && K >= 2 * N;
}

void blocked_sgemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta,
                   const float* B, int64_t ldb, bool tb, float* C, int64_t ldc,
                   const float* bias, int threads) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = bias ? bias[j] : 0.0f;
    return;
  }
  threads = std::max(1, threads);
  // A blocks of equal height, as many as threads (or a multiple), each at most kMCMax rows.
  const int64_t mblocks = ceil_div(ceil_div(M, kMCMax), threads) * threads;
  const int64_t mc = std::min(kMCMax, ceil_div(ceil_div(M, mblocks), kMR) * kMR);
  const int64_t nblocks_m = ceil_div(M, mc);
  static thread_local std::vector<float> b_store;
  float* bp = thread_buffer(b_store, kKC * ceil_div(std::min(kNC, N), kNR) * kNR);
  for (int64_t jc = 0; jc < N; jc += kNC) {
    const int64_t nc = std::min(kNC, N - jc);
    for (int64_t pc = 0; pc < K; pc += kKC) {
      const int64_t kc = std::min(kKC, K - pc);
      const bool first = pc == 0;
      pack_b(B, ldb, tb, pc, jc, kc, nc, bp, threads);
      parallel_for(nblocks_m, threads, 1, [&](int64_t b0, int64_t b1) {
        static thread_local std::vector<float> a_store;
        float* ap = thread_buffer(a_store, kMCMax * kKC);
        for (int64_t blk = b0; blk < b1; ++blk) {
          const int64_t ic = blk * mc, rows_c = std::min(mc, M - ic);
          pack_a(A, lda, ta, ic, pc, rows_c, kc, ap);
          for (int64_t jr = 0; jr < nc; jr += kNR) {
            const int64_t cols = std::min(kNR, nc - jr);
            const float* bpanel = bp + (jr / kNR) * kc * kNR;
            const float* bias_j = bias ? bias + jc + jr : nullptr;
            for (int64_t ir = 0; ir < rows_c; ir += kMR)
              tile(kc, ap + (ir / kMR) * kc * kMR, bpanel, C + (ic + ir) * ldc + jc + jr, ldc,
                   std::min(kMR, rows_c - ir), cols, first, bias_j);
          }
        }
      });
    }
  }
}

}  // namespace onyx::cpu
