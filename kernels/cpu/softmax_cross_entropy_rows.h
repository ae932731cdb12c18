// The per-row pieces of softmax cross-entropy that three CPU kernels share, so each computes the
// same bits: SoftmaxCrossEntropyLoss (loss.cpp: log-softmax rows, then the loss), ai.onyx
// SoftmaxCrossEntropyGrad (softmax_cross_entropy_grad.cpp: the scores' gradient from the
// log-probabilities) and ai.onyx SoftmaxCrossEntropyLossGrad (softmax_cross_entropy_loss_grad.cpp:
// both in one pass over the scores, the log-probabilities never written out).
//
// Scores are [N, C, D...] flattened to [N, C, D]: row (n, d) holds the C classes D apart.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>

#include <string>
#include <vector>

#include "graph/error.h"
#include "kernels/cpu/simd/simd.h"
#include "kernels/cpu/vmath.h"
#include "kernels/kernel.h"

namespace onyx::cpu::sce {

/// lp[row] = log-softmax of src[row] over the C classes of row (n, d), `base` = n * C * D + d.
/// `exps`: C values of scratch when src and lp are one buffer and D == 1 (the float row path
/// keeps exp(x - m) there for its sum), else null: the sum's exponentials go to lp's row first.
template <typename A>
inline void log_softmax_row(const A* src, A* lp, int64_t C, int64_t D, int64_t base, A* exps) {
  if constexpr (std::is_same_v<A, float>) {
    if (D == 1) {  // classes contiguous: the vectorised row loops
      const float* row = src + base;
      float* out = lp + base;
      const float m = simd().row_max(row, C);
      const float s = simd().exp_minus(row, &m, false, exps ? exps : out, C);
      const float shift = m + std::log(s);
      for (int64_t c = 0; c < C; ++c) out[c] = row[c] - shift;
      return;
    }
  }
  A m = -std::numeric_limits<A>::infinity();
  for (int64_t c = 0; c < C; ++c) m = std::max(m, src[base + c * D]);
  A s = A(0);
  for (int64_t c = 0; c < C; ++c) s += std::exp(src[base + c * D] - m);
  const A shift = m + std::log(s);
  for (int64_t c = 0; c < C; ++c) lp[base + c * D] = src[base + c * D] - shift;
}

/// One sample's [C, D] block of the scores' gradient: y = (exp(x) - onehot(labels)) * coef, x the
/// log-probabilities (y may be x itself), `labels` the sample's D labels (one outside [0, C)
/// marks no class), `coef` one value (`scalar`) or the sample's D values.
template <typename T>
inline void grad_block(const T* x, T* y, const int64_t* labels, const T* coef, bool scalar,
                       int64_t C, int64_t D) {
  if constexpr (std::is_same_v<T, float>)
    simd().unary(UnaryF32::Exp, x, y, C * D);  // the Exp kernel's
  else
    for (int64_t i = 0; i < C * D; ++i) y[i] = vexp(x[i]);
  for (int64_t d = 0; d < D; ++d) {
    const int64_t c = labels[d];
    if (c >= 0 && c < C) y[c * D + d] = y[c * D + d] - T(1);
  }
  if (scalar) {
    const T k = coef[0];
    for (int64_t i = 0; i < C * D; ++i) y[i] = y[i] * k;
  } else {
    for (int64_t c = 0; c < C; ++c)
      for (int64_t d = 0; d < D; ++d) y[c * D + d] = y[c * D + d] * coef[d];
  }
}

enum class Reduction { None, Sum, Mean };

/// SoftmaxCrossEntropyLoss's (and NegativeLogLikelihoodLoss's) attributes; onyx::Error for a
/// reduction other than none, sum or mean.
struct LossAttrs {
  Reduction reduction = Reduction::Mean;
  bool has_ignore = false;
  int64_t ignore = 0;

  explicit LossAttrs(const KernelInfo& info) {
    const std::string red = info.node.attr_string("reduction", "mean");
    if (red == "none")
      reduction = Reduction::None;
    else if (red == "sum")
      reduction = Reduction::Sum;
    else if (red == "mean")
      reduction = Reduction::Mean;
    else
      ONYX_THROW("[{}] reduction should be none, sum or mean but is '{}'", info.label(), red);
    has_ignore = info.node.has_attr("ignore_index");
    ignore = info.node.attr_int("ignore_index", 0);
  }
};

/// The targets of scores `x` [N, C, d...] as int64, after checking them ([N, d...], int32 or
/// int64, each in [0, C) or ignore_index) and the optional class weights ([C], x's dtype):
/// onyx::Error naming `who` and what was found.
inline std::vector<int64_t> checked_targets(const std::string& who, const Tensor& x,
                                            const Tensor& target, const Tensor* weight,
                                            const LossAttrs& a) {
  ONYX_CHECK(x.rank() >= 2, "[{}] input should be [N, C, ...] but is {}", who,
             shape_str(x.shape()));
  const int64_t N = x.dim(0), C = x.dim(1);
  Shape want_t{N};
  want_t.insert(want_t.end(), x.shape().begin() + 2, x.shape().end());
  ONYX_CHECK(target.shape() == want_t, "[{}] target should have shape {} but has {}", who,
             shape_str(want_t), shape_str(target.shape()));
  ONYX_CHECK(target.dtype() == DataType::Int32 || target.dtype() == DataType::Int64,
             "[{}] target should be int32 or int64 but is {}", who, dtype_name(target.dtype()));
  if (weight)
    ONYX_CHECK(weight->dtype() == x.dtype() && weight->shape() == Shape({C}),
               "[{}] weight should be {} [{}] but is {} {}", who, dtype_name(x.dtype()), C,
               dtype_name(weight->dtype()), shape_str(weight->shape()));
  std::vector<int64_t> t = target.to_int64_vector();
  for (int64_t v : t)
    ONYX_CHECK((a.has_ignore && v == a.ignore) || (v >= 0 && v < C),
               "[{}] target value {} is outside [0, {}) and is not ignore_index", who, v, C);
  return t;
}

/// The loss from each position's log-probability of its target, `logp(idx)` reading the one at
/// flat index idx of [N, C, D]: -weight[t] * logp, a target equal to `ignore` (when `has_ignore`)
/// counting as weight 0; `out` gets the N * D values (None) or their sum, or their sum divided by
/// the sum of weights (Mean), accumulated in double in (n, d) order.
template <typename T, typename LogP>
inline void reduce_loss(std::span<const int64_t> targets, int64_t N, int64_t C, int64_t D,
                        const T* weight, bool has_ignore, int64_t ignore, Reduction reduction,
                        LogP logp, T* out) {
  double total = 0, wsum = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) {
      const int64_t tv = targets[static_cast<size_t>(n * D + d)];
      double l = 0, wt = 0;
      if (!(has_ignore && tv == ignore)) {
        const int64_t idx = (n * C + tv) * D + d;
        wt = weight ? static_cast<double>(weight[tv]) : 1.0;
        l = -wt * static_cast<double>(logp(idx));
      }
      if (reduction == Reduction::None) out[n * D + d] = static_cast<T>(l);
      total += l, wsum += wt;
    }
  if (reduction == Reduction::Sum) out[0] = static_cast<T>(total);
  if (reduction == Reduction::Mean) out[0] = static_cast<T>(total / wsum);
}

}  // namespace onyx::cpu::sce
