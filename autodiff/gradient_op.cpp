#include "autodiff/gradient_op.h"

#include "autodiff/training_graph.h"
#include "graph/error.h"
#include "graph/shape_inference.h"

namespace onyx::autodiff {

int expand_gradient_ops(Model& model) {
  Graph& g = *model.graph;
  std::vector<Node*> grads;
  for (const auto& n : g.nodes())
    if (n->op_type == "Gradient" && n->domain == "ai.onnx.preview.training") grads.push_back(n.get());
  if (grads.empty()) return 0;
  infer_types_and_shapes(model);
  for (Node* n : grads) {
    std::vector<std::string> xs = n->attr_strings("xs");
    std::string y = n->attr_string("y", "");
    ONYX_CHECK(!xs.empty() && !y.empty(), "[{}] needs the attributes xs and y", n->label());
    ONYX_CHECK(n->outputs.size() == xs.size(), "[{}] has {} outputs for {} xs", n->label(), n->outputs.size(),
               xs.size());
    Value* yv = g.find_value(y);
    ONYX_CHECK(yv, "[{}] y names '{}', which is not a value of the graph", n->label(), y);
    std::vector<Value*> wrt;
    for (const auto& x : xs) {
      Value* v = g.find_value(x);
      ONYX_CHECK(v, "[{}] xs names '{}', which is not a value of the graph", n->label(), x);
      wrt.push_back(v);
    }
    // d sum(Y) / dY = ones shaped like Y.
    Value* shape = g.add_unique_value(y + "_grad/shape");
    g.add_node("Shape", {yv}, {shape}, "", shape->name);
    Value* seed = g.add_unique_value(y + "_grad/seed");
    Node* ones = g.add_node("ConstantOfShape", {shape}, {seed}, "", seed->name);
    Attribute value;
    value.name = "value";
    value.type = Attribute::Type::Tensor;
    ONYX_CHECK(yv->type.elem == DataType::Float || yv->type.elem == DataType::Double,
               "[{}] differentiates '{}' of type {}; float or double expected", n->label(), y, yv->type.str());
    value.t = yv->type.elem == DataType::Double ? Tensor::from_vector<double>({1}, {1.0})
                                                : Tensor::from_vector<float>({1}, {1.0f});
    ones->attrs["value"] = value;
    seed->type = yv->type;
    std::vector<Value*> outs = n->outputs;
    g.remove_node(n);
    auto res = differentiate(model, {{yv, seed}}, wrt);
    for (size_t i = 0; i < outs.size(); ++i)
      if (outs[i]) g.add_node("Identity", {res.at(wrt[i])}, {outs[i]}, "", outs[i]->name + "/Identity");
  }
  g.sort_topologically();
  return static_cast<int>(grads.size());
}

}  // namespace onyx::autodiff
