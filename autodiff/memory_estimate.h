// How much activation memory a graph will hold at once, estimated before it runs: the
// executor (inference/executor.cpp) runs nodes in the graph's stable topological order and
// frees each intermediate after its last reader, so replaying that order over the values'
// sizes gives the plan's peak. Activation recomputation chooses its segments by it.
//
// Not counted: graph inputs and initializers (the caller's memory), kernels' scratch space,
// and what the session's optimizer passes change (fusions); reshape-like ops (Reshape,
// Flatten, Squeeze, Unsqueeze, Identity) are views that share their input's buffer, as the
// CPU kernels make them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>

#include "graph/ir.h"

namespace onyx::autodiff {

/// Byte sizes of a graph's tensor values, by name.
struct ValueSizes {
  std::unordered_map<std::string, int64_t> bytes;
  /// Values that allocate but whose size stayed unknown (counted as 0 bytes). Where shape
  /// inference cannot follow the backward's run-time shape ops, an elementwise op is sized as
  /// its largest input; what stays unknown is mostly those shape ops and the reductions of
  /// broadcast gradients (parameter-sized), e.g. 148 values in the 2-block GPT-2 test model,
  /// whose planned peak still came within 4 % of the measured one at bench size.
  size_t unknown = 0;
  int64_t of(const Value* v) const;
};

/// Sizes of every value of `model`'s main graph when its inputs have `input_shapes` (inputs
/// not listed keep their declared shapes, with symbols bound from the listed ones): the model
/// is specialised (graph/specialize.h) and then given back its types, so it ends as it was.
/// onyx::Error as specialize_input_shapes.
ValueSizes value_sizes(Model& model, const std::map<std::string, Shape>& input_shapes);

/// The most intermediate bytes alive at once while `g` runs in topological order, `bytes`
/// giving each value's size.
int64_t planned_peak_bytes(const Graph& g, const std::function<int64_t(const Value*)>& bytes);

}  // namespace onyx::autodiff
