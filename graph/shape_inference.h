// Static type and shape inference over a model's graphs, for validation and planning.
// Symbolic dims are kept; anything unknown stays unknown. Kernels still check the actual
// inputs at run time, so inference only has to be right, never complete.
#pragma once

#include <optional>
#include <vector>

#include "graph/ir.h"

namespace onyx {

/// Fills in the types of values that have none, from op schemas and per-op shape rules.
/// Throws onyx::Error when an op's inputs break its type constraints (e.g. Add of float and
/// int64, or Relu of a string tensor).
void infer_types_and_shapes(Model& model);

/// The same for one graph of `model` that is being built (a subgraph not yet attached): the
/// outer values it reads are typed from its enclosing graphs (Graph::parent) first.
void infer_subgraph_types(const Model& model, Graph& g);

/// The contents of the small integer tensor `v` of `g` when every element is known: an
/// initializer, or a shape computation over constants (Reshape / Concat / Unsqueeze of them, as
/// exporters write axes and shapes) that shape inference's data propagation evaluates. Reads
/// the types shape inference gave the values on the way.
std::optional<std::vector<int64_t>> known_int_values(const Graph& g, const Value* v);

/// numpy-style broadcast of two symbolic shapes; nullopt when they cannot broadcast.
std::optional<SymShape> broadcast_shapes(const SymShape& a, const SymShape& b);

}  // namespace onyx
