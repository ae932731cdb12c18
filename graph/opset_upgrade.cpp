#include "graph/opset_upgrade.h"

#include <string>
#include <vector>

#include "graph/canonicalize.h"
#include "graph/error.h"

namespace onyx {
namespace {

bool is_softmax_family(const std::string& op) {
  return op == "Softmax" || op == "LogSoftmax" || op == "Hardmax";
}

// op(x, axis=a) before 13 normalises over the flattened axes [a, rank): Flatten(a) -> op over
// axis 1 -> Reshape(Shape(x)). The last axis alone is already opset 13's meaning.
void upgrade_softmax(Graph& g, Node* n) {
  Value* x = n->inputs[0];
  Value* y = n->outputs[0];
  const int64_t axis = n->attr_int("axis", 1);
  const auto& shape = x->type.shape;
  if (shape) {
    const int64_t r = static_cast<int64_t>(shape->size());
    if (axis == r - 1 || axis == -1) {
      n->attrs["axis"] = Attribute::of_int("axis", -1);
      return;
    }
  }
  const std::string op = n->op_type, name = n->name;
  g.remove_node(n);
  Value* flat = g.add_unique_value(x->name + "/flat");
  g.add_node("Flatten", {x}, {flat}, "", name + "/flatten")->attrs["axis"] =
      Attribute::of_int("axis", axis);
  Value* z = g.add_unique_value(y->name + "/2d");
  g.add_node(op, {flat}, {z}, "", name)->attrs["axis"] = Attribute::of_int("axis", 1);
  Value* sh = g.add_unique_value(x->name + "/shape");
  g.add_node("Shape", {x}, {sh}, "", name + "/shape");
  g.add_node("Reshape", {z, sh}, {y}, "", name + "/reshape");
}

// Resize-10 (X, scales) and Upsample-9 (X, scales) / Upsample-7 (scales attribute) as
// Resize-13 (X, roi, scales). The legacy nearest rounding is floor, or ceil when shrinking:
// floor with asymmetric coordinates is the same only when no axis shrinks.
void upgrade_resize(Graph& g, Node* n) {
  const std::string mode = n->attr_string("mode", "nearest");
  Value* scales = n->num_inputs() > 1 ? n->inputs[1] : nullptr;
  std::vector<float> values;
  if (!scales) {
    ONYX_CHECK(n->has_attr("scales"), "[upgrade] {}: Upsample needs scales", n->label());
    for (double s : n->attr("scales")->floats) values.push_back(static_cast<float>(s));
    scales = g.add_initializer(g.add_unique_value(n->name + "/scales")->name,
                               Tensor::from_vector<float>({static_cast<int64_t>(values.size())},
                                                          values));
    n->attrs.erase("scales");
  } else if (const Tensor* t = g.initializer(scales)) {
    for (double s : t->to_double_vector()) values.push_back(static_cast<float>(s));
  }
  if (mode == "nearest") {
    ONYX_CHECK(!values.empty(),
               "[upgrade] {}: {} with run-time scales uses the legacy nearest rounding (floor, "
               "or ceil when shrinking), which opset 13 cannot state; re-export the model "
               "with opset 13 or later",
               n->label(), n->op_type);
    for (float s : values)
      ONYX_CHECK(s >= 1.0f,
                 "[upgrade] {}: nearest {} by scale {} rounds up (legacy), which opset 13 "
                 "cannot state; re-export the model with opset 13 or later",
                 n->label(), n->op_type, s);
    n->attrs["nearest_mode"] = Attribute::of_string("nearest_mode", "floor");
  }
  n->attrs["coordinate_transformation_mode"] =
      Attribute::of_string("coordinate_transformation_mode", "asymmetric");
  Value* x = n->inputs[0];
  Value* y = n->outputs[0];
  auto attrs = n->attrs;
  const std::string name = n->name;
  g.remove_node(n);
  Value* roi = g.add_initializer(g.add_unique_value(name + "/roi")->name,
                                 Tensor::from_vector<float>({0}, {}));
  Node* r = g.add_node("Resize", {x, roi, scales}, {y}, "", name);
  r->attrs = attrs;
}

void upgrade_graph(Graph& g, int64_t opset) {
  std::vector<Node*> todo;
  for (const auto& node : g.nodes()) {
    Node* n = node.get();
    for (auto& [name, a] : n->attrs) {
      if (a.g) upgrade_graph(*a.g, opset);
      for (auto& sub : a.graphs)
        if (sub) upgrade_graph(*sub, opset);
    }
    if (!n->domain.empty()) continue;
    if (n->op_type == "BatchNormalization" && n->has_attr("spatial")) {
      ONYX_CHECK(n->attr_int("spatial", 1) == 1,
                 "[upgrade] {}: BatchNormalization with spatial=0 (statistics per element) has "
                 "no opset-13 form",
                 n->label());
      n->attrs.erase("spatial");
    }
    if (is_softmax_family(n->op_type) || n->op_type == "Upsample" ||
        (n->op_type == "Resize" && opset < 11))
      todo.push_back(n);
  }
  for (Node* n : todo) {
    if (is_softmax_family(n->op_type))
      upgrade_softmax(g, n);
    else
      upgrade_resize(g, n);
  }
}

}  // namespace

void upgrade_to_opset13(Model& model) {
  const int64_t opset = model.opset("");
  if (opset >= 13 || !model.graph) return;
  if (opset == 0) {
    // No ai.onnx import (only ai.onnx.ml or another domain's nodes): nothing to upgrade, and
    // the loss and gradient nodes training adds need one.
    model.opsets.push_back({"", 14});
    return;
  }
  ONYX_CHECK(opset >= 7,
             "[upgrade] the model imports ai.onnx opset {}; training needs opset 7 or later "
             "(re-export it, e.g. torch.onnx.export(..., opset_version=17))",
             opset);
  canonicalize_opsets(model);
  upgrade_graph(*model.graph, opset);
  for (auto& o : model.opsets)
    if (canonical_domain(o.domain).empty()) o.version = 14;
}

}  // namespace onyx
