// Loop templates shared by the CPU elementwise kernels: contiguous unary maps and
// broadcasting binary maps, parallel over the session's threads. Inner loops are plain
// pointer loops specialised on which operands advance, so the compiler vectorises them;
// 16-bit floats are widened to float in blocks, computed, and narrowed back.
#pragma once

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/half_convert.h"
#include "graph/dispatch.h"
#include "kernels/kernel.h"

namespace onyx::cpu {

/// Elements per thread below which a loop stays on one thread.
inline constexpr int64_t kCheapGrain = 1 << 15;   // add, compare, copy
inline constexpr int64_t kCostlyGrain = 1 << 12;  // exp, erf, pow, ...

/// Runtime dtype list of a TypeList, for KernelDef::types.
template <typename... Ts>
std::vector<DataType> dtypes_of(TypeList<Ts...>) {
  return {dtype_of<Ts>()...};
}

/// An element as its compute type: float for 16-bit floats, else the element itself
/// (by reference, so strings are not copied).
template <typename T>
decltype(auto) widen1(const T& v) {
  if constexpr (is_half_v<T>)
    return float(v);
  else
    return (v);
}

/// y[i] = f(x[i]) for n contiguous elements, f taking and returning the compute type.
template <typename In, typename Out, typename F>
void unary_map(const In* x, Out* y, int64_t n, int threads, int64_t grain, F f) {
  parallel_for(n, threads, grain, [&](int64_t b, int64_t e) {
    if constexpr (is_half_v<In> && std::is_same_v<In, Out>) {
      constexpr int64_t kBlock = kHalfBlock;
      float buf[kBlock];
      for (int64_t s = b; s < e; s += kBlock) {
        int64_t m = std::min(kBlock, e - s);
        widen(x + s, buf, m);
        for (int64_t i = 0; i < m; ++i) buf[i] = f(buf[i]);
        narrow(buf, y + s, m);
      }
    } else {
      for (int64_t i = b; i < e; ++i) y[i] = Out(f(widen1(x[i])));
    }
  });
}

namespace detail {
// z[0..n) = f(x[i*sx], y[i*sy]) for sx, sy in {0, 1}, each case its own loop.
template <typename A, typename B, typename Out, typename F>
void binary_run(const A* x, bool sx, const B* y, bool sy, Out* z, int64_t n, F& f) {
  if (sx && sy) {
    for (int64_t i = 0; i < n; ++i) z[i] = Out(f(widen1(x[i]), widen1(y[i])));
  } else if (sx) {
    const auto yv = widen1(y[0]);
    for (int64_t i = 0; i < n; ++i) z[i] = Out(f(widen1(x[i]), yv));
  } else if (sy) {
    const auto xv = widen1(x[0]);
    for (int64_t i = 0; i < n; ++i) z[i] = Out(f(xv, widen1(y[i])));
  } else {
    std::fill(z, z + n, Out(f(widen1(x[0]), widen1(y[0]))));
  }
}

// The same for 16-bit floats: blocks widened to float, computed, narrowed. Blocks of 256
// rather than kHalfBlock: with three buffers in flight, Add of 4M bfloat16/float16 ran
// 15-25% faster with 128-256 than with 512 (one thread, AVX2).
template <typename T, typename Out, typename F>
void binary_run_half(const T* x, bool sx, const T* y, bool sy, Out* z, int64_t n, F& f) {
  constexpr int64_t kBlock = 256;
  float bx[kBlock], by[kBlock];
  using R = decltype(f(0.0f, 0.0f));
  R bz[kBlock];
  if (!sx) bx[0] = float(x[0]);
  if (!sy) by[0] = float(y[0]);
  for (int64_t s = 0; s < n; s += kBlock) {
    int64_t m = std::min(kBlock, n - s);
    if (sx) widen(x + s, bx, m);
    if (sy) widen(y + s, by, m);
    binary_run(bx, sx, by, sy, bz, m, f);
    if constexpr (std::is_same_v<Out, T>)
      narrow(bz, z + s, m);
    else
      std::copy(bz, bz + m, z + s);
  }
}
}  // namespace detail

/// out = f(a, b) with numpy broadcasting into `out` (allocated with the broadcast shape).
/// f takes the compute types of A and B (see widen1) and returns something Out holds.
template <typename A, typename B, typename Out, typename F>
void binary_map(const Tensor& a, const Tensor& b, Tensor& out, int threads, int64_t grain, F f) {
  const A* pa = a.data_as<A>();
  const B* pb = b.data_as<B>();
  Out* po = out.data_as<Out>();
  auto run = [&](const A* x, bool sx, const B* y, bool sy, Out* z, int64_t n) {
    if constexpr (is_half_v<A> && std::is_same_v<A, B>)
      detail::binary_run_half(x, sx, y, sy, z, n, f);
    else
      detail::binary_run(x, sx, y, sy, z, n, f);
  };
  // Same shape as each other and as the output: one flat run. (Equal operands smaller than
  // the output, as in Sum of [1], [1] and [50] folded left to right, still need the broadcast
  // plan: the flat run read past both: found by tests/fuzz/fuzz_model.cpp.)
  if (a.shape() == b.shape() && a.shape() == out.shape()) {
    parallel_for(out.numel(), threads, grain,
                 [&](int64_t s, int64_t e) { run(pa + s, true, pb + s, true, po + s, e - s); });
    return;
  }
  BroadcastPlan p(out.shape(), {a.shape(), b.shape()});
  const bool sa = p.step[0] != 0, sb = p.step[1] != 0;
  broadcast_for<2>(p, threads, grain, [&](int64_t o, const std::array<int64_t, 2>& at, int64_t n) {
    run(pa + at[0], sa, pb + at[1], sb, po + o, n);
  });
}

/// Checks that the inputs of a same-type elementwise op share one dtype.
inline void check_same_dtype(const KernelContext& ctx, const std::vector<const Tensor*>& ins,
                             int first = 0) {
  for (size_t k = 1; k < ins.size(); ++k)
    ONYX_CHECK(ins[k]->dtype() == ins[0]->dtype(),
               "[{}] input {} has dtype {} but input {} has dtype {}; they must match", ctx.label(),
               first + int(k), dtype_name(ins[k]->dtype()), first, dtype_name(ins[0]->dtype()));
}

}  // namespace onyx::cpu
