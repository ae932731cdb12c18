// The plain interface between kernels/cuda/elementwise.cpp (kernel classes, shapes) and
// elementwise.cu (device code): op and dtype enums, the broadcast descriptor, launchers.
// Every op lists the dtypes it takes here once (unary_supports / binary_supports): the .cu
// instantiates exactly those and the .cpp registers exactly those.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace onyx::cuda::ew {

/// Element types of this family (the float8 ones only for IsNaN / IsInf).
enum class DType : int {
  F32, F64, F16, BF16, I8, I16, I32, I64, U8, U16, U32, U64, Bool,
  F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ,
  kCount
};

constexpr bool is_float(DType t) { return t <= DType::BF16; }
constexpr bool is_signed_int(DType t) { return t >= DType::I8 && t <= DType::I64; }
constexpr bool is_unsigned_int(DType t) { return t >= DType::U8 && t <= DType::U64; }
constexpr bool is_int(DType t) { return is_signed_int(t) || is_unsigned_int(t); }
constexpr bool is_numeric(DType t) { return is_float(t) || is_int(t); }

/// The dtype sets the ops below take (each mirrors the CPU registration of the op).
enum class Set { Float, FloatSigned, Numeric, NumericBool, Int, Unsigned, Bool, PRelu, PowBase };

constexpr bool in_set(Set s, DType t) {
  switch (s) {
    case Set::Float: return is_float(t);
    case Set::FloatSigned: return is_float(t) || is_signed_int(t);
    case Set::Numeric: return is_numeric(t);
    case Set::NumericBool: return is_numeric(t) || t == DType::Bool;
    case Set::Int: return is_int(t);
    case Set::Unsigned: return is_unsigned_int(t);
    case Set::Bool: return t == DType::Bool;
    case Set::PRelu:
      return is_float(t) || t == DType::I32 || t == DType::I64 || t == DType::U32 || t == DType::U64;
    case Set::PowBase: return is_float(t) || t == DType::I32 || t == DType::I64;
  }
  return false;
}

// X(op, dtype set). DivBy (x / alpha) is Mean's last step, not an ONNX op.
#define ONYX_CUDA_UNARY_OPS(X)                                                                   \
  X(Abs, Numeric) X(Neg, FloatSigned) X(Exp, Float) X(Log, Float) X(Sqrt, Float)                \
  X(Reciprocal, Float) X(Relu, FloatSigned) X(LeakyRelu, Float) X(Elu, Float) X(Selu, Float)    \
  X(Celu, Float) X(Sigmoid, Float) X(HardSigmoid, Float) X(HardSwish, Float) X(Tanh, Float)     \
  X(Softplus, Float) X(Softsign, Float) X(Mish, Float) X(ThresholdedRelu, Float)                \
  X(Shrink, Numeric) X(Erf, Numeric) X(Floor, Float) X(Ceil, Float) X(Round, Float)             \
  X(Sign, Numeric) X(Sin, Float) X(Cos, Float) X(Tan, Float) X(Asin, Float) X(Acos, Float)      \
  X(Atan, Float) X(Sinh, Float) X(Cosh, Float) X(Asinh, Float) X(Acosh, Float) X(Atanh, Float)  \
  X(BitwiseNot, Int) X(Not, Bool) X(GeluErf, Float) X(GeluTanh, Float) X(DivBy, Float)

// X(op, dtype set). AddGeluTanh(x, bias) = GeluTanh(x + bias) is FastGelu with a bias.
#define ONYX_CUDA_BINARY_OPS(X)                                                                  \
  X(Add, Numeric) X(Sub, Numeric) X(Mul, Numeric) X(Div, Numeric) X(Mod, Numeric)               \
  X(Min, Numeric) X(Max, Numeric) X(Equal, NumericBool) X(Less, Numeric)                        \
  X(LessOrEqual, Numeric) X(Greater, Numeric) X(GreaterOrEqual, Numeric) X(And, Bool)           \
  X(Or, Bool) X(Xor, Bool) X(BitShift, Unsigned) X(BitwiseAnd, Int) X(BitwiseOr, Int)           \
  X(BitwiseXor, Int) X(PRelu, PRelu) X(AddGeluTanh, Float)

#define ONYX_CUDA_ENUM_ENTRY(op, set) op,
enum class UnaryOp : int { ONYX_CUDA_UNARY_OPS(ONYX_CUDA_ENUM_ENTRY) };
enum class BinaryOp : int { ONYX_CUDA_BINARY_OPS(ONYX_CUDA_ENUM_ENTRY) };
#undef ONYX_CUDA_ENUM_ENTRY

constexpr bool unary_supports(UnaryOp op, DType t) {
#define ONYX_CUDA_CASE(o, set) \
  case UnaryOp::o: return in_set(Set::set, t);
  switch (op) { ONYX_CUDA_UNARY_OPS(ONYX_CUDA_CASE) }
#undef ONYX_CUDA_CASE
  return false;
}

constexpr bool binary_supports(BinaryOp op, DType t) {
#define ONYX_CUDA_CASE(o, set) \
  case BinaryOp::o: return in_set(Set::set, t);
  switch (op) { ONYX_CUDA_BINARY_OPS(ONYX_CUDA_CASE) }
#undef ONYX_CUDA_CASE
  return false;
}

/// Comparisons and logic produce bool; every other binary op its operands' dtype.
constexpr bool binary_bool_out(BinaryOp op) {
  return op == BinaryOp::Equal || op == BinaryOp::Less || op == BinaryOp::LessOrEqual ||
         op == BinaryOp::Greater || op == BinaryOp::GreaterOrEqual || op == BinaryOp::And ||
         op == BinaryOp::Or || op == BinaryOp::Xor;
}

/// Attributes of the unary ops: alpha (LeakyRelu, Elu, Selu, Celu, HardSigmoid,
/// ThresholdedRelu, DivBy's divisor, Shrink's bias), beta (HardSigmoid's beta, Selu's gamma,
/// Shrink's lambd).
struct UnaryParams {
  float alpha = 0, beta = 0;
};

/// Mod's fmod attribute; BitShift's direction.
struct BinaryParams {
  bool fmod = false;
  bool shift_left = false;
};

/// Most dimensions a broadcast may have once neighbouring dimensions are merged.
inline constexpr int kMaxDims = 8;

/// An output of `numel` elements, row-major over dims[0..rank), read from up to three inputs
/// with element strides (0 along broadcast dimensions). The .cpp drops size-1 dimensions and
/// merges neighbours every input is contiguous across, so same-shape operands are rank 1 with
/// stride 1 and a scalar operand has stride 0: rank <= 1 takes the flat, vectorised path.
struct Broadcast {
  int rank = 0;
  int64_t numel = 0;
  int64_t dims[kMaxDims] = {};
  int64_t strides[3][kMaxDims] = {};
  int64_t max_input_numel = 0;  // with numel: whether 32-bit index math suffices
};

/// y[i] = op(x[i]) for n contiguous elements of dtype t (same dtype out).
void launch_unary(UnaryOp op, DType t, const void* x, void* y, int64_t n, const UnaryParams& p,
                  cudaStream_t s);
/// Clip: y = min(max(x, lo), hi); lo / hi point to one host value of dtype t, or are null.
void launch_clip(DType t, const void* x, void* y, int64_t n, const void* lo, const void* hi,
                 cudaStream_t s);
/// IsNaN (nan) or IsInf (detect_positive pos, detect_negative neg) of a float or float8 x.
void launch_float_class(DType t, const void* x, bool* y, int64_t n, bool nan, bool pos, bool neg,
                        cudaStream_t s);
/// y = op(a, b) broadcast per bc; a and b of dtype t, y of dtype t or bool.
void launch_binary(BinaryOp op, DType t, const void* a, const void* b, void* y,
                   const Broadcast& bc, const BinaryParams& p, cudaStream_t s);
/// Converts n elements of numeric dtype t to int64 (to_int, integer t only) or double: Pow's
/// exponent, so that Pow instantiates one kernel per base dtype and exponent kind.
void launch_widen_exponent(DType t, bool to_int, const void* x, void* y, int64_t n,
                           cudaStream_t s);
/// y = a ^ b broadcast per bc; a of dtype base, b int64 (exp_int) or double. same_dtype: the
/// exponent had the base's dtype; scalar_exp: it has one element (then 2 and 3 multiply).
void launch_pow(DType base, bool exp_int, const void* a, const void* b, void* y,
                const Broadcast& bc, bool same_dtype, bool scalar_exp, cudaStream_t s);
/// out = cond ? x : y broadcast per bc (inputs 0, 1, 2 = cond, x, y), elements of
/// elem_bytes (1, 2, 4, 8 or 16) bytes.
void launch_where(int elem_bytes, const bool* cond, const void* x, const void* y, void* out,
                  const Broadcast& bc, cudaStream_t s);

}  // namespace onyx::cuda::ew
