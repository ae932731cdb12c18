// Normalization device code, in float for the 16-bit floats (double for double).
//   Row norms (LayerNorm, RMSNorm, SkipLayerNorm): a warp per row of <= 1024 values held in
//   registers, else a block per row (values cached in shared memory when they fit): two-pass
//   mean / variance over the cached values, then the affine pass.
//   Group / instance / batch norms: `moments` writes Welford partials (count, mean, M2) of
//   every statistics group, split over several blocks when groups are few and long; a small
//   kernel merges them (in double) into per-(image, channel) or per-channel coefficients
//   a, b; `apply` computes y = x * a + b, as kernels/cpu/normalization.cpp does.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/normalization_launch.h"

namespace onyx::cuda::norm {
namespace {

using dev::acc_t, dev::ceil_div, dev::clamp_grid, dev::dsqrt, dev::narrow, dev::warp_sum, dev::widen;

/// Element i of a parameter of runtime dtype t, as A.
template <class A>
__device__ __forceinline__ A ld(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<A>(static_cast<const float*>(p)[i]);
    case DType::F64: return static_cast<A>(static_cast<const double*>(p)[i]);
    case DType::F16: return static_cast<A>(__half2float(static_cast<const __half*>(p)[i]));
    case DType::BF16: return static_cast<A>(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]));
  }
  return A(0);
}
/// Stores v as element i of p of runtime dtype t.
__device__ __forceinline__ void st(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(p)[i] = v; break;
    case DType::F16: static_cast<__half*>(p)[i] = __float2half_rn(static_cast<float>(v)); break;
    case DType::BF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(static_cast<float>(v)); break;
  }
}

/// Sum over the block, returned to every thread. `sh` holds 33 values.
template <class A> __device__ __forceinline__ A block_sum(A v, A* sh) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  if (lane == 0) sh[w] = v;
  __syncthreads();
  if (w == 0) {
    v = lane < nw ? sh[lane] : A(0);
    v = warp_sum(v);
    if (lane == 0) sh[32] = v;
  }
  __syncthreads();
  return sh[32];  // sh[32] is rewritten only after the next call's first barrier
}

// ---- row norms ----

/// v of (row, j): x plus the skip row and the added bias; stored to sum_out when asked.
template <class T>
struct RowSrc {
  const T* xr;
  const T* sr;
  const T* ba;
  T* so;
  __device__ __forceinline__ RowSrc(const RowNorm& a, int64_t row)
      : xr(static_cast<const T*>(a.x) + row * a.cols),
        sr(a.skip ? static_cast<const T*>(a.skip) + (row % a.skip_rows) * a.cols : nullptr),
        ba(static_cast<const T*>(a.bias_add)),
        so(a.sum_out ? static_cast<T*>(a.sum_out) + row * a.cols : nullptr) {}
  __device__ __forceinline__ acc_t<T> operator()(int64_t j, bool store_sum) const {
    acc_t<T> v = widen(xr[j]);
    if (sr) v += widen(sr[j]);
    if (ba) v += widen(ba[j]);
    if (store_sum && so) so[j] = narrow<T>(v);
    return v;
  }
};

template <class T, class A>
__device__ __forceinline__ void row_out(const RowNorm& a, int64_t row, int64_t j, A v, A mean, A inv) {
  A out = (v - mean) * inv * ld<A>(a.scale, a.scale_t, j);
  if (a.shift) out += ld<A>(a.shift, a.shift_t, j);
  static_cast<T*>(a.y)[row * a.cols + j] = narrow<T>(out);
}
__device__ __forceinline__ void row_stats(const RowNorm& a, int64_t row, double mean, double inv) {
  if (a.mean_out) st(a.mean_out, a.stat_t, row, mean);
  if (a.inv_out) st(a.inv_out, a.stat_t, row, inv);
}

template <class T, int kPer>
__global__ void __launch_bounds__(256) row_norm_warp(RowNorm a) {
  using A = acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t wpb = blockDim.x >> 5;
  const int cols = static_cast<int>(a.cols);
  for (int64_t row = blockIdx.x * wpb + (threadIdx.x >> 5); row < a.rows; row += gridDim.x * wpb) {
    const RowSrc<T> src(a, row);
    A v[kPer];
    A sum = 0;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int j = lane + 32 * k;
      v[k] = j < cols ? src(j, true) : A(0);
      sum += v[k];
    }
    const A mean = a.rms ? A(0) : warp_sum(sum) / static_cast<A>(cols);
    A sq = 0;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const A d = lane + 32 * k < cols ? v[k] - mean : A(0);
      sq += d * d;
    }
    const A inv = A(1) / dsqrt(warp_sum(sq) / static_cast<A>(cols) + static_cast<A>(a.epsilon));
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int j = lane + 32 * k;
      if (j < cols) row_out<T>(a, row, j, v[k], mean, inv);
    }
    if (lane == 0) row_stats(a, row, mean, inv);
  }
}

/// A block per row. With `cache`, each thread keeps the values it reads in dynamic shared
/// memory (only its own: the passes need no barrier between them); otherwise they are reread.
template <class T>
__global__ void __launch_bounds__(256) row_norm_block(RowNorm a, bool cache) {
  using A = acc_t<T>;
  extern __shared__ __align__(16) unsigned char dyn[];
  A* buf = reinterpret_cast<A*>(dyn);
  __shared__ A sh[33];
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const RowSrc<T> src(a, row);
    A sum = 0;
    for (int64_t j = threadIdx.x; j < a.cols; j += blockDim.x) {
      const A v = src(j, true);
      if (cache) buf[j] = v;
      sum += v;
    }
    const A n = static_cast<A>(a.cols);
    const A mean = a.rms ? A(0) : block_sum(sum, sh) / n;
    A sq = 0;
    for (int64_t j = threadIdx.x; j < a.cols; j += blockDim.x) {
      const A d = (cache ? buf[j] : src(j, false)) - mean;
      sq += d * d;
    }
    const A inv = A(1) / dsqrt(block_sum(sq, sh) / n + static_cast<A>(a.epsilon));
    for (int64_t j = threadIdx.x; j < a.cols; j += blockDim.x)
      row_out<T>(a, row, j, cache ? buf[j] : src(j, false), mean, inv);
    if (threadIdx.x == 0) row_stats(a, row, mean, inv);
  }
}

template <class T>
void run_row_norm(const RowNorm& a, cudaStream_t s) {
  if (a.cols <= 1024) {
    const unsigned grid = clamp_grid(ceil_div(a.rows, 8), 65536 * 8);
    if (a.cols <= 32) row_norm_warp<T, 1><<<grid, 256, 0, s>>>(a);
    else if (a.cols <= 64) row_norm_warp<T, 2><<<grid, 256, 0, s>>>(a);
    else if (a.cols <= 128) row_norm_warp<T, 4><<<grid, 256, 0, s>>>(a);
    else if (a.cols <= 256) row_norm_warp<T, 8><<<grid, 256, 0, s>>>(a);
    else if (a.cols <= 512) row_norm_warp<T, 16><<<grid, 256, 0, s>>>(a);
    else row_norm_warp<T, 32><<<grid, 256, 0, s>>>(a);
    return;
  }
  const size_t bytes = static_cast<size_t>(a.cols) * sizeof(acc_t<T>);
  const bool cache = bytes <= 48 * 1024;
  row_norm_block<T><<<clamp_grid(a.rows, 65536 * 8), 256, cache ? bytes : 0, s>>>(a, cache);
}

// ---- parameter broadcast ----

__global__ void __launch_bounds__(256) expand_kernel(const unsigned char* __restrict__ p, unsigned char* __restrict__ out,
                                                     int eb, int64_t n, Expand e) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t off = 0, rem = i;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d)
      if (d < e.ndims) {
        off += (rem % e.dims[d]) * e.strides[d];
        rem /= e.dims[d];
      }
    if (eb == 2) reinterpret_cast<uint16_t*>(out)[i] = reinterpret_cast<const uint16_t*>(p)[off];
    else if (eb == 4) reinterpret_cast<uint32_t*>(out)[i] = reinterpret_cast<const uint32_t*>(p)[off];
    else reinterpret_cast<uint64_t*>(out)[i] = reinterpret_cast<const uint64_t*>(p)[off];
  }
}

// ---- statistics groups (group, instance and batch norms) ----

/// Welford state: count, mean, sum of squared deviations.
template <class A>
struct Welford {
  A n, mean, m2;
};
template <class A> __device__ __forceinline__ void add(Welford<A>& w, A x) {
  w.n += A(1);
  const A d = x - w.mean;
  w.mean += d / w.n;
  w.m2 += d * (x - w.mean);
}
template <class A> __device__ __forceinline__ Welford<A> merge(Welford<A> a, Welford<A> b) {
  if (a.n == A(0)) return b;
  if (b.n == A(0)) return a;
  const A n = a.n + b.n, d = b.mean - a.mean, fb = b.n / n;
  return {n, a.mean + d * fb, a.m2 + b.m2 + d * d * a.n * fb};
}
template <class A> __device__ __forceinline__ Welford<A> warp_merge(Welford<A> w) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1)
    w = merge(w, Welford<A>{__shfl_xor_sync(0xffffffffu, w.n, m), __shfl_xor_sync(0xffffffffu, w.mean, m),
                            __shfl_xor_sync(0xffffffffu, w.m2, m)});
  return w;
}

/// How `moments` walks the G statistics groups: group g holds `runs` runs of L contiguous
/// values, run k at g * L + k * G * L (groups and instances: one run; batch norm: a run per
/// image). Split s of a group takes its flattened elements [s * chunk, (s + 1) * chunk).
struct Groups {
  int64_t G, runs, L, chunk;
  int splits;
};

Groups plan_groups(int64_t G, int64_t runs, int64_t L) {
  const int64_t R = runs * L;
  // Enough blocks to fill the device, at least 4K values each, at most 4M (float counts
  // stay exact below 2^24).
  int64_t splits = ceil_div(2048, G < 1 ? 1 : G);
  if (splits > ceil_div(R, 4096)) splits = ceil_div(R, 4096);
  if (splits < ceil_div(R, int64_t(1) << 22)) splits = ceil_div(R, int64_t(1) << 22);
  if (splits < 1) splits = 1;
  if (splits > 65535) splits = 65535;
  Groups p{G, runs, L, R > 0 ? ceil_div(R, splits) : 0, 1};
  p.splits = R > 0 ? static_cast<int>(ceil_div(R, p.chunk)) : 1;
  return p;
}

/// Welford partials of every (group, split), as three doubles each, [G, splits].
template <class T>
__global__ void __launch_bounds__(256) moments(const T* __restrict__ x, Groups p, double* __restrict__ partial) {
  using A = acc_t<T>;
  const int64_t g = blockIdx.x;
  const int s = blockIdx.y;
  const int64_t R = p.runs * p.L, r0 = s * p.chunk, r1 = r0 + p.chunk < R ? r0 + p.chunk : R;
  const T* base = x + g * p.L;
  Welford<A> w{0, 0, 0};
  if (p.runs == 1) {
    for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x) add(w, static_cast<A>(widen(base[r])));
  } else {
    const int64_t run_stride = p.G * p.L;
    for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x)
      add(w, static_cast<A>(widen(base[(r / p.L) * run_stride + r % p.L])));
  }
  __shared__ A sn[32], sm[32], sq[32];
  w = warp_merge(w);
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  if (lane == 0) sn[wi] = w.n, sm[wi] = w.mean, sq[wi] = w.m2;
  __syncthreads();
  if (wi == 0) {
    w = lane < nw ? Welford<A>{sn[lane], sm[lane], sq[lane]} : Welford<A>{0, 0, 0};
    w = warp_merge(w);
    if (lane == 0) {
      double* out = partial + (g * p.splits + s) * 3;
      out[0] = w.n, out[1] = w.mean, out[2] = w.m2;
    }
  }
}

/// Mean and biased variance of group g from its partials (0 and 0 for an empty group).
__device__ __forceinline__ void group_stats(const double* partial, int splits, int64_t g, double& mean, double& var) {
  Welford<double> w{0, 0, 0};
  for (int s = 0; s < splits; ++s) {
    const double* q = partial + (g * splits + s) * 3;
    w = merge(w, Welford<double>{q[0], q[1], q[2]});
  }
  mean = w.n > 0 ? w.mean : 0.0;
  var = w.n > 0 ? w.m2 / w.n : 0.0;
}

/// coef[2 * (n * C + c)] = a, [+ 1] = b with y = x * a + b for group norm.
template <class A>
__global__ void __launch_bounds__(256) group_coeffs(GroupNorm a, const double* __restrict__ partial, int splits,
                                                    A* __restrict__ coef) {
  const int64_t cg = a.C / a.groups;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < a.N * a.C;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / a.C, c = i % a.C, g = c / cg, pi = a.per_group ? g : c;
    double mean, var;
    group_stats(partial, splits, n * a.groups + g, mean, var);
    const double k = ld<double>(a.scale, a.scale_t, pi) / sqrt(var + a.epsilon);
    coef[2 * i] = static_cast<A>(k);
    coef[2 * i + 1] = static_cast<A>(ld<double>(a.bias, a.bias_t, pi) - mean * k);
  }
}

/// coef for batch norm: one (a, b) per channel, or per element (P = C * S) for the old
/// per-element parameters; training also writes the statistics outputs.
template <class A>
__global__ void __launch_bounds__(256) batch_coeffs(BatchNorm a, int64_t P, const double* __restrict__ partial,
                                                    int splits, A* __restrict__ coef) {
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < P;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = P == a.C ? p : p / a.S;
    auto at = [&](int64_t n) { return n == P ? p : c; };  // index of p in a param of n values
    double mean, var;
    if (a.training) {
      group_stats(partial, splits, c, mean, var);
      const double m0 = ld<double>(a.mean, a.mean_t, at(a.mean_n)), v0 = ld<double>(a.var, a.var_t, at(a.var_n));
      if (a.out_running_mean) st(a.out_running_mean, a.mean_t, c, m0 * a.momentum + mean * (1.0 - a.momentum));
      if (a.out_running_var) st(a.out_running_var, a.var_t, c, v0 * a.momentum + var * (1.0 - a.momentum));
      if (a.out_saved_mean) st(a.out_saved_mean, a.mean_t, c, mean);
      if (a.out_saved_var) st(a.out_saved_var, a.var_t, c, var);
    } else {
      mean = ld<double>(a.mean, a.mean_t, at(a.mean_n));
      var = ld<double>(a.var, a.var_t, at(a.var_n));
    }
    const double k = ld<double>(a.scale, a.scale_t, at(a.scale_n)) / sqrt(var + a.epsilon);
    coef[2 * p] = static_cast<A>(k);
    coef[2 * p + 1] = static_cast<A>(ld<double>(a.bias, a.bias_t, at(a.bias_n)) - mean * k);
  }
}

/// y[i] = x[i] * a[q] + b[q], q = (i / S) % P.
template <class T, class I>
__global__ void __launch_bounds__(256) apply(const T* __restrict__ x, T* __restrict__ y,
                                             const acc_t<T>* __restrict__ coef, I n, I S, I P) {
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n; i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I q = (i / S) % P;
    y[i] = narrow<T>(widen(x[i]) * coef[2 * q] + coef[2 * q + 1]);
  }
}

template <class T>
void run_apply(const void* x, void* y, const acc_t<T>* coef, int64_t n, int64_t S, int64_t P, cudaStream_t s) {
  const unsigned grid = clamp_grid(ceil_div(n, 256), 65536);
  if (n < (int64_t(1) << 31))  // 32-bit index math; i + grid stride cannot wrap
    apply<T, uint32_t><<<grid, 256, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), coef,
                                              static_cast<uint32_t>(n), static_cast<uint32_t>(S),
                                              static_cast<uint32_t>(P));
  else
    apply<T, int64_t><<<grid, 256, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), coef, n, S, P);
}

constexpr size_t align256(size_t n) { return (n + 255) / 256 * 256; }

size_t acc_bytes(DType t) { return t == DType::F64 ? 8 : 4; }

template <class F>
void dispatch(DType t, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); break;
    case DType::F64: f(double{}); break;
    case DType::F16: f(__half{}); break;
    case DType::BF16: f(__nv_bfloat16{}); break;
  }
}

Groups group_norm_groups(const GroupNorm& a) { return plan_groups(a.N * a.groups, 1, (a.C / a.groups) * a.S); }
Groups batch_norm_groups(const BatchNorm& a) { return plan_groups(a.C, a.N, a.S); }
int64_t batch_norm_params(const BatchNorm& a) {
  return (a.scale_n == a.C * a.S && a.S > 1) ? a.C * a.S : a.C;
}

}  // namespace

void launch_row_norm(DType t, const RowNorm& a, cudaStream_t s) {
  if (a.rows <= 0 || a.cols <= 0) return;
  dispatch(t, [&](auto tag) { run_row_norm<decltype(tag)>(a, s); });
}

void launch_expand(const void* p, void* out, int elem_bytes, int64_t n, const Expand& e, cudaStream_t s) {
  if (n <= 0) return;
  expand_kernel<<<clamp_grid(ceil_div(n, 256), 4096), 256, 0, s>>>(static_cast<const unsigned char*>(p),
                                                                     static_cast<unsigned char*>(out), elem_bytes, n, e);
}

size_t group_norm_scratch_bytes(DType t, const GroupNorm& a) {
  const Groups p = group_norm_groups(a);
  return align256(static_cast<size_t>(p.G) * p.splits * 3 * sizeof(double)) +
         align256(static_cast<size_t>(a.N * a.C) * 2 * acc_bytes(t));
}

void launch_group_norm(DType t, const GroupNorm& a, void* scratch, cudaStream_t s) {
  if (a.N * a.C * a.S <= 0) return;
  const Groups p = group_norm_groups(a);
  double* partial = static_cast<double*>(scratch);
  void* coef = static_cast<char*>(scratch) + align256(static_cast<size_t>(p.G) * p.splits * 3 * sizeof(double));
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    moments<T><<<dim3(static_cast<unsigned>(p.G), static_cast<unsigned>(p.splits)), 256, 0, s>>>(
        static_cast<const T*>(a.x), p, partial);
    group_coeffs<A><<<clamp_grid(ceil_div(a.N * a.C, 256), 4096), 256, 0, s>>>(a, partial, p.splits,
                                                                                static_cast<A*>(coef));
    run_apply<T>(a.x, a.y, static_cast<const A*>(coef), a.N * a.C * a.S, a.S, a.N * a.C, s);
  });
}

size_t batch_norm_scratch_bytes(DType t, const BatchNorm& a) {
  size_t n = align256(static_cast<size_t>(batch_norm_params(a)) * 2 * acc_bytes(t));
  if (a.training) {
    const Groups p = batch_norm_groups(a);
    n += align256(static_cast<size_t>(p.G) * p.splits * 3 * sizeof(double));
  }
  return n;
}

void launch_batch_norm(DType t, const BatchNorm& a, void* scratch, cudaStream_t s) {
  if (a.C <= 0) return;
  const int64_t P = batch_norm_params(a);
  void* coef = scratch;
  double* partial = nullptr;
  Groups p{};
  if (a.training) {
    p = batch_norm_groups(a);
    partial = reinterpret_cast<double*>(static_cast<char*>(scratch) +
                                        align256(static_cast<size_t>(P) * 2 * acc_bytes(t)));
  }
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    if (a.training)
      moments<T><<<dim3(static_cast<unsigned>(p.G), static_cast<unsigned>(p.splits)), 256, 0, s>>>(
          static_cast<const T*>(a.x), p, partial);
    batch_coeffs<A><<<clamp_grid(ceil_div(P, 256), 4096), 256, 0, s>>>(a, P, partial, p.splits,
                                                                       static_cast<A*>(coef));
    const int64_t n = a.N * a.C * a.S;
    if (n > 0) run_apply<T>(a.x, a.y, static_cast<const A*>(coef), n, P == a.C ? a.S : 1, P, s);
  });
}

}  // namespace onyx::cuda::norm
