#include "graph/validate.h"

#include <unordered_set>

#include "graph/schema.h"
#include "graph/shape_inference.h"

namespace onyx {
namespace {

bool defined_in_scope(const Graph* g, const std::string& name) {
  for (; g; g = g->parent) {
    const Value* v = g->find_value(name);
    if (v && (v->producer || g->initializers.count(name) ||
              std::find(g->inputs.begin(), g->inputs.end(), v) != g->inputs.end()))
      return true;
  }
  return false;
}

void check_graph(const Model& model, const Graph& g) {
  std::string where = g.parent ? fmt::format("subgraph '{}'", g.name) : fmt::format("graph '{}'", g.name);
  g.topological_order();  // throws on a cycle
  std::unordered_set<std::string> input_names;
  for (const Value* v : g.inputs)
    ONYX_CHECK(input_names.insert(v->name).second, "[validate] {} lists input '{}' twice", where, v->name);
  for (const auto& node : g.nodes()) {
    for (const Value* v : node->inputs)
      ONYX_CHECK(!v || defined_in_scope(&g, v->name),
                 "[validate] {} in {} reads '{}', which no node, graph input or initializer "
                 "produces",
                 node->label(), where, v->name);
    int64_t opset = model.opset(node->domain);
    std::string dom = node->domain.empty() ? "ai.onnx" : node->domain;
    ONYX_CHECK(opset > 0, "[validate] {} uses domain '{}', which the model does not import",
               node->label(), dom);
    if (schema_domain_known(node->domain)) {
      const OpSchema* s = find_schema(node->op_type, node->domain, opset);
      if (!s) {
        int first = first_opset_of(node->op_type, node->domain);
        if (first)
          ONYX_THROW("[validate] {}: {} first appears in {} opset {}, but the model imports opset {}",
                     node->label(), node->op_type, dom, first, opset);
        ONYX_THROW("[validate] {}: '{}' is not an operator of domain {}", node->label(),
                   node->op_type, dom);
      }
      int nin = node->num_inputs(), nout = static_cast<int>(node->outputs.size());
      ONYX_CHECK(nin >= s->min_inputs && nin <= s->max_inputs,
                 "[validate] {}: {}-{} takes {} to {} inputs, got {}", node->label(), node->op_type,
                 s->since_version, s->min_inputs, s->max_inputs, nin);
      ONYX_CHECK(nout >= s->min_outputs && nout <= s->max_outputs,
                 "[validate] {}: {}-{} has {} to {} outputs, got {}", node->label(), node->op_type,
                 s->since_version, s->min_outputs, s->max_outputs, nout);
    }
    for (const auto& [an, a] : node->attrs) {
      if (a.g) check_graph(model, *a.g);
      for (const auto& sg : a.graphs) check_graph(model, *sg);
    }
  }
  for (const Value* v : g.outputs)
    ONYX_CHECK(defined_in_scope(&g, v->name),
               "[validate] {} output '{}' is not produced by any node, input or initializer", where,
               v->name);
}

}  // namespace

void validate_model(Model& model) {
  check_graph(model, *model.graph);
  infer_types_and_shapes(model);
}

}  // namespace onyx
