// The float64 gemm behind MatMul, Gemm and Conv in double (what `onyx gradcheck` runs): packed
// panels and a 4 x 8 register tile. The generic blocked loop (ref_gemm.h) keeps its
// accumulators in a 16 x 256 array in L1, so every multiply-add also loads and stores one;
// here the 32 accumulators stay in eight AVX2 registers for a whole depth block and each step
// loads 8 values of B and broadcasts 4 of A for 32 multiply-adds.
#include <algorithm>
#include <vector>

#include "kernels/cpu/ref_gemm.h"

namespace onyx::cpu {
namespace {

constexpr int64_t kMR = 4, kNR = 8;          // register tile
constexpr int64_t kMC = 64, kNC = 256, kKC = 256;  // cache blocks: A 128 KiB, B 512 KiB

/// Four doubles in one AVX2 register (GCC/Clang vector extension). Written out this way the
/// compiler emits a broadcast load of A and two loads of B per step; from plain nested loops
/// GCC 12 shuffled lanes (vpermpd) and the tile ran a third slower.
using V4 = double __attribute__((vector_size(32)));

inline V4 load4(const double* p) {
  V4 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

/// C (ldc) += A panel [kk x MR] * B panel [kk x NR] (both packed k-major), for the `mr` x `nr`
/// corner of the 4 x 8 tile that exists.
inline void micro_tile(int64_t kk, const double* a, const double* b, double* C, int64_t ldc,
                       int64_t mr, int64_t nr) {
  static_assert(kMR == 4 && kNR == 8, "the tile below is written out for 4 x 8");
  V4 c00{}, c01{}, c10{}, c11{}, c20{}, c21{}, c30{}, c31{};
  for (int64_t k = 0; k < kk; ++k, a += kMR, b += kNR) {
    const V4 b0 = load4(b), b1 = load4(b + 4);
    V4 x = V4{a[0], a[0], a[0], a[0]};
    c00 += x * b0, c01 += x * b1;
    x = V4{a[1], a[1], a[1], a[1]};
    c10 += x * b0, c11 += x * b1;
    x = V4{a[2], a[2], a[2], a[2]};
    c20 += x * b0, c21 += x * b1;
    x = V4{a[3], a[3], a[3], a[3]};
    c30 += x * b0, c31 += x * b1;
  }
  double c[kMR][kNR];
  const V4 rows[kMR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}};
  __builtin_memcpy(c, rows, sizeof c);
  for (int64_t r = 0; r < mr; ++r)
    for (int64_t j = 0; j < nr; ++j) C[r * ldc + j] += c[r][j];
}

}  // namespace

void gemm_f64(int64_t M, int64_t N, int64_t K, const double* A, int64_t a_rs, int64_t a_cs,
              const double* B, int64_t b_rs, int64_t b_cs, double* C, int threads) {
  const int64_t row_blocks = (M + kMC - 1) / kMC, col_blocks = (N + kNC - 1) / kNC;
  // Tasks: one column block each, its rows split in as many groups as threads need. A task
  // packs each depth block of its B once and runs every row block of its group over it (B
  // re-read from memory per row block was a fifth of BERT's float64 forward time).
  const int64_t groups = std::min(row_blocks, std::max<int64_t>(1, (threads + col_blocks - 1) / col_blocks));
  const int64_t per_group = (row_blocks + groups - 1) / groups;
  parallel_for(col_blocks * groups, threads, 1, [&](int64_t tb, int64_t te) {
    std::vector<double> ap(static_cast<size_t>(kMC * kKC)), bp(static_cast<size_t>(kKC * kNC));
    for (int64_t t = tb; t < te; ++t) {
      const int64_t j0 = (t / groups) * kNC, nc = std::min(kNC, N - j0);
      const int64_t ib = (t % groups) * per_group, ie = std::min(row_blocks, ib + per_group);
      const int64_t n_panels = (nc + kNR - 1) / kNR;
      for (int64_t i = ib * kMC; i < std::min(M, ie * kMC); ++i)
        std::fill(C + i * N + j0, C + i * N + j0 + nc, 0.0);
      for (int64_t k0 = 0; k0 < K; k0 += kKC) {
        const int64_t kk = std::min(kKC, K - k0);
        // Pack B [kk x nc] into panels of kNR columns, k-major, zero beyond the edge; row by
        // row of B, so a row-major B streams.
        for (int64_t k = 0; k < kk; ++k)
          for (int64_t p = 0; p < n_panels; ++p) {
            double* dst = bp.data() + (p * kk + k) * kNR;
            const double* src = B + (k0 + k) * b_rs + (j0 + p * kNR) * b_cs;
            const int64_t w = std::min(kNR, nc - p * kNR);
            for (int64_t j = 0; j < w; ++j) dst[j] = src[j * b_cs];
            for (int64_t j = w; j < kNR; ++j) dst[j] = 0.0;
          }
        for (int64_t rb = ib; rb < ie; ++rb) {
          const int64_t i0 = rb * kMC, mc = std::min(kMC, M - i0);
          const int64_t m_panels = (mc + kMR - 1) / kMR;
          // Pack A [mc x kk] into panels of kMR rows, k-major.
          for (int64_t p = 0; p < m_panels; ++p) {
            const int64_t h = std::min(kMR, mc - p * kMR);
            for (int64_t k = 0; k < kk; ++k) {
              double* dst = ap.data() + (p * kk + k) * kMR;
              const double* src = A + (i0 + p * kMR) * a_rs + (k0 + k) * a_cs;
              for (int64_t r = 0; r < h; ++r) dst[r] = src[r * a_rs];
              for (int64_t r = h; r < kMR; ++r) dst[r] = 0.0;
            }
          }
          for (int64_t q = 0; q < n_panels; ++q)
            for (int64_t p = 0; p < m_panels; ++p)
              micro_tile(kk, ap.data() + p * kk * kMR, bp.data() + q * kk * kNR,
                         C + (i0 + p * kMR) * N + j0 + q * kNR, N, std::min(kMR, mc - p * kMR),
                         std::min(kNR, nc - q * kNR));
        }
      }
    }
  });
}

}  // namespace onyx::cpu
