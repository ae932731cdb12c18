#include "autodiff/memory_estimate.h"

#include <algorithm>
#include <set>
#include <unordered_set>

#include "graph/specialize.h"

namespace onyx::autodiff {
namespace {

bool is_view_op(const Node& n) {
  static const std::set<std::string> views = {"Reshape", "Flatten", "Squeeze", "Unsqueeze",
                                              "Identity"};
  return canonical_domain(n.domain).empty() && views.count(n.op_type) > 0;
}

bool is_elementwise(const Node& n) {
  static const std::set<std::string> ops = {
      "Add", "Sub", "Mul", "Div", "Pow", "Where", "Neg", "Abs", "Sqrt", "Reciprocal", "Exp",
      "Log", "Tanh", "Sigmoid", "Relu", "Erf", "Cast", "Max", "Min", "Sin", "Cos", "Equal",
      "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Not", "Sign", "Clip"};
  return canonical_domain(n.domain).empty() && ops.count(n.op_type) > 0;
}

}  // namespace

int64_t ValueSizes::of(const Value* v) const {
  auto it = v ? bytes.find(v->name) : bytes.end();
  return it == bytes.end() ? 0 : it->second;
}

ValueSizes value_sizes(Model& model, const std::map<std::string, Shape>& input_shapes) {
  Graph& g = *model.graph;
  // Specialise in place and put every type back afterwards: cheaper than a copy of the model,
  // which would copy every weight.
  std::unordered_map<Value*, ValueType> saved;
  for (const auto& [name, v] : g.values()) saved[v.get()] = v->type;
  ValueSizes sizes;
  std::unordered_map<const Value*, int64_t> numel;
  try {
    specialize_input_shapes(model, input_shapes);
    for (const auto& [name, v] : g.values()) {
      const auto& s = v->type.shape;
      if (!v->type.is_tensor() || !s || v->type.elem == DataType::Undefined) continue;
      if (!std::all_of(s->begin(), s->end(), [](const Dim& d) { return d.is_fixed(); })) continue;
      int64_t n = 1;
      for (const Dim& d : *s) n *= d.value;
      numel[v.get()] = n;
    }
  } catch (...) {
    for (auto& [v, t] : saved) v->type = t;
    throw;
  }
  // The backward reduces broadcast gradients with run-time shape ops that inference cannot
  // follow; an elementwise op there is as large as its largest input (broadcasting only grows).
  for (const Node* n : g.topological_order()) {
    if (!is_elementwise(*n)) continue;
    for (const Value* o : n->outputs) {
      if (!o || numel.count(o)) continue;
      int64_t largest = -1;
      for (const Value* in : n->inputs)
        if (auto it = in ? numel.find(in) : numel.end(); it != numel.end())
          largest = std::max(largest, it->second);
      if (largest >= 0) numel[o] = largest;
    }
  }
  for (const auto& [name, v] : g.values()) {
    if (!v->type.is_tensor() || g.is_initializer(v.get())) continue;
    auto it = numel.find(v.get());
    if (it != numel.end() && v->type.elem != DataType::Undefined)
      sizes.bytes[name] = it->second * static_cast<int64_t>(dtype_size(v->type.elem));
    else if (v->producer && !is_view_op(*v->producer))  // a view allocates nothing anyway
      ++sizes.unknown;
  }
  for (auto& [v, t] : saved) v->type = t;
  return sizes;
}

int64_t planned_peak_bytes(const Graph& g, const std::function<int64_t(const Value*)>& bytes) {
  const std::vector<Node*> order = g.topological_order();
  // A view shares the buffer of the value it views: account everything to that root.
  std::unordered_map<const Value*, const Value*> root;
  auto root_of = [&](const Value* v) {
    auto it = root.find(v);
    return it == root.end() ? v : it->second;
  };
  for (const Node* n : order)
    if (is_view_op(*n) && n->has_input(0) && !n->outputs.empty() && n->outputs[0])
      root[n->outputs[0]] = root_of(n->inputs[0]);
  std::unordered_map<const Value*, size_t> last_use;
  for (size_t s = 0; s < order.size(); ++s) {
    for (const Value* v : order[s]->inputs)
      if (v) last_use[root_of(v)] = s;
    for (const Value* v : order[s]->implicit_inputs) last_use[root_of(v)] = s;
    for (const Value* v : order[s]->outputs)
      if (v) last_use.try_emplace(root_of(v), s);  // produced, maybe never read
  }
  std::unordered_set<const Value*> pinned;
  for (const Value* v : g.outputs) pinned.insert(root_of(v));
  std::vector<std::vector<const Value*>> release(order.size());
  for (const auto& [v, s] : last_use)
    if (!pinned.count(v)) release[s].push_back(v);
  int64_t live = 0, peak = 0;
  for (size_t s = 0; s < order.size(); ++s) {
    for (const Value* v : order[s]->outputs)
      if (v && root_of(v) == v) live += bytes(v);  // views allocate nothing
    peak = std::max(peak, live);
    for (const Value* v : release[s])
      if (v->producer) live -= bytes(v);  // inputs and initializers were never counted
  }
  return peak;
}

}  // namespace onyx::autodiff
