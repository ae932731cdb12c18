// Pooling kernels (see pool_launch.h). Windowed pooling: one thread per output, visiting only
// the window's in-input taps (a kernel far larger than the input costs its in-input taps).
// Global pooling: a warp per plane for small planes, a block per plane otherwise, reduced with
// warp shuffles.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/pool_launch.h"

namespace onyx::cuda::pooling {
namespace {

using dev::grid_upto_64k, dev::kThreads, dev::put, dev::widen;

// Arithmetic type (float for the 16-bit floats, double for double and the integers, as the
// CPU kernel's Acc): not dev::acc_t, which leaves the integers as they are.
template <typename T> struct AccOf { using type = float; };
template <> struct AccOf<double> { using type = double; };
template <> struct AccOf<int8_t> { using type = double; };
template <> struct AccOf<uint8_t> { using type = double; };

/// The type's lowest finite value (numeric_limits<T>::lowest()).
template <typename T> __host__ __device__ __forceinline__ T lowest();
template <> __host__ __device__ __forceinline__ float lowest<float>() { return -3.402823466e+38f; }
template <> __host__ __device__ __forceinline__ double lowest<double>() { return -1.7976931348623157e+308; }
template <> __host__ __device__ __forceinline__ __half lowest<__half>() {
  return __ushort_as_half(static_cast<unsigned short>(0xFBFFu));  // -65504
}
template <> __host__ __device__ __forceinline__ __nv_bfloat16 lowest<__nv_bfloat16>() {
  return __ushort_as_bfloat16(static_cast<unsigned short>(0xFF7Fu));  // -3.39e38
}
template <> __host__ __device__ __forceinline__ int8_t lowest<int8_t>() { return -128; }
template <> __host__ __device__ __forceinline__ uint8_t lowest<uint8_t>() { return 0; }

__host__ __device__ __forceinline__ int64_t floor_div(int64_t a, int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}

/// [k0, k1): the taps k in [0, K) whose position base + k * D lies in [lo, hi).
__host__ __device__ __forceinline__ void tap_range(int64_t base, int64_t D, int64_t K, int64_t lo, int64_t hi,
                                          int64_t& k0, int64_t& k1) {
  k0 = -floor_div(base - lo, D);  // ceil((lo - base) / D)
  if (k0 < 0) k0 = 0;
  k1 = floor_div(hi - 1 - base, D) + 1;
  if (k1 > K) k1 = K;
  if (k1 < k0) k1 = k0;
}

/// Output i (flat over [planes, out0, out1, out2]) of a windowed pooling.
template <typename T>
__host__ __device__ void pool_one(const T* __restrict__ x, T* __restrict__ y,
                                  int64_t* __restrict__ indices, int64_t i, const Window& w,
                                  Kind kind, bool count_include_pad, bool column_major,
                                  typename AccOf<T>::type p) {
  using A = typename AccOf<T>::type;
  const int64_t in_sz = w.in[0] * w.in[1] * w.in[2];
  int64_t t = i;
  int64_t o[3];
  o[2] = t % w.out[2];
  t /= w.out[2];
  o[1] = t % w.out[1];
  t /= w.out[1];
  o[0] = t % w.out[0];
  const int64_t plane = t / w.out[0];
  int64_t base[3], k0[3], k1[3];
  double count = 1;  // taps in the pads may number 2^31 per axis
  for (int d = 0; d < 3; ++d) {
    base[d] = o[d] * w.stride[d] - w.pad_l[d];
    tap_range(base[d], w.dil[d], w.k[d], 0, w.in[d], k0[d], k1[d]);
    if (kind != Kind::Max) {
      int64_t c0 = k0[d], c1 = k1[d];
      if (count_include_pad)
        tap_range(base[d], w.dil[d], w.k[d], -w.pad_l[d], w.in[d] + w.pad_r[d], c0, c1);
      count *= static_cast<double>(c1 - c0);
    }
  }
  const T* xp = x + plane * in_sz;
  if (kind == Kind::Max) {
    T best = lowest<T>();
    int64_t best_i = -1;
    for (int64_t kd = k0[0]; kd < k1[0]; ++kd) {
      const int64_t id = base[0] + kd * w.dil[0];
      for (int64_t kh = k0[1]; kh < k1[1]; ++kh) {
        const int64_t row = (id * w.in[1] + base[1] + kh * w.dil[1]) * w.in[2] + base[2];
        for (int64_t kw = k0[2]; kw < k1[2]; ++kw) {
          const int64_t xi = row + kw * w.dil[2];
          const T v = xp[xi];
          if (best_i < 0 || widen(v) > widen(best)) best = v, best_i = xi;
        }
      }
    }
    y[i] = best;
    if (indices) {
      int64_t r = -1;
      if (best_i >= 0) {
        const int64_t ww = best_i % w.in[2], hh = (best_i / w.in[2]) % w.in[1],
                      dd = best_i / (w.in[1] * w.in[2]);
        r = plane * in_sz + (column_major ? dd + hh * w.in[0] + ww * w.in[0] * w.in[1] : best_i);
      }
      indices[i] = r;
    }
    return;
  }
  A sum = 0;
  for (int64_t kd = k0[0]; kd < k1[0]; ++kd) {
    const int64_t id = base[0] + kd * w.dil[0];
    for (int64_t kh = k0[1]; kh < k1[1]; ++kh) {
      const int64_t row = (id * w.in[1] + base[1] + kh * w.dil[1]) * w.in[2] + base[2];
      for (int64_t kw = k0[2]; kw < k1[2]; ++kw) {
        const A v = static_cast<A>(widen(xp[row + kw * w.dil[2]]));
        sum += kind == Kind::Avg ? v : pow(fabs(v), p);
      }
    }
  }
  A r;
  if (kind == Kind::Avg)
    r = count != 0 ? sum / static_cast<A>(count) : A(0);
  else
    r = pow(sum, A(1) / p);
  put(y[i], r);
}

template <typename T>
__global__ void pool_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t* __restrict__ indices,
                            int64_t total, Window w, Kind kind, bool count_include_pad,
                            bool column_major, typename AccOf<T>::type p) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    pool_one(x, y, indices, i, w, kind, count_include_pad, column_major, p);
}

template <typename A>
__device__ __forceinline__ A combine(A a, A b, bool max) {
  return max ? (a < b ? b : a) : a + b;  // std::max(a, b) skips a NaN b
}

template <typename A>
__device__ __forceinline__ A warp_reduce(A v, bool max) {
  for (int off = 16; off > 0; off /= 2) v = combine(v, __shfl_down_sync(0xffffffffu, v, off), max);
  return v;
}

template <typename A>
__device__ __forceinline__ A init_value(bool max) {
  return max ? -static_cast<A>(INFINITY) : A(0);
}

/// One warp per plane: for planes of up to a few thousand elements (GlobalAveragePool after a
/// 7x7 feature map) a block per plane would leave most threads idle.
template <typename T>
__global__ void global_pool_warp_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t planes,
                                        int64_t size, bool max) {
  using A = typename AccOf<T>::type;
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t plane = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
       plane < planes; plane += warps) {
    const T* xp = x + plane * size;
    A r = init_value<A>(max);
    for (int64_t j = lane; j < size; j += 32) r = combine(r, static_cast<A>(widen(xp[j])), max);
    r = warp_reduce(r, max);
    if (lane == 0) put(y[plane], max ? r : r / static_cast<A>(size));
  }
}

template <typename T>
__global__ void global_pool_block_kernel(const T* __restrict__ x, T* __restrict__ y,
                                         int64_t planes, int64_t size, bool max) {
  using A = typename AccOf<T>::type;
  __shared__ A partial[kThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t plane = blockIdx.x; plane < planes; plane += gridDim.x) {
    const T* xp = x + plane * size;
    A r = init_value<A>(max);
    for (int64_t j = threadIdx.x; j < size; j += blockDim.x)
      r = combine(r, static_cast<A>(widen(xp[j])), max);
    r = warp_reduce(r, max);
    if (lane == 0) partial[warp] = r;
    __syncthreads();
    if (warp == 0) {
      r = lane < kThreads / 32 ? partial[lane] : init_value<A>(max);
      r = warp_reduce(r, max);
      if (lane == 0) put(y[plane], max ? r : r / static_cast<A>(size));
    }
    __syncthreads();  // partial is reused by the next plane
  }
}

template <typename T>
void pool(const void* x, void* y, int64_t* indices, int64_t planes, const Window& w, Kind kind,
          bool cip, bool column_major, double p, cudaStream_t s) {
  const int64_t total = planes * w.out[0] * w.out[1] * w.out[2];
  if (total <= 0) return;
  using A = typename AccOf<T>::type;
  pool_kernel<T><<<grid_upto_64k(total, kThreads), kThreads, 0, s>>>(
      static_cast<const T*>(x), static_cast<T*>(y), indices, total, w, kind, cip, column_major,
      static_cast<A>(p));
}

template <typename T>
void global_pool(const void* x, void* y, int64_t planes, int64_t size, bool max, cudaStream_t s) {
  if (planes <= 0) return;
  const T* xp = static_cast<const T*>(x);
  T* yp = static_cast<T*>(y);
  if (size <= 4096)
    global_pool_warp_kernel<T><<<grid_upto_64k(planes, kThreads / 32), kThreads, 0, s>>>(
        xp, yp, planes, size, max);
  else
    global_pool_block_kernel<T><<<grid_upto_64k(planes, 1), kThreads, 0, s>>>(
        xp, yp, planes, size, max);
}

}  // namespace

void launch_pool(const void* x, void* y, int64_t* indices, int64_t planes, const Window& w,
                 Kind kind, bool count_include_pad, bool column_major, double p, DType dt,
                 cudaStream_t stream) {
  switch (dt) {
    case DType::F32:
      return pool<float>(x, y, indices, planes, w, kind, count_include_pad, column_major, p, stream);
    case DType::F16:
      return pool<__half>(x, y, indices, planes, w, kind, count_include_pad, column_major, p, stream);
    case DType::BF16:
      return pool<__nv_bfloat16>(x, y, indices, planes, w, kind, count_include_pad, column_major, p,
                                 stream);
    case DType::F64:
      return pool<double>(x, y, indices, planes, w, kind, count_include_pad, column_major, p, stream);
    case DType::I8:
      return pool<int8_t>(x, y, indices, planes, w, kind, count_include_pad, column_major, p, stream);
    case DType::U8:
      return pool<uint8_t>(x, y, indices, planes, w, kind, count_include_pad, column_major, p,
                           stream);
  }
}

void launch_global_pool(const void* x, void* y, int64_t planes, int64_t size, bool max, DType dt,
                        cudaStream_t stream) {
  switch (dt) {
    case DType::F32: return global_pool<float>(x, y, planes, size, max, stream);
    case DType::F16: return global_pool<__half>(x, y, planes, size, max, stream);
    case DType::BF16: return global_pool<__nv_bfloat16>(x, y, planes, size, max, stream);
    case DType::F64: return global_pool<double>(x, y, planes, size, max, stream);
    case DType::I8: return global_pool<int8_t>(x, y, planes, size, max, stream);
    case DType::U8: return global_pool<uint8_t>(x, y, planes, size, max, stream);
  }
}

}  // namespace onyx::cuda::pooling
