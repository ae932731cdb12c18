// Structural checks on a loaded model, with errors that name the node and the problem.
#pragma once

#include "graph/ir.h"

namespace onyx {

/// Checks, for the main graph and every subgraph: each value read has a producer (a node,
/// a graph input, an initializer or an enclosing scope); no cycles; each op exists in the
/// imported opset of its domain and has an allowed number of inputs and outputs; input
/// types agree with the op's type constraints. Then runs type and shape inference.
/// Throws onyx::Error on the first problem.
void validate_model(Model& model);

}  // namespace onyx
