// The plain interface between kernels/cuda/cast.cpp and cast.cu: Cast / CastLike between
// every non-string ONNX element type on the device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace onyx::cuda::cast {

/// Element types a cast reads or writes. The 8- and 4-bit floats and the sub-byte integers
/// are held one value per byte, as in host memory.
enum class CType : int {
  F32, F64, F16, BF16, I8, I16, I32, I64, U8, U16, U32, U64, Bool,  // plain types
  F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0, F4E2M1,          // small floats
  I4, U4, I2, U2,                                                    // sub-byte integers
  kCount
};

constexpr bool is_plain(CType t) { return t <= CType::Bool; }
constexpr bool is_small_float(CType t) { return t >= CType::F8E4M3FN && t <= CType::F4E2M1; }
constexpr bool is_sub_byte_int(CType t) { return t >= CType::I4; }

/// Cast's round_mode for float8e8m0 (as onyx::E8M0Round).
enum class E8M0Round : int { Up, Down, Nearest };

/// y[i] = x[i] converted from `from` to `to` (from != to), n > 0 elements, with the rules of
/// kernels/cpu/cast.cpp: float to integer truncates (NaN and out-of-range give the x86
/// 0x80..0 pattern), integer narrowing wraps, bool is "!= 0", float8 encodes round to nearest
/// even and saturate (or not) per `saturate`.
void launch_cast(CType from, CType to, const void* x, void* y, int64_t n, bool saturate,
                 E8M0Round round, cudaStream_t s);

}  // namespace onyx::cuda::cast
