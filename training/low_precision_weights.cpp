#include "training/low_precision_weights.h"

#include <algorithm>

namespace onyx::training {
namespace {

/// Cast(to = dt) nodes reading `param` whose output is read by nodes of this graph only.
std::vector<Node*> weight_casts(const Graph& g, const Value* param, DataType dt) {
  std::vector<Node*> casts;
  for (const auto& [node, idx] : param->consumers) {
    if (idx < 0 || node->op_type != "Cast" || !canonical_domain(node->domain).empty() ||
        node->outputs.size() != 1 || !node->outputs[0] ||
        node->attr_int("to", 0) != static_cast<int64_t>(dt))
      continue;
    const Value* out = node->outputs[0];
    const bool graph_output = std::find(g.outputs.begin(), g.outputs.end(), out) != g.outputs.end();
    const bool in_subgraph = std::any_of(out->consumers.begin(), out->consumers.end(),
                                         [](const auto& c) { return c.second < 0; });
    if (!graph_output && !in_subgraph && std::find(casts.begin(), casts.end(), node) == casts.end())
      casts.push_back(node);
  }
  return casts;
}

}  // namespace

std::vector<std::string> cast_weights_to_inputs(Model& m, const std::vector<std::string>& params,
                                                DataType dt) {
  Graph& g = *m.graph;
  std::vector<std::string> inputs(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Value* p = g.find_value(params[i]);
    if (!p) continue;
    std::vector<Node*> casts = weight_casts(g, p, dt);
    if (casts.empty()) continue;
    Value* kept = casts[0]->outputs[0];
    for (size_t k = 1; k < casts.size(); ++k) {
      Value* dup = casts[k]->outputs[0];
      g.remove_node(casts[k]);
      g.replace_all_uses(dup, kept);
    }
    g.remove_node(casts[0]);
    g.inputs.push_back(kept);
    inputs[i] = kept->name;
  }
  g.prune_values();
  return inputs;
}

}  // namespace onyx::training
