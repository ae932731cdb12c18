// CNN fusions: BatchNormalization folded into the Conv before it, then a residual Add and an
// activation fused into com.microsoft FusedConv (Y = act(conv(X, W) + B + Z)), as ONNX Runtime
// does. Each rewrite keeps the fused node's name and the last fused node's output value, so
// graph outputs keep their names; a value that is a graph output is never fused away.
#include <cmath>
#include <limits>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "graph/shape_inference.h"
#include "inference/fusion_util.h"
#include "inference/optimizer.h"
#include "graph/dispatch.h"

namespace onyx {
namespace {

bool is_conv(const Node* n) { return is_op(n, "Conv") || is_op(n, "FusedConv", "com.microsoft"); }
bool has_activation(const Node& n) { return !n.attr_string("activation", "").empty(); }

Tensor tensor_from_doubles(DataType dt, const Shape& shape, const std::vector<double>& v) {
  Tensor t = Tensor::empty(dt, shape);
  dispatch<FloatTypes>(dt, "optimizer", [&]<typename T>() {
    T* p = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<T>(v[i]);
  });
  return t;
}

/// Equal static shapes: every dim fixed and equal, or the same named symbol.
bool same_static_shape(const SymShape& a, const SymShape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    bool fixed = a[i].is_fixed() && b[i].is_fixed() && a[i].value == b[i].value;
    bool symbol =
        !a[i].is_fixed() && !b[i].is_fixed() && !a[i].param.empty() && a[i].param == b[i].param;
    if (!fixed && !symbol) return false;
  }
  return true;
}

/// Static shapes of values, derived through the ops of a CNN where the graph leaves them
/// unknown (symbolic spatial sizes, or models that carry no shapes at all, as test models do).
class CnnShapes {
 public:
  std::optional<SymShape> of(const Value* v) {
    if (!v) return std::nullopt;
    if (auto it = memo_.find(v); it != memo_.end()) return it->second;
    std::optional<SymShape> s = derive(v);
    memo_[v] = s;
    return s;
  }

 private:
  std::optional<SymShape> derive(const Value* v) {
    if (v->type.is_tensor() && v->type.shape) return *v->type.shape;
    const Node* p = v->producer;
    if (!p || v->producer_output != 0) return std::nullopt;
    // Ops whose output 0 has the shape of input 0.
    static const std::unordered_set<std::string> same = {
        "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid", "HardSwish", "Elu",
        "Identity", "Dropout", "BatchNormalization", "Neg", "Abs"};
    if (p->domain.empty() && same.count(p->op_type)) return of(p->inputs[0]);
    if (is_op(p, "Add") || is_op(p, "Sub") || is_op(p, "Mul") || is_op(p, "Div")) {
      auto a = of(p->inputs[0]), b = of(p->inputs[1]);
      return a && b ? broadcast_shapes(*a, *b) : std::nullopt;
    }
    if (is_op(p, "GlobalAveragePool") || is_op(p, "GlobalMaxPool")) {
      auto x = of(p->inputs[0]);
      if (!x || x->size() < 3) return std::nullopt;
      SymShape r(x->begin(), x->begin() + 2);
      r.resize(x->size(), Dim::fixed(1));
      return r;
    }
    bool conv = is_conv(p), pool = is_op(p, "MaxPool") || is_op(p, "AveragePool");
    if (!conv && !pool) return std::nullopt;
    auto x = of(p->inputs[0]);
    std::optional<SymShape> w = conv ? of(p->inputs[1]) : std::nullopt;
    if (!x || x->size() < 3 || (conv && (!w || w->size() != x->size() || !(*w)[0].is_fixed())))
      return std::nullopt;
    size_t nsp = x->size() - 2;
    Shape k = p->attr_ints("kernel_shape");
    if (k.empty() && conv)
      for (size_t i = 0; i < nsp; ++i) k.push_back((*w)[i + 2].is_fixed() ? (*w)[i + 2].value : -1);
    Shape s = p->attr_ints("strides", Shape(nsp, 1)), d = p->attr_ints("dilations", Shape(nsp, 1)),
          pads = p->attr_ints("pads", Shape(2 * nsp, 0));
    std::string auto_pad = p->attr_string("auto_pad", "NOTSET");
    bool ceil = pool && p->attr_int("ceil_mode", 0) != 0;
    if (k.size() != nsp || s.size() != nsp || d.size() != nsp || pads.size() != 2 * nsp)
      return std::nullopt;
    SymShape r{(*x)[0], conv ? (*w)[0] : (*x)[1]};
    for (size_t i = 0; i < nsp; ++i) {
      const Dim& in = (*x)[i + 2];
      if (!in.is_fixed() || k[i] < 1 || s[i] < 1) return std::nullopt;
      int64_t ek = (k[i] - 1) * d[i] + 1, out;
      if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
        out = (in.value + s[i] - 1) / s[i];
      } else {
        int64_t pad = auto_pad == "VALID" ? 0 : pads[i] + pads[i + nsp];
        int64_t span = in.value + pad - ek;
        if (span < 0) return std::nullopt;
        out = (ceil ? (span + s[i] - 1) / s[i] : span / s[i]) + 1;
        if (ceil && (out - 1) * s[i] >= in.value + (auto_pad == "VALID" ? 0 : pads[i])) --out;
      }
      r.push_back(Dim::fixed(out));
    }
    return r;
  }

  std::unordered_map<const Value*, std::optional<SymShape>> memo_;
};

/// The FusedConv activation an activation node computes, as (name, activation_params); nullopt
/// for other ops and for Clip bounds that are not constant scalars.
std::optional<std::pair<std::string, std::vector<float>>> fusable_activation(const Graph& g,
                                                                             const Node& n) {
  if (!n.domain.empty()) return std::nullopt;
  const std::string& op = n.op_type;
  if (op == "Relu" || op == "Sigmoid" || op == "Tanh") return std::pair{op, std::vector<float>{}};
  if (op == "LeakyRelu") return std::pair{op, std::vector<float>{n.attr_float("alpha", 0.01f)}};
  if (op == "HardSigmoid")
    return std::pair{op,
                     std::vector<float>{n.attr_float("alpha", 0.2f), n.attr_float("beta", 0.5f)}};
  if (op != "Clip") return std::nullopt;
  // Clip-6 has min/max attributes; Clip-11 optional scalar inputs.
  std::vector<float> bounds{n.attr_float("min", std::numeric_limits<float>::lowest()),
                            n.attr_float("max", std::numeric_limits<float>::max())};
  for (int i = 1; i <= 2; ++i) {
    if (!n.has_input(i)) continue;
    const Tensor* t = constant_value(g, n.inputs[i]);
    if (!t || t->numel() != 1 || !is_float(t->dtype())) return std::nullopt;
    bounds[i - 1] = static_cast<float>(t->to_double_vector()[0]);
  }
  // oneDNN's clip and ours disagree on empty ranges (min > max); those stay unfused.
  if (bounds[0] > bounds[1]) return std::nullopt;
  return std::pair{op, bounds};
}

/// float32 `W` with row m (its [m, ...] slice) times s[m] in double, rounded once, into `dst`
/// (W's own data for the fold in place).
void scale_float_rows(const Tensor& W, const std::vector<double>& s, float* dst) {
  const int64_t M = static_cast<int64_t>(s.size());
  const int64_t per_m = W.numel() / std::max<int64_t>(M, 1);
  const float* src = W.data<float>();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t i = 0; i < per_m; ++i)
      dst[m * per_m + i] = static_cast<float>(static_cast<double>(src[m * per_m + i]) * s[m]);
}

/// W with row m (its [m, ...] slice) multiplied by s[m] in double and rounded once to W's
/// dtype. float32 weights go straight from one buffer to the other: through a double copy,
/// a BatchNorm-heavy ResNet-18 spent ~100 ms of its session creation (94 MB of doubles
/// faulted in and converted twice).
Tensor scale_rows(const Tensor& W, const std::vector<double>& s) {
  if (W.dtype() != DataType::Float) {
    const int64_t M = static_cast<int64_t>(s.size());
    const int64_t per_m = W.numel() / std::max<int64_t>(M, 1);
    std::vector<double> w = W.to_double_vector();
    for (int64_t m = 0; m < M; ++m)
      for (int64_t i = 0; i < per_m; ++i) w[m * per_m + i] *= s[m];
    return tensor_from_doubles(W.dtype(), W.shape(), w);
  }
  Tensor out = Tensor::empty(DataType::Float, W.shape());
  scale_float_rows(W, s, out.data<float>());
  return out;
}

/// The float32 initializer behind `w` when the fold may scale it in place: `conv` alone reads
/// it, and its memory is onyx's own and held by nothing else (no other copy of the model, no
/// view, no caller's or torch's buffer). Else nullptr, and the fold writes a new tensor. In
/// place, a BatchNorm-heavy ResNet's fold faults in no second copy of its weights (ResNet-18:
/// 45 MB, ~11k page faults) and frees none.
Tensor* weight_to_scale_in_place(Graph& g, const Value* w, const Node* conv) {
  if (!constant_value(g, w) || only_consumer(g, w) != conv) return nullptr;
  auto it = g.initializers.find(w->name);
  if (it == g.initializers.end()) return nullptr;
  Tensor& t = it->second;
  const auto& storage = t.storage();
  if (t.dtype() != DataType::Float || !storage || !storage->owned() || storage.use_count() != 1)
    return nullptr;
  return &t;
}

/// Turns `conv` (Conv or FusedConv) into a FusedConv in place.
void make_fused_conv(Model& model, Node* conv) {
  conv->op_type = "FusedConv";
  conv->domain = "com.microsoft";
  import_domain(model, "com.microsoft");
}

}  // namespace

size_t fuse_batchnorm_into_conv(Model& model) {
  Graph& g = *model.graph;
  size_t fused = 0;
  for (Node* bn : g.topological_order()) {
    if (!is_op(bn, "BatchNormalization") || bn->num_inputs() < 5 || !bn->has_input(0) ||
        bn->outputs.empty() || !bn->outputs[0])
      continue;
    Value* y = bn->inputs[0];
    Node* conv = y->producer;
    if (!is_op(conv, "Conv") || only_consumer(g, y) != bn) continue;
    // Inference mode only: training_mode 0 (opset 14+) and no statistics outputs read.
    if (bn->attr_int("training_mode", 0) != 0 || bn->attr_int("spatial", 1) == 0) continue;
    bool stats_read = false;
    for (size_t o = 1; o < bn->outputs.size(); ++o)
      stats_read |= bn->outputs[o] &&
                    (!bn->outputs[o]->consumers.empty() || is_graph_output(g, bn->outputs[o]));
    if (stats_read) continue;
    const Tensor* W = constant_value(g, conv->inputs[1]);
    const Tensor* B = conv->has_input(2) ? constant_value(g, conv->inputs[2]) : nullptr;
    if (!W || W->rank() < 3 || !is_float(W->dtype()) || (conv->has_input(2) && !B)) continue;
    const int64_t M = W->dim(0);
    std::vector<std::vector<double>> p;  // scale, bias, mean, var
    for (int i = 1; i <= 4; ++i) {
      const Tensor* t = constant_value(g, bn->inputs[i]);
      if (!t || t->numel() != M || !is_float(t->dtype())) break;
      p.push_back(t->to_double_vector());
    }
    if (p.size() != 4 || (B && B->numel() != M)) continue;
    // W' = W * s, B' = (B - mean) * s + bias with s = scale / sqrt(var + eps), in double.
    const double eps = bn->attr_float("epsilon", 1e-5f);
    std::vector<double> s(M), b(M, 0.0);
    if (B) b = B->to_double_vector();
    for (int64_t m = 0; m < M; ++m) {
      s[m] = p[0][m] / std::sqrt(p[3][m] + eps);
      b[m] = (b[m] - p[2][m]) * s[m] + p[1][m];
    }
    // W in place when nothing else can see it, else a new initializer (W may be shared with
    // other nodes, another copy of the model, or memory onyx was lent).
    Value* wv = conv->inputs[1];
    if (Tensor* own = weight_to_scale_in_place(g, wv, conv)) {
      scale_float_rows(*own, s, own->data<float>());
    } else {
      wv = g.add_unique_value(conv->inputs[1]->name + "_bn");
      g.add_initializer(wv->name, scale_rows(*W, s));
    }
    Value* bv = g.add_unique_value((B ? conv->inputs[2] : conv->inputs[1])->name + "_bn_bias");
    g.add_initializer(bv->name, tensor_from_doubles(B ? B->dtype() : W->dtype(), {M}, b));
    Value* out = bn->outputs[0];
    g.remove_node(bn);
    g.set_input(conv, 1, wv);
    if (conv->num_inputs() < 3) conv->inputs.resize(3, nullptr);
    g.set_input(conv, 2, bv);
    set_output(conv, 0, out);
    ++fused;
  }
  return fused;
}

size_t fuse_add_into_conv(Model& model) {
  Graph& g = *model.graph;
  CnnShapes shapes;
  size_t fused = 0;
  for (Node* add : g.topological_order()) {
    if (!is_op(add, "Add") || add->num_inputs() != 2 || !add->has_input(0) || !add->has_input(1) ||
        add->outputs.empty() || !add->outputs[0])
      continue;
    for (int i = 0; i < 2; ++i) {
      Value* y = add->inputs[i];
      Value* z = add->inputs[1 - i];
      Node* conv = y->producer;
      if (!is_conv(conv) || only_consumer(g, y) != add || has_activation(*conv) ||
          conv->has_input(3))
        continue;
      // Z is added as is: no broadcasting either way.
      auto ys = shapes.of(y), zs = shapes.of(z);
      if (!ys || !zs || !same_static_shape(*ys, *zs)) continue;
      if (z->type.elem != DataType::Undefined && y->type.elem != DataType::Undefined &&
          z->type.elem != y->type.elem)
        continue;
      Value* out = add->outputs[0];
      g.remove_node(add);
      make_fused_conv(model, conv);
      conv->inputs.resize(4, nullptr);
      g.set_input(conv, 3, z);
      set_output(conv, 0, out);
      ++fused;
      break;
    }
  }
  return fused;
}

size_t fuse_activation_into_conv(Model& model) {
  Graph& g = *model.graph;
  size_t fused = 0;
  // Visits the activations, so the node removed is always the one at hand.
  for (Node* act : g.topological_order()) {
    if (act->num_inputs() < 1 || !act->has_input(0) || act->outputs.empty() || !act->outputs[0])
      continue;
    Node* conv = act->inputs[0]->producer;
    if (!is_conv(conv) || has_activation(*conv) || only_consumer(g, act->inputs[0]) != act)
      continue;
    auto a = fusable_activation(g, *act);
    if (!a) continue;
    Value* out = act->outputs[0];
    g.remove_node(act);
    make_fused_conv(model, conv);
    conv->attrs["activation"] = Attribute::of_string("activation", a->first);
    if (!a->second.empty())
      conv->attrs["activation_params"] = Attribute::of_floats("activation_params", a->second);
    set_output(conv, 0, out);
    ++fused;
  }
  return fused;
}

}  // namespace onyx
