// The 8-bit and 4-bit float encodings of ONNX (float8e4m3fn, float8e4m3fnuz, float8e5m2,
// float8e5m2fnuz, float8e8m0, float4e2m1), held one value per byte, converted via float.
#pragma once

#include <cstdint>

#include "graph/dtype.h"

namespace onyx {

/// Decodes one stored byte of type `t` (a float8 type or float4e2m1) to float.
float float8_to_float(uint8_t bits, DataType t);
/// Encodes `v` as type `t`, rounding to nearest even. With `saturate`, out-of-range
/// values clamp to the largest finite value (as ONNX Cast's saturate=1 does).
uint8_t float_to_float8(float v, DataType t, bool saturate = true);

/// Rounding of a float's mantissa into float8e8m0's power of two (ONNX Cast round_mode).
enum class E8M0Round { Up, Down, Nearest };
/// Encodes `v` as float8e8m0 (sign ignored; NaN and inf give NaN 0xff). With `saturate`,
/// rounding never goes past the largest finite exponent.
uint8_t float_to_float8e8m0(float v, bool saturate, E8M0Round mode);

}  // namespace onyx
