#include "graph/quantized_contrib_ops.h"

#include <fmt/format.h>

namespace onyx {
namespace {

/// Builds the replacement of one node; the last op writes the node's own output value.
class Expander {
 public:
  Expander(Graph& g, const Node& n) : g_(g), name_(n.name.empty() ? n.op_type : n.name) {}

  Value* op(const std::string& type, std::vector<Value*> ins, std::vector<Attribute> attrs = {},
            Value* out = nullptr) {
    if (!out) out = g_.add_unique_value(fmt::format("{}/{}", name_, type));
    Node* n = g_.add_node(type, std::move(ins), {out}, "", fmt::format("{}/{}", name_, type));
    for (auto& a : attrs) n->attrs[a.name] = std::move(a);
    return out;
  }
  /// A zero point of `dt` (0) for an omitted one, so QuantizeLinear keeps the 8-bit type.
  Value* zero(DataType dt) {
    Value* v = g_.add_unique_value(fmt::format("{}/zero_point", name_));
    return g_.add_initializer(v->name, Tensor::zeros(dt, {}));
  }

 private:
  Graph& g_;
  std::string name_;
};

Value* input(const Node& n, int i) { return n.has_input(i) ? n.inputs[i] : nullptr; }

/// The 8-bit type of the node's quantized values: a zero point's, else uint8 (ORT's default).
DataType quant_type(const Graph& g, const Node& n, std::initializer_list<int> zero_points) {
  for (int i : zero_points)
    if (const Value* z = input(n, i)) {
      if (const Tensor* t = g.initializer(z)) return t->dtype();
      if (z->type.is_tensor() && z->type.elem != DataType::Undefined) return z->type.elem;
    }
  return DataType::UInt8;
}

Value* dq(Expander& e, Value* x, Value* s, Value* z, std::vector<Attribute> attrs = {}) {
  std::vector<Value*> ins = {x, s};
  if (z) ins.push_back(z);
  return e.op("DequantizeLinear", ins, std::move(attrs));
}

void q(Expander& e, Value* x, Value* s, Value* z, DataType dt, Value* out) {
  e.op("QuantizeLinear", {x, s, z ? z : e.zero(dt)}, {}, out);
}

/// Attributes of `n` but those named in `drop`.
std::vector<Attribute> attrs_but(const Node& n, std::initializer_list<const char*> drop) {
  std::vector<Attribute> out;
  for (const auto& [name, a] : n.attrs) {
    bool keep = true;
    for (const char* d : drop) keep = keep && name != d;
    if (keep) out.push_back(a);
  }
  return out;
}

bool expand(Graph& g, Node& n, int64_t onnx_opset) {
  const std::string& t = n.op_type;
  Value* y = n.outputs.empty() ? nullptr : n.outputs[0];
  if (!y) return false;
  Expander e(g, n);
  if (t == "QLinearAdd" || t == "QLinearMul") {
    if (!n.has_input(0) || !n.has_input(1) || !n.has_input(3) || !n.has_input(4) || !n.has_input(6))
      return false;
    const DataType dt = quant_type(g, n, {2, 5, 7});
    Value* a = dq(e, n.inputs[0], n.inputs[1], input(n, 2));
    Value* b = dq(e, n.inputs[3], n.inputs[4], input(n, 5));
    Value* c = e.op(t == "QLinearAdd" ? "Add" : "Mul", {a, b});
    Value *cs = n.inputs[6], *cz = input(n, 7);
    g.remove_node(&n);
    q(e, c, cs, cz, dt, y);
    return true;
  }
  if (t == "QLinearSigmoid" || t == "QLinearLeakyRelu" || t == "QLinearGlobalAveragePool" ||
      t == "QLinearAveragePool") {
    if (n.attr_int("channels_last", 0) != 0 || !n.has_input(0) || !n.has_input(1) || !n.has_input(3))
      return false;
    const DataType dt = quant_type(g, n, {2, 4});
    Value* x = dq(e, n.inputs[0], n.inputs[1], input(n, 2));
    const std::string op = t.substr(std::string("QLinear").size());
    Value* h = e.op(op, {x}, attrs_but(n, {"channels_last"}));
    Value *ys = n.inputs[3], *yz = input(n, 4);
    g.remove_node(&n);
    q(e, h, ys, yz, dt, y);
    return true;
  }
  if (t == "QLinearSoftmax") {
    if (!n.has_input(0) || !n.has_input(1) || !n.has_input(3)) return false;
    // Its `opset` attribute picks Softmax's meaning: before 13 the input is coerced to 2-D at
    // `axis`. The rewrite's Softmax has the model's: the two agree when they are on the same
    // side of 13, or for inputs of rank <= 2 with the axis last.
    const int64_t sm_opset = n.attr_int("opset", onnx_opset);
    const int64_t axis = n.attr_int("axis", sm_opset < 13 ? 1 : -1);
    const Value* x = n.inputs[0];
    const int64_t rank = x->type.is_tensor() && x->type.shape ? int64_t(x->type.shape->size()) : -1;
    const bool same = (sm_opset < 13) == (onnx_opset < 13) ||
                      (rank >= 1 && rank <= 2 && (axis == -1 || axis == rank - 1));
    if (!same) return false;
    const DataType dt = quant_type(g, n, {2, 4});
    Value* h = dq(e, n.inputs[0], n.inputs[1], input(n, 2));
    h = e.op("Softmax", {h}, {Attribute::of_int("axis", axis)});
    Value *ys = n.inputs[3], *yz = input(n, 4);
    g.remove_node(&n);
    q(e, h, ys, yz, dt, y);
    return true;
  }
  if (t == "QLinearConcat") {
    if (n.num_inputs() < 5 || (n.num_inputs() - 2) % 3 != 0 || !n.has_input(0)) return false;
    std::vector<int> zps = {1};
    for (int i = 2; i < n.num_inputs(); i += 3) {
      if (!n.has_input(i) || !n.has_input(i + 1)) return false;
      zps.push_back(i + 2);
    }
    DataType dt = DataType::UInt8;
    for (int z : zps)
      if (input(n, z)) {
        dt = quant_type(g, n, {z});
        break;
      }
    std::vector<Value*> parts;
    for (int i = 2; i < n.num_inputs(); i += 3)
      parts.push_back(dq(e, n.inputs[i], n.inputs[i + 1], input(n, i + 2)));
    Value* c = e.op("Concat", parts, attrs_but(n, {}));
    Value *ys = n.inputs[0], *yz = input(n, 1);
    g.remove_node(&n);
    q(e, c, ys, yz, dt, y);
    return true;
  }
  if (t == "QGemm") {
    for (int i : {0, 1, 3, 4})
      if (!n.has_input(i)) return false;
    const bool trans_b = n.attr_int("transB", 0) != 0;
    const DataType dt = quant_type(g, n, {8, 2});
    Value* a = dq(e, n.inputs[0], n.inputs[1], input(n, 2));
    // A per-column B scale lies along N: axis 1 of [K, N], axis 0 of [N, K] (transB).
    Value* b = dq(e, n.inputs[3], n.inputs[4], input(n, 5),
                  {Attribute::of_int("axis", trans_b ? 0 : 1)});
    std::vector<Value*> ins = {a, b};
    if (Value* c = input(n, 6)) {
      // The int32 C is in the scale alpha * As * Bs (per column with a per-column Bs), which
      // Gemm's alpha does not multiply again (its beta is 1).
      Value* cs = e.op("Mul", {n.inputs[1], n.inputs[4]});
      const float alpha = n.attr_float("alpha", 1.0f);
      if (alpha != 1.0f) {
        Value* a_v = g.add_unique_value(fmt::format("{}/alpha", n.name.empty() ? n.op_type : n.name));
        cs = e.op("Mul", {cs, g.add_initializer(a_v->name, Tensor::scalar<float>(alpha))});
      }
      ins.push_back(dq(e, c, cs, nullptr, {Attribute::of_int("axis", -1)}));
    }
    std::vector<Attribute> attrs = attrs_but(n, {});
    Value *ys = input(n, 7), *yz = input(n, 8);
    g.remove_node(&n);
    if (!ys) {
      e.op("Gemm", ins, attrs, y);  // no output scale: the output is float
      return true;
    }
    q(e, e.op("Gemm", ins, attrs), ys, yz, dt, y);
    return true;
  }
  return false;
}

}  // namespace

int expand_quantized_contrib_ops(Model& model) {
  Graph& g = *model.graph;
  std::vector<Node*> todo;
  for (const auto& n : g.nodes())
    if (canonical_domain(n->domain) == "com.microsoft") todo.push_back(n.get());
  int64_t onnx_opset = 0;
  for (const auto& o : model.opsets)
    if (canonical_domain(o.domain).empty()) onnx_opset = o.version;
  int count = 0;
  for (Node* n : todo) count += expand(g, *n, onnx_opset) ? 1 : 0;
  if (count) g.sort_topologically();
  return count;
}

}  // namespace onyx
