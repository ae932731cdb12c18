// Per-element optimizer update math shared by the CPU optimizer kernels (optimizer_kernels.cpp,
// which run the fused optimizers of optimizers/ through kernels/optimizer_kernels.h) and the
// ai.onnx.preview.training op kernels (training_ops.cpp). Each function updates n contiguous
// elements; callers split work into chunks with parallel_for. Outputs may alias inputs (the
// same index is read before it is written), which is how the fused optimizers update in place.
// Scalar coefficients are precomputed once per step (in double) and passed in as T.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/optimizer_coeffs.h"
#include "kernels/cpu/simd/simd.h"

namespace onyx::cpu {

namespace scalar {
#include "kernels/cpu/optimizer_math_body.inc"
}  // namespace scalar

// float32 updates run the active ISA's SIMD table; other types the scalar loops.
template <typename T>
inline void momentum_update(const T* x, const T* g, const T* v, T* x_out, T* v_out, int64_t n,
                            const MomentumCoeffs<T>& c) {
  if constexpr (std::is_same_v<T, float>)
    simd().momentum(x, g, v, x_out, v_out, n, c);
  else
    scalar::momentum_update(x, g, v, x_out, v_out, n, c);
}

template <typename T>
inline void sgd_update(const T* x, const T* g, T* x_out, int64_t n, T lr, T l2) {
  if constexpr (std::is_same_v<T, float>)
    simd().sgd(x, g, x_out, n, lr, l2);
  else
    scalar::sgd_update(x, g, x_out, n, lr, l2);
}

template <typename T>
inline void adam_update(const T* x, const T* g, const T* m, const T* v, T* x_out, T* m_out,
                        T* v_out, int64_t n, const AdamCoeffs<T>& c) {
  if constexpr (std::is_same_v<T, float>)
    simd().adam(x, g, m, v, x_out, m_out, v_out, n, c);
  else
    scalar::adam_update(x, g, m, v, x_out, m_out, v_out, n, c);
}

/// LAMB moments (no l2; weight decay is decoupled into the direction):
///   m' = beta1 * m + (1 - beta1) * g;  v' = beta2 * v + (1 - beta2) * g^2;
///   r = m' * inv_bc1 / (sqrt(v' * inv_bc2) + eps) + wd * x
/// lamb_moments updates m, v in place and adds ||x||^2 and ||r||^2 (in double) to the sums;
/// lamb_apply then does x -= scale * r, with scale = lr * trust ratio.
template <typename T>
inline T lamb_direction(T x, T m, T v, const LambCoeffs<T>& c) {
  return m * c.inv_bc1 / (std::sqrt(v * c.inv_bc2) + c.eps) + c.wd * x;
}

template <typename T>
inline void lamb_moments(const T* x, const T* g, T* m, T* v, int64_t n, const LambCoeffs<T>& c,
                         double& x_sq, double& r_sq) {
  const T b1 = c.beta1, b2 = c.beta2, c1 = T(1) - c.beta1, c2 = T(1) - c.beta2;
  double xs = 0, rs = 0;
#pragma omp simd reduction(+ : xs, rs)
  for (int64_t i = 0; i < n; ++i) {
    const T mn = b1 * m[i] + c1 * g[i];
    const T vn = b2 * v[i] + c2 * g[i] * g[i];
    m[i] = mn;
    v[i] = vn;
    const double r = static_cast<double>(lamb_direction(x[i], mn, vn, c));
    const double xd = static_cast<double>(x[i]);
    xs += xd * xd;
    rs += r * r;
  }
  x_sq += xs;
  r_sq += rs;
}

template <typename T>
inline void lamb_apply(T* x, const T* m, const T* v, int64_t n, const LambCoeffs<T>& c, T scale) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] -= scale * lamb_direction(x[i], m[i], v[i], c);
}

/// ONNX Adagrad: g' = g + l2 * x;  h' = h + g'^2;  x' = x - lr * g' / (sqrt(h') + eps),
/// with lr already divided by (1 + T * decay_factor).
template <typename T>
inline void adagrad_update(const T* x, const T* g, const T* h, T* x_out, T* h_out, int64_t n, T lr,
                           T l2, T eps) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const T gr = g[i] + l2 * x[i];
    const T hn = h[i] + gr * gr;
    h_out[i] = hn;
    x_out[i] = x[i] - lr * gr / (std::sqrt(hn) + eps);
  }
}

/// Sum of squares in double (for global gradient norms).
template <typename T>
inline double sum_squares(const T* g, int64_t n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  return s;
}

/// True when all n values are finite: x * 0 is 0 for finite x and NaN for inf or NaN.
template <typename T>
inline bool all_finite(const T* g, int64_t n) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += g[i] * T(0);
  return s == T(0);
}

/// g *= s.
template <typename T>
inline void scale_in_place(T* g, int64_t n, T s) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) g[i] *= s;
}

/// acc += g (gradient accumulation over micro-batches).
template <typename T>
inline void accumulate(T* acc, const T* g, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) acc[i] += g[i];
}

}  // namespace onyx::cpu
