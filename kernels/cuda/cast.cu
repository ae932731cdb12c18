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
#include "kernels/cuda/device_util.cuh"

namespace onyx::cuda::cast {
namespace {

namespace cs = ::cuda::std;

using dev::is_half, dev::map, dev::narrow, dev::Tag, dev::widen;

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
    if constexpr (is_half<D>)
      return narrow<D>(s ? 1.0f : 0.0f);
    else
      return D(s ? 1 : 0);
  } else if constexpr (cs::is_integral_v<D> && !cs::is_integral_v<S>) {
    return float_to_int<D>(double(widen(s)));
  } else if constexpr (is_half<D>) {
    return narrow<D>(float(widen(s)));  // double and int64 round twice, as on the CPU
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

// ---- the map (device_util.cuh's map_kernel) -------------------------------------------------

template <typename Src, typename Dst>
struct CastF {
  Src src;
  Dst dst;
  __device__ typename Dst::storage operator()(typename Src::storage x) const {
    return dst.store(convert<typename Dst::value>(src.load(x)));
  }
};

template <typename Src, typename Dst>
void run(Src src, Dst dst, const void* x, void* y, int64_t n, cudaStream_t s) {
  map<typename Src::storage, typename Dst::storage>(x, y, n, CastF<Src, Dst>{src, dst}, s);
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
