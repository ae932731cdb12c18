// com.microsoft fused ops in a model to train: our optimizer (and ONNX Runtime's) writes
// FusedMatMul and FusedConv into optimized models, and a user may load one to train. Before
// differentiating, each is rewritten into the ai.onnx ops it fuses, whose rules then apply:
//
//   FusedMatMul(A, B)       -> Mul(MatMul(Transpose?(A), Transpose?(B)), alpha)
//   FusedConv(X, W, B?, Z?) -> act(Add(Conv(X, W, B), Z))   act: Relu, LeakyRelu, Sigmoid,
//                                                           Tanh, Clip, HardSigmoid or none
#include <limits>

#include "autodiff/gradient_rules.h"
#include "graph/error.h"
#include "graph/shape_inference.h"

namespace onyx::autodiff {

namespace {

bool is_fused(const Node& n) {
  return canonical_domain(n.domain) == "com.microsoft" &&
         (n.op_type == "FusedMatMul" || n.op_type == "FusedConv");
}

Tensor scalar_like(DataType dt, double v) {
  switch (dt) {
    case DataType::Float: return Tensor::scalar<float>(static_cast<float>(v));
    case DataType::Double: return Tensor::scalar<double>(v);
    case DataType::Float16: return Tensor::scalar<float16>(float16(static_cast<float>(v)));
    case DataType::BFloat16: return Tensor::scalar<bfloat16>(bfloat16(static_cast<float>(v)));
    default: ONYX_THROW("[autodiff] no float constant of dtype {}", dtype_name(dt));
  }
}

/// Adds the nodes that replace one fused node; the last one produces its output value.
class Rewriter {
 public:
  Rewriter(Graph& g, Node& n) : g_(g), name_(n.name.empty() ? n.op_type : n.name) {}

  Value* op(const std::string& type, std::vector<Value*> ins, Attrs attrs = {},
            Value* out = nullptr) {
    if (!out) out = g_.add_unique_value(fmt::format("{}/{}", name_, type));
    Node* n = g_.add_node(type, std::move(ins), {out}, "",
                          fmt::format("{}/{}_{}", name_, type, g_.num_nodes()));
    for (auto& a : attrs) n->attrs[a.name] = std::move(a);
    return out;
  }
  Value* constant(DataType dt, double v) {
    Value* c = g_.add_unique_value(fmt::format("{}/const", name_));
    return g_.add_initializer(c->name, scalar_like(dt, v));
  }

 private:
  Graph& g_;
  std::string name_;
};

/// `x` with its last two axes swapped (rank >= 2; FusedMatMul ignores trans* on a vector).
Value* swap_last(Rewriter& rw, const Node& n, Value* x) {
  int r = x->type.is_tensor() && x->type.shape ? static_cast<int>(x->type.shape->size()) : -1;
  ONYX_CHECK(r >= 0, "[autodiff] {}: the rank of '{}' must be known to rewrite transA/transB",
             n.label(), x->name);
  if (r < 2) return x;
  std::vector<int64_t> perm;
  for (int i = 0; i < r; ++i) perm.push_back(i == r - 2 ? r - 1 : i == r - 1 ? r - 2 : i);
  return rw.op("Transpose", {x}, {Attribute::of_ints("perm", perm)});
}

void defuse_matmul(Graph& g, Node& n, DataType dt) {
  for (const char* a : {"transBatchA", "transBatchB"})
    ONYX_CHECK(n.attr_int(a, 0) == 0, "[autodiff] {}: {} = 1 is not supported", n.label(), a);
  Value *a = n.inputs.at(0), *b = n.inputs.at(1), *y = n.outputs.at(0);
  double alpha = n.attr_float("alpha", 1.0f);
  Rewriter rw(g, n);
  if (n.attr_int("transA", 0)) a = swap_last(rw, n, a);
  if (n.attr_int("transB", 0)) b = swap_last(rw, n, b);
  g.remove_node(&n);
  if (alpha == 1.0) {
    rw.op("MatMul", {a, b}, {}, y);
  } else {
    rw.op("Mul", {rw.op("MatMul", {a, b}), rw.constant(dt, alpha)}, {}, y);
  }
}

void defuse_conv(Graph& g, Node& n, DataType dt) {
  std::string act = n.attr_string("activation", "");
  std::vector<float> p = n.attr_floats("activation_params");
  auto param = [&](size_t i, float fallback) { return i < p.size() ? p[i] : fallback; };
  Attrs conv_attrs;
  for (const auto& [name, a] : n.attrs)
    if (name != "activation" && name != "activation_params") conv_attrs.push_back(a);
  std::vector<Value*> ins = {n.inputs.at(0), n.inputs.at(1)};
  if (n.has_input(2)) ins.push_back(n.inputs[2]);
  Value* z = n.has_input(3) ? n.inputs[3] : nullptr;
  Value* y = n.outputs.at(0);
  Rewriter rw(g, n);
  const std::string label = n.label();
  g.remove_node(&n);
  Value* out = act.empty() ? y : nullptr;
  Value* h = rw.op("Conv", ins, conv_attrs, z ? nullptr : out);
  if (z) h = rw.op("Add", {h, z}, {}, out);
  if (act.empty()) return;
  if (act == "Relu" || act == "Sigmoid" || act == "Tanh") {
    rw.op(act, {h}, {}, y);
  } else if (act == "LeakyRelu") {
    rw.op(act, {h}, {Attribute::of_float("alpha", param(0, 0.01f))}, y);
  } else if (act == "HardSigmoid") {
    Attrs ab = {Attribute::of_float("alpha", param(0, 0.2f)),
                Attribute::of_float("beta", param(1, 0.5f))};
    rw.op(act, {h}, ab, y);
  } else if (act == "Clip") {
    const float lo = std::numeric_limits<float>::lowest(), hi = std::numeric_limits<float>::max();
    rw.op(act, {h, rw.constant(dt, param(0, lo)), rw.constant(dt, param(1, hi))}, {}, y);
  } else {
    ONYX_THROW("[autodiff] {}: unknown FusedConv activation '{}'", label, act);
  }
}

}  // namespace

void defuse_contrib_ops(Model& m) {
  Graph& g = *m.graph;
  auto pending = [&] {
    std::vector<Node*> out;
    for (Node* n : g.topological_order())
      if (is_fused(*n)) out.push_back(n);
    return out;
  };
  // Fused outputs carry no type (no schema), so a fused node reading another's output is
  // rewritten once inference has typed that input: one round per level of such chains.
  for (auto todo = pending(); !todo.empty(); todo = pending()) {
    infer_types_and_shapes(m);
    size_t done = 0;
    for (Node* n : todo) {
      const Value* in = n->inputs.at(0);
      if (!in->type.is_tensor() || in->type.elem == DataType::Undefined) continue;
      DataType dt = in->type.elem;
      if (n->op_type == "FusedMatMul")
        defuse_matmul(g, *n, dt);
      else
        defuse_conv(g, *n, dt);
      ++done;
    }
    ONYX_CHECK(done > 0, "[autodiff] {}: the dtype of input '{}' is unknown, so the fused op "
               "cannot be rewritten for training; train the unoptimized model instead",
               todo[0]->label(), todo[0]->inputs.at(0)->name);
  }
}

}  // namespace onyx::autodiff
