// Upgrading models that import ai.onnx opset 7-12 to opset-13 semantics, for training:
// gradient rules emit opset-13 ops, and a graph that mixes opset-12 and opset-13 meanings
// cannot be run as one model. Inference does not need this (kernels honour every opset).
#pragma once

#include "graph/ir.h"

namespace onyx {

/// Rewrites `model` (ai.onnx opset 7-12) so that it means the same at opset 14 and sets its
/// ai.onnx opset to 14: canonicalize_opsets() moves attributes into inputs; Softmax,
/// LogSoftmax and Hardmax (which normalised everything from `axis` on, as one flattened
/// axis) become Flatten -> op(axis 1) -> Reshape unless `axis` is the last; Resize-10 and
/// Upsample become Resize with an empty roi, asymmetric coordinates and floor rounding (the
/// legacy rounding, exact when no axis shrinks); BatchNormalization loses `spatial` (1).
/// Opset 13 and later: nothing. Throws onyx::Error naming the node for what has no exact
/// opset-13 form (opset < 7, BatchNormalization spatial=0, nearest downsampling of Resize-10).
void upgrade_to_opset13(Model& model);

}  // namespace onyx
