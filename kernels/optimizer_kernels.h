// Optimizer kernels: the fused optimizer updates (SGD with momentum and Nesterov, Adam/AdamW,
// LAMB) and the passes over flat gradient buffers (sum of squares, non-finite check, scale,
// loss-scaler unscale, accumulation), on float32 tensors wherever they live. optimizers/ does
// its arithmetic only through these functions; each dispatches on its tensors' device to the
// implementation that device's provider registered (kernels/cpu/optimizer_kernels.cpp for the
// CPU), and refuses a device without one with onyx::Error "[optimizer] <what>: buffers on
// cuda:0: this build has no optimizer kernels for that device".
//
// Every tensor is float32, contiguous, and all tensors of one call are on one device. Buffers of
// the fused updates cover [0, plan.span) of the flat layout; elements outside every piece
// (alignment padding) are left alone. Results never depend on `threads`.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "graph/tensor.h"

namespace onyx::optimizer_kernels {

/// A contiguous run [begin, end) of one segment's elements in the flat buffers.
struct Piece {
  int segment = 0;  // index into the per-segment coefficient arrays
  int64_t begin = 0, end = 0;
};

/// How a fused update splits the flat buffers into work: pieces, each inside one segment, packed
/// into blocks (block b holds pieces [block_start[b], block_start[b + 1])). The split comes from
/// the segments alone (optim::BlockPlan), never from the thread count, so per-piece partial sums
/// reduce in a fixed order. An implementation may run blocks in any order or in parallel.
struct PiecePlan {
  std::span<const Piece> pieces;
  std::span<const int64_t> block_start;  // blocks + 1 entries, starting at 0
  int64_t span = 0;                      // one past the last element any piece covers
  int64_t segments = 0;                  // length of the per-segment arrays
  /// Per segment: 1 when the updates' params_low gets its pieces (empty: every segment's).
  std::span<const uint8_t> low_copy;
};

/// Per segment, computed once per step (in double, rounded to float) by the optimizer:
/// g' = g + l2 * x; buf = momentum * buf + g'; x -= lr * buf, or with nesterov
/// x -= lr * (g' + momentum * buf). Without a momentum buffer: x -= lr * g'.
struct SgdCoeffs {
  float lr = 0, l2 = 0, momentum = 0;
  bool nesterov = false;
};

/// Per segment: g' = g + l2 * x; m = b1 m + (1 - b1) g'; v = b2 v + (1 - b2) g'^2;
/// x = post * (pre * x - step * m / (sqrt(v) * denom_scale + eps)).
struct AdamCoeffs {
  float beta1 = 0, beta2 = 0, eps = 0, l2 = 0, step = 0, denom_scale = 1, pre = 1, post = 1;
};

/// Per segment: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
/// r = m * inv_bc1 / (sqrt(v * inv_bc2) + eps) + wd * x.
struct LambCoeffs {
  float beta1 = 0, beta2 = 0, eps = 0, inv_bc1 = 1, inv_bc2 = 1, wd = 0;
};

/// `params_low` of the updates below (sgd, adam, lamb_apply), where given: a bfloat16 or float16
/// buffer of at least plan.span elements on params' device, into which each piece's updated
/// parameters are written rounded to its type, at the same offsets, while the piece is in cache
/// (mixed precision's low-precision weights, refreshed by the update instead of by a Cast pass
/// over cold memory before the next forward).
/// SGD over the plan's pieces, in place on params (and momentum, when given; nullptr: plain SGD).
void sgd(const PiecePlan& plan, std::span<const SgdCoeffs> coeffs, Tensor& params,
         const Tensor& grads, Tensor* momentum, int threads, Tensor* params_low = nullptr);
/// Adam / AdamW (the coefficients say which) in place on params, m and v.
void adam(const PiecePlan& plan, std::span<const AdamCoeffs> coeffs, Tensor& params,
          const Tensor& grads, Tensor& m, Tensor& v, int threads, Tensor* params_low = nullptr);
/// LAMB, first pass: updates m and v in place and writes each segment's ||x||^2 and ||r||^2
/// (double, summed piece by piece in plan order) into param_sq[s] and dir_sq[s].
void lamb_moments(const PiecePlan& plan, std::span<const LambCoeffs> coeffs, const Tensor& params,
                  const Tensor& grads, Tensor& m, Tensor& v, std::span<double> param_sq,
                  std::span<double> dir_sq, int threads);
/// LAMB, second pass: x -= scale[segment] * r, r recomputed from m and v (scale: lr * trust ratio).
void lamb_apply(const PiecePlan& plan, std::span<const LambCoeffs> coeffs,
                std::span<const float> scale, Tensor& params, const Tensor& m, const Tensor& v,
                int threads, Tensor* params_low = nullptr);

/// sum g^2 over all of g, in double: fixed 16384-element blocks summed in order.
double sum_squares(const Tensor& g, int threads);
/// Copies src into dst (same element count) and returns the sum of squares of what it copied
/// (as sum_squares): one read of src.
double copy_sum_squares(Tensor& dst, const Tensor& src, int threads);
/// True when every element of g is finite.
bool all_finite(const Tensor& g, int threads);
/// g *= s.
void scale(Tensor& g, float s, int threads);
/// g *= s, returning true when any element of g was NaN or infinite before (one read of g).
bool unscale(Tensor& g, float s, int threads);
/// acc += g (same element count).
void accumulate(Tensor& acc, const Tensor& g, int threads);
/// low = params rounded to low's type, bfloat16 or float16 (same element count): the copy that
/// the updates' params_low maintain, made whole.
void to_low_precision(const Tensor& params, Tensor& low, int threads);

/// True when this build has optimizer kernels for tensors on `device`.
bool has_kernels(Device device);
/// onyx::Error "[optimizer] <who>: buffers on <device>: this build has no optimizer kernels for
/// that device" unless has_kernels(device).
void check_device(Device device, std::string_view who);
/// A float32 copy of `src` on `device` (its provider's memory; host memory for the CPU), for
/// optimizer state that lives where the parameters do and checkpoints that live on the host.
Tensor copy_to(const Tensor& src, Device device);

}  // namespace onyx::optimizer_kernels
