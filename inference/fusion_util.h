// Small graph queries and edits the fusion and layout passes share.
#pragma once

#include <algorithm>

#include "graph/ir.h"

namespace onyx {

/// True when `v` is one of the graph's outputs.
inline bool is_graph_output(const Graph& g, const Value* v) {
  return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
}

/// The initializer behind `v` when no feed can replace it (not a graph input, not an IR < 4
/// overridable initializer); else nullptr.
inline const Tensor* constant_value(const Graph& g, const Value* v) {
  if (!v || std::find(g.inputs.begin(), g.inputs.end(), v) != g.inputs.end()) return nullptr;
  const auto& o = g.overridable_initializers;
  if (std::find(o.begin(), o.end(), v->name) != o.end()) return nullptr;
  return g.initializer(v);
}

/// The single node that reads `v`, through one input, when `v` is not a graph output (so the
/// value may disappear into a fusion); else nullptr.
inline Node* only_consumer(const Graph& g, const Value* v) {
  if (!v || v->consumers.size() != 1 || v->consumers[0].second < 0 || is_graph_output(g, v))
    return nullptr;
  return v->consumers[0].first;
}

/// Makes `v`, which nothing produces, output `idx` of `n`; the value there loses its producer.
inline void set_output(Node* n, int idx, Value* v) {
  ONYX_CHECK(!v->producer, "[optimizer] value '{}' already has a producer", v->name);
  if (Value* old = n->outputs[idx]; old && old->producer == n) {
    old->producer = nullptr;
    old->producer_output = -1;
  }
  n->outputs[idx] = v;
  v->producer = n;
  v->producer_output = idx;
}

/// Adds `domain` at version 1 to the model's opset imports when it is missing.
inline void import_domain(Model& model, const std::string& domain) {
  if (model.opset(domain) == 0) model.opsets.push_back({domain, 1});
}

}  // namespace onyx
