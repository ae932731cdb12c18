#include "graph/float8.h"

#include <array>
#include <bit>
#include <cmath>
#include <limits>

#include "graph/error.h"

namespace onyx {
namespace {

// Layout of one small float encoding. Codes exclude the sign bit.
struct Format {
  int mbits;          // mantissa bits
  int bias;           // exponent bias
  uint8_t sign;       // sign bit
  uint8_t max_code;   // largest finite magnitude code
  uint8_t inf_code;   // infinity code (0: none)
  bool uz;            // no negative zero; the "-0" code 0x80 is the one NaN
  bool nan_all_ones;  // S.1111.111 is NaN (e4m3fn)
};

Format format_of(DataType t) {
  switch (t) {
    case DataType::Float8E4M3FN:
      return {3, 7, 0x80, 0x7e, 0, false, true};
    case DataType::Float8E4M3FNUZ:
      return {3, 8, 0x80, 0x7f, 0, true, false};
    case DataType::Float8E5M2:
      return {2, 15, 0x80, 0x7b, 0x7c, false, false};
    case DataType::Float8E5M2FNUZ:
      return {2, 16, 0x80, 0x7f, 0, true, false};
    case DataType::Float4E2M1:
      return {1, 1, 0x08, 0x07, 0, false, false};
    default:
      ONYX_THROW("[float8] {} is not a float8 or float4 type", dtype_name(t));
  }
}

float decode(uint8_t bits, const Format& f) {
  bool neg = bits & f.sign;
  uint8_t mag = bits & uint8_t(f.sign - 1);
  if (f.uz && bits == 0x80) return std::numeric_limits<float>::quiet_NaN();
  if (f.nan_all_ones && mag == 0x7f) return neg ? -NAN : NAN;
  if (f.inf_code && mag >= f.inf_code) {
    if (mag == f.inf_code) return neg ? -INFINITY : INFINITY;
    return neg ? -NAN : NAN;
  }
  int exp = mag >> f.mbits, man = mag & ((1 << f.mbits) - 1);
  float v = exp == 0 ? std::ldexp(float(man), 1 - f.bias - f.mbits)
                     : std::ldexp(float(man | (1 << f.mbits)), exp - f.bias - f.mbits);
  return neg ? -v : v;
}

// Code of the NaN ml_dtypes (the ONNX reference) produces for a float NaN.
uint8_t nan_code(uint32_t bits, DataType t, const Format& f) {
  uint8_t sign = (bits >> 31) ? f.sign : 0;
  switch (t) {
    case DataType::Float8E4M3FN:
      return sign | 0x7f;
    case DataType::Float8E5M2:
      return sign | 0x7e;
    case DataType::Float4E2M1:
      return sign ^ 0x08;  // no NaN: ml_dtypes yields the other zero
    default:
      return 0x80;  // fnuz
  }
}

uint8_t encode(float v, DataType t, const Format& f, bool saturate) {
  uint32_t bits = std::bit_cast<uint32_t>(v);
  uint8_t sign = (bits >> 31) ? f.sign : 0;
  uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return nan_code(bits, t, f);
  bool is_f4 = t == DataType::Float4E2M1;
  uint32_t code;
  if (abs_bits == 0x7f800000u) {
    code = 0x100;  // beyond any max: handled as overflow below
  } else {
    int exp = int(abs_bits >> 23) - 127;
    int emin = 1 - f.bias;
    if (exp < emin) {  // subnormal in the target: round the scaled value to an integer
      float scaled = std::ldexp(std::bit_cast<float>(abs_bits), f.mbits - emin);
      code = uint32_t(std::nearbyint(scaled));
    } else {
      int shift = 23 - f.mbits;
      uint32_t r = abs_bits + ((1u << (shift - 1)) - 1) + ((abs_bits >> shift) & 1);
      code = (r >> shift) - (uint32_t(127 - f.bias) << f.mbits);
    }
  }
  if (code > f.max_code) {
    if (saturate || is_f4) return sign | f.max_code;
    if (f.inf_code) return sign | f.inf_code;
    return f.uz ? 0x80 : (sign | 0x7f);
  }
  if (code == 0 && f.uz) return 0;
  return sign | uint8_t(code);
}

// 2^(e - 127); 0xff is NaN.
float decode_e8m0(uint8_t bits) {
  if (bits == 0xff) return std::numeric_limits<float>::quiet_NaN();
  if (bits == 0) return std::bit_cast<float>(0x00400000u);  // 2^-127, a float subnormal
  return std::bit_cast<float>(uint32_t(bits) << 23);
}

template <DataType T>
const std::array<float, 256>& table() {
  static const std::array<float, 256> lut = [] {
    std::array<float, 256> a{};
    if constexpr (T == DataType::Float8E8M0) {
      for (int i = 0; i < 256; ++i) a[i] = decode_e8m0(uint8_t(i));
    } else {
      Format f = format_of(T);
      int n = T == DataType::Float4E2M1 ? 16 : 256;
      for (int i = 0; i < n; ++i) a[i] = decode(uint8_t(i), f);
    }
    return a;
  }();
  return lut;
}

}  // namespace

float float8_to_float(uint8_t bits, DataType t) {
  switch (t) {
    case DataType::Float8E4M3FN:
      return table<DataType::Float8E4M3FN>()[bits];
    case DataType::Float8E4M3FNUZ:
      return table<DataType::Float8E4M3FNUZ>()[bits];
    case DataType::Float8E5M2:
      return table<DataType::Float8E5M2>()[bits];
    case DataType::Float8E5M2FNUZ:
      return table<DataType::Float8E5M2FNUZ>()[bits];
    case DataType::Float8E8M0:
      return table<DataType::Float8E8M0>()[bits];
    case DataType::Float4E2M1:
      return table<DataType::Float4E2M1>()[bits & 0x0f];
    default:
      ONYX_THROW("[float8] {} is not a float8 or float4 type", dtype_name(t));
  }
}

uint8_t float_to_float8(float v, DataType t, bool saturate) {
  if (t == DataType::Float8E8M0) return float_to_float8e8m0(v, saturate, E8M0Round::Up);
  return encode(v, t, format_of(t), saturate);
}

uint8_t float_to_float8e8m0(float v, bool saturate, E8M0Round mode) {
  uint32_t bits = std::bit_cast<uint32_t>(v);
  uint32_t exp = (bits >> 23) & 0xff, man = bits & 0x7fffff;
  if (exp == 0xff) return 0xff;
  bool up = false;
  if (mode == E8M0Round::Up) {
    up = man != 0;
  } else if (mode == E8M0Round::Nearest) {  // ONNX reference: guard bit and (round|sticky|lsb)
    bool g = bits & 0x400000, r = bits & 0x200000, s = bits & 0x1fffff;
    up = g && (r || s || exp > 0);
  }
  if (up && exp == 0xfe && saturate) up = false;
  return uint8_t(exp + (up ? 1 : 0));
}

}  // namespace onyx
