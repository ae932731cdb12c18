// Small graph queries and edits the fusion and layout passes share.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <optional>
#include <vector>

#include "graph/gelu_pattern.h"
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

/// True when `n` is op `op` of `domain` (ai.onnx by default).
inline bool is_op(const Node* n, const char* op, const char* domain = "") {
  return n && n->op_type == op && n->domain == domain;
}

/// The producer of v when it is `op` (of ai.onnx), else nullptr.
inline Node* made_by(const Value* v, const char* op) {
  return v && v->producer && is_op(v->producer, op) ? v->producer : nullptr;
}

/// The other input of a two-input node, given one of them; nullptr when `v` is not an input.
inline Value* other_input(const Node* n, const Value* v) {
  if (n->num_inputs() != 2) return nullptr;
  if (n->inputs[0] == v) return n->inputs[1];
  if (n->inputs[1] == v) return n->inputs[0];
  return nullptr;
}

/// The values of `v` when it is a constant (see constant_value) int64 or int32 scalar or 1-D
/// tensor; else nullopt (also for a null `v`).
inline std::optional<std::vector<int64_t>> constant_ints(const Graph& g, const Value* v) {
  const Tensor* t = constant_value(g, v);
  if (!t || t->rank() > 1 || (t->dtype() != DataType::Int64 && t->dtype() != DataType::Int32))
    return std::nullopt;
  if (t->dtype() == DataType::Int64)
    return std::vector<int64_t>(t->data<int64_t>(), t->data<int64_t>() + t->numel());
  return std::vector<int64_t>(t->data<int32_t>(), t->data<int32_t>() + t->numel());
}

/// Zeros as training's gradient rules write them (zeros_like: Expand(+0, shape)), or the
/// constant of +0s constant folding made of them.
struct ZeroFill {
  Value* shape = nullptr;  // the Expand's shape; nullptr for the folded constant
  Shape dims;              // the folded constant's dims
};
inline std::optional<ZeroFill> zero_fill(const Graph& g, const Value* v) {
  if (const Node* expand = made_by(v, "Expand")) {
    if (expand->inputs.size() != 2 || !expand->inputs[1]) return std::nullopt;
    const std::optional<double> zero = constant_scalar(g, expand->inputs[0]);
    if (!zero || *zero != 0.0 || std::signbit(*zero)) return std::nullopt;
    return ZeroFill{expand->inputs[1], {}};
  }
  const Tensor* t = constant_value(g, v);
  if (!t || !is_float(t->dtype())) return std::nullopt;
  // All bits zero (+0.0), a word at a time: such constants can be tens of MB.
  const auto* bytes = static_cast<const unsigned char*>(t->raw());
  const size_t n = t->nbytes(), words = n / sizeof(uint64_t);
  uint64_t any = 0;
  for (size_t i = 0; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, bytes + i * sizeof(uint64_t), sizeof w);
    any |= w;
  }
  for (size_t i = words * sizeof(uint64_t); i < n; ++i) any |= bytes[i];
  if (any != 0) return std::nullopt;
  return ZeroFill{nullptr, t->shape()};
}

/// True when `a` and `b` have one shape at every run: the same dims, each fixed or a named
/// symbol.
inline bool provably_same_shape(const Value* a, const Value* b) {
  if (!a->type.is_tensor() || !b->type.is_tensor() || !a->type.shape || !b->type.shape)
    return false;
  if (*a->type.shape != *b->type.shape) return false;
  for (const Dim& d : *a->type.shape)
    if (!d.is_fixed() && d.param.empty()) return false;
  return true;
}

/// True when `t` is a Transpose that swaps exactly the last two axes of its input.
inline bool swaps_last_two_axes(const Node& t) {
  if (t.op_type != "Transpose" || !t.domain.empty() || !t.has_input(0)) return false;
  std::vector<int64_t> perm = t.attr_ints("perm");
  if (perm.empty()) {  // the default reverses every axis: a swap of the last two only for rank 2
    const ValueType& in = t.inputs[0]->type;
    return in.is_tensor() && in.shape && in.shape->size() == 2;
  }
  const int64_t r = static_cast<int64_t>(perm.size());
  if (r < 2) return false;
  for (int64_t i = 0; i < r - 2; ++i)
    if (perm[i] != i) return false;
  return perm[r - 2] == r - 1 && perm[r - 1] == r - 2;
}

/// The single node that reads `v`, through one input, when `v` is not a graph output (so the
/// value may disappear into a fusion); else nullptr.
inline Node* only_consumer(const Graph& g, const Value* v) {
  if (!v || v->consumers.size() != 1 || v->consumers[0].second < 0 || is_graph_output(g, v))
    return nullptr;
  return v->consumers[0].first;
}

/// Gives `n` a fresh value at output `idx`, so the value it wrote there can move to a fused
/// node; `n` (now read by nobody) is left for dead-code elimination, and passes running before
/// it still see a node whose outputs all exist.
inline void detach_output(Graph& g, Node* n, int idx) {
  Value* fresh = g.add_unique_value(n->outputs[idx]->name + "_unfused");
  Value* old = n->outputs[idx];
  old->producer = nullptr;
  old->producer_output = -1;
  n->outputs[idx] = fresh;
  fresh->producer = n;
  fresh->producer_output = idx;
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

/// Replaces the node producing `y` (output 0) by a new node of `op` over `inputs`, returned;
/// the old node, read by nobody now, is left for dead-code elimination.
inline Node* replace_producer(Model& model, Value* y, const char* op, const char* domain,
                              std::vector<Value*> inputs) {
  Graph& g = *model.graph;
  Node* old = y->producer;
  detach_output(g, old, 0);
  Node* n = g.add_node(op, std::move(inputs), {y}, domain, old->name + "_fused");
  import_domain(model, domain);
  return n;
}

}  // namespace onyx
