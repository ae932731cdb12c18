// Fusions of quantized models. QDQ convolutions onto the int8 kernel: onnxruntime.quantization's QDQ format (its default)
// writes each quantized convolution as
//
//   QuantizeLinear(Conv(DequantizeLinear(xq), DequantizeLinear(wq), DequantizeLinear(bq)))
//
// whose meaning is a float convolution of dequantized values. Where the provider sums int8
// products exactly (LayoutPreferences::exact_int8_convolutions), the pattern becomes one
// QLinearConv(xq, xs, xz, wq, ws, wz, ys, yz, bq), as ONNX Runtime's QDQ transformer makes it:
// integer sums, one float requantization. Outputs may differ from the float form by one
// quantization step where a value lies on a rounding boundary.
//
// And quantize_dynamic's Linear, MatMulInteger -> Cast(float) -> Mul(scale) [-> Add(bias)], as
// one ai.onyx MatMulIntegerToFloat whose epilogue does the last three in their order.
#include <cmath>
#include <optional>

#include "inference/fusion_util.h"
#include "inference/optimizer.h"

namespace onyx {
namespace {

/// The DequantizeLinear node feeding `v` when its scale is one constant float and its zero point
/// (if any) one constant value; else nullptr.
Node* scalar_dq(const Graph& g, const Value* v) {
  Node* dq = made_by(v, "DequantizeLinear");
  if (!dq || !dq->has_input(0) || !dq->has_input(1)) return nullptr;
  const Tensor* s = constant_value(g, dq->inputs[1]);
  if (!s || s->numel() != 1 || s->dtype() != DataType::Float) return nullptr;
  if (dq->has_input(2)) {
    const Tensor* z = constant_value(g, dq->inputs[2]);
    if (!z || z->numel() != 1) return nullptr;
  }
  return dq;
}

DataType data_type(const Value* v) { return v->type.is_tensor() ? v->type.elem : DataType::Undefined; }

/// A zero point of `dt` and `shape` (the QLinearConv inputs the DQs left out).
Value* zeros(Graph& g, const std::string& hint, DataType dt, const Shape& shape) {
  return g.add_initializer(g.add_unique_value(hint)->name, Tensor::zeros(dt, shape));
}

bool fuse_one(Graph& g, Node* conv) {
  if (!is_op(conv, "Conv") || conv->num_inputs() < 2 || conv->outputs.size() != 1) return false;
  Node* q = only_consumer(g, conv->outputs[0]);
  if (!is_op(q, "QuantizeLinear") || !q->has_input(1) || !q->has_input(2)) return false;
  const Tensor* ys = constant_value(g, q->inputs[1]);
  const Tensor* yz = constant_value(g, q->inputs[2]);
  if (!ys || ys->numel() != 1 || ys->dtype() != DataType::Float || !yz || yz->numel() != 1)
    return false;
  // x: 8-bit activations of the output's type (the int8 kernel writes what it reads).
  Node* dqx = scalar_dq(g, conv->inputs[0]);
  if (!dqx) return false;
  // Its type: the zero point's (DequantizeLinear's x and zero point share it), else the
  // inferred one.
  const DataType xdt = dqx->has_input(2) ? constant_value(g, dqx->inputs[2])->dtype()
                                         : data_type(dqx->inputs[0]);
  if ((xdt != DataType::UInt8 && xdt != DataType::Int8) || yz->dtype() != xdt) return false;
  // w: constant int8, 4-D, zero points 0, scale per tensor or per output channel (axis 0).
  Node* dqw = made_by(conv->inputs[1], "DequantizeLinear");
  if (!dqw || !dqw->has_input(1)) return false;
  const Tensor* w = constant_value(g, dqw->inputs[0]);
  const Tensor* ws = constant_value(g, dqw->inputs[1]);
  if (!w || w->dtype() != DataType::Int8 || w->rank() != 4 || !ws || ws->dtype() != DataType::Float)
    return false;
  const int64_t M = w->dim(0);
  if (ws->numel() != 1 && !(ws->rank() == 1 && ws->numel() == M && dqw->attr_int("axis", 1) == 0))
    return false;
  if (dqw->has_input(2)) {
    const Tensor* wz = constant_value(g, dqw->inputs[2]);
    if (!wz || wz->dtype() != DataType::Int8)
      return false;
    for (int64_t v : wz->to_int64_vector())
      if (v != 0) return false;
  }
  // b: int32 in the scale x_scale * w_scale (what QLinearConv's B means), zero point 0. Torch
  // exports share equal biases through Identity, so the quantizer leaves some convolutions a
  // bias dequantized for another one's scale, or a float one: those are quantized here to this
  // convolution's accumulator scale (a rounding of at most half a step of that scale, far
  // below the output's step).
  const float xs = *constant_value(g, dqx->inputs[1])->data<float>();
  auto acc_scale = [&](int64_t m) { return xs * ws->data<float>()[ws->numel() == 1 ? 0 : m]; };
  Value* bq = nullptr;
  std::optional<Tensor> b_quantized;
  if (conv->has_input(2)) {
    const Value* bv = conv->inputs[2];
    while (Node* id = made_by(bv, "Identity")) bv = id->inputs[0];
    std::vector<double> b_float;  // the bias's float values when it is not usable as it is
    if (Node* dqb = made_by(bv, "DequantizeLinear")) {
      if (!dqb->has_input(1)) return false;
      const Tensor* b = constant_value(g, dqb->inputs[0]);
      const Tensor* bs = constant_value(g, dqb->inputs[1]);
      if (!b || b->dtype() != DataType::Int32 || b->numel() != M || !bs ||
          bs->dtype() != DataType::Float || (bs->numel() != 1 && bs->numel() != M))
        return false;
      if (dqb->has_input(2)) {
        const Tensor* bz = constant_value(g, dqb->inputs[2]);
        if (!bz) return false;
        for (int64_t v : bz->to_int64_vector())
          if (v != 0) return false;
      }
      bool same_scale = true;
      for (int64_t m = 0; m < M; ++m) {
        const float s = bs->data<float>()[bs->numel() == 1 ? 0 : m];
        same_scale = same_scale && std::abs(s - acc_scale(m)) <= 1e-6f * std::abs(acc_scale(m));
        b_float.push_back(double(float(double(b->data<int32_t>()[m]) * s)));
      }
      if (same_scale) bq = dqb->inputs[0];
    } else {
      const Tensor* b = constant_value(g, bv);
      if (!b || b->dtype() != DataType::Float || b->numel() != M) return false;
      for (int64_t m = 0; m < M; ++m) b_float.push_back(b->data<float>()[m]);
    }
    if (!bq) {
      Tensor t = Tensor::empty(DataType::Int32, {M});
      for (int64_t m = 0; m < M; ++m) {
        const double v = std::nearbyint(b_float[m] / double(acc_scale(m)));
        if (!(std::abs(v) < 2147483647.0)) return false;
        t.data<int32_t>()[m] = static_cast<int32_t>(v);
      }
      b_quantized = t;
    }
  }
  const std::string name = conv->name.empty() ? "qdq_conv" : conv->name;
  Value* xz = dqx->has_input(2) ? dqx->inputs[2] : zeros(g, name + "/x_zero_point", xdt, {});
  Value* wz = zeros(g, name + "/w_zero_point", DataType::Int8, ws->numel() == 1 ? Shape{} : Shape{M});
  if (b_quantized) bq = g.add_initializer(g.add_unique_value(name + "/bias_int32")->name, *b_quantized);
  std::vector<Value*> ins = {dqx->inputs[0], dqx->inputs[1], xz, dqw->inputs[0], dqw->inputs[1], wz,
                             q->inputs[1], q->inputs[2]};
  if (bq) ins.push_back(bq);
  Value* y = q->outputs[0];
  std::map<std::string, Attribute> attrs = conv->attrs;
  g.remove_node(q);
  g.remove_node(conv);
  Node* fused = g.add_node("QLinearConv", ins, {y}, "", name + "/qlinear");
  fused->attrs = std::move(attrs);
  return true;
}

/// True when `v` holds one float: its inferred shape says so, or it is the product of two such
/// values (quantize_dynamic's scale product of DynamicQuantizeLinear's scale and the weight's).
bool one_float(const Graph& g, const Value* v, int depth = 0) {
  if (!v) return false;
  if (v->type.is_tensor() && v->type.shape) {
    for (const Dim& d : *v->type.shape)
      if (!d.is_fixed() || d.value != 1) return false;
    return v->type.elem == DataType::Float;
  }
  if (const Tensor* t = constant_value(g, v)) return t->dtype() == DataType::Float && t->numel() == 1;
  if (v->producer && is_op(v->producer, "DynamicQuantizeLinear") && v->producer_output == 1) return true;
  Node* mul = made_by(v, "Mul");
  return depth < 2 && mul && mul->num_inputs() == 2 && one_float(g, mul->inputs[0], depth + 1) &&
         one_float(g, mul->inputs[1], depth + 1);
}

bool fuse_matmul_integer(Graph& g, Node* mm) {
  if (!is_op(mm, "MatMulInteger") || !mm->has_input(0) || !mm->has_input(1)) return false;
  const Tensor* b = constant_value(g, mm->inputs[1]);
  if (!b || b->rank() != 2) return false;
  Node* cast = only_consumer(g, mm->outputs[0]);
  if (!is_op(cast, "Cast") || cast->attr_int("to", 0) != static_cast<int64_t>(DataType::Float))
    return false;
  Node* mul = only_consumer(g, cast->outputs[0]);
  if (!is_op(mul, "Mul")) return false;
  Value* scale = other_input(mul, cast->outputs[0]);
  if (!one_float(g, scale)) return false;
  Value* y = mul->outputs[0];
  Value* bias = nullptr;
  Node* add = only_consumer(g, y);
  if (is_op(add, "Add")) {
    Value* other = other_input(add, y);
    const Tensor* t = constant_value(g, other);
    if (t && t->dtype() == DataType::Float && t->rank() == 1 && t->numel() == b->dim(1)) bias = other;
  }
  std::vector<Value*> ins = {mm->inputs[0], mm->inputs[1], mm->has_input(2) ? mm->inputs[2] : nullptr,
                             mm->has_input(3) ? mm->inputs[3] : nullptr, scale};
  if (bias) ins.push_back(bias);
  Value* out = bias ? add->outputs[0] : y;
  const std::string name = mm->name.empty() ? "matmul_integer" : mm->name;
  if (bias) g.remove_node(add);
  g.remove_node(mul);
  g.remove_node(cast);
  g.remove_node(mm);
  g.add_node("MatMulIntegerToFloat", ins, {out}, "ai.onyx", name + "/to_float");
  return true;
}

}  // namespace

size_t fuse_matmul_integer_to_float(Model& model) {
  Graph& g = *model.graph;
  std::vector<Node*> mms;
  for (const auto& n : g.nodes())
    if (is_op(n.get(), "MatMulInteger")) mms.push_back(n.get());
  size_t fused = 0;
  for (Node* m : mms) fused += fuse_matmul_integer(g, m) ? 1 : 0;
  if (fused) {
    g.sort_topologically();
    import_domain(model, "ai.onyx");
  }
  return fused;
}

size_t fuse_qdq_into_qlinear_conv(Model& model) {
  Graph& g = *model.graph;
  std::vector<Node*> convs;
  for (const auto& n : g.nodes())
    if (is_op(n.get(), "Conv")) convs.push_back(n.get());
  size_t fused = 0;
  for (Node* c : convs) fused += fuse_one(g, c) ? 1 : 0;
  if (fused) g.sort_topologically();
  return fused;
}

}  // namespace onyx
