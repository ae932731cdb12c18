// Loop templates shared by the CPU elementwise kernels: contiguous unary maps and
// broadcasting binary/ternary maps, parallel over the session's threads. Inner loops are
// plain pointer loops specialised on which operands advance, so the compiler vectorises
// them; 16-bit floats are computed through float by the callers' functors.
#pragma once

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/broadcast.h"
#include "kernels/dispatch.h"
#include "kernels/kernel.h"

namespace onyx::cpu {

/// Elements per thread below which a loop stays on one thread.
inline constexpr int64_t kCheapGrain = 1 << 15;  // add, compare, copy
inline constexpr int64_t kCostlyGrain = 1 << 12;  // exp, erf, pow, ...

/// Runtime dtype list of a TypeList, for KernelDef::types.
template <typename... Ts>
std::vector<DataType> dtypes_of(TypeList<Ts...>) {
  return {dtype_of<Ts>()...};
}

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

/// y[i] = f(x[i]) for n contiguous elements. 16-bit floats go through float blocks so
/// that `f` runs on a float array the compiler can vectorise.
template <typename In, typename Out, typename F>
void unary_map(const In* x, Out* y, int64_t n, int threads, int64_t grain, F f) {
  parallel_for(n, threads, grain, [&](int64_t b, int64_t e) {
    if constexpr (is_half_v<In> && std::is_same_v<In, Out>) {
      constexpr int64_t kBlock = 256;
      float buf[kBlock];
      for (int64_t s = b; s < e; s += kBlock) {
        int64_t m = std::min(kBlock, e - s);
        for (int64_t i = 0; i < m; ++i) buf[i] = float(x[s + i]);
        for (int64_t i = 0; i < m; ++i) buf[i] = f(buf[i]);
        for (int64_t i = 0; i < m; ++i) y[s + i] = Out(buf[i]);
      }
    } else {
      for (int64_t i = b; i < e; ++i) y[i] = Out(f(acc_t<In>(x[i])));
    }
  });
}

/// out = f(a, b) with numpy broadcasting; `out` is allocated with the broadcast shape.
/// f takes (A, B) element values and returns Out.
template <typename A, typename B, typename Out, typename F>
void binary_map(const Tensor& a, const Tensor& b, Tensor& out, int threads, int64_t grain,
                F f) {
  const A* pa = a.data_as<A>();
  const B* pb = b.data_as<B>();
  Out* po = out.data_as<Out>();
  if (a.shape() == b.shape()) {  // same shape: one flat loop
    parallel_for(out.numel(), threads, grain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) po[i] = f(pa[i], pb[i]);
    });
    return;
  }
  BroadcastPlan p(out.shape(), {a.shape(), b.shape()});
  const bool sa = p.step[0] != 0, sb = p.step[1] != 0;
  broadcast_for<2>(p, threads, grain, [&](int64_t o, const std::array<int64_t, 2>& at, int64_t n) {
    const A* x = pa + at[0];
    const B* y = pb + at[1];
    Out* z = po + o;
    if (sa && sb) {
      for (int64_t i = 0; i < n; ++i) z[i] = f(x[i], y[i]);
    } else if (sa) {
      const B yv = y[0];
      for (int64_t i = 0; i < n; ++i) z[i] = f(x[i], yv);
    } else if (sb) {
      const A xv = x[0];
      for (int64_t i = 0; i < n; ++i) z[i] = f(xv, y[i]);
    } else {
      const Out v = f(x[0], y[0]);
      std::fill(z, z + n, v);
    }
  });
}

/// Checks that the inputs of a same-type elementwise op share one dtype.
inline void check_same_dtype(const KernelContext& ctx, const std::vector<const Tensor*>& ins,
                             int first = 0) {
  for (size_t k = 1; k < ins.size(); ++k)
    ONYX_CHECK(ins[k]->dtype() == ins[0]->dtype(),
               "[{}] input {} has dtype {} but input {} has dtype {}; they must match",
               ctx.label(), first + int(k), dtype_name(ins[k]->dtype()), first,
               dtype_name(ins[0]->dtype()));
}

}  // namespace onyx::cpu
