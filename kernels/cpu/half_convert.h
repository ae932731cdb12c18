// Block conversions between the 16-bit floats (float16, bfloat16) and float: F16C for float16,
// AVX2 shifts for bfloat16 (both in the x86-64-v3 baseline, so no run-time dispatch). Kernels with a
// 16-bit path convert a block of a row at a time through these, never element by element
// through float16/bfloat16's scalar operators (graph/dtype.h), which are branchy.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <type_traits>

#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "graph/dtype.h"

namespace onyx::cpu {

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

/// Elements converted at a time (a multiple of every vector width, small enough for L1).
inline constexpr int64_t kHalfBlock = 512;

/// float16/bfloat16 <-> float over arrays.
inline void widen(const float16* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
#endif
  for (; i < n; ++i) y[i] = float(x[i]);
}
inline void narrow(const float* x, float16* y, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i) y[i] = float16(x[i]);
}
inline void widen(const bfloat16* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::bit_cast<float>(uint32_t(x[i].bits) << 16);
}
namespace detail {
inline void narrow_scalar(const float* x, bfloat16* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {  // round to nearest even; NaN stays a quiet NaN
    uint32_t f = std::bit_cast<uint32_t>(x[i]);
    uint32_t r = (f + 0x7fffu + ((f >> 16) & 1u)) >> 16;
    y[i].bits = uint16_t((f & 0x7fffffffu) > 0x7f800000u ? (f >> 16) | 0x40u : r);
  }
}
#if defined(__AVX2__)
// Top halves of 8 non-NaN floats rounded to nearest even (in the low 16 bits of each lane).
inline __m256i bf16_round(__m256 v) {
  const __m256i f = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(f, 16), _mm256_set1_epi32(1));
  return _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(f, _mm256_set1_epi32(0x7fff)), lsb), 16);
}
#endif
}  // namespace detail

// The same bits as bfloat16(float) (checked over all 2^32 inputs); 16 values at a time, a
// group holding a NaN (rare) through the scalar loop.
inline void narrow(const float* x, bfloat16* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__)
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    const __m256 nan = _mm256_cmp_ps(a, b, _CMP_UNORD_Q);
    if (!_mm256_testz_ps(nan, nan)) {
      detail::narrow_scalar(x + i, y + i, 16);
      continue;
    }
    const __m256i packed = _mm256_packus_epi32(detail::bf16_round(a), detail::bf16_round(b));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i),
                        _mm256_permute4x64_epi64(packed, 0xd8));
  }
#endif
  detail::narrow_scalar(x + i, y + i, n - i);
}

/// Calls fn(block, i0, m) over x[0..n) in order, `block` holding x[i0..i0+m) in acc_t<T>:
/// x itself (one call) unless T is a 16-bit float, whose blocks are widened to float.
template <typename T, typename F>
void read_blocks(const T* x, int64_t n, F&& fn) {
  if constexpr (is_half_v<T>) {
    float buf[kHalfBlock];
    for (int64_t i0 = 0; i0 < n; i0 += kHalfBlock) {
      const int64_t m = std::min(kHalfBlock, n - i0);
      widen(x + i0, buf, m);
      fn(static_cast<const float*>(buf), i0, m);
    }
  } else {
    fn(x, int64_t(0), n);
  }
}

/// y[0..n) from x[0..n) through fn(in, out, i0, m), which fills out[0..m) in acc_t<T> from
/// in[0..m) = x[i0..i0+m). Without a 16-bit T, one call with in = x and out = y (which may
/// alias); with one, blocks are widened, computed in float and narrowed.
template <typename T, typename F>
void map_blocks(const T* x, T* y, int64_t n, F&& fn) {
  if constexpr (is_half_v<T>) {
    float in[kHalfBlock], out[kHalfBlock];
    for (int64_t i0 = 0; i0 < n; i0 += kHalfBlock) {
      const int64_t m = std::min(kHalfBlock, n - i0);
      widen(x + i0, in, m);
      fn(static_cast<const float*>(in), static_cast<float*>(out), i0, m);
      narrow(out, y + i0, m);
    }
  } else {
    fn(x, y, int64_t(0), n);
  }
}

}  // namespace onyx::cpu
