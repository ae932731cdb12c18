// The convolutions' own elementwise passes (see conv_epilogue_launch.h): grid-stride loops with
// 32-bit indices when the tensor allows, arithmetic in float (double for double tensors).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/conv_epilogue_launch.h"
#include "kernels/cuda/device_util.cuh"

namespace onyx::cuda::cv {
namespace {

using dev::acc_t, dev::grid_upto_64k, dev::kThreads, dev::put, dev::widen;

/// The CPU kernel's activation (kernels/cpu/conv.h), comparisons written as std::min/max
/// evaluate them, so NaN behaves alike.
template <typename A>
__device__ __forceinline__ A activate(A x, const Act& act) {
  switch (act.kind) {
    case Act::Kind::None: return x;
    case Act::Kind::Relu: return x > A(0) ? x : A(0);
    case Act::Kind::LeakyRelu: return x >= A(0) ? x : A(act.alpha) * x;
    case Act::Kind::Sigmoid: return A(1) / (A(1) + exp(-x));
    case Act::Kind::Tanh: return tanh(x);
    case Act::Kind::Clip: {
      const A lo = A(act.alpha), hi = A(act.beta);
      const A m = x < lo ? lo : x;  // std::max(x, lo)
      return hi < m ? hi : m;       // std::min(m, hi)
    }
    case Act::Kind::HardSigmoid: {
      const A v = A(act.alpha) * x + A(act.beta);
      const A m = v < A(1) ? v : A(1);  // std::min(1, v)
      return m < A(0) ? A(0) : m;       // std::max(0, m)
    }
  }
  return x;
}

template <typename T, typename I>
__global__ void epilogue_kernel(T* y, const T* bias, const T* z, I total, I inner, I channels,
                                Act act) {
  using A = acc_t<T>;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    A v = widen(y[i]);
    if (bias) v += widen(bias[(i / inner) % channels]);
    if (z) v += widen(z[i]);
    put(y[i], activate<A>(v, act));
  }
}

template <typename E, typename I>
__global__ void window_copy_kernel(E* dst, const E* src, I total, Dims3 dd, Dims3 sd, Dims3 off) {
  const I d1 = static_cast<I>(dd.d[1]), d2 = static_cast<I>(dd.d[2]), d0 = static_cast<I>(dd.d[0]);
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    I t = i;
    const I k = t % d2;
    t /= d2;
    const I j = t % d1;
    t /= d1;
    const I h = t % d0;
    const I p = t / d0;
    const int64_t sh = static_cast<int64_t>(h) - off.d[0], sj = static_cast<int64_t>(j) - off.d[1],
                  sk = static_cast<int64_t>(k) - off.d[2];
    E v{};
    if (sh >= 0 && sh < sd.d[0] && sj >= 0 && sj < sd.d[1] && sk >= 0 && sk < sd.d[2])
      v = src[((static_cast<int64_t>(p) * sd.d[0] + sh) * sd.d[1] + sj) * sd.d[2] + sk];
    dst[i] = v;
  }
}

template <typename T>
void epilogue(void* y, const void* bias, const void* z, int64_t total, int64_t inner,
              int64_t channels, Act act, cudaStream_t s) {
  T* yp = static_cast<T*>(y);
  const T* bp = static_cast<const T*>(bias);
  const T* zp = static_cast<const T*>(z);
  if (total <= INT32_MAX)
    epilogue_kernel<T, uint32_t><<<grid_upto_64k(total), kThreads, 0, s>>>(
        yp, bp, zp, static_cast<uint32_t>(total), static_cast<uint32_t>(inner),
        static_cast<uint32_t>(channels), act);
  else
    epilogue_kernel<T, uint64_t><<<grid_upto_64k(total), kThreads, 0, s>>>(
        yp, bp, zp, static_cast<uint64_t>(total), static_cast<uint64_t>(inner),
        static_cast<uint64_t>(channels), act);
}

template <typename E>
void window_copy(void* dst, const void* src, int64_t total, Dims3 dd, Dims3 sd, Dims3 off,
                 cudaStream_t s) {
  E* d = static_cast<E*>(dst);
  const E* sp = static_cast<const E*>(src);
  if (total <= INT32_MAX)
    window_copy_kernel<E, uint32_t><<<grid_upto_64k(total), kThreads, 0, s>>>(
        d, sp, static_cast<uint32_t>(total), dd, sd, off);
  else
    window_copy_kernel<E, uint64_t><<<grid_upto_64k(total), kThreads, 0, s>>>(
        d, sp, static_cast<uint64_t>(total), dd, sd, off);
}

}  // namespace

void launch_conv_epilogue(void* y, const void* bias, const void* z, int64_t total, int64_t inner,
                          int64_t channels, Act act, DType dt, cudaStream_t stream) {
  if (total <= 0 || inner <= 0 || channels <= 0) return;
  switch (dt) {
    case DType::F32: return epilogue<float>(y, bias, z, total, inner, channels, act, stream);
    case DType::F16: return epilogue<__half>(y, bias, z, total, inner, channels, act, stream);
    case DType::BF16:
      return epilogue<__nv_bfloat16>(y, bias, z, total, inner, channels, act, stream);
    case DType::F64: return epilogue<double>(y, bias, z, total, inner, channels, act, stream);
  }
}

void launch_window_copy(void* dst, const void* src, int64_t planes, Dims3 dst_dims,
                        Dims3 src_dims, Dims3 offset, int elem_size, cudaStream_t stream) {
  const int64_t total = planes * dst_dims.d[0] * dst_dims.d[1] * dst_dims.d[2];
  if (total <= 0) return;
  switch (elem_size) {
    case 2: return window_copy<uint16_t>(dst, src, total, dst_dims, src_dims, offset, stream);
    case 4: return window_copy<uint32_t>(dst, src, total, dst_dims, src_dims, offset, stream);
    case 8: return window_copy<uint64_t>(dst, src, total, dst_dims, src_dims, offset, stream);
    default: return;
  }
}

}  // namespace onyx::cuda::cv
