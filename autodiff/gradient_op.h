// The ai.onnx.preview.training Gradient op, expanded into backward nodes when a model is
// imported: Gradient(xs..., zs...; xs=[...], y="Y") outputs dY/dx for each x, where Y is
// computed by the surrounding graph. As in the ONNX spec, a non-scalar Y is differentiated
// as sum(Y) (its seed is ones).
#pragma once

#include "graph/ir.h"

namespace onyx::autodiff {

/// Replaces every Gradient node of the main graph by the nodes that compute it. Returns the
/// number of nodes expanded. onyx::Error for unknown xs/y names or ops without a rule.
int expand_gradient_ops(Model& model);

}  // namespace onyx::autodiff
