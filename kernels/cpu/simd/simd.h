// The hot float32 loops that we vectorise ourselves, as one table of functions per ISA
// (kernels/cpu/isa.h). simd_body.inc holds the loops once; simd_avx2.cpp and
// simd_avx512.cpp compile it with their own -march into their own namespace, so no inline
// function compiled for AVX-512 can be picked by the linker for code that runs on an AVX2
// host. Callers ask simd() for the table of the active ISA, once per kernel call.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/optimizer_coeffs.h"

namespace onyx::cpu {

/// Elementwise float maps with a SIMD variant (the polynomial exp/tanh/erf of vmath).
enum class UnaryF32 { Exp, Tanh, Erf, Sigmoid, GeluErf, GeluTanh };

struct SimdTable {
  Isa isa;
  /// y[i] = op(x[i]), i < n (y may alias x).
  void (*unary)(UnaryF32 op, const float* x, float* y, int64_t n);
  /// dx[i] = dy[i] * gelu'(x[i]) for the erf form: Phi(x) + x phi(x) (dx may alias dy).
  void (*gelu_grad)(const float* dy, const float* x, float* dx, int64_t n);
  /// The same for the tanh form (GPT-2's gelu_new), t = tanh(k (x + c x^3)), k = sqrt(2/pi),
  /// c = 0.044715: 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2).
  void (*gelu_tanh_grad)(const float* dy, const float* x, float* dx, int64_t n);
  /// out[i] = exp(x[i] - m[i]) when per_elem, else exp(x[i] - m[0]); returns the sum of out.
  float (*exp_minus)(const float* x, const float* m, bool per_elem, float* out, int64_t n);
  /// Maximum of x[0..n) (-inf when n = 0; NaNs are skipped).
  float (*row_max)(const float* x, int64_t n);
  /// y = softmax(x) over n contiguous floats (y may alias x).
  void (*softmax_row)(const float* x, float* y, int64_t n);
  /// y = softmax(x + m) over n contiguous floats, m a row of n when m_row, else m[0] added to
  /// each (y may alias x, not m): the same bits as the sum then softmax_row.
  void (*add_softmax_row)(const float* x, const float* m, bool m_row, float* y, int64_t n);
  /// Columns [j0, j1) of y[N] = x[K] * B, B [K, N] (or [N, K] when trans_b).
  void (*gemv_cols)(int64_t K, int64_t N, const float* x, const float* B, bool trans_b,
                    float* y, int64_t j0, int64_t j1);
  /// Panels [p0, p1) of C [M, N] (row stride ldc) = A [M, K] (row stride lda) x B, with B
  /// packed by pack_panels (panel_gemm.h) for this table's lanes; then + bias[j] (when given)
  /// and Relu (when `relu`), after the whole sum. Each element is one multiply-add chain in k
  /// order.
  void (*panel_gemm)(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                     const float* Bp, int64_t p0, int64_t p1, float* C, int64_t ldc,
                     const float* bias, bool relu);
  /// The optimizer updates of optimizer_math.h over n contiguous elements.
  void (*momentum)(const float* x, const float* g, const float* v, float* x_out, float* v_out,
                   int64_t n, const MomentumCoeffs<float>& c);
  void (*sgd)(const float* x, const float* g, float* x_out, int64_t n, float lr, float l2);
  void (*adam)(const float* x, const float* g, const float* m, const float* v, float* x_out,
               float* m_out, float* v_out, int64_t n, const AdamCoeffs<float>& c);
};

/// The table of the active ISA (active_isa()).
const SimdTable& simd();

/// The table compiled for `isa` (the widest variant at or below it): tests compare them.
const SimdTable& simd_for(Isa isa);

namespace avx2 {
extern const SimdTable kTable;
}
namespace avx512 {
extern const SimdTable kTable;
}

}  // namespace onyx::cpu
