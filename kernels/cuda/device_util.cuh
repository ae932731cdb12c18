// The helpers the kernels/cuda/*.cu files share, once: element types (compute type, widen and
// narrow between storage and compute), float / double math by overload, the warp sum, word
// types for elements that are only moved, the vectorised map kernel and launch-grid sizing.
// Only *.cu files include it (nvcc, C++17, the CUDA headers and libcu++ only); each names
// what it takes with using-declarations.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstdint>
#include <cuda/std/type_traits>

namespace onyx::cuda::dev {

// ---- element types ------------------------------------------------------------------------------

template <class A, class B> struct same_t { static constexpr bool value = false; };
template <class A> struct same_t<A, A> { static constexpr bool value = true; };
template <class A, class B> constexpr bool same = same_t<A, B>::value;

template <class T> constexpr bool is_half = same<T, __half> || same<T, __nv_bfloat16>;

/// Compute type: float for the 16-bit floats, else T.
template <class T> struct acc_s { using type = T; };
template <> struct acc_s<__half> { using type = float; };
template <> struct acc_s<__nv_bfloat16> { using type = float; };
template <class T> using acc_t = typename acc_s<T>::type;

/// Storage to compute type. Host too: elementwise.cu widens Clip's host bounds, and pool.cu's
/// per-output function is __host__ __device__.
template <class T> __host__ __device__ __forceinline__ acc_t<T> widen(T v) {
  if constexpr (same<T, __half>) return __half2float(v);
  else if constexpr (same<T, __nv_bfloat16>) return __bfloat162float(v);
  else return v;
}
/// Compute to storage type: the 16-bit floats round to nearest even from float (the explicit
/// cast is the conversion a float parameter would make anyway), the rest static_cast.
template <class T, class A> __host__ __device__ __forceinline__ T narrow(A v) {
  if constexpr (same<T, __half>) return __float2half_rn(static_cast<float>(v));
  else if constexpr (same<T, __nv_bfloat16>) return __float2bfloat16_rn(static_cast<float>(v));
  else return static_cast<T>(v);
}

/// d = narrow<T>(v), as conv_epilogue.cu, matmul.cu and pool.cu store. The call addresses d
/// before computing v (an assignment computes v first): same results, but nvcc optimises the
/// loops differently, so put keeps those kernels' code as it was.
template <class T, class A> __host__ __device__ __forceinline__ void put(T& d, A v) {
  d = narrow<T>(v);
}

/// The unsigned type integer C wraps in (at least unsigned, so no promotion to int).
template <class C>
using wrap_t =
    ::cuda::std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, ::cuda::std::make_unsigned_t<C>>;

/// Host-side dtype dispatch: f(Tag<T>{}) hands a lambda its element type.
template <class T> struct Tag { using type = T; };

// ---- float / double math (the compute type picks the libm function) -----------------------------

template <class A> __device__ __forceinline__ A inf() {
  if constexpr (same<A, float>) return CUDART_INF_F;
  else return CUDART_INF;
}
template <class A> __device__ __forceinline__ A nan() {
  if constexpr (same<A, float>) return CUDART_NAN_F;
  else return CUDART_NAN;
}
__device__ __forceinline__ float dexp(float x) { return expf(x); }
__device__ __forceinline__ double dexp(double x) { return exp(x); }
__device__ __forceinline__ float dlog(float x) { return logf(x); }
__device__ __forceinline__ double dlog(double x) { return log(x); }
__device__ __forceinline__ float dsqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double dsqrt(double x) { return sqrt(x); }
__device__ __forceinline__ bool dfinite(float x) { return isfinite(x); }
__device__ __forceinline__ bool dfinite(double x) { return isfinite(x); }

/// Sum over the warp by butterfly shuffles, returned to every lane. (pool.cu's shuffle-down
/// reduction adds in another order, so float sums may round differently: it stays its own.)
template <class A> __device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// ---- elements that are only moved ---------------------------------------------------------------

template <int Bytes> struct Word;
template <> struct Word<1> { using type = uint8_t; };
template <> struct Word<2> { using type = uint16_t; };
template <> struct Word<4> { using type = uint32_t; };
template <> struct Word<8> { using type = uint64_t; };
struct alignas(8) Word16 { uint64_t lo, hi; };  // complex128: 8-byte alignment suffices
template <> struct Word<16> { using type = Word16; };

/// Calls f(Word<bytes>::type{}) for an element width of 1, 2, 4, 8 or 16 bytes.
template <class F>
void with_width(int bytes, F&& f) {
  switch (bytes) {
    case 1: return f(Word<1>::type{});
    case 2: return f(Word<2>::type{});
    case 4: return f(Word<4>::type{});
    case 8: return f(Word<8>::type{});
    case 16: return f(Word<16>::type{});
    default: return;
  }
}

// ---- launch grids -------------------------------------------------------------------------------

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // grid-stride loops past this (about 8 waves on an H100)

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
constexpr unsigned clamp_grid(int64_t blocks, int64_t most) {
  return static_cast<unsigned>(blocks < most ? blocks : most);
}

/// The elementwise, cast, data-movement and gather/scatter grid: kThreads work items a block,
/// at least 1 block and at most kMaxBlocks.
inline unsigned grid_for(int64_t work) {
  int64_t b = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : b > kMaxBlocks ? kMaxBlocks : b);
}

/// The convolution-epilogue, matmul and pooling grid: per_block work items a block, at most
/// 65536 blocks and no floor (their callers return on empty work). Not grid_for: merging the
/// two would change those launches' shapes.
constexpr unsigned grid_upto_64k(int64_t work, int64_t per_block = kThreads) {
  return clamp_grid(ceil_div(work, per_block), 65536);
}

// ---- the vectorised map -------------------------------------------------------------------------

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

/// Elements per 16-byte access for the widest of the types.
template <class... Ts>
constexpr int vec_width() {
  size_t m = 1;
  ((m = sizeof(Ts) > m ? sizeof(Ts) : m), ...);
  return m >= 16 ? 1 : static_cast<int>(16 / m);
}

/// y[i] = f(x[i]); with vec, 16-byte vectors first, the rest one by one.
template <class In, class Out, class F>
__global__ void map_kernel(const In* x, Out* y, int64_t n, bool vec, F f) {
  constexpr int V = vec_width<In, Out>();
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vec) {
    const int64_t nv = n / V;
    for (int64_t j = first; j < nv; j += stride) {
      const Vec<In, V> a = reinterpret_cast<const Vec<In, V>*>(x)[j];
      Vec<Out, V> b;
#pragma unroll
      for (int k = 0; k < V; ++k) b.v[k] = f(a.v[k]);
      reinterpret_cast<Vec<Out, V>*>(y)[j] = b;
    }
    done = nv * V;
  }
  for (int64_t j = done + first; j < n; j += stride) y[j] = f(x[j]);
}

/// Launches map_kernel over n elements (none: nothing), vectorised when both pointers allow.
template <class In, class Out, class F>
void map(const void* x, void* y, int64_t n, F f, cudaStream_t s) {
  if (n <= 0) return;
  constexpr int V = vec_width<In, Out>();
  const bool vec = V > 1 && aligned16(x) && aligned16(y);
  map_kernel<In, Out, F><<<grid_for(vec ? (n + V - 1) / V : n), kThreads, 0, s>>>(
      static_cast<const In*>(x), static_cast<Out*>(y), n, vec, f);
}

}  // namespace onyx::cuda::dev
