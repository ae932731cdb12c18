// Coefficients of the fused optimizer updates (optimizer_math.h), precomputed once per step
// in double and passed in as T. Kept apart from the loops so the per-ISA SIMD table
// (simd/simd.h) can name them.
#pragma once

namespace onyx::cpu {

template <typename T>
struct MomentumCoeffs {
  T lr, l2, alpha, beta;
  bool nesterov;
};

template <typename T>
struct AdamCoeffs {
  T beta1, beta2, eps, l2, step, denom_scale, pre, post;
};

template <typename T>
struct LambCoeffs {
  T beta1, beta2, eps, inv_bc1, inv_bc2, wd;
};

}  // namespace onyx::cpu
