#include "interop/module_state.h"

#include <algorithm>
#include <set>
#include <unordered_set>

#include "graph/error.h"

namespace onyx::torch {

namespace {

/// Initializers `n` reads, directly or from its subgraphs (If/Loop/Scan bodies).
std::vector<const Value*> read_values(const Node& n) {
  std::vector<const Value*> out;
  for (const Value* v : n.inputs)
    if (v) out.push_back(v);
  out.insert(out.end(), n.implicit_inputs.begin(), n.implicit_inputs.end());
  return out;
}

/// Initializers in order of first use (then the unused ones, by name, for a stable order).
std::vector<std::string> initializers_by_first_use(const Graph& g, const std::vector<Node*>& order) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const Node* n : order)
    for (const Value* v : read_values(*n))
      if (g.is_initializer(v) && seen.insert(v->name).second) out.push_back(v->name);
  std::vector<std::string> unused;
  for (const auto& [name, t] : g.initializers)
    if (!seen.count(name)) unused.push_back(name);
  std::sort(unused.begin(), unused.end());
  out.insert(out.end(), unused.begin(), unused.end());
  return out;
}

bool float_or_unknown(const Value* v) {
  return v->type.elem == DataType::Undefined || is_float(v->type.elem);
}

/// The candidates that reach a graph output along float values: forward from the candidates
/// through every node whose float outputs then depend on them, backward from the outputs.
std::unordered_set<const Value*> reaching_outputs(const Graph& g, const std::vector<Node*>& order,
                                                  const std::vector<const Value*>& candidates) {
  std::unordered_set<const Value*> fwd(candidates.begin(), candidates.end());
  for (const Node* n : order) {
    auto reads = read_values(*n);
    if (std::none_of(reads.begin(), reads.end(), [&](const Value* v) { return fwd.count(v); })) continue;
    for (const Value* o : n->outputs)
      if (o && float_or_unknown(o)) fwd.insert(o);
  }
  std::unordered_set<const Value*> back;
  for (const Value* o : g.outputs)
    if (fwd.count(o)) back.insert(o);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Node* n = *it;
    if (std::none_of(n->outputs.begin(), n->outputs.end(), [&](const Value* o) { return o && back.count(o); }))
      continue;
    for (const Value* v : read_values(*n))
      if (fwd.count(v)) back.insert(v);
  }
  return back;
}

}  // namespace

ModuleState choose_module_state(const Model& model, const std::vector<std::string>& trainable) {
  ONYX_CHECK(model.graph, "[onyx::torch] the model has no graph");
  const Graph& g = *model.graph;
  const std::vector<Node*> order = g.topological_order();
  ModuleState s;
  std::set<std::string> stats;
  for (const Node* n : order) {
    if (n->op_type != "BatchNormalization" || !canonical_domain(n->domain).empty()) continue;
    for (int i = 3; i <= 4; ++i)
      if (n->has_input(i) && g.is_initializer(n->inputs[i])) stats.insert(n->inputs[i]->name);
  }
  const std::vector<std::string> by_use = initializers_by_first_use(g, order);
  for (const auto& name : by_use)
    if (stats.count(name)) s.buffers.push_back(name);

  if (!trainable.empty()) {
    for (const auto& name : trainable)
      ONYX_CHECK(!stats.count(name), "[onyx::torch] initializer '{}' is a BatchNormalization running "
                 "statistic (a buffer, updated by training-mode forwards); it cannot also be trainable",
                 name);
    s.parameters = trainable;
    return s;
  }
  std::vector<const Value*> candidates;
  for (const auto& name : by_use) {
    const Tensor& t = g.initializers.at(name);
    if (!stats.count(name) && is_float(t.dtype()) && t.rank() >= 1) candidates.push_back(g.find_value(name));
  }
  const auto reaching = reaching_outputs(g, order, candidates);
  for (const Value* v : candidates)
    if (reaching.count(v)) s.parameters.push_back(v->name);
  return s;
}

TorchName split_torch_name(const std::string& name) {
  TorchName out;
  size_t start = 0;
  while (true) {
    const size_t dot = name.find('.', start);
    std::string part = name.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    ONYX_CHECK(!part.empty(), "[onyx::torch] initializer '{}' cannot be named in torch: torch nests "
               "dotted names into submodules and this one has an empty component (a parameter "
               "stays in the model when OnnxModuleOptions::trainable lists the others)", name);
    if (dot == std::string::npos) {
      out.leaf = std::move(part);
      return out;
    }
    out.modules.push_back(std::move(part));
    start = dot + 1;
  }
}

}  // namespace onyx::torch
