// Small helpers of the graph layer's pattern matchers (gelu_pattern.cpp, attention_pattern.cpp):
// what a spelling's edges must be so that its nodes may disappear into one op.
#pragma once

#include <algorithm>

#include "graph/ir.h"

namespace onyx::pattern {

/// True when `n` is the ai.onnx op `op`.
inline bool is(const Node* n, const char* op) { return n && n->op_type == op && n->domain.empty(); }

/// The node producing v, when v is read by `reader` only and is not a graph output (so it may
/// disappear into one op).
inline Node* private_producer(const Graph& g, const Value* v, const Node* reader) {
  if (!v || !v->producer || v->consumers.size() != 1 || v->consumers[0].first != reader)
    return nullptr;
  if (std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end()) return nullptr;
  return v->producer;
}

/// v's static shape when it is a tensor of known rank, else nullptr.
inline const SymShape* shape_of(const Value* v) {
  return v && v->type.is_tensor() && v->type.shape ? &*v->type.shape : nullptr;
}

/// True when `v` is a tensor of `dt` known to hold one element ([] or [1, ...]).
inline bool one_element(const Value* v, DataType dt) {
  const SymShape* s = shape_of(v);
  if (!s || v->type.elem != dt) return false;
  return std::all_of(s->begin(), s->end(), [](const Dim& d) { return d.is_fixed() && d.value == 1; });
}

}  // namespace onyx::pattern
