// numpy broadcasting for the elementwise kernels: the output shape, and a walk over the
// output as contiguous runs in which every input either advances by one or stays put.
//
//   BroadcastPlan p(out_shape, {a.shape(), b.shape()});
//   broadcast_for<2>(p, ctx.threads(), grain, [&](int64_t o, const auto& in, int64_t n) {
//     // out[o .. o+n) from a[in[0] + i * p.step[0]], b[in[1] + i * p.step[1]]
//   });
#pragma once

#include "kernels/shape_util.h"

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "graph/tensor.h"
#include "kernels/parallel.h"

namespace onyx::cpu {

using onyx::broadcast_shapes;  // kernels/shape_util.h, every provider's

/// How inputs map onto a broadcast output: dimensions of size 1 dropped and neighbours
/// merged where every input is contiguous across them, so same-shape operands become one
/// run, a scalar a run with step 0, and a row vector over a matrix rows of step-1 runs.
struct BroadcastPlan {
  BroadcastPlan(const Shape& out, const std::vector<Shape>& inputs);

  int64_t numel = 0;                          // output elements
  int64_t inner = 1;                          // length of one run (the merged innermost dimension)
  Shape outer;                                // merged outer dimensions, outermost first
  std::vector<std::vector<int64_t>> strides;  // [input][outer dim] element strides
  std::vector<int64_t> step;                  // [input] 1, or 0 when broadcast along a run
};

/// Calls fn(out_offset, in_offsets, n) for runs covering the output in order, split
/// over `threads`; in_offsets[k] is input k's element offset at the run's start.
template <size_t N, typename F>
void broadcast_for(const BroadcastPlan& p, int threads, int64_t grain, F&& fn) {
  const int nd = static_cast<int>(p.outer.size());
  parallel_for(p.numel, threads, grain, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> idx(nd);
    std::array<int64_t, N> base{};
    int64_t row = begin / p.inner, col = begin % p.inner;
    for (int d = nd - 1; d >= 0; --d) {
      idx[d] = row % p.outer[d];
      row /= p.outer[d];
      for (size_t k = 0; k < N; ++k) base[k] += idx[d] * p.strides[k][d];
    }
    for (int64_t i = begin; i < end;) {
      int64_t n = std::min(p.inner - col, end - i);
      std::array<int64_t, N> at;
      for (size_t k = 0; k < N; ++k) at[k] = base[k] + col * p.step[k];
      fn(i, at, n);
      i += n;
      col = 0;
      for (int d = nd - 1; d >= 0; --d) {  // next row: odometer increment
        for (size_t k = 0; k < N; ++k) base[k] += p.strides[k][d];
        if (++idx[d] < p.outer[d]) break;
        for (size_t k = 0; k < N; ++k) base[k] -= p.strides[k][d] * p.outer[d];
        idx[d] = 0;
      }
    }
  });
}

}  // namespace onyx::cpu
