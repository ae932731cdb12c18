// Reduce* and ArgMax/ArgMin device code. One kernel template per shape of work, over the
// element type and what is accumulated (Accum); what becomes of an accumulator (mean, sqrt,
// log, the two LogSumExp passes) is a runtime switch run once per output.
//   along_r: a warp (or a block, for few long outputs) per output, threads striding the
//            reduced elements: rows, and the general layout when its innermost axis is reduced.
//   along_o: a thread per output, threads of a column sharing its reduced elements: columns
//            ([outer, red, inner], inner > 1), short rows, and the other general layouts.
// When there are too few outputs to fill the device, several blocks share an output: each
// writes a partial accumulator to scratch and combine_splits finishes them.
// Semantics mirror kernels/cpu/reduce.cpp: 16-bit floats accumulate in float, integers in
// 64 bits with wrap-around, Max/Min let NaN stick, empty reductions give the identity.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/reduce_launch.h"

namespace onyx::cuda::red {
namespace {

using dev::acc_t, dev::ceil_div, dev::dexp, dev::dfinite, dev::dlog, dev::dsqrt, dev::inf, dev::is_half, dev::narrow,
    dev::same, dev::Tag, dev::widen;

// ---- type helpers (the .cu cannot use <type_traits> through graph/dtype.h) ----

template <bool C, class A, class B> struct cond_t { using type = A; };
template <class A, class B> struct cond_t<false, A, B> { using type = B; };
template <bool C, class A, class B> using cond = typename cond_t<C, A, B>::type;

template <class T> constexpr bool is_fp = is_half<T> || same<T, float> || same<T, double>;
template <class T>
constexpr bool is_sint = same<T, int8_t> || same<T, int16_t> || same<T, int32_t> || same<T, int64_t>;

/// Sums and products: acc_t for floats, 64 bits for integers.
template <class T> using sum_t = cond<is_fp<T>, acc_t<T>, cond<is_sint<T>, int64_t, uint64_t>>;
/// log / sqrt / exp precision: float for float and the 16-bit floats, double otherwise.
template <class T> using math_t = cond<same<acc_t<T>, float>, float, double>;

template <class T> struct lim;
template <> struct lim<bool> { static constexpr bool lo = false, hi = true; };
template <> struct lim<int8_t> { static constexpr int8_t lo = INT8_MIN, hi = INT8_MAX; };
template <> struct lim<int32_t> { static constexpr int32_t lo = INT32_MIN, hi = INT32_MAX; };
template <> struct lim<int64_t> { static constexpr int64_t lo = INT64_MIN, hi = INT64_MAX; };
template <> struct lim<uint8_t> { static constexpr uint8_t lo = 0, hi = UINT8_MAX; };
template <> struct lim<uint32_t> { static constexpr uint32_t lo = 0, hi = UINT32_MAX; };
template <> struct lim<uint64_t> { static constexpr uint64_t lo = 0, hi = UINT64_MAX; };

/// Float to T: NaN gives 0 and values past an integer T's range clamp (graph/saturate_cast.h).
template <class T, class M> __device__ __forceinline__ T saturate(M v) {
  if constexpr (is_fp<T>) {
    return narrow<T>(v);
  } else {
    if (v != v) return T(0);
    if (v <= static_cast<M>(lim<T>::lo)) return lim<T>::lo;
    if (v >= static_cast<M>(lim<T>::hi)) return lim<T>::hi;
    return static_cast<T>(v);
  }
}
template <class A> __device__ __forceinline__ bool is_nan(A v) {
  if constexpr (same<A, float> || same<A, double>) return v != v;
  else return false;
}

/// Integer sums and products wrap (done unsigned); floats are plain.
template <class A> __device__ __forceinline__ A wadd(A a, A b) {
  if constexpr (same<A, int64_t>) return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  else return a + b;
}
template <class A> __device__ __forceinline__ A wmul(A a, A b) {
  if constexpr (same<A, int64_t>) return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  else return a * b;
}

/// __shfl_xor_sync for every accumulator type (narrow ones travel as int).
template <class A> __device__ __forceinline__ A shfl_xor(A v, int mask) {
  if constexpr (sizeof(A) < 4) return static_cast<A>(__shfl_xor_sync(0xffffffffu, static_cast<int>(v), mask));
  else if constexpr (same<A, int64_t>) return static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(v), mask));
  else if constexpr (same<A, uint64_t>) return static_cast<uint64_t>(__shfl_xor_sync(0xffffffffu, static_cast<unsigned long long>(v), mask));
  else return __shfl_xor_sync(0xffffffffu, v, mask);
}

// ---- what a reduction accumulates and how an output is finished ----

enum class Accum { Sum, AbsSum, SqSum, Prod, Max, Min, ExpSum };
enum class Final { Plain, Mean, Sqrt, Log, LseMax, LseSum };

template <class T, Accum K>
struct Reducer {
  using M = math_t<T>;
  using A = cond<K == Accum::Max || K == Accum::Min, acc_t<T>, cond<K == Accum::ExpSum, M, sum_t<T>>>;

  static __device__ __forceinline__ A init() {
    if constexpr (K == Accum::Max) {
      if constexpr (is_fp<T>) return -inf<A>();
      else return lim<T>::lo;
    } else if constexpr (K == Accum::Min) {
      if constexpr (is_fp<T>) return inf<A>();
      else return lim<T>::hi;
    } else if constexpr (K == Accum::Prod) {
      return A(1);
    } else {
      return A(0);
    }
  }
  /// a with element x folded in; m is the output's maximum (ExpSum only).
  static __device__ __forceinline__ A step(A a, T x, M m) {
    if constexpr (K == Accum::ExpSum) {
      return a + dexp(static_cast<M>(widen(x)) - m);
    } else {
      const A v = static_cast<A>(widen(x));
      if constexpr (K == Accum::Max || K == Accum::Min) return combine(a, v);
      else if constexpr (K == Accum::Prod) return wmul(a, v);
      else if constexpr (K == Accum::SqSum) return wadd(a, wmul(v, v));
      else if constexpr (K == Accum::AbsSum && !same<A, uint64_t>) return wadd(a, v < A(0) ? wmul(v, A(-1)) : v);
      else return wadd(a, v);
    }
  }
  static __device__ __forceinline__ A combine(A a, A b) {
    // NaN sticks: a NaN accumulator stays, a NaN element replaces.
    if constexpr (K == Accum::Max) return (a >= b || is_nan(a)) ? a : b;
    else if constexpr (K == Accum::Min) return (a <= b || is_nan(a)) ? a : b;
    else if constexpr (K == Accum::Prod) return wmul(a, b);
    else return wadd(a, b);
  }
  /// Stores output o from its accumulator over n elements.
  static __device__ __forceinline__ void finish(Final f, A a, int64_t n, M m, T* y, M* mbuf, int64_t o) {
    if constexpr (K == Accum::Max || K == Accum::Min) {
      if (f == Final::LseMax) mbuf[o] = static_cast<M>(a);
      else y[o] = narrow<T>(a);
    } else if constexpr (K == Accum::ExpSum) {
      y[o] = saturate<T>(dfinite(m) ? m + dlog(a) : m);
    } else if constexpr (K == Accum::Sum) {
      if (f == Final::Mean) {
        if constexpr (is_fp<T>) y[o] = narrow<T>(a / static_cast<A>(n));
        else y[o] = n ? narrow<T>(a / static_cast<A>(n)) : T(0);
      } else if (f == Final::Log) {
        y[o] = saturate<T>(dlog(static_cast<M>(a)));
      } else {
        y[o] = narrow<T>(a);
      }
    } else if constexpr (K == Accum::SqSum) {
      if (f == Final::Sqrt) y[o] = saturate<T>(dsqrt(static_cast<M>(a)));
      else y[o] = narrow<T>(a);
    } else {
      y[o] = narrow<T>(a);
    }
  }
};

template <class Rd, class A>
__device__ __forceinline__ A warp_reduce(A v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v = Rd::combine(v, shfl_xor(v, m));
  return v;
}

/// Reduction over the block; the result is valid in thread 0.
template <class Rd, class A>
__device__ __forceinline__ A block_reduce(A v) {
  __shared__ A sh[32];
  v = warp_reduce<Rd>(v);
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  if (lane == 0) sh[w] = v;
  __syncthreads();
  if (w == 0) {
    v = lane < nw ? sh[lane] : Rd::init();
    v = warp_reduce<Rd>(v);
  }
  return v;
}

// ---- input offsets of (output, reduced index) ----

struct RowMap {
  int64_t red;
  __device__ __forceinline__ int64_t out(int64_t o) const { return o * red; }
  __device__ __forceinline__ int64_t at(int64_t r) const { return r; }
};
struct ColMap {
  int64_t red, inner;
  __device__ __forceinline__ int64_t out(int64_t o) const { return (o / inner) * red * inner + o % inner; }
  __device__ __forceinline__ int64_t at(int64_t r) const { return r * inner; }
};
/// Row-major decomposition of i over dims[0..n) with strides; loops unrolled over kMaxDims
/// so the arrays stay in registers / the parameter bank instead of local memory.
__device__ __forceinline__ int64_t decompose(int64_t i, int n, const int64_t* dims, const int64_t* strides,
                                             bool small) {
  int64_t off = 0;
  if (small) {
    uint32_t u = static_cast<uint32_t>(i);
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d)
      if (d < n) {
        const uint32_t dim = static_cast<uint32_t>(dims[d]);
        off += static_cast<int64_t>(u % dim) * strides[d];
        u /= dim;
      }
  } else {
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d)
      if (d < n) {
        off += (i % dims[d]) * strides[d];
        i /= dims[d];
      }
  }
  return off;
}
struct GenMap {
  int nk, nr;
  bool small;
  int64_t kd[kMaxDims], ks[kMaxDims], rd[kMaxDims], rs[kMaxDims];
  __device__ __forceinline__ int64_t out(int64_t o) const { return decompose(o, nk, kd, ks, small); }
  __device__ __forceinline__ int64_t at(int64_t r) const { return decompose(r, nr, rd, rs, small); }
};

// ---- kernels ----

struct Args {
  const void* x;
  void* y;
  void* partial;  // [splits, O] accumulators when splits > 1
  void* m;        // LogSumExp: per-output maximum (math type)
  int64_t O, R, chunk;
  int splits;
  Final fin;
};

template <class T, Accum K>
__device__ __forceinline__ math_t<T> out_max(const Args& a, int64_t o) {
  if constexpr (K == Accum::ExpSum) return static_cast<const math_t<T>*>(a.m)[o];
  else return math_t<T>(0);
}

template <class T, Accum K>
__device__ __forceinline__ void store(const Args& a, int64_t o, int s, typename Reducer<T, K>::A acc, math_t<T> m) {
  using A = typename Reducer<T, K>::A;
  if (a.splits > 1) static_cast<A*>(a.partial)[s * a.O + o] = acc;
  else Reducer<T, K>::finish(a.fin, acc, a.R, m, static_cast<T*>(a.y), static_cast<math_t<T>*>(a.m), o);
}

/// Threads along the reduced elements: a warp per output (grid-stride), or a block per
/// (output, split) with blockIdx.x the output and blockIdx.y the split.
template <class T, Accum K, class Map>
__global__ void __launch_bounds__(256) along_r(Args a, Map map, bool warp_mode) {
  using Rd = Reducer<T, K>;
  using A = typename Rd::A;
  const T* __restrict__ x = static_cast<const T*>(a.x);
  if (warp_mode) {
    const int lane = threadIdx.x & 31;
    const int64_t wpb = blockDim.x >> 5, warps = static_cast<int64_t>(gridDim.x) * wpb;
    for (int64_t o = blockIdx.x * wpb + (threadIdx.x >> 5); o < a.O; o += warps) {
      const auto m = out_max<T, K>(a, o);
      const int64_t base = map.out(o);
      A acc = Rd::init();
#pragma unroll 4
      for (int64_t r = lane; r < a.R; r += 32) acc = Rd::step(acc, x[base + map.at(r)], m);
      acc = warp_reduce<Rd>(acc);
      if (lane == 0) Rd::finish(a.fin, acc, a.R, m, static_cast<T*>(a.y), static_cast<math_t<T>*>(a.m), o);
    }
    return;
  }
  const int64_t o = blockIdx.x;
  const int s = blockIdx.y;
  const auto m = out_max<T, K>(a, o);
  const int64_t base = map.out(o), r0 = s * a.chunk;
  const int64_t r1 = r0 + a.chunk < a.R ? r0 + a.chunk : a.R;
  A acc = Rd::init();
#pragma unroll 4
  for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x) acc = Rd::step(acc, x[base + map.at(r)], m);
  acc = block_reduce<Rd>(acc);
  if (threadIdx.x == 0) store<T, K>(a, o, s, acc, m);
}

/// Threads along outputs: blockDim (32, by), 32 consecutive outputs per block, the by rows
/// of threads interleaving over the reduced elements of split blockIdx.y.
template <class T, Accum K, class Map>
__global__ void __launch_bounds__(256) along_o(Args a, Map map) {
  using Rd = Reducer<T, K>;
  using A = typename Rd::A;
  const T* __restrict__ x = static_cast<const T*>(a.x);
  const int tx = threadIdx.x, ty = threadIdx.y, by = blockDim.y;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * 32 + tx;
  const int s = blockIdx.y;
  A acc = Rd::init();
  math_t<T> m = 0;
  if (o < a.O) {
    m = out_max<T, K>(a, o);
    const int64_t base = map.out(o), r0 = s * a.chunk;
    const int64_t r1 = r0 + a.chunk < a.R ? r0 + a.chunk : a.R;
#pragma unroll 4
    for (int64_t r = r0 + ty; r < r1; r += by) acc = Rd::step(acc, x[base + map.at(r)], m);
  }
  if (by > 1) {
    __shared__ A sh[8][33];
    sh[ty][tx] = acc;
    __syncthreads();
    if (ty != 0) return;
    for (int k = 1; k < by; ++k) acc = Rd::combine(acc, sh[k][tx]);
  }
  if (o < a.O) store<T, K>(a, o, s, acc, m);
}

/// Finishes outputs whose elements were split between blocks.
template <class T, Accum K>
__global__ void __launch_bounds__(256) combine_splits(Args a) {
  using Rd = Reducer<T, K>;
  using A = typename Rd::A;
  const A* p = static_cast<const A*>(a.partial);
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < a.O;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    A acc = p[o];
    for (int s = 1; s < a.splits; ++s) acc = Rd::combine(acc, p[s * a.O + o]);
    Rd::finish(a.fin, acc, a.R, out_max<T, K>(a, o), static_cast<T*>(a.y), static_cast<math_t<T>*>(a.m), o);
  }
}

// ---- planning (host) ----

struct Plan {
  bool along_r = false, warp_mode = false;
  int by = 1;
  int splits = 1;
  int64_t chunk = 0;
};

Plan plan_for(const Geom& g) {
  const int64_t O = g.out_numel, R = g.red_numel;
  Plan p;
  int64_t splits = 1;
  p.along_r = R > 16 && (g.layout == Layout::Rows || (g.layout == Layout::General && g.innermost_reduced));
  if (p.along_r) {
    // A warp per output unless a few long outputs would leave the device idle; then blocks
    // of 256 share an output, each taking at least 16K elements.
    p.warp_mode = R <= 2048 || O >= 2048;
    if (!p.warp_mode) splits = ceil_div(4096, O) < ceil_div(R, 16384) ? ceil_div(4096, O) : ceil_div(R, 16384);
  } else {
    p.by = R >= 64 ? 8 : 1;
    const int64_t bx = ceil_div(O, 32);
    if (bx < 512 && R >= 1024) splits = ceil_div(1024, bx) < ceil_div(R, 512) ? ceil_div(1024, bx) : ceil_div(R, 512);
  }
  if (splits < 1) splits = 1;
  if (splits > 1024) splits = 1024;
  p.chunk = R > 0 ? ceil_div(R, splits) : 0;
  p.splits = R > 0 ? static_cast<int>(ceil_div(R, p.chunk)) : 1;
  return p;
}

constexpr size_t align256(size_t n) { return (n + 255) / 256 * 256; }

size_t scratch_bytes(Op op, const Geom& g, const Plan& p) {
  size_t n = 0;
  if (op == Op::LogSumExp) n += align256(static_cast<size_t>(g.out_numel) * 8);
  if (p.splits > 1) n += align256(static_cast<size_t>(p.splits) * g.out_numel * 8);
  return n;
}

GenMap gen_map(const Geom& g) {
  GenMap m{};
  m.nk = g.nkept, m.nr = g.nred, m.small = g.small;
  for (int i = 0; i < kMaxDims; ++i) {
    m.kd[i] = i < g.nkept ? g.kept_dims[i] : 1, m.ks[i] = i < g.nkept ? g.kept_strides[i] : 0;
    m.rd[i] = i < g.nred ? g.red_dims[i] : 1, m.rs[i] = i < g.nred ? g.red_strides[i] : 0;
  }
  return m;
}

/// One pass of accumulation K finished by `fin`, under plan p.
template <class T, Accum K>
void run_pass(Args a, const Geom& g, const Plan& p, cudaStream_t s) {
  a.splits = p.splits, a.chunk = p.chunk;
  if (p.along_r) {
    const dim3 grid = p.warp_mode ? dim3(static_cast<unsigned>(ceil_div(a.O, 8) < 65536 * 16 ? ceil_div(a.O, 8) : 65536 * 16))
                                  : dim3(static_cast<unsigned>(a.O), static_cast<unsigned>(p.splits));
    if (g.layout == Layout::Rows)
      along_r<T, K, RowMap><<<grid, 256, 0, s>>>(a, RowMap{g.red_numel}, p.warp_mode);
    else
      along_r<T, K, GenMap><<<grid, 256, 0, s>>>(a, gen_map(g), p.warp_mode);
  } else {
    const dim3 grid(static_cast<unsigned>(ceil_div(a.O, 32)), static_cast<unsigned>(p.splits)), block(32, p.by);
    if (g.layout == Layout::Rows)
      along_o<T, K, RowMap><<<grid, block, 0, s>>>(a, RowMap{g.red_numel});
    else if (g.layout == Layout::Cols)
      along_o<T, K, ColMap><<<grid, block, 0, s>>>(a, ColMap{g.red_numel, g.inner});
    else
      along_o<T, K, GenMap><<<grid, block, 0, s>>>(a, gen_map(g));
  }
  if (p.splits > 1) {
    const int64_t blocks = ceil_div(a.O, 256) < 4096 ? ceil_div(a.O, 256) : 4096;
    combine_splits<T, K><<<static_cast<unsigned>(blocks), 256, 0, s>>>(a);
  }
}

template <Accum K> struct AccumTag { static constexpr Accum value = K; };

template <class T>
void run_op(Op op, const void* x, void* y, const Geom& g, void* scratch, cudaStream_t s) {
  const Plan p = plan_for(g);
  Args a{};
  a.x = x, a.y = y, a.O = g.out_numel, a.R = g.red_numel;
  char* sc = static_cast<char*>(scratch);
  if (op == Op::LogSumExp) {
    a.m = sc;
    sc += align256(static_cast<size_t>(g.out_numel) * 8);
  }
  a.partial = p.splits > 1 ? sc : nullptr;
  auto pass = [&](auto kind, Final fin) {
    a.fin = fin;
    run_pass<T, decltype(kind)::value>(a, g, p, s);
  };
  if constexpr (same<T, bool> || same<T, int8_t> || same<T, uint8_t>) {
    // Max and Min only (reduce_supports).
    if (op == Op::Max) pass(AccumTag<Accum::Max>{}, Final::Plain);
    else pass(AccumTag<Accum::Min>{}, Final::Plain);
  } else {
    switch (op) {
      case Op::Sum: pass(AccumTag<Accum::Sum>{}, Final::Plain); break;
      case Op::Mean: pass(AccumTag<Accum::Sum>{}, Final::Mean); break;
      case Op::Max: pass(AccumTag<Accum::Max>{}, Final::Plain); break;
      case Op::Min: pass(AccumTag<Accum::Min>{}, Final::Plain); break;
      case Op::Prod: pass(AccumTag<Accum::Prod>{}, Final::Plain); break;
      case Op::L1: pass(AccumTag<Accum::AbsSum>{}, Final::Plain); break;
      case Op::L2: pass(AccumTag<Accum::SqSum>{}, Final::Sqrt); break;
      case Op::LogSum: pass(AccumTag<Accum::Sum>{}, Final::Log); break;
      case Op::SumSquare: pass(AccumTag<Accum::SqSum>{}, Final::Plain); break;
      case Op::LogSumExp:
        // max first (into the m buffer), then max + log(sum(exp(x - max))).
        pass(AccumTag<Accum::Max>{}, Final::LseMax);
        pass(AccumTag<Accum::ExpSum>{}, Final::LseSum);
        break;
    }
  }
}


// ---- ArgMax / ArgMin ----

/// True when v, at a later index, replaces the current best b (kernels/cpu/arg_reduce.cpp):
/// NaN is the extreme; ties go to the first index, or to the last with select_last.
template <class A>
__device__ __forceinline__ bool beats(A v, A b, bool is_max, bool last) {
  const bool vn = is_nan(v), bn = is_nan(b);
  const bool better = is_max ? (last ? v >= b : v > b) : (last ? v <= b : v < b);
  return (bn && last && vn) || (!bn && (vn || better));
}

/// A candidate (value, index); index -1 is "no element yet".
template <class A>
struct Best {
  A v;
  int64_t i;
};

/// The winner of two candidates under the sequential rule: the later one wins iff it beats
/// the earlier one.
template <class A>
__device__ __forceinline__ Best<A> merge(Best<A> a, Best<A> b, bool is_max, bool last) {
  if (a.i < 0) return b;
  if (b.i < 0) return a;
  if (b.i > a.i) return beats(b.v, a.v, is_max, last) ? b : a;
  return beats(a.v, b.v, is_max, last) ? a : b;
}

template <class A>
__device__ __forceinline__ Best<A> warp_merge(Best<A> c, bool is_max, bool last) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) {
    Best<A> o;
    o.v = shfl_xor(c.v, m);
    o.i = static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(c.i), m));
    c = merge(c, o, is_max, last);
  }
  return c;
}

/// Rows ([outer, n], contiguous): a warp per row (grid-stride), or a block per row.
template <class T>
__global__ void __launch_bounds__(256) arg_rows(const T* __restrict__ x, int64_t* __restrict__ y, int64_t outer,
                                                int64_t n, bool is_max, bool last, bool warp_mode) {
  using A = acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t step = warp_mode ? 32 : blockDim.x;
  const int64_t per_block = warp_mode ? blockDim.x >> 5 : 1;
  const int64_t first = blockIdx.x * per_block + (warp_mode ? threadIdx.x >> 5 : 0);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * per_block;
  for (int64_t row = first; row < outer; row += stride) {
    const T* xr = x + row * n;
    Best<A> c{A(0), -1};
    for (int64_t r = warp_mode ? lane : threadIdx.x; r < n; r += step) {
      const A v = widen(xr[r]);
      if (c.i < 0 || beats(v, c.v, is_max, last)) c = Best<A>{v, r};
    }
    c = warp_merge(c, is_max, last);
    if (!warp_mode) {
      __shared__ A sv[32];
      __shared__ int64_t si[32];
      const int w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
      if (lane == 0) sv[w] = c.v, si[w] = c.i;
      __syncthreads();
      if (threadIdx.x == 0)
        for (int k = 1; k < nw; ++k) c = merge(c, Best<A>{sv[k], si[k]}, is_max, last);
      __syncthreads();  // sv/si are reused by the next row
      if (threadIdx.x == 0) y[row] = c.i;
    } else if (lane == 0) {
      y[row] = c.i;
    }
  }
}

/// Columns ([outer, n, inner], inner > 1): a thread per output walks its column.
template <class T>
__global__ void __launch_bounds__(256) arg_cols(const T* __restrict__ x, int64_t* __restrict__ y, int64_t outer,
                                                int64_t n, int64_t inner, bool is_max, bool last) {
  using A = acc_t<T>;
  const int64_t total = outer * inner;
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < total;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const T* base = x + (o / inner) * n * inner + o % inner;
    A best = widen(base[0]);
    int64_t idx = 0;
    for (int64_t r = 1; r < n; ++r) {
      const A v = widen(base[r * inner]);
      if (beats(v, best, is_max, last)) best = v, idx = r;
    }
    y[o] = idx;
  }
}

/// Calls f(Tag<T>{}) for dtype t (every numeric dtype and bool).
template <class F>
void dispatch(DType t, F&& f) {
  switch (t) {
    case DType::F32: f(Tag<float>{}); break;
    case DType::F64: f(Tag<double>{}); break;
    case DType::F16: f(Tag<__half>{}); break;
    case DType::BF16: f(Tag<__nv_bfloat16>{}); break;
    case DType::I8: f(Tag<int8_t>{}); break;
    case DType::I16: f(Tag<int16_t>{}); break;
    case DType::I32: f(Tag<int32_t>{}); break;
    case DType::I64: f(Tag<int64_t>{}); break;
    case DType::U8: f(Tag<uint8_t>{}); break;
    case DType::U16: f(Tag<uint16_t>{}); break;
    case DType::U32: f(Tag<uint32_t>{}); break;
    case DType::U64: f(Tag<uint64_t>{}); break;
    case DType::Bool: f(Tag<bool>{}); break;
  }
}

}  // namespace

size_t reduce_scratch_bytes(Op op, DType, const Geom& g) { return scratch_bytes(op, g, plan_for(g)); }

void launch_reduce(Op op, DType t, const void* x, void* y, const Geom& g, void* scratch, cudaStream_t s) {
  if (g.out_numel <= 0 || !reduce_supports(op, t)) return;
  dispatch(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!same<T, int16_t> && !same<T, uint16_t>) run_op<T>(op, x, y, g, scratch, s);
  });
}

void launch_arg_reduce(bool is_max, bool select_last, DType t, const void* x, int64_t* y, int64_t outer,
                       int64_t n, int64_t inner, cudaStream_t s) {
  if (outer * inner <= 0 || n <= 0 || !arg_supports(t)) return;
  dispatch(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!same<T, bool>) {
      const T* xt = static_cast<const T*>(x);
      if (inner > 1) {
        const int64_t blocks = ceil_div(outer * inner, 256);
        arg_cols<T><<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), 256, 0, s>>>(xt, y, outer, n, inner,
                                                                                          is_max, select_last);
      } else {
        // A warp per row unless a few long rows would leave the device idle.
        const bool warp_mode = n <= 8192 || outer >= 1024;
        const int64_t blocks = warp_mode ? ceil_div(outer, 8) : outer;
        arg_rows<T><<<static_cast<unsigned>(blocks < 65536 * 16 ? blocks : 65536 * 16), 256, 0, s>>>(
            xt, y, outer, n, is_max, select_last, warp_mode);
      }
    }
  });
}

}  // namespace onyx::cuda::red
