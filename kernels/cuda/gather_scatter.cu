// Device code of Gather, GatherElements, ScatterElements and ScatterND. Plain moves are words
// of the element's width; scatter reductions compute in the element type (16-bit floats in
// float) through atomics: native atomicAdd / atomicMax / atomicMin where CUDA has them, a
// compare-and-swap loop otherwise (on the enclosing 32-bit word for 1- and 2-byte types,
// which stays inside the arena's block: its size classes are multiples of 64 bytes).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cuda/std/type_traits>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/gather_scatter_launch.h"

namespace onyx::cuda::gs {
namespace {

namespace cs = ::cuda::std;

using dev::acc_t, dev::grid_for, dev::kThreads, dev::narrow, dev::widen, dev::with_width, dev::wrap_t;

template <typename F>
void with_type(GsType t, F&& f) {
  switch (t) {
    case GsType::F32: return f(float{});
    case GsType::F64: return f(double{});
    case GsType::F16: return f(__half{});
    case GsType::BF16: return f(__nv_bfloat16{});
    case GsType::I8: return f(int8_t{});
    case GsType::I16: return f(int16_t{});
    case GsType::I32: return f(int32_t{});
    case GsType::I64: return f(int64_t{});
    case GsType::U8: return f(uint8_t{});
    case GsType::U16: return f(uint16_t{});
    case GsType::U32: return f(uint32_t{});
    case GsType::U64: return f(uint64_t{});
    case GsType::Bool: return f(bool{});
  }
}

/// An index value made non-negative (it may still be out of range: callers check).
template <typename I>
__device__ __forceinline__ int64_t wrap_index(I v, int64_t dim) {
  const int64_t x = int64_t(v);
  return x < 0 ? x + dim : x;
}

// ---- reductions -----------------------------------------------------------------------------

/// d combined with s as the CPU's combine(): bool adds as "or" and multiplies as "and"; Max
/// and Min keep d unless s compares greater / less (so a NaN never replaces a number).
template <typename T>
__device__ T combine(T d, T s, Reduction r) {
  using A = acc_t<T>;  // integer arithmetic wraps in wrap_t<A>
  const A a = widen(d), b = widen(s);
  switch (r) {
    case Reduction::Add:
      if constexpr (cs::is_same_v<A, bool>)
        return a || b;
      else if constexpr (cs::is_integral_v<A>)
        return A(wrap_t<A>(a) + wrap_t<A>(b));
      else
        return narrow<T>(a + b);
    case Reduction::Mul:
      if constexpr (cs::is_same_v<A, bool>)
        return a && b;
      else if constexpr (cs::is_integral_v<A>)
        return A(wrap_t<A>(a) * wrap_t<A>(b));
      else
        return narrow<T>(a * b);
    case Reduction::Max: return b > a ? s : d;
    case Reduction::Min: return b < a ? s : d;
    default: return s;
  }
}

template <typename To, typename From>
__device__ __forceinline__ To bit_cast(const From& f) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast between sizes");
  To t;
  __builtin_memcpy(&t, &f, sizeof(To));
  return t;
}

/// *p = combine(*p, s, r) atomically through compare-and-swap.
template <typename T>
__device__ void cas_combine(T* p, T s, Reduction r) {
  if constexpr (sizeof(T) == 4 || sizeof(T) == 8) {
    using W = cs::conditional_t<sizeof(T) == 4, unsigned int, unsigned long long>;
    W* a = reinterpret_cast<W*>(p);
    W old = *a, assumed;
    do {
      assumed = old;
      old = atomicCAS(a, assumed, bit_cast<W>(combine(bit_cast<T>(assumed), s, r)));
    } while (assumed != old);
  } else {  // 1 or 2 bytes: the aligned 32-bit word holding them
    using B = cs::conditional_t<sizeof(T) == 1, uint8_t, uint16_t>;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
    unsigned int* a = reinterpret_cast<unsigned int*>(addr & ~uintptr_t(3));
    const unsigned shift = unsigned(addr & 3) * 8;
    const unsigned mask = unsigned(B(~B(0))) << shift;
    unsigned old = *a, assumed;
    do {
      assumed = old;
      const T cur = bit_cast<T>(B((assumed & mask) >> shift));
      const unsigned nb = unsigned(bit_cast<B>(combine(cur, s, r)));
      old = atomicCAS(a, assumed, (assumed & ~mask) | (nb << shift));
    } while (assumed != old);
  }
}

template <typename T>
__device__ __forceinline__ void atomic_combine(T* p, T s, Reduction r) {
  constexpr bool kNativeAdd = cs::is_same_v<T, float> || cs::is_same_v<T, double> ||
                              cs::is_same_v<T, __half> || cs::is_same_v<T, __nv_bfloat16> ||
                              cs::is_same_v<T, int32_t> || cs::is_same_v<T, uint32_t>;
  constexpr bool k64 = cs::is_same_v<T, int64_t> || cs::is_same_v<T, uint64_t>;
  if (r == Reduction::Add) {
    if constexpr (kNativeAdd) return (void)atomicAdd(p, s);
    if constexpr (k64)  // two's complement: the unsigned sum wraps the same way
      return (void)atomicAdd(reinterpret_cast<unsigned long long*>(p), (unsigned long long)s);
  }
  if (r == Reduction::Max || r == Reduction::Min) {
    const bool mx = r == Reduction::Max;
    if constexpr (cs::is_same_v<T, int32_t> || cs::is_same_v<T, uint32_t>)
      return (void)(mx ? atomicMax(p, s) : atomicMin(p, s));
    if constexpr (cs::is_same_v<T, int64_t>) {
      auto q = reinterpret_cast<long long*>(p);
      return (void)(mx ? atomicMax(q, (long long)s) : atomicMin(q, (long long)s));
    }
    if constexpr (cs::is_same_v<T, uint64_t>) {
      auto q = reinterpret_cast<unsigned long long*>(p);
      return (void)(mx ? atomicMax(q, (unsigned long long)s) : atomicMin(q, (unsigned long long)s));
    }
  }
  cas_combine(p, s, r);
}

/// Writes s into *p (kReduce false: plain store) or combines it in atomically.
template <bool kReduce, typename T>
__device__ __forceinline__ void put(T* p, T s, Reduction r) {
  if constexpr (kReduce)
    atomic_combine(p, s, r);
  else
    *p = s;
}

// ---- kernels --------------------------------------------------------------------------------

/// U: the linear index type (uint32 when every index and offset fits).
template <typename T, typename I, typename U>
__global__ void gather_kernel(const T* x, const I* idx, T* y, U n, U dim, U inner, U total) {
  const U stride = U(gridDim.x) * blockDim.x;
  for (U i = U(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const U t = i / inner, k = i - t * inner, o = t / n, j = t - o * n;
    const int64_t v = wrap_index(idx[j], int64_t(dim));
    y[i] = v >= 0 && v < int64_t(dim) ? x[(o * dim + U(v)) * inner + k] : T{};
  }
}

/// Data offset of index element i, leaving out the axis (whose index value the caller adds).
__device__ __forceinline__ int64_t elements_offset(const ElementsDesc& d, int64_t i) {
  int64_t off = 0;
#pragma unroll
  for (int q = kMaxDims - 1; q >= 0; --q) {
    if (q >= d.rank) continue;
    const int64_t c = i % d.ind_dims[q];
    i /= d.ind_dims[q];
    if (q != d.axis) off += c * d.data_strides[q];
  }
  return off;
}

/// The axis stride of ElementsDesc (unrolled select, so d stays out of local memory).
__device__ __forceinline__ int64_t axis_stride(const ElementsDesc& d) {
  int64_t s = 0;
#pragma unroll
  for (int q = 0; q < kMaxDims; ++q)
    if (q == d.axis) s = d.data_strides[q];
  return s;
}

template <typename T, typename I>
__global__ void gather_elements_kernel(const T* x, const I* idx, T* y, ElementsDesc d) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x, as = axis_stride(d);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < d.numel; i += stride) {
    const int64_t v = wrap_index(idx[i], d.axis_dim);
    y[i] = v >= 0 && v < d.axis_dim ? x[elements_offset(d, i) + v * as] : T{};
  }
}

template <bool kReduce, typename T, typename I>
__global__ void scatter_elements_kernel(T* y, const I* idx, const T* upd, ElementsDesc d,
                                        Reduction r) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x, as = axis_stride(d);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < d.numel; i += stride) {
    const int64_t v = wrap_index(idx[i], d.axis_dim);
    if (v >= 0 && v < d.axis_dim) put<kReduce>(y + elements_offset(d, i) + v * as, upd[i], r);
  }
}

template <bool kReduce, typename T>
__global__ void scatter_nd_kernel(T* y, const int64_t* idx, const T* upd, NdDesc d, Reduction r) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x, total = d.n_tuples * d.slice;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t t = i / d.slice, j = i - t * d.slice;
    int64_t off = 0;
    bool ok = true;
#pragma unroll
    for (int q = 0; q < kMaxDims; ++q) {
      if (q >= d.k) continue;
      const int64_t v = wrap_index(idx[t * d.k + q], d.dims[q]);
      ok = ok && v >= 0 && v < d.dims[q];
      off += v * d.strides[q];
    }
    if (ok) put<kReduce>(y + off + j, upd[i], r);
  }
}

}  // namespace

void launch_gather(int elem_bytes, const void* x, const void* idx, bool idx64, void* y,
                   int64_t outer, int64_t n, int64_t dim, int64_t inner, cudaStream_t s) {
  const int64_t total = outer * n * inner;
  if (total <= 0) return;
  const bool small = total <= INT32_MAX && outer * dim * inner <= INT32_MAX;
  with_width(elem_bytes, [&](auto w) {
    using T = decltype(w);
    auto run = [&](auto index) {
      using I = decltype(index);
      auto px = static_cast<const T*>(x);
      auto pi = static_cast<const I*>(idx);
      auto py = static_cast<T*>(y);
      if (small)
        gather_kernel<T, I, uint32_t><<<grid_for(total), kThreads, 0, s>>>(
            px, pi, py, uint32_t(n), uint32_t(dim), uint32_t(inner), uint32_t(total));
      else
        gather_kernel<T, I, int64_t><<<grid_for(total), kThreads, 0, s>>>(px, pi, py, n, dim, inner, total);
    };
    if (idx64)
      run(int64_t{});
    else
      run(int32_t{});
  });
}

void launch_gather_elements(int elem_bytes, const void* x, const void* idx, bool idx64, void* y,
                            const ElementsDesc& d, cudaStream_t s) {
  if (d.numel <= 0) return;
  with_width(elem_bytes, [&](auto w) {
    using T = decltype(w);
    auto px = static_cast<const T*>(x);
    auto py = static_cast<T*>(y);
    if (idx64)
      gather_elements_kernel<<<grid_for(d.numel), kThreads, 0, s>>>(px, static_cast<const int64_t*>(idx), py, d);
    else
      gather_elements_kernel<<<grid_for(d.numel), kThreads, 0, s>>>(px, static_cast<const int32_t*>(idx), py, d);
  });
}

void launch_scatter_elements(GsType type, int elem_bytes, Reduction r, void* y, const void* idx,
                             bool idx64, const void* upd, const ElementsDesc& d, cudaStream_t s) {
  if (d.numel <= 0) return;
  auto run = [&](auto value, auto reduce) {
    using T = decltype(value);
    constexpr bool kReduce = decltype(reduce)::value;
    auto py = static_cast<T*>(y);
    auto pu = static_cast<const T*>(upd);
    if (idx64)
      scatter_elements_kernel<kReduce><<<grid_for(d.numel), kThreads, 0, s>>>(
          py, static_cast<const int64_t*>(idx), pu, d, r);
    else
      scatter_elements_kernel<kReduce><<<grid_for(d.numel), kThreads, 0, s>>>(
          py, static_cast<const int32_t*>(idx), pu, d, r);
  };
  if (r == Reduction::None)
    with_width(elem_bytes, [&](auto w) { run(w, cs::false_type{}); });
  else
    with_type(type, [&](auto v) { run(v, cs::true_type{}); });
}

void launch_scatter_nd(GsType type, int elem_bytes, Reduction r, void* y, const int64_t* idx,
                       const void* upd, const NdDesc& d, cudaStream_t s) {
  const int64_t total = d.n_tuples * d.slice;
  if (total <= 0) return;
  auto run = [&](auto value, auto reduce) {
    using T = decltype(value);
    constexpr bool kReduce = decltype(reduce)::value;
    scatter_nd_kernel<kReduce><<<grid_for(total), kThreads, 0, s>>>(
        static_cast<T*>(y), idx, static_cast<const T*>(upd), d, r);
  };
  if (r == Reduction::None)
    with_width(elem_bytes, [&](auto w) { run(w, cs::false_type{}); });
  else
    with_type(type, [&](auto v) { run(v, cs::true_type{}); });
}

}  // namespace onyx::cuda::gs
