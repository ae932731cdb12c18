// Shared machinery of the reduction-like CPU kernels (Reduce*, ArgMax, Softmax, TopK, CumSum,
// LpNormalization, MeanVarianceNormalization): axis checks, the [outer, axis, inner] split,
// and a reduction driver with contiguous fast paths.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "graph/saturate_cast.h"
#include "graph/tensor.h"
#include "kernels/cpu/half_convert.h"
#include "kernels/cpu/wrap_int.h"
#include "kernels/kernel.h"
#include "kernels/parallel.h"

namespace onyx::cpu {

/// Registration functions of the reduction family's files (called by register_reduce_kernels).
void register_arg_reduce_kernels(KernelRegistry& r);  // arg_reduce.cpp
void register_topk_kernels(KernelRegistry& r);        // topk.cpp
void register_cumsum_kernels(KernelRegistry& r);      // cumsum.cpp
void register_lp_norm_kernels(KernelRegistry& r);     // lp_norm.cpp

/// Elements per thread below which loops stay on one thread.
inline constexpr int64_t kReduceGrain = 32768;
/// Columns handled together when reducing a non-innermost axis (accumulators on the stack).
inline constexpr int64_t kColumnChunk = 256;

/// `axis` in [-rank, rank) mapped to [0, rank); onyx::Error starting with "[who]" otherwise.
int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& who);

/// A shape seen as [outer, axis, inner] around one axis (or a range of axes).
struct AxisSplit {
  int64_t outer = 1, axis = 1, inner = 1;
};
/// Split around axis `axis` (already normalised).
AxisSplit split_at_axis(const Shape& s, int64_t axis);
/// Split for the opset < 13 Softmax family: [prod(s[:axis]), prod(s[axis:]), 1].
AxisSplit split_2d(const Shape& s, int64_t axis);

/// Reads a scalar integer input (0-D or one element, int32 or int64) such as CumSum's axis
/// or TopK's k; onyx::Error naming the input otherwise.
int64_t scalar_int_input(const KernelContext& ctx, int i, const char* what);

/// How a reduction over a set of axes walks its input. The fast form is [outer, red, inner]
/// (reduced axes contiguous in the middle, output index o = outer_i * inner + inner_i); any
/// other pattern uses the general form (per-output base offset + table of offsets of
/// contiguous runs of reduced elements).
struct ReducePlan {
  int64_t out_numel = 1;  // outputs
  int64_t red_numel = 1;  // elements reduced into each output
  bool general = false;
  int64_t outer = 1, red = 1, inner = 1;
  std::vector<int64_t> kept_dims, kept_strides;  // general: input strides of kept dims
  std::vector<int64_t> red_offsets;              // general: where one output's runs start
  int64_t red_run = 1;                           // general: contiguous elements per run
};
/// Plan for reducing the axes of `shape` whose `reduced` flag is set.
ReducePlan make_reduce_plan(const Shape& shape, const std::vector<bool>& reduced);

/// Input offset of output o's first element under a general plan.
inline int64_t general_base(const ReducePlan& p, int64_t o) {
  int64_t base = 0;
  for (int64_t i = static_cast<int64_t>(p.kept_dims.size()) - 1; i >= 0; --i) {
    base += (o % p.kept_dims[i]) * p.kept_strides[i];
    o /= p.kept_dims[i];
  }
  return base;
}

/// Independent accumulators over a contiguous run, so the compiler can vectorise it.
/// 16-bit floats are widened a block at a time (a multiple of kLanes, so every lane sees
/// the same elements in the same order) and stepped as floats.
inline constexpr int kLanes = 8;
template <typename Op, typename T>
void accumulate_run(const Op& op, typename Op::Acc* lanes, const T* src, int64_t n, int64_t o) {
  if constexpr (is_half_v<T>) {
    static_assert(kHalfBlock % kLanes == 0);
    read_blocks(src, n, [&](const float* blk, int64_t, int64_t m) {
      accumulate_run(op, lanes, blk, m, o);
    });
    return;
  }
  int64_t r = 0;
  for (; r + kLanes <= n; r += kLanes)
    for (int l = 0; l < kLanes; ++l) lanes[l] = op.step(lanes[l], src[r + l], o);
  for (int l = 0; r < n; ++r, ++l) lanes[l] = op.step(lanes[l], src[r], o);
}
template <typename Op>
void store_lanes(const Op& op, const typename Op::Acc* lanes, int64_t o) {
  typename Op::Acc a = lanes[0];
  for (int l = 1; l < kLanes; ++l) a = op.combine(a, lanes[l]);
  op.store(o, a);
}

/// Reduces x under plan `p` with `op`, which provides
///   using Acc; Acc init(); Acc step(Acc a, E x, int64_t o); Acc combine(Acc a, Acc b);
///   void store(int64_t o, Acc a);
/// where step takes E = T, or float when T is a 16-bit float (read in widened blocks).
/// `o` is the output index (ops may read per-output data through it). An empty reduction
/// stores init() for every output.
template <typename Op, typename T>
void run_reduce(const T* x, const ReducePlan& p, const Op& op, int threads) {
  using Acc = typename Op::Acc;
  if (p.out_numel == 0) return;
  if (p.red_numel == 0) {
    parallel_for(p.out_numel, threads, kReduceGrain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) op.store(o, op.init());
    });
    return;
  }
  if (p.general) {
    const int64_t nruns = static_cast<int64_t>(p.red_offsets.size()), run = p.red_run;
    parallel_for(p.out_numel, threads, std::max<int64_t>(1, kReduceGrain / p.red_numel),
                 [&](int64_t b, int64_t e) {
                   for (int64_t o = b; o < e; ++o) {
                     const T* base = x + general_base(p, o);
                     Acc lanes[kLanes];
                     for (int l = 0; l < kLanes; ++l) lanes[l] = op.init();
                     for (int64_t q = 0; q < nruns; ++q)
                       accumulate_run(op, lanes, base + p.red_offsets[q], run, o);
                     store_lanes(op, lanes, o);
                   }
                 });
    return;
  }
  const int64_t red = p.red, inner = p.inner;
  if (inner == 1) {
    // Innermost contiguous reduction: independent lanes let the compiler vectorise.
    parallel_for(p.outer, threads, std::max<int64_t>(1, kReduceGrain / red),
                 [&](int64_t b, int64_t e) {
                   for (int64_t o = b; o < e; ++o) {
                     Acc lanes[kLanes];
                     for (int l = 0; l < kLanes; ++l) lanes[l] = op.init();
                     accumulate_run(op, lanes, x + o * red, red, o);
                     store_lanes(op, lanes, o);
                   }
                 });
    return;
  }
  // Outer/middle-axis reduction: accumulate a chunk of contiguous columns row by row.
  const int64_t chunks = (inner + kColumnChunk - 1) / kColumnChunk;
  parallel_for(p.outer * chunks, threads,
               std::max<int64_t>(1, kReduceGrain / (red * std::min(inner, kColumnChunk))),
               [&](int64_t b, int64_t e) {
                 Acc acc[kColumnChunk];
                 using Row = std::conditional_t<is_half_v<T>, float, T>;
                 [[maybe_unused]] Row buf[is_half_v<T> ? kColumnChunk : 1];
                 for (int64_t t = b; t < e; ++t) {
                   const int64_t k1 = t / chunks, j0 = (t % chunks) * kColumnChunk;
                   const int64_t len = std::min(kColumnChunk, inner - j0), o0 = k1 * inner + j0;
                   for (int64_t j = 0; j < len; ++j) acc[j] = op.init();
                   const T* base = x + k1 * red * inner + j0;
                   for (int64_t r = 0; r < red; ++r) {
                     const Row* row;
                     if constexpr (is_half_v<T>) {
                       widen(base + r * inner, buf, len);
                       row = buf;
                     } else {
                       row = base + r * inner;
                     }
                     for (int64_t j = 0; j < len; ++j) acc[j] = op.step(acc[j], row[j], o0 + j);
                   }
                   for (int64_t j = 0; j < len; ++j) op.store(o0 + j, acc[j]);
                 }
               });
}

/// Calls fn(o, off) for every input offset `off` under plan `p`, `o` being its output index.
/// Outputs are split between threads, so fn may update per-output state without locks.
template <typename F>
void for_each_reduced(const ReducePlan& p, int threads, F&& fn) {
  if (p.out_numel == 0 || p.red_numel == 0) return;
  if (p.general) {
    const int64_t nruns = static_cast<int64_t>(p.red_offsets.size()), run = p.red_run;
    parallel_for(p.out_numel, threads, std::max<int64_t>(1, kReduceGrain / p.red_numel),
                 [&](int64_t b, int64_t e) {
                   for (int64_t o = b; o < e; ++o) {
                     const int64_t base = general_base(p, o);
                     for (int64_t q = 0; q < nruns; ++q)
                       for (int64_t r = 0, off = base + p.red_offsets[q]; r < run; ++r) fn(o, off + r);
                   }
                 });
    return;
  }
  const int64_t red = p.red, inner = p.inner;
  if (inner == 1) {
    parallel_for(p.outer, threads, std::max<int64_t>(1, kReduceGrain / red),
                 [&](int64_t b, int64_t e) {
                   for (int64_t o = b; o < e; ++o)
                     for (int64_t r = 0; r < red; ++r) fn(o, o * red + r);
                 });
    return;
  }
  const int64_t chunks = (inner + kColumnChunk - 1) / kColumnChunk;
  parallel_for(p.outer * chunks, threads,
               std::max<int64_t>(1, kReduceGrain / (red * std::min(inner, kColumnChunk))),
               [&](int64_t b, int64_t e) {
                 for (int64_t t = b; t < e; ++t) {
                   const int64_t k1 = t / chunks, j0 = (t % chunks) * kColumnChunk;
                   const int64_t len = std::min(kColumnChunk, inner - j0), o0 = k1 * inner + j0;
                   const int64_t base = k1 * red * inner + j0;
                   for (int64_t r = 0; r < red; ++r)
                     for (int64_t j = 0; j < len; ++j) fn(o0 + j, base + r * inner + j);
                 }
               });
}

}  // namespace onyx::cpu
