// The host-side part of MatMul, FusedMatMul, FusedMatMulBias and Gemm that every provider
// shares: attributes, numpy's batch broadcasting, and the checks of operand dtypes and shapes,
// with the same onyx::Error messages on the CPU and on a device.
#pragma once

#include <string>

#include "kernels/kernel.h"

namespace onyx {

/// Shapes of a MatMul after numpy's rules: 1-D operands promoted, batch dims broadcast.
struct MatMulShape {
  int64_t M = 1, N = 1, K = 1;
  Shape batch;             // broadcast batch dims
  Shape a_batch, b_batch;  // each padded to batch's rank
  Shape out;               // the ONNX output shape
};

MatMulShape matmul_shape(const std::string& who, const Shape& a, const Shape& b);

/// The logical shape of an operand: the last two dims swapped when `trans` (rank >= 2).
Shape logical_shape(Shape s, bool trans);

/// What ai.onyx FusedMatMulBias applies to each product element after adding the bias.
enum class MatMulActivation { None, Relu, Gelu, GeluTanh };

/// MatMul, com.microsoft FusedMatMul (alpha, transA, transB; transBatchA/B refused with
/// NotImplemented) and ai.onyx FusedMatMulBias (a row bias and an activation; neither alpha
/// nor transA), parsed at session creation.
struct MatMulAttrs {
  float alpha;
  bool trans_a, trans_b;
  bool bias;  // FusedMatMulBias: input 2 is a row bias, `act` follows
  MatMulActivation act;
  explicit MatMulAttrs(const KernelInfo& info);
};

/// One run's operands checked (one dtype; FusedMatMulBias: a 2-D B and a bias [N] or
/// [1, .., N] of that dtype) and their product's shape; `ta`/`tb` say which operand is used
/// transposed (transA/transB on an operand of rank >= 2).
MatMulShape matmul_run_shape(const KernelContext& ctx, const MatMulAttrs& attrs, bool& ta,
                             bool& tb);

/// Gemm's [M, K] x [K, N] and how C broadcasts onto [M, N] (cm, cn: 1 or M, 1 or N).
struct GemmShape {
  int64_t M = 0, N = 0, K = 0, cm = 1, cn = 1;
};
GemmShape gemm_shape(const KernelContext& ctx, bool trans_a, bool trans_b);

}  // namespace onyx
