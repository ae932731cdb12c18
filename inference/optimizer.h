// Graph optimizations run at session creation, as named passes in an explicit pipeline.
#pragma once

#include "kernels/provider.h"
#include "inference/session.h"

namespace onyx {

/// Runs the passes `level` enables on the main graph: basic = constant folding (on `cpu`),
/// then dead-code elimination; extended adds the fusions below (those into a provider's own ops
/// only where `first`, the provider placement tries first, has their kernels); all adds the
/// NCHWc layout pass with `layout`'s block (the preference of the provider that runs
/// convolutions; 0 skips the pass), or its Winograd block (convert_convs_to_nchwc). Returns the
/// number of nodes removed. `approximate_fusions`: see SessionOptions::approximate_fusions.
size_t optimize_graph(Model& model, OptLevel level, const ExecutionProvider& cpu,
                      const ExecutionProvider& first, const LayoutPreferences& layout,
                      bool approximate_fusions = true);

/// Dropout with a constant ratio of 0 whose mask nobody reads (training mode or not) -> Identity:
/// it keeps every element at scale 1 (torch's nn.Dropout(p=0.0) exports as one in training mode,
/// a copy of its input each run). Returns how many.
size_t drop_zero_ratio_dropouts(Graph& g);

/// Evaluates nodes whose inputs are all constant and replaces them by initializers (results up
/// to 64 MB; a node whose inferred output is larger is not evaluated). With
/// `transposes_fused_later` (fuse_transpose_into_matmul runs after), a Transpose of the last two
/// axes that only MatMuls read stays, for them to read its input in place.
size_t fold_constants(Model& model, const ExecutionProvider& cpu,
                      bool transposes_fused_later = false);
/// Removes nodes whose outputs nobody reads, and unused initializers.
size_t eliminate_dead_code(Graph& graph);

// Fusions (fusions_*.cpp), each returning the number of rewrites.
/// MatMul(Transpose(X), Y) and MatMul(X, Transpose(Y)) where the Transpose swaps the last two
/// axes -> com.microsoft FusedMatMul with transA/transB: no transposed copy at run time (GPT-2's
/// tied LM head reads its 154 MB embedding this way).
size_t fuse_transpose_into_matmul(Model& model);

/// A float product of two computed operands scaled by constants, (a * s) x (b * t) or
/// (a x b) * s (or / s), becomes com.microsoft FusedMatMul(a, b, alpha = s * t); run before
/// fuse_transpose_into_matmul, which then reads a Transpose behind a removed Mul in place.
size_t fuse_scale_into_matmul(Model& model);

/// Softmax(Add(X, M)) along the last axis, M broadcasting into X (an attention mask) ->
/// ai.onyx AddSoftmax(X, M), where `runs_it` (the session's first provider) has that kernel.
size_t fuse_add_softmax(Model& model, const ExecutionProvider& runs_it);

/// MatMul or FusedMatMul (transA 0, alpha 1) with a 2-D B of fixed width N, whose output only an
/// Add of a row bias (a value of shape [N] or [1, .., N], same dtype) reads, optionally followed
/// by the only reader Relu or Gelu (erf or tanh) -> ai.onyx FusedMatMulBias(A, B, bias) with
/// transB and activation ("none", "relu", "gelu", "gelu_tanh"); likewise a Gemm (transA 0,
/// alpha and beta 1) whose C is such a row bias, with the activation that only reads it. Run
/// after fuse_transpose_into_matmul and fuse_gelu. Without `activations`, only the bias is
/// fused.
size_t fuse_bias_into_matmul(Model& model, bool activations = true);

/// Training graphs (fusions_conv_grad.cpp): the Transpose / Conv / Slice / Transpose pattern the
/// Conv gradient rule writes for dW (group 1, static pads, float/float16/bfloat16), each
/// intermediate read by the next node alone -> ai.onyx ConvWeightGrad(X, dY), one oneDNN
/// primitive without the transposed copies; a float32 Cast reading it alone is absorbed as `to`.
size_t fuse_conv_weight_grad(Model& model);

/// Mixed-precision training graphs (fusions_gemm_cast.cpp): Cast(to = FLOAT) of a bfloat16 or
/// float16 Gemm without C that only the Cast reads (a weight's gradient cast back to its float32
/// master) -> ai.onyx GemmCast(A, B) writing float32, where `runs_it` has that kernel.
size_t fuse_cast_into_gemm(Model& model, const ExecutionProvider& runs_it);

/// Training graphs (fusions_norm_grad.cpp): the input gradient of a training-mode
/// BatchNormalization as the gradient rule writes it (a dozen plain ONNX nodes over [N, C, S]
/// views) -> one ai.onyx BatchNormTrainingGrad(dY, X, scale) writing dX and the per-channel sums
/// of dY and dY * xhat that the parameter gradients read.
size_t fuse_batch_norm_grad(Model& model);

/// Training graphs (fusions_layer_norm_grad.cpp): the gradients of a LayerNormalization as the
/// gradient rule writes them (about fifteen plain ONNX nodes over an [outer, inner] view, from
/// the forward node's Mean and InvStdDev) -> one ai.onyx LayerNormalizationGrad(dY, X, scale,
/// Mean, InvStdDev) writing dX and, where sum_to wrote them in its static form, the scale's and
/// bias's gradients; where `runs_it` (the session's first provider) has that kernel.
size_t fuse_layer_norm_grad(Model& model, const ExecutionProvider& runs_it);

/// The backward of an attention spelling as training writes it (fusions_attention_grad.cpp:
/// dP = dO V^T, Softmax's gradient, the scale, dQ = dX Kt^T, dKt = Q^T dX, dV = P^T dO) -> one
/// ai.onyx SoftmaxAttentionGrad(dO, P, V, Q, Kt, alpha), where `runs_it` has that kernel.
size_t fuse_softmax_attention_grad(Model& model, const ExecutionProvider& runs_it);

/// GELU (fusions_gelu.cpp): the Erf spelling exporters write (graph/gelu_pattern.h), its
/// intermediates read inside alone -> com.microsoft Gelu(x); the tanh spelling ->
/// com.microsoft FastGelu(x) (with `tanh_form`).
size_t fuse_gelu(Model& model, bool tanh_form = true);
/// Training graphs (fusions_gelu.cpp): the input gradient of GELU as the Gelu rule writes it
/// (about ten plain ONNX nodes) -> ai.onyx GeluGrad(dY, x).
size_t fuse_gelu_grad(Model& model);
/// Training's ReLU gradient, Where(Greater(Y, 0), dY, 0) with dY and Y of one shape ->
/// ai.onyx ReluGrad(dY, Y), where `runs_it` (the session's first provider) has that kernel.
size_t fuse_relu_grad(Model& model, const ExecutionProvider& runs_it);
/// Training's MaxPool gradient, ScatterElements(Expand(0, S), Reshape(Indices, [-1]),
/// Reshape(dY, [-1]), axis 0, add) over MaxPool's Indices -> ai.onyx MaxPoolGrad(dY, Indices, S)
/// (fusions_max_pool_grad.cpp), where `runs_it` has that kernel.
size_t fuse_max_pool_grad(Model& model, const ExecutionProvider& runs_it);

/// Training's SoftmaxCrossEntropyLoss gradient (fusions_loss_grad.cpp): Mul(Sub(Exp(log_prob),
/// Cast(Equal(Unsqueeze(labels, [1]), the constant classes))), coef) over a float log_prob of fixed
/// class count, coef one value or [N, 1, d...] -> ai.onyx SoftmaxCrossEntropyGrad(log_prob, labels,
/// coef), where `runs_it` has that kernel.
size_t fuse_softmax_cross_entropy_grad(Model& model, const ExecutionProvider& runs_it);

/// After it: SoftmaxCrossEntropyLoss whose log_prob only that gradient reads, and the gradient
/// (fusions_loss_grad.cpp) -> one ai.onyx SoftmaxCrossEntropyLossGrad(scores, labels,
/// grad_labels, coef[, weight]) with the loss and the scores' gradient as outputs, where
/// `runs_it` has that kernel and coef is not computed from the loss.
size_t fuse_softmax_cross_entropy_loss_grad(Model& model, const ExecutionProvider& runs_it);

/// Training's Gather / GatherND gradients (fusions_scatter_sum.cpp): ScatterND(zeros, indices,
/// dy, reduction=add) of a float type, alone or as terms of a Sum whose inputs all have its
/// shape (a tied embedding's dW_head + scattered rows, torch's packed q/k/v) -> ai.onyx
/// ScatterAddSum(terms..., shape), where `runs_it` has that kernel.
size_t fuse_scatter_add_sum(Model& model, const ExecutionProvider& runs_it);

/// QDQ convolutions (fusions_qdq.cpp): QuantizeLinear(Conv(DequantizeLinear(x),
/// DequantizeLinear(W), DequantizeLinear(B))) with 8-bit x of the output's type, constant int8 W
/// (zero points 0, scale per tensor or per output channel) and int32 B in the scale x_scale *
/// w_scale -> QLinearConv. Runs before constant folding (which would dequantize W), only where
/// the first provider asks for it (LayoutPreferences::exact_int8_convolutions).
size_t fuse_qdq_into_qlinear_conv(Model& model);
/// MatMulInteger (constant 2-D B) -> Cast(to float) -> Mul by one float [-> Add of a constant
/// float bias [N]], each read only by the next -> ai.onyx MatMulIntegerToFloat (the same bits).
size_t fuse_matmul_integer_to_float(Model& model);

// CNN fusions (fusions_conv.cpp), in pipeline order; none fuses away a graph output.
/// Conv -> BatchNormalization (inference mode, only Y read) with constant W, B and statistics,
/// the Conv's output read by the BN alone -> Conv with W' = W * s, B' = (B - mean) * s + bias,
/// s = scale / sqrt(var + eps), computed in double into new initializers.
size_t fuse_batchnorm_into_conv(Model& model);
/// Add(Conv(...), Z) with Z of the conv output's static shape (no broadcasting), the conv output
/// read by the Add alone -> com.microsoft FusedConv with Z (a residual connection).
size_t fuse_add_into_conv(Model& model);
/// Relu, LeakyRelu, Sigmoid, Tanh, Clip (constant bounds) or HardSigmoid of a Conv/FusedConv
/// output read by it alone -> FusedConv with `activation` / `activation_params`.
size_t fuse_activation_into_conv(Model& model);

/// NCHWc layout (layout_nchwc.cpp): 2-D float32 Conv/FusedConv with constant weights, one
/// group and output channels a multiple of `block` (8 or 16; any for -1, channels-last) ->
/// ai.onyx ConvNchwc on blocked [N, C/block, H, W, block] tensors ([N, 1, H, W, C] for -1),
/// with ai.onyx ToNchwc / FromNchwc reorders at the boundary (one per value; unused FromNchwc
/// are left to dead-code elimination). A 2-D MaxPool (Indices unread) or GlobalAveragePool of
/// a blocked value becomes MaxPoolNchwc / GlobalAveragePoolNchwc (the latter writes plain
/// [N, C, 1, 1]).
/// With `winograd_block` (> 0) and 3x3 stride-1 convolutions holding at least a quarter of the
/// convolution weights, the pass takes that block instead and marks those convolutions
/// `winograd` = 1 (their kernel then runs Winograd's algorithm where the CPU has it).
size_t convert_convs_to_nchwc(Model& model, int64_t block, int64_t winograd_block = 0);

}  // namespace onyx
