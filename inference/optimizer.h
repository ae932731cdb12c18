// Graph optimizations run at session creation, as named passes in an explicit pipeline.
#pragma once

#include "inference/provider.h"
#include "inference/session.h"

namespace onyx {

/// Runs the passes `level` enables on the main graph: basic = constant folding, then
/// dead-code elimination; extended adds the fusions below. Returns the number of nodes removed.
size_t optimize_graph(Model& model, OptLevel level, const ExecutionProvider& cpu);

/// Evaluates nodes whose inputs are all constant and replaces them by initializers.
size_t fold_constants(Model& model, const ExecutionProvider& cpu);
/// Removes nodes whose outputs nobody reads, and unused initializers.
size_t eliminate_dead_code(Graph& graph);

// Fusions (fusions.cpp), each returning the number of rewrites.
/// MatMul(Transpose(X), Y) and MatMul(X, Transpose(Y)) where the Transpose swaps the last two
/// axes -> com.microsoft FusedMatMul with transA/transB: no transposed copy at run time (GPT-2's
/// tied LM head reads its 154 MB embedding this way).
size_t fuse_transpose_into_matmul(Model& model);

}  // namespace onyx
