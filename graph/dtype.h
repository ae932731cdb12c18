// Element types: the ONNX TensorProto.DataType enum, their storage sizes and names,
// and the 16-bit float types used by kernels.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

namespace onyx {

/// Numbering is ONNX's TensorProto.DataType, so values convert by cast.
enum class DataType : int32_t {
  Undefined = 0,
  Float = 1,
  UInt8 = 2,
  Int8 = 3,
  UInt16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  String = 8,
  Bool = 9,
  Float16 = 10,
  Double = 11,
  UInt32 = 12,
  UInt64 = 13,
  Complex64 = 14,
  Complex128 = 15,
  BFloat16 = 16,
  Float8E4M3FN = 17,
  Float8E4M3FNUZ = 18,
  Float8E5M2 = 19,
  Float8E5M2FNUZ = 20,
  UInt4 = 21,
  Int4 = 22,
  Float4E2M1 = 23,
  Float8E8M0 = 24,
  UInt2 = 25,
  Int2 = 26,
};

/// Bytes one element takes in memory. Sub-byte types (int4, uint4, int2, uint2,
/// float4e2m1) are held unpacked, one element per byte; they are packed only in files.
size_t dtype_size(DataType t);
/// ONNX spelling, lower case: "float", "int64", "bfloat16", ...
std::string dtype_name(DataType t);
/// Parses dtype_name's spelling; throws onyx::Error for an unknown name.
DataType dtype_from_name(const std::string& name);
/// True for a value of the ONNX enum this build knows.
bool dtype_is_known(int32_t v);

bool is_float(DataType t);         // float, double, float16, bfloat16
bool is_float8(DataType t);        // the float8 family and float4e2m1
bool is_signed_int(DataType t);    // int8..int64, int4, int2
bool is_unsigned_int(DataType t);  // uint8..uint64, uint4, uint2
bool is_sub_byte(DataType t);      // int4, uint4, int2, uint2, float4e2m1

/// IEEE 754 binary16, converted through float for arithmetic.
struct float16 {
  uint16_t bits = 0;
  float16() = default;
  float16(float f) : bits(from_float(f)) {}  // NOLINT: implicit like a builtin float
  operator float() const { return to_float(bits); }
  static float16 from_bits(uint16_t b) {
    float16 h;
    h.bits = b;
    return h;
  }
  static float to_float(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t f;
    if (exp == 0) {
      if (man == 0) {
        f = sign;
      } else {  // subnormal: renormalise
        int e = -1;
        do {
          ++e;
          man <<= 1;
        } while (!(man & 0x400));
        f = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
      }
    } else if (exp == 31) {
      f = sign | 0x7f800000u | man << 13;
    } else {
      f = sign | (exp + 112) << 23 | man << 13;
    }
    return std::bit_cast<float>(f);
  }
  static uint16_t from_float(float value) {
    uint32_t f = std::bit_cast<uint32_t>(value);
    uint32_t sign = (f >> 16) & 0x8000;
    uint32_t absf = f & 0x7fffffff;
    if (absf > 0x7f800000) return uint16_t(sign | 0x7e00);  // NaN
    if (absf >= 0x47800000) return uint16_t(sign | 0x7c00);  // overflow -> inf
    if (absf < 0x38800000) {  // subnormal or zero: round to nearest even
      float a = std::bit_cast<float>(absf);
      uint32_t r = uint32_t(std::nearbyint(a * 16777216.0f));  // 2^24
      return uint16_t(sign | r);
    }
    uint32_t mant_odd = (absf >> 13) & 1;
    absf += 0xc8000fff + mant_odd;  // rebias exponent and round to nearest even
    return uint16_t(sign | (absf >> 13));
  }
};

/// bfloat16: the top 16 bits of a float, rounded to nearest even.
struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  bfloat16(float f) : bits(from_float(f)) {}  // NOLINT: implicit like a builtin float
  operator float() const { return std::bit_cast<float>(uint32_t(bits) << 16); }
  static bfloat16 from_bits(uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
  static uint16_t from_float(float value) {
    uint32_t f = std::bit_cast<uint32_t>(value);
    if ((f & 0x7fffffff) > 0x7f800000) return uint16_t((f >> 16) | 0x40);  // quiet NaN
    f += 0x7fff + ((f >> 16) & 1);
    return uint16_t(f >> 16);
  }
};

/// Maps a C++ element type to its DataType.
template <typename T>
constexpr DataType dtype_of();
template <> constexpr DataType dtype_of<float>() { return DataType::Float; }
template <> constexpr DataType dtype_of<double>() { return DataType::Double; }
template <> constexpr DataType dtype_of<float16>() { return DataType::Float16; }
template <> constexpr DataType dtype_of<bfloat16>() { return DataType::BFloat16; }
template <> constexpr DataType dtype_of<int8_t>() { return DataType::Int8; }
template <> constexpr DataType dtype_of<int16_t>() { return DataType::Int16; }
template <> constexpr DataType dtype_of<int32_t>() { return DataType::Int32; }
template <> constexpr DataType dtype_of<int64_t>() { return DataType::Int64; }
template <> constexpr DataType dtype_of<uint8_t>() { return DataType::UInt8; }
template <> constexpr DataType dtype_of<uint16_t>() { return DataType::UInt16; }
template <> constexpr DataType dtype_of<uint32_t>() { return DataType::UInt32; }
template <> constexpr DataType dtype_of<uint64_t>() { return DataType::UInt64; }
template <> constexpr DataType dtype_of<bool>() { return DataType::Bool; }
template <> constexpr DataType dtype_of<std::string>() { return DataType::String; }

/// Type used to accumulate and compute T: float for the 16-bit floats, else T.
template <typename T> struct acc_type { using type = T; };
template <> struct acc_type<float16> { using type = float; };
template <> struct acc_type<bfloat16> { using type = float; };
template <typename T> using acc_t = typename acc_type<T>::type;

}  // namespace onyx
