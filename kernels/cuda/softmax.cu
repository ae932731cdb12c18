// Softmax, LogSoftmax and Hardmax device code, in float for the 16-bit floats.
//   softmax_warp:  rows of n <= 1024: a warp per row, the row held in registers (one read).
//   softmax_block: longer rows: a block per row, an online max/sum pass, then the write pass.
//   softmax_cols:  axis not innermost (opset >= 13): a thread per column, same two passes.
// The max and the sum of exponentials are kept online (running max m, sum s of exp(x - m)),
// so a row is read once before the write pass. Results match kernels/cpu/softmax.cpp: NaN
// anywhere in a row, or a row whose maximum is +-inf, gives NaN; Hardmax picks the first
// maximum (index 0 when x[0] is NaN, since nothing compares greater than it there).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/softmax_launch.h"

namespace onyx::cuda::sm {
namespace {

using dev::acc_t, dev::ceil_div, dev::clamp_grid, dev::dexp, dev::dfinite, dev::dlog, dev::inf, dev::nan,
    dev::narrow, dev::widen;

/// Running max m (never NaN: NaN is not greater) and s = sum of exp(x - m). An element equal
/// to m = -inf adds 0 rather than exp(NaN): whether such a row is all -inf is decided at the
/// end from m (the CPU's answer then is NaN).
template <class A>
struct State {
  A m, s;
};
template <class A> __device__ __forceinline__ State<A> empty_state() { return {-inf<A>(), A(0)}; }
template <class A> __device__ __forceinline__ void add(State<A>& st, A x) {
  if (x > st.m) {
    st.s = st.s * dexp(st.m - x) + A(1);
    st.m = x;
  } else {
    st.s += x == -inf<A>() ? A(0) : dexp(x - st.m);  // NaN x makes s NaN
  }
}
template <class A> __device__ __forceinline__ State<A> merge(State<A> a, State<A> b) {
  const A m = a.m > b.m ? a.m : b.m;
  return {m, (a.m == m ? a.s : a.s * dexp(a.m - m)) + (b.m == m ? b.s : b.s * dexp(b.m - m))};
}
template <class A> __device__ __forceinline__ State<A> warp_merge(State<A> st) {
#pragma unroll
  for (int k = 16; k > 0; k >>= 1)
    st = merge(st, State<A>{__shfl_xor_sync(0xffffffffu, st.m, k), __shfl_xor_sync(0xffffffffu, st.s, k)});
  return st;
}

/// Hardmax candidate: the first maximum among non-NaN values (i = -1: none yet).
template <class A>
struct Arg {
  A v;
  int64_t i;
};
/// Elements arrive in increasing index order per thread.
template <class A> __device__ __forceinline__ void add(Arg<A>& c, A v, int64_t i) {
  if (v == v && (c.i < 0 || v > c.v)) c = {v, i};
}
template <class A> __device__ __forceinline__ Arg<A> merge(Arg<A> a, Arg<A> b) {
  if (a.i < 0) return b;
  if (b.i < 0) return a;
  return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}
template <class A> __device__ __forceinline__ Arg<A> warp_merge(Arg<A> c) {
#pragma unroll
  for (int k = 16; k > 0; k >>= 1)
    c = merge(c, Arg<A>{__shfl_xor_sync(0xffffffffu, c.v, k),
                        static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(c.i), k))});
  return c;
}
/// The CPU's Hardmax index: 0 when x[0] is NaN (nothing is greater) or every value is NaN.
template <class A> __device__ __forceinline__ int64_t hard_index(const Arg<A>& c, A x0) {
  return (x0 != x0 || c.i < 0) ? 0 : c.i;
}

/// What an element becomes once its row's state is known.
template <class A>
struct Finish {
  Kind kind;
  A m, scale;  // Softmax: exp(x - m) * scale; LogSoftmax: x - scale
  bool bad;    // the row's maximum is +-inf (or the row is all NaN): NaN out
  int64_t idx;  // Hardmax
  __device__ __forceinline__ Finish(Kind k, State<A> st, int64_t hard) : kind(k), m(st.m), idx(hard) {
    bad = !dfinite(st.m);
    scale = k == Kind::Softmax ? A(1) / st.s : st.m + dlog(st.s);
  }
  __device__ __forceinline__ A operator()(A x, int64_t j) const {
    if (kind == Kind::Hardmax) return j == idx ? A(1) : A(0);
    if (bad) return nan<A>();
    return kind == Kind::Softmax ? dexp(x - m) * scale : x - scale;
  }
};

template <class T, int kPer>
__global__ void __launch_bounds__(256) softmax_warp(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int n,
                                                    Kind kind) {
  using A = acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t wpb = blockDim.x >> 5;
  for (int64_t row = blockIdx.x * wpb + (threadIdx.x >> 5); row < rows; row += gridDim.x * wpb) {
    const T* xr = x + row * n;
    T* yr = y + row * n;
    A v[kPer];
    State<A> st = empty_state<A>();
    Arg<A> c{A(0), -1};
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int j = lane + 32 * k;
      v[k] = j < n ? widen(xr[j]) : A(0);
      if (j < n) {
        if (kind == Kind::Hardmax) add(c, v[k], j);
        else add(st, v[k]);
      }
    }
    int64_t idx = 0;
    if (kind == Kind::Hardmax) idx = hard_index(warp_merge(c), widen(xr[0]));
    else st = warp_merge(st);
    const Finish<A> fin(kind, st, idx);
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int j = lane + 32 * k;
      if (j < n) yr[j] = narrow<T>(fin(v[k], j));
    }
  }
}

template <class T>
__global__ void __launch_bounds__(256) softmax_block(const T* __restrict__ x, T* __restrict__ y, int64_t rows,
                                                     int64_t n, Kind kind) {
  using A = acc_t<T>;
  __shared__ A sh_a[32], sh_b[32];
  __shared__ int64_t sh_i[32];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * n;
    T* yr = y + row * n;
    State<A> st = empty_state<A>();
    Arg<A> c{A(0), -1};
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const A v = widen(xr[j]);
      if (kind == Kind::Hardmax) add(c, v, j);
      else add(st, v);
    }
    if (kind == Kind::Hardmax) {
      c = warp_merge(c);
      if (lane == 0) sh_a[w] = c.v, sh_i[w] = c.i;
    } else {
      st = warp_merge(st);
      if (lane == 0) sh_a[w] = st.m, sh_b[w] = st.s;
    }
    __syncthreads();
    if (w == 0) {
      if (kind == Kind::Hardmax) {
        c = lane < nw ? Arg<A>{sh_a[lane], sh_i[lane]} : Arg<A>{A(0), -1};
        c = warp_merge(c);
        if (lane == 0) sh_i[0] = hard_index(c, widen(xr[0]));
      } else {
        st = lane < nw ? State<A>{sh_a[lane], sh_b[lane]} : empty_state<A>();
        st = warp_merge(st);
        if (lane == 0) sh_a[0] = st.m, sh_b[0] = st.s;
      }
    }
    __syncthreads();
    const bool hard = kind == Kind::Hardmax;
    const Finish<A> fin(kind, hard ? empty_state<A>() : State<A>{sh_a[0], sh_b[0]}, hard ? sh_i[0] : 0);
    __syncthreads();  // the shared slots are rewritten by the next row
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = narrow<T>(fin(widen(xr[j]), j));
  }
}

template <class T>
__global__ void __launch_bounds__(256) softmax_cols(const T* __restrict__ x, T* __restrict__ y, int64_t outer,
                                                    int64_t n, int64_t inner, Kind kind) {
  using A = acc_t<T>;
  const int64_t total = outer * inner;
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < total;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t base = (o / inner) * n * inner + o % inner;
    State<A> st = empty_state<A>();
    Arg<A> c{A(0), -1};
    for (int64_t r = 0; r < n; ++r) {
      const A v = widen(x[base + r * inner]);
      if (kind == Kind::Hardmax) add(c, v, r);
      else add(st, v);
    }
    const Finish<A> fin(kind, st, kind == Kind::Hardmax ? hard_index(c, widen(x[base])) : 0);
    for (int64_t r = 0; r < n; ++r) y[base + r * inner] = narrow<T>(fin(widen(x[base + r * inner]), r));
  }
}

template <class T>
void run(Kind kind, const T* x, T* y, int64_t outer, int64_t n, int64_t inner, cudaStream_t s) {
  if (inner > 1) {
    softmax_cols<T><<<clamp_grid(ceil_div(outer * inner, 256), 65536), 256, 0, s>>>(x, y, outer, n, inner, kind);
    return;
  }
  if (n <= 1024) {
    const unsigned grid = clamp_grid(ceil_div(outer, 8), 65536 * 8);
    const int ni = static_cast<int>(n);
    if (n <= 32) softmax_warp<T, 1><<<grid, 256, 0, s>>>(x, y, outer, ni, kind);
    else if (n <= 64) softmax_warp<T, 2><<<grid, 256, 0, s>>>(x, y, outer, ni, kind);
    else if (n <= 128) softmax_warp<T, 4><<<grid, 256, 0, s>>>(x, y, outer, ni, kind);
    else if (n <= 256) softmax_warp<T, 8><<<grid, 256, 0, s>>>(x, y, outer, ni, kind);
    else if (n <= 512) softmax_warp<T, 16><<<grid, 256, 0, s>>>(x, y, outer, ni, kind);
    else softmax_warp<T, 32><<<grid, 256, 0, s>>>(x, y, outer, ni, kind);
    return;
  }
  softmax_block<T><<<clamp_grid(outer, 65536 * 8), 256, 0, s>>>(x, y, outer, n, kind);
}

}  // namespace

void launch_softmax(Kind kind, DType t, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
                    cudaStream_t s) {
  if (outer <= 0 || n <= 0 || inner <= 0) return;
  switch (t) {
    case DType::F32: run(kind, static_cast<const float*>(x), static_cast<float*>(y), outer, n, inner, s); break;
    case DType::F64: run(kind, static_cast<const double*>(x), static_cast<double*>(y), outer, n, inner, s); break;
    case DType::F16: run(kind, static_cast<const __half*>(x), static_cast<__half*>(y), outer, n, inner, s); break;
    case DType::BF16:
      run(kind, static_cast<const __nv_bfloat16*>(x), static_cast<__nv_bfloat16*>(y), outer, n, inner, s);
      break;
  }
}

}  // namespace onyx::cuda::sm
