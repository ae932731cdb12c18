// Static type and shape inference over a model's graphs, for validation and planning.
// Symbolic dims are kept; anything unknown stays unknown. Kernels still check the actual
// inputs at run time, so inference only has to be right, never complete.
#pragma once

#include "graph/ir.h"

namespace onyx {

/// Fills in the types of values that have none, from op schemas and per-op shape rules.
/// Throws onyx::Error when an op's inputs break its type constraints (e.g. Add of float and
/// int64, or Relu of a string tensor).
void infer_types_and_shapes(Model& model);

/// The same for one graph of `model` that is being built (a subgraph not yet attached): the
/// outer values it reads are typed from its enclosing graphs (Graph::parent) first.
void infer_subgraph_types(const Model& model, Graph& g);

/// numpy-style broadcast of two symbolic shapes; nullopt when they cannot broadcast.
std::optional<SymShape> broadcast_shapes(const SymShape& a, const SymShape& b);

}  // namespace onyx
