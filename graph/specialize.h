// Specialising a graph to concrete input shapes: the real batch's shapes replace the symbolic
// (or, on request, fixed) dims the model declares, and shape inference runs again from them, so
// every value whose size follows from the inputs gets a concrete shape. Memory planning for
// activation recomputation sizes a training graph this way from its first batch, and `onyx
// gradcheck --batch N` checks a model on a smaller batch than the one it was exported with.
#pragma once

#include <map>
#include <string>

#include "graph/ir.h"

namespace onyx {

/// Sizes of symbolic dims ("batch" -> 8) bound by matching each graph input's declared shape
/// against `shapes` (input name -> concrete shape). onyx::Error when a listed name is not a
/// graph input, a rank differs, a fixed dim differs (unless `resize_fixed`), or one symbol
/// would get two sizes.
std::map<std::string, int64_t> bind_input_dims(const Graph& g, const std::map<std::string, Shape>& shapes,
                                               bool resize_fixed = false);

/// Rewrites `model`'s main graph for the input shapes in `shapes`: those inputs take them,
/// every other input's symbolic dims take the sizes bound from them (bind_input_dims), and the
/// shapes of all values nodes produce (graph outputs included) are inferred again. A value
/// whose shape inference can no longer tell keeps what it declared, with bound symbols
/// substituted, or only its rank when `resize_fixed` (a fixed dim there may be the old batch).
/// Subgraph bodies keep their declared shapes (kernels check actual shapes at run time).
/// `resize_fixed`: a listed input may change a fixed dim, e.g. a model exported with batch 16
/// checked with batch 2; the graph must not have baked the old size into a constant.
void specialize_input_shapes(Model& model, const std::map<std::string, Shape>& shapes,
                             bool resize_fixed = false);

/// The shapes of `g`'s inputs (initializers excluded) with dim 0 set to `batch` (and so every
/// dim named like a dim 0), other symbolic dims taken from `dims`, and dims still unknown
/// `default_dim`: what specialize_input_shapes needs to run a model on `batch` samples. Inputs
/// of rank 0 keep their shape; an input without a declared shape is an error.
std::map<std::string, Shape> input_shapes_with_batch(const Graph& g, int64_t batch,
                                                     std::map<std::string, int64_t> dims = {},
                                                     int64_t default_dim = 1);

}  // namespace onyx
