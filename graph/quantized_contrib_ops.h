// ONNX Runtime's quantized com.microsoft ops, as its quantizer writes them in the QOperator
// format (and as the ONNX model zoo's int8 models use them): each is rewritten into the
// ai.onnx ops that define it, DequantizeLinear -> the float op -> QuantizeLinear, so the
// optimizer folds the constant weights' dequantization and runs the float kernels.
//
//   QLinearAdd / QLinearMul (A, As, Az, B, Bs, Bz, Cs, Cz)  -> Q(Add|Mul(DQ(A), DQ(B)), Cs, Cz)
//   QLinearSigmoid / QLinearLeakyRelu (X, Xs, Xz, Ys, Yz)   -> Q(Sigmoid|LeakyRelu(DQ(X)), Ys, Yz)
//   QLinearGlobalAveragePool / QLinearAveragePool           -> Q(GlobalAveragePool|AveragePool(DQ(X)))
//   QLinearConcat (Ys, Yz, X0, X0s, X0z, ...)               -> Q(Concat(DQ(X0), ...), Ys, Yz)
//   QGemm (A, As, Az, B, Bs, Bz, C?, Ys?, Yz?)              -> [Q](Gemm(DQ(A), DQ(B), DQ(C, As*Bs)))
//   QLinearSoftmax (X, Xs, Xz, Ys, Yz)                       -> Q(Softmax(DQ(X)), Ys, Yz)
//
// The results are the float computation's, requantized: they may differ from ONNX Runtime's
// integer kernels by one step of the output's scale where a value lies on a rounding boundary.
#pragma once

#include "graph/ir.h"

namespace onyx {

/// Rewrites the ops above in the main graph of `model` (channels_last = 1 pools are left for
/// the kernel lookup to report). Returns how many nodes were rewritten.
int expand_quantized_contrib_ops(Model& model);

}  // namespace onyx
