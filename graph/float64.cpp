#include "graph/float64.h"

namespace onyx {
namespace {

bool narrow_float(DataType t) {
  return t == DataType::Float || t == DataType::Float16 || t == DataType::BFloat16;
}

Tensor to_double(const Tensor& t) {
  return Tensor::from_vector<double>(t.shape(), t.to_double_vector());
}

void convert_type(ValueType& t) {
  if (t.kind == ValueType::Kind::Tensor && narrow_float(t.elem)) t.elem = DataType::Double;
  if (t.inner) convert_type(*t.inner);
}

void convert_graph(Graph& g) {
  for (auto& [name, t] : g.initializers)
    if (narrow_float(t.dtype())) t = to_double(t);
  for (const auto& node : g.nodes()) {
    Node& n = *node;
    for (Value* v : n.outputs)
      if (v) convert_type(v->type);
    for (Value* v : n.inputs)
      if (v) convert_type(v->type);
    for (auto& [name, a] : n.attrs) {
      if (a.type == Attribute::Type::Tensor && narrow_float(a.t.dtype())) a.t = to_double(a.t);
      if (a.g) convert_graph(*a.g);
      for (auto& sub : a.graphs)
        if (sub) convert_graph(*sub);
    }
    const bool domain_onnx = canonical_domain(n.domain).empty();
    if (!domain_onnx) continue;
    // Dtype-valued attributes.
    for (const char* key : {"to", "dtype"}) {
      if (!n.has_attr(key)) continue;
      if (n.op_type != "Cast" && std::string(key) == "to") continue;
      if (narrow_float(static_cast<DataType>(n.attr_int(key, 0))))
        n.attrs[key] = Attribute::of_int(key, static_cast<int64_t>(DataType::Double));
    }
    if (n.op_type == "ConstantOfShape" && !n.has_attr("value")) {  // default: float32 zero
      Attribute a;
      a.name = "value";
      a.type = Attribute::Type::Tensor;
      a.t = Tensor::from_vector<double>({1}, {0.0});
      n.attrs["value"] = a;
    }
    if (n.op_type == "Constant") {
      if (n.has_attr("value_float")) {
        Attribute a;
        a.name = "value";
        a.type = Attribute::Type::Tensor;
        a.t = Tensor::scalar<double>(n.attr("value_float")->f);
        n.attrs.erase("value_float");
        n.attrs["value"] = a;
      } else if (const Attribute* l = n.attr("value_floats")) {
        std::vector<double> v(l->floats.begin(), l->floats.end());
        Attribute a;
        a.name = "value";
        a.type = Attribute::Type::Tensor;
        a.t = Tensor::from_vector<double>({static_cast<int64_t>(v.size())}, v);
        n.attrs.erase("value_floats");
        n.attrs["value"] = a;
      }
    }
  }
  for (Value* v : g.inputs) convert_type(v->type);
  for (Value* v : g.outputs) convert_type(v->type);
}

}  // namespace

void convert_to_float64(Model& model) {
  if (model.graph) convert_graph(*model.graph);
}

}  // namespace onyx
