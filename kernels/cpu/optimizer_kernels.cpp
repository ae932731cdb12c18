// The CPU optimizer kernels (kernels/optimizer_kernels.h): the per-element math of
// optimizer_math.h (shared with the ai.onnx.preview.training ops in training_ops.cpp) over the
// piece plan's blocks in parallel, or over fixed-size blocks of a flat gradient. Reductions sum
// per-block (or per-piece) partials in block order, so results do not depend on the thread count.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "kernels/cpu/half_convert.h"
#include "kernels/cpu/optimizer_math.h"
#include "kernels/optimizer_kernel_table.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

using optimizer_kernels::PiecePlan;
using optimizer_kernels::Piece;

/// Calls fn(piece, piece_index) for every piece, blocks spread over `threads` threads.
template <typename F>
void for_each_piece(const PiecePlan& plan, int threads, F&& fn) {
  const int64_t blocks = static_cast<int64_t>(plan.block_start.size()) - 1;
  parallel_for(blocks, threads, 2, [&](int64_t b, int64_t e) {
    for (int64_t p = plan.block_start[b]; p < plan.block_start[e]; ++p) fn(plan.pieces[p], p);
  });
}

/// The flat-gradient passes: fixed blocks, so per-block partial sums are thread-independent.
constexpr int64_t kBlock = 16384;

/// Calls fn(block_index, begin, end) for each kBlock-sized block of [0, n), in parallel.
template <typename F>
void for_each_block(int64_t n, int threads, F&& fn) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  parallel_for(blocks, threads, 2, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) fn(k, k * kBlock, std::min(n, (k + 1) * kBlock));
  });
}

/// params_low[b, b + n) = params[b, b + n) rounded to params_low's 16-bit type (nothing without
/// one): right after a piece's update, while it is in cache.
void write_low(const float* p, Tensor* low, int64_t b, int64_t n) {
  if (!low) return;
  if (low->dtype() == DataType::BFloat16)
    narrow(p + b, low->data<bfloat16>() + b, n);
  else
    narrow(p + b, low->data<float16>() + b, n);
}

/// write_low for piece `pc` when its segment wants the copy.
void write_low(const PiecePlan& plan, const Piece& pc, const float* p, Tensor* low) {
  if (!low || (!plan.low_copy.empty() && !plan.low_copy[pc.segment])) return;
  write_low(p, low, pc.begin, pc.end - pc.begin);
}

MomentumCoeffs<float> momentum_coeffs(const optimizer_kernels::SgdCoeffs& c) {
  return {c.lr, c.l2, c.momentum, 1.0f, c.nesterov};
}

AdamCoeffs<float> adam_coeffs(const optimizer_kernels::AdamCoeffs& c) {
  return {c.beta1, c.beta2, c.eps, c.l2, c.step, c.denom_scale, c.pre, c.post};
}

LambCoeffs<float> lamb_coeffs(const optimizer_kernels::LambCoeffs& c) {
  return {c.beta1, c.beta2, c.eps, c.inv_bc1, c.inv_bc2, c.wd};
}

void sgd(const PiecePlan& plan, std::span<const optimizer_kernels::SgdCoeffs> coeffs,
         Tensor& params, const Tensor& grads, Tensor* momentum, int threads, Tensor* params_low) {
  float* p = params.data<float>();
  const float* g = grads.data<float>();
  if (!momentum) {
    for_each_piece(plan, threads, [&](const Piece& pc, int64_t) {
      const int64_t b = pc.begin;
      const auto& k = coeffs[pc.segment];
      sgd_update<float>(p + b, g + b, p + b, pc.end - b, k.lr, k.l2);
      write_low(plan, pc, p, params_low);
    });
    return;
  }
  float* buf = momentum->data<float>();
  for_each_piece(plan, threads, [&](const Piece& pc, int64_t) {
    const int64_t b = pc.begin;
    momentum_update<float>(p + b, g + b, buf + b, p + b, buf + b, pc.end - b,
                           momentum_coeffs(coeffs[pc.segment]));
    write_low(plan, pc, p, params_low);
  });
}

void adam(const PiecePlan& plan, std::span<const optimizer_kernels::AdamCoeffs> coeffs,
          Tensor& params, const Tensor& grads, Tensor& m_t, Tensor& v_t, int threads,
          Tensor* params_low) {
  float* p = params.data<float>();
  const float* g = grads.data<float>();
  float *m = m_t.data<float>(), *v = v_t.data<float>();
  for_each_piece(plan, threads, [&](const Piece& pc, int64_t) {
    const int64_t b = pc.begin;
    adam_update<float>(p + b, g + b, m + b, v + b, p + b, m + b, v + b, pc.end - b,
                       adam_coeffs(coeffs[pc.segment]));
    write_low(plan, pc, p, params_low);
  });
}

void lamb_moments(const PiecePlan& plan, std::span<const optimizer_kernels::LambCoeffs> coeffs,
                  const Tensor& params, const Tensor& grads, Tensor& m_t, Tensor& v_t,
                  std::span<double> param_sq, std::span<double> dir_sq, int threads) {
  const float* p = params.data<float>();
  const float* g = grads.data<float>();
  float *m = m_t.data<float>(), *v = v_t.data<float>();
  std::vector<double> piece_sq(2 * plan.pieces.size());  // per piece: ||x||^2, ||r||^2
  for_each_piece(plan, threads, [&](const Piece& pc, int64_t i) {
    const int64_t b = pc.begin;
    double& x_sq = piece_sq[2 * i];
    double& r_sq = piece_sq[2 * i + 1];
    x_sq = r_sq = 0;
    cpu::lamb_moments<float>(p + b, g + b, m + b, v + b, pc.end - b,
                             lamb_coeffs(coeffs[pc.segment]), x_sq, r_sq);
  });
  // Reduce in piece order (fixed by the plan), so the result does not depend on threads.
  std::fill(param_sq.begin(), param_sq.begin() + plan.segments, 0.0);
  std::fill(dir_sq.begin(), dir_sq.begin() + plan.segments, 0.0);
  for (size_t i = 0; i < plan.pieces.size(); ++i) {
    param_sq[plan.pieces[i].segment] += piece_sq[2 * i];
    dir_sq[plan.pieces[i].segment] += piece_sq[2 * i + 1];
  }
}

void lamb_apply(const PiecePlan& plan, std::span<const optimizer_kernels::LambCoeffs> coeffs,
                std::span<const float> scale, Tensor& params, const Tensor& m_t,
                const Tensor& v_t, int threads, Tensor* params_low) {
  float* p = params.data<float>();
  const float *m = m_t.data<float>(), *v = v_t.data<float>();
  for_each_piece(plan, threads, [&](const Piece& pc, int64_t) {
    const int64_t b = pc.begin;
    cpu::lamb_apply<float>(p + b, m + b, v + b, pc.end - b, lamb_coeffs(coeffs[pc.segment]),
                           scale[pc.segment]);
    write_low(plan, pc, p, params_low);
  });
}

double flat_sum_squares(const Tensor& t, int threads) {
  const int64_t n = t.numel();
  const float* g = n ? t.data<float>() : nullptr;
  std::vector<double> partial((n + kBlock - 1) / kBlock, 0.0);
  for_each_block(n, threads, [&](int64_t k, int64_t b, int64_t e) {
    partial[k] = sum_squares(g + b, e - b);
  });
  double s = 0;
  for (double x : partial) s += x;
  return s;
}

double copy_sum_squares(Tensor& dst_t, const Tensor& src_t, int threads) {
  const int64_t n = src_t.numel();
  if (n == 0) return 0;
  float* dst = dst_t.data<float>();
  const float* src = src_t.data<float>();
  std::vector<double> partial((n + kBlock - 1) / kBlock, 0.0);
  for_each_block(n, threads, [&](int64_t k, int64_t b, int64_t e) {
    // Equal pointers: the run wrote the gradient in place (a read, not a 2x-traffic copy).
    if (dst != src) std::memcpy(dst + b, src + b, static_cast<size_t>(e - b) * sizeof(float));
    partial[k] = sum_squares(dst + b, e - b);  // the block just copied (still in cache), or read
  });
  double s = 0;
  for (double x : partial) s += x;
  return s;
}

bool flat_all_finite(const Tensor& t, int threads) {
  const int64_t n = t.numel();
  if (n == 0) return true;
  const float* g = t.data<float>();
  std::vector<char> bad((n + kBlock - 1) / kBlock, 0);
  for_each_block(n, threads,
                 [&](int64_t k, int64_t b, int64_t e) { bad[k] = !all_finite(g + b, e - b); });
  return std::none_of(bad.begin(), bad.end(), [](char c) { return c != 0; });
}

void scale(Tensor& t, float s, int threads) {
  const int64_t n = t.numel();
  if (n == 0) return;
  float* g = t.data<float>();
  for_each_block(n, threads,
                 [&](int64_t, int64_t b, int64_t e) { scale_in_place(g + b, e - b, s); });
}

bool unscale(Tensor& t, float s, int threads) {
  const int64_t n = t.numel();
  if (n == 0) return false;
  float* g = t.data<float>();
  std::atomic<bool> found{false};
  for_each_block(n, threads, [&](int64_t, int64_t b, int64_t e) {
    if (!all_finite(g + b, e - b)) found.store(true, std::memory_order_relaxed);
    scale_in_place(g + b, e - b, s);
  });
  return found.load();
}

void accumulate(Tensor& acc_t, const Tensor& g_t, int threads) {
  const int64_t n = acc_t.numel();
  if (n == 0) return;
  float* acc = acc_t.data<float>();
  const float* g = g_t.data<float>();
  parallel_for(n, threads, 32768,
               [&](int64_t b, int64_t e) { cpu::accumulate(acc + b, g + b, e - b); });
}

void to_low_precision(const Tensor& params, Tensor& low, int threads) {
  const float* p = params.numel() ? params.data<float>() : nullptr;
  for_each_block(params.numel(), threads,
                 [&](int64_t, int64_t b, int64_t e) { write_low(p, &low, b, e - b); });
}

}  // namespace

void register_optimizer_kernels(optimizer_kernels::Table& t) {
  t.sgd = &sgd;
  t.adam = &adam;
  t.lamb_moments = &lamb_moments;
  t.lamb_apply = &lamb_apply;
  t.sum_squares = &flat_sum_squares;
  t.copy_sum_squares = &copy_sum_squares;
  t.all_finite = &flat_all_finite;
  t.scale = &scale;
  t.unscale = &unscale;
  t.accumulate = &accumulate;
  t.to_low_precision = &to_low_precision;
}

}  // namespace onyx::cpu
