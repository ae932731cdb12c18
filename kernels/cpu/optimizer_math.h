// Per-element optimizer update math shared by the fused optimizers (optimizers/) and the
// ai.onnx.preview.training op kernels (training_ops.cpp). Each function updates n contiguous
// elements; callers split work into chunks with parallel_for. Outputs may alias inputs (the
// same index is read before it is written), which is how optimizers/ updates in place.
// Scalar coefficients are precomputed once per step (in double) and passed in as T.
#pragma once

#include <cmath>
#include <cstdint>

namespace onyx::cpu {

/// SGD with momentum (PyTorch SGD with dampening 0, and ONNX Momentum):
///   g' = g + l2 * x;  v' = alpha * v + beta * g';
///   x' = x - lr * v'                 (standard)
///   x' = x - lr * (g' + alpha * v')  (nesterov)
/// With alpha = 0 and beta = 1 this is plain SGD and v' is g' (v may then be x_out's scratch).
template <typename T>
struct MomentumCoeffs {
  T lr, l2, alpha, beta;
  bool nesterov;
};

template <typename T>
inline void momentum_update(const T* x, const T* g, const T* v, T* x_out, T* v_out, int64_t n,
                            const MomentumCoeffs<T>& c) {
  const T lr = c.lr, l2 = c.l2, alpha = c.alpha, beta = c.beta;
  if (c.nesterov) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const T gr = g[i] + l2 * x[i];
      const T vn = alpha * v[i] + beta * gr;
      v_out[i] = vn;
      x_out[i] = x[i] - lr * (gr + alpha * vn);
    }
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const T gr = g[i] + l2 * x[i];
      const T vn = alpha * v[i] + beta * gr;
      v_out[i] = vn;
      x_out[i] = x[i] - lr * vn;
    }
  }
}

/// Plain SGD without momentum state: x' = x - lr * (g + l2 * x).
template <typename T>
inline void sgd_update(const T* x, const T* g, T* x_out, int64_t n, T lr, T l2) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x_out[i] = x[i] - lr * (g[i] + l2 * x[i]);
}

/// Adam family, one form covering PyTorch Adam/AdamW and ONNX Adam:
///   g' = g + l2 * x;  m' = beta1 * m + (1 - beta1) * g';  v' = beta2 * v + (1 - beta2) * g'^2;
///   x' = post * (pre * x - step * m' / (sqrt(v') * denom_scale + eps))
/// PyTorch Adam: step = lr / bc1, denom_scale = 1 / sqrt(bc2), pre = post = 1.
/// AdamW: additionally pre = 1 - lr * wd, l2 = 0. ONNX Adam: step = R * sqrt(bc2) / bc1,
/// denom_scale = 1, post = 1 - norm_coefficient_post.
template <typename T>
struct AdamCoeffs {
  T beta1, beta2, eps, l2, step, denom_scale, pre, post;
};

template <typename T>
inline void adam_update(const T* x, const T* g, const T* m, const T* v, T* x_out, T* m_out,
                        T* v_out, int64_t n, const AdamCoeffs<T>& c) {
  const T b1 = c.beta1, b2 = c.beta2, c1 = T(1) - c.beta1, c2 = T(1) - c.beta2;
  const T eps = c.eps, l2 = c.l2, step = c.step, ds = c.denom_scale, pre = c.pre, post = c.post;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const T gr = g[i] + l2 * x[i];
    const T mn = b1 * m[i] + c1 * gr;
    const T vn = b2 * v[i] + c2 * gr * gr;
    m_out[i] = mn;
    v_out[i] = vn;
    x_out[i] = post * (pre * x[i] - step * mn / (std::sqrt(vn) * ds + eps));
  }
}

/// LAMB moments (no l2; weight decay is decoupled into the direction):
///   m' = beta1 * m + (1 - beta1) * g;  v' = beta2 * v + (1 - beta2) * g^2;
///   r = m' * inv_bc1 / (sqrt(v' * inv_bc2) + eps) + wd * x
/// lamb_moments updates m, v in place and adds ||x||^2 and ||r||^2 (in double) to the sums;
/// lamb_apply then does x -= scale * r, with scale = lr * trust ratio.
template <typename T>
struct LambCoeffs {
  T beta1, beta2, eps, inv_bc1, inv_bc2, wd;
};

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
