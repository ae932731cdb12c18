// Graph optimizations run at session creation, as named passes in an explicit pipeline.
#pragma once

#include "inference/provider.h"
#include "inference/session.h"

namespace onyx {

/// Runs the passes `level` enables on the main graph: basic = constant folding, then
/// dead-code elimination. Returns the number of nodes removed.
size_t optimize_graph(Model& model, OptLevel level, const ExecutionProvider& cpu);

/// Evaluates nodes whose inputs are all constant and replaces them by initializers.
size_t fold_constants(Model& model, const ExecutionProvider& cpu);
/// Removes nodes whose outputs nobody reads, and unused initializers.
size_t eliminate_dead_code(Graph& graph);

}  // namespace onyx
