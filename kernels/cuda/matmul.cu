// Elementwise helpers of the cuBLASLt matmuls (see matmul_launch.h): grid-stride loops, 32-bit
// indices when the tensor allows, arithmetic in float (double for double tensors).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/matmul_launch.h"

namespace onyx::cuda::mm {
namespace {

using dev::acc_t, dev::grid_upto_64k, dev::kThreads, dev::put, dev::widen;

__device__ __forceinline__ float activate(float v, Act act) {
  switch (act) {
    case Act::None: return v;
    case Act::Relu: return v > 0.0f ? v : 0.0f;
    case Act::Gelu: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    case Act::GeluTanh:
      return 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
  }
  return v;
}

__device__ __forceinline__ double activate(double v, Act act) {
  switch (act) {
    case Act::None: return v;
    case Act::Relu: return v > 0.0 ? v : 0.0;
    case Act::Gelu: return 0.5 * v * (1.0 + erf(v * 0.70710678118654752));
    case Act::GeluTanh:
      return 0.5 * v * (1.0 + tanh(0.79788456080286536 * (v + 0.044715 * v * v * v)));
  }
  return v;
}

template <typename T, typename I>
__global__ void bias_act_kernel(T* y, const T* bias, I total, I n, Act act) {
  using A = acc_t<T>;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    A v = widen(y[i]);
    if (bias) v += widen(bias[i % n]);
    put(y[i], activate(v, act));
  }
}

template <typename T, typename I>
__global__ void broadcast_c_kernel(T* y, const T* c, I total, I n, I cm, I cn, acc_t<T> scale) {
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I row = i / n, col = i - row * n;
    const T v = c[(cm == 1 ? 0 : row) * cn + (cn == 1 ? 0 : col)];
    if (scale == 1)
      y[i] = v;
    else
      put(y[i], scale * widen(v));
  }
}

template <typename T>
void bias_act(void* y, const void* bias, int64_t rows, int64_t n, Act act, cudaStream_t s) {
  const int64_t total = rows * n;
  if (total <= 0) return;
  T* yp = static_cast<T*>(y);
  const T* bp = static_cast<const T*>(bias);
  if (total <= INT32_MAX)
    bias_act_kernel<T, uint32_t><<<grid_upto_64k(total), kThreads, 0, s>>>(
        yp, bp, static_cast<uint32_t>(total), static_cast<uint32_t>(n), act);
  else
    bias_act_kernel<T, uint64_t><<<grid_upto_64k(total), kThreads, 0, s>>>(
        yp, bp, static_cast<uint64_t>(total), static_cast<uint64_t>(n), act);
}

template <typename T>
void broadcast_c(void* y, const void* c, int64_t m, int64_t n, int64_t cm, int64_t cn,
                 double scale, cudaStream_t s) {
  const int64_t total = m * n;
  if (total <= 0) return;
  using A = acc_t<T>;
  T* yp = static_cast<T*>(y);
  const T* cp = static_cast<const T*>(c);
  if (total <= INT32_MAX)
    broadcast_c_kernel<T, uint32_t><<<grid_upto_64k(total), kThreads, 0, s>>>(
        yp, cp, static_cast<uint32_t>(total), static_cast<uint32_t>(n), static_cast<uint32_t>(cm),
        static_cast<uint32_t>(cn), static_cast<A>(scale));
  else
    broadcast_c_kernel<T, uint64_t><<<grid_upto_64k(total), kThreads, 0, s>>>(
        yp, cp, static_cast<uint64_t>(total), static_cast<uint64_t>(n), static_cast<uint64_t>(cm),
        static_cast<uint64_t>(cn), static_cast<A>(scale));
}

}  // namespace

void launch_bias_act(void* y, const void* bias, int64_t rows, int64_t n, Act act, DType dt,
                     cudaStream_t stream) {
  switch (dt) {
    case DType::F32: return bias_act<float>(y, bias, rows, n, act, stream);
    case DType::F16: return bias_act<__half>(y, bias, rows, n, act, stream);
    case DType::BF16: return bias_act<__nv_bfloat16>(y, bias, rows, n, act, stream);
    case DType::F64: return bias_act<double>(y, bias, rows, n, act, stream);
  }
}

void launch_broadcast_c(void* y, const void* c, int64_t m, int64_t n, int64_t cm, int64_t cn,
                        double scale, DType dt, cudaStream_t stream) {
  switch (dt) {
    case DType::F32: return broadcast_c<float>(y, c, m, n, cm, cn, scale, stream);
    case DType::F16: return broadcast_c<__half>(y, c, m, n, cm, cn, scale, stream);
    case DType::BF16: return broadcast_c<__nv_bfloat16>(y, c, m, n, cm, cn, scale, stream);
    case DType::F64: return broadcast_c<double>(y, c, m, n, cm, cn, scale, stream);
  }
}

}  // namespace onyx::cuda::mm
