// Device code of Cast: one map kernel per (source kind, target kind). A source is a plain
// type or a small float (decoded to float by its format at run time); a target is a plain
// type, a small float (encoded from float) or a sub-byte integer (low bits of an int64). The
// small-float codecs are graph/float8.cpp's, bit for bit, so a device cast writes the bytes
// the CPU one does (cuda_fp8.h's conversions differ in NaN signs and e8m0 / fnuz support).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cuda/std/limits>
#include <cuda/std/type_traits>

#include "kernels/cuda/cast_launch.h"

namespace onyx::cuda::cast {
namespace {

namespace cs = ::cuda::std;

template <typename T> struct Tag { using type = T; };

/// Calls f(Tag<T>{}) for a plain dtype t.
template <typename F>
void with_plain(CType t, F&& f) {
  switch (t) {
    case CType::F32: return f(Tag<float>{});
    case CType::F64: return f(Tag<double>{});
    case CType::F16: return f(Tag<__half>{});
    case CType::BF16: return f(Tag<__nv_bfloat16>{});
    case CType::I8: return f(Tag<int8_t>{});
    case CType::I16: return f(Tag<int16_t>{});
    case CType::I32: return f(Tag<int32_t>{});
    case CType::I64: return f(Tag<int64_t>{});
    case CType::U8: return f(Tag<uint8_t>{});
    case CType::U16: return f(Tag<uint16_t>{});
    case CType::U32: return f(Tag<uint32_t>{});
    case CType::U64: return f(Tag<uint64_t>{});
    case CType::Bool: return f(Tag<bool>{});
    default: return;
  }
}

template <typename T>
constexpr bool kHalf = cs::is_same_v<T, __half> || cs::is_same_v<T, __nv_bfloat16>;

template <typename T>
__device__ __forceinline__ T widen(T v) { return v; }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename D>
__device__ __forceinline__ D from_float(float v) {
  if constexpr (cs::is_same_v<D, __half>)
    return __float2half_rn(v);
  else
    return __float2bfloat16_rn(v);
}

/// Double to integer without undefined behaviour (out of range gives x86's 0x80..0).
template <typename D>
__device__ __forceinline__ D float_to_int(double v) {
  if constexpr (cs::is_same_v<D, uint64_t>)
    if (v >= 9.2233720368547758e18 && v < 1.8446744073709552e19) return D(v);
  if (!(v > -9.2233720368547758e18 && v < 9.2233720368547758e18))
    return D(cs::numeric_limits<int64_t>::min());
  return D(int64_t(v));
}

/// One element from plain type S to plain type D (kernels/cpu/cast.cpp's convert).
template <typename D, typename S>
__device__ __forceinline__ D convert(S s) {
  if constexpr (cs::is_same_v<D, S>) {
    return s;
  } else if constexpr (cs::is_same_v<D, bool>) {
    return widen(s) != decltype(widen(s))(0);
  } else if constexpr (cs::is_same_v<S, bool>) {
    if constexpr (kHalf<D>)
      return from_float<D>(s ? 1.0f : 0.0f);
    else
      return D(s ? 1 : 0);
  } else if constexpr (cs::is_integral_v<D> && !cs::is_integral_v<S>) {
    return float_to_int<D>(double(widen(s)));
  } else if constexpr (kHalf<D>) {
    return from_float<D>(float(widen(s)));  // double and int64 round twice, as on the CPU
  } else {
    return D(widen(s));
  }
}

// ---- small floats (graph/float8.cpp) --------------------------------------------------------

/// Layout of one small float encoding (codes exclude the sign bit), plus what its NaN and
/// non-saturated overflow encode to.
struct SmallFormat {
  int mbits = 0, bias = 0;
  uint32_t sign = 0, max_code = 0, inf_code = 0;
  bool uz = false, nan_all_ones = false, e8m0 = false, f4 = false;
  uint8_t nan_pos = 0, nan_neg = 0;  // NaN of a positive / negative float NaN (ml_dtypes')
  bool saturate = true;
  E8M0Round round = E8M0Round::Up;
};

SmallFormat format_of(CType t, bool saturate, E8M0Round round) {
  SmallFormat f;
  switch (t) {
    case CType::F8E4M3FN: f = {3, 7, 0x80, 0x7e, 0, false, true, false, false, 0x7f, 0xff}; break;
    case CType::F8E4M3FNUZ: f = {3, 8, 0x80, 0x7f, 0, true, false, false, false, 0x80, 0x80}; break;
    case CType::F8E5M2: f = {2, 15, 0x80, 0x7b, 0x7c, false, false, false, false, 0x7e, 0xfe}; break;
    case CType::F8E5M2FNUZ: f = {2, 16, 0x80, 0x7f, 0, true, false, false, false, 0x80, 0x80}; break;
    case CType::F4E2M1: f = {1, 1, 0x08, 0x07, 0, false, false, false, true, 0x08, 0x00}; break;
    default: f.e8m0 = true; break;  // F8E8M0
  }
  f.saturate = saturate;
  f.round = round;
  return f;
}

// Not inlined: the codecs are large, and inlining them into every unrolled vector lane of
// every (source, target) kernel made this file take many minutes to compile.
__device__ __noinline__ float decode(uint8_t bits, const SmallFormat& f) {
  const float nan = cs::numeric_limits<float>::quiet_NaN(), inf = cs::numeric_limits<float>::infinity();
  if (f.e8m0) {  // 2^(e - 127); 0xff is NaN
    if (bits == 0xff) return nan;
    if (bits == 0) return __uint_as_float(0x00400000u);  // 2^-127, a float subnormal
    return __uint_as_float(uint32_t(bits) << 23);
  }
  if (f.f4) bits &= 0x0f;
  const bool neg = bits & f.sign;
  const uint32_t mag = bits & (f.sign - 1);
  if (f.uz && bits == 0x80) return nan;
  if (f.nan_all_ones && mag == 0x7f) return neg ? -nan : nan;
  if (f.inf_code && mag >= f.inf_code) {
    if (mag == f.inf_code) return neg ? -inf : inf;
    return neg ? -nan : nan;
  }
  const int exp = int(mag >> f.mbits), man = int(mag & ((1u << f.mbits) - 1));
  const float v = exp == 0 ? ldexpf(float(man), 1 - f.bias - f.mbits)
                           : ldexpf(float(man | (1 << f.mbits)), exp - f.bias - f.mbits);
  return neg ? -v : v;
}

__device__ __noinline__ uint8_t encode_e8m0(float v, bool saturate, E8M0Round mode) {
  const uint32_t bits = __float_as_uint(v), exp = (bits >> 23) & 0xff, man = bits & 0x7fffff;
  if (exp == 0xff) return 0xff;
  bool up = false;
  if (mode == E8M0Round::Up) {
    up = man != 0;
  } else if (mode == E8M0Round::Nearest) {  // guard bit and (round | sticky | lsb)
    const bool g = bits & 0x400000, r = bits & 0x200000, s = bits & 0x1fffff;
    up = g && (r || s || exp > 0);
  }
  if (up && exp == 0xfe && saturate) up = false;
  return uint8_t(exp + (up ? 1 : 0));
}

/// Round to nearest even; out of range saturates to the largest finite value or, without
/// saturate, goes to infinity (e5m2) or NaN. float4e2m1 always saturates.
__device__ __noinline__ uint8_t encode(float v, const SmallFormat& f) {
  if (f.e8m0) return encode_e8m0(v, f.saturate, f.round);
  const uint32_t bits = __float_as_uint(v), abs_bits = bits & 0x7fffffffu;
  const bool negative = bits >> 31;
  const uint32_t sign = negative ? f.sign : 0;
  if (abs_bits > 0x7f800000u) return negative ? f.nan_neg : f.nan_pos;
  uint32_t code;
  if (abs_bits == 0x7f800000u) {
    code = 0x100;  // beyond any max: handled as overflow below
  } else {
    const int exp = int(abs_bits >> 23) - 127, emin = 1 - f.bias;
    if (exp < emin) {  // subnormal in the target: round the scaled value to an integer
      code = uint32_t(rintf(ldexpf(__uint_as_float(abs_bits), f.mbits - emin)));
    } else {
      const int shift = 23 - f.mbits;
      const uint32_t r = abs_bits + ((1u << (shift - 1)) - 1) + ((abs_bits >> shift) & 1);
      code = (r >> shift) - (uint32_t(127 - f.bias) << f.mbits);
    }
  }
  if (code > f.max_code) {
    if (f.saturate || f.f4) return uint8_t(sign | f.max_code);
    if (f.inf_code) return uint8_t(sign | f.inf_code);
    return f.uz ? 0x80 : uint8_t(sign | 0x7f);
  }
  if (code == 0 && f.uz) return 0;
  return uint8_t(sign | code);
}

// ---- sources and targets --------------------------------------------------------------------

template <typename T>
struct PlainSrc {
  using storage = T;
  __device__ T load(T v) const { return v; }
};
struct SmallSrc {
  using storage = uint8_t;
  SmallFormat f;
  __device__ float load(uint8_t v) const { return decode(v, f); }
};

template <typename T>
struct PlainDst {
  using storage = T;
  using value = T;
  __device__ T store(T v) const { return v; }
};
struct SmallDst {
  using storage = uint8_t;
  using value = float;
  SmallFormat f;
  __device__ uint8_t store(float v) const { return encode(v, f); }
};
/// Keeps the low `bits` bits, sign-extended for signed types (one value per byte).
struct SubByteDst {
  using storage = uint8_t;
  using value = int64_t;
  int bits;
  bool is_signed;
  __device__ uint8_t store(int64_t v) const {
    const uint64_t mask = (uint64_t(1) << bits) - 1;
    uint64_t u = uint64_t(v) & mask;
    if (is_signed && (u >> (bits - 1))) u |= ~mask;
    return uint8_t(u);
  }
};

// ---- the kernel -----------------------------------------------------------------------------

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

unsigned grid_for(int64_t work) {
  int64_t b = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : b > kMaxBlocks ? kMaxBlocks : b);
}

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

template <typename A, typename B>
constexpr int vec_width() {
  constexpr size_t m = sizeof(A) > sizeof(B) ? sizeof(A) : sizeof(B);
  return m >= 16 ? 1 : int(16 / m);
}

template <typename Src, typename Dst>
struct CastF {
  Src src;
  Dst dst;
  __device__ typename Dst::storage operator()(typename Src::storage x) const {
    return dst.store(convert<typename Dst::value>(src.load(x)));
  }
};

/// y[i] = f(x[i]); with vec, 16-byte vectors first, the rest one by one.
template <typename In, typename Out, typename F>
__global__ void cast_kernel(const In* x, Out* y, int64_t n, bool vec, F f) {
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

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <typename Src, typename Dst>
void run(Src src, Dst dst, const void* x, void* y, int64_t n, cudaStream_t s) {
  using In = typename Src::storage;
  using Out = typename Dst::storage;
  constexpr int V = vec_width<In, Out>();
  const bool vec = V > 1 && aligned16(x) && aligned16(y);
  cast_kernel<<<grid_for(vec ? (n + V - 1) / V : n), kThreads, 0, s>>>(
      static_cast<const In*>(x), static_cast<Out*>(y), n, vec, CastF<Src, Dst>{src, dst});
}

/// Calls f(target) with the target kind of `to`.
template <typename F>
void with_target(CType to, bool saturate, E8M0Round round, F&& f) {
  if (is_small_float(to)) return f(SmallDst{format_of(to, saturate, round)});
  if (is_sub_byte_int(to))
    return f(SubByteDst{to == CType::I4 || to == CType::U4 ? 4 : 2, to == CType::I4 || to == CType::I2});
  with_plain(to, [&](auto tag) { f(PlainDst<typename decltype(tag)::type>{}); });
}

}  // namespace

void launch_cast(CType from, CType to, const void* x, void* y, int64_t n, bool saturate,
                 E8M0Round round, cudaStream_t s) {
  if (n <= 0) return;
  // Sub-byte integers are read as their 8-bit storage, which holds the value.
  if (from == CType::I4 || from == CType::I2) from = CType::I8;
  if (from == CType::U4 || from == CType::U2) from = CType::U8;
  with_target(to, saturate, round, [&](auto dst) {
    if (is_small_float(from)) return run(SmallSrc{format_of(from, true, round)}, dst, x, y, n, s);
    with_plain(from, [&](auto tag) { run(PlainSrc<typename decltype(tag)::type>{}, dst, x, y, n, s); });
  });
}

}  // namespace onyx::cuda::cast
