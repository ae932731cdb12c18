// MatMul fusions:
// - a Transpose of the last two axes folded into com.microsoft FusedMatMul, which reads the
//   operand transposed in place (same math, up to reassociation inside one kernel);
// - the bias Add that follows a product with a 2-D weight (nn.Linear on a 3-D activation
//   exports as MatMul + Add, not Gemm) and the Relu or Gelu after it, folded into ai.onyx
//   FusedMatMulBias: oneDNN adds the bias and applies the activation while the output tile
//   is still in cache, instead of two more passes over [batch * seq, N]; likewise a Gemm
//   whose C is a row bias (nn.Linear on 2-D input) and the activation after it.
#include <cmath>
#include <optional>
#include <utility>

#include "inference/fusion_util.h"
#include "inference/optimizer.h"

namespace onyx {
namespace {

/// The fixed size of `v`'s dim `i` from the end (1 = last), or -1.
int64_t fixed_dim_from_end(const Value* v, size_t i) {
  if (!v || !v->type.is_tensor() || !v->type.shape || v->type.shape->size() < i) return -1;
  const Dim& d = (*v->type.shape)[v->type.shape->size() - i];
  return d.is_fixed() ? d.value : -1;
}

size_t known_rank(const Value* v) {
  return v && v->type.is_tensor() && v->type.shape ? v->type.shape->size() : 0;
}

/// True when `bias` broadcasts over the product of `a` (rank >= 2) and a 2-D weight of width
/// n along its last axis only: all its dims 1 but the last, which is n, its rank at most a's
/// (so the Add keeps the product's shape), its dtype a's.
bool is_row_bias(const Value* bias, const Value* a, int64_t n) {
  const size_t r = known_rank(bias);
  if (r == 0 || r > known_rank(a) || fixed_dim_from_end(bias, 1) != n) return false;
  for (size_t i = 2; i <= r; ++i)
    if (fixed_dim_from_end(bias, i) != 1) return false;
  return bias->type.elem == a->type.elem;
}

/// The FusedMatMulBias `activation` for `n` when it is an activation the kernel applies, else
/// nullptr.
const char* fusable_activation(const Node* n) {
  if (is_op(n, "Relu")) return "relu";
  if (is_op(n, "Gelu", "com.microsoft")) return "gelu";
  if (is_op(n, "FastGelu", "com.microsoft") && n->num_inputs() == 1) return "gelu_tanh";
  if (is_op(n, "Gelu")) {
    const std::string a = n->attr_string("approximate", "none");
    return a == "none" ? "gelu" : a == "tanh" ? "gelu_tanh" : nullptr;
  }
  return nullptr;
}

bool is_float_type(DataType dt) {
  return dt == DataType::Float || dt == DataType::Float16 || dt == DataType::BFloat16 ||
         dt == DataType::Double;
}

/// transA / transB of a matrix product whose operands may be read transposed in place: MatMul
/// (neither), FusedMatMul without batch transposes and Gemm; nullopt for anything else.
std::optional<std::pair<bool, bool>> product_trans(const Node& n) {
  if (is_op(&n, "MatMul")) return std::pair{false, false};
  const bool fused = is_op(&n, "FusedMatMul", "com.microsoft");
  if (!fused && !is_op(&n, "Gemm")) return std::nullopt;
  if (fused && (n.attr_int("transBatchA", 0) != 0 || n.attr_int("transBatchB", 0) != 0))
    return std::nullopt;
  return std::pair{n.attr_int("transA", 0) != 0, n.attr_int("transB", 0) != 0};
}

/// Replaces the product `n` (through `bias_end`, the node whose output is product + bias)
/// and the activation that alone reads `bias_end`'s output, when `activations` allows it, by
/// FusedMatMulBias(A, B, bias) writing the last node's output.
void replace_with_fused(Graph& g, const Node* n, Node* bias_end, Value* bias, bool trans_b,
                        bool activations) {
  Node* last = bias_end;
  const char* activation = "none";
  if (Node* act = activations ? only_consumer(g, bias_end->outputs[0]) : nullptr;
      act && fusable_activation(act)) {
    activation = fusable_activation(act);
    last = act;
  }
  Value* out = last->outputs[0];
  detach_output(g, last, 0);
  Node* f = g.add_node("FusedMatMulBias", {n->inputs[0], n->inputs[1], bias}, {out}, "ai.onyx",
                       n->name + "_bias");
  f->attrs["transB"] = Attribute::of_int("transB", trans_b ? 1 : 0);
  f->attrs["activation"] = Attribute::of_string("activation", activation);
}

/// A Gemm that is a product plus a row bias (transA 0, alpha and beta 1, C [N] or [1, N] of
/// A's dtype) becomes FusedMatMulBias with the activation after it: the kernel adds the bias
/// after the whole sum as Gemm's C is added, without first filling the output with C, and
/// applies the activation in the same pass (torch exports nn.Linear on 2-D input as Gemm).
bool fuse_gemm_bias(Graph& g, Node* n, bool activations) {
  if (n->num_inputs() != 3 || !n->has_input(0) || !n->has_input(1) || !n->has_input(2) ||
      n->attr_int("transA", 0) != 0 || n->attr_float("alpha", 1.0f) != 1.0f ||
      n->attr_float("beta", 1.0f) != 1.0f)
    return false;
  const bool trans_b = n->attr_int("transB", 0) != 0;
  const Value* a = n->inputs[0];
  const Value* b = n->inputs[1];
  Value* bias = n->inputs[2];
  const int64_t width = known_rank(b) == 2 ? fixed_dim_from_end(b, trans_b ? 2 : 1) : -1;
  if (width < 0 || known_rank(a) != 2 || !is_float_type(a->type.elem) ||
      b->type.elem != a->type.elem || !is_row_bias(bias, a, width))
    return false;
  replace_with_fused(g, n, n, bias, trans_b, activations);
  return true;
}

/// The value of `c` when it is a constant one-element float tensor of `dtype` whose rank is at
/// most `max_rank` (so multiplying by it broadcasts nothing), as a float; else nullopt.
std::optional<float> constant_scale(const Graph& g, const Value* c, DataType dtype,
                                    size_t max_rank) {
  const Tensor* t = constant_value(g, c);
  if (!t || t->numel() != 1 || t->dtype() != dtype || static_cast<size_t>(t->rank()) > max_rank)
    return std::nullopt;
  const double v = t->to_double_vector()[0];
  if (!std::isfinite(v) || v == 0.0) return std::nullopt;
  return static_cast<float>(v);
}

/// When `y` (of rank `rank`, dtype `dtype`) is x * c, c * x or x / c for a constant scale c,
/// the factor it applies and x; else nullopt.
std::optional<std::pair<float, Value*>> scaled_value(const Graph& g, const Value* y,
                                                     DataType dtype, size_t rank) {
  const Node* p = y ? y->producer : nullptr;
  const bool mul = is_op(p, "Mul"), div = is_op(p, "Div");
  if ((!mul && !div) || p->num_inputs() != 2 || !p->has_input(0) || !p->has_input(1))
    return std::nullopt;
  for (int x = 0; x < (mul ? 2 : 1); ++x) {
    Value* data = p->inputs[x];
    if (data->type.elem != dtype || known_rank(data) != rank) continue;
    if (auto c = constant_scale(g, p->inputs[1 - x], dtype, rank))
      return std::pair{div ? 1.0f / *c : *c, data};
  }
  return std::nullopt;
}

}  // namespace

size_t fuse_scale_into_matmul(Model& model) {
  Graph& g = *model.graph;
  size_t fused = 0;
  // (a * s) x (b * t) and (a x b) * s or / s become FusedMatMul(a, b, alpha = s * t): torch's
  // scaled_dot_product_attention export scales q and k^T by sqrt(scale) each, and the Mul on
  // k^T is what kept its Transpose from being read in place. A product by a constant weight is
  // left as it is (the weight paths take alpha = 1). Rounding moves by an ulp or so, as with
  // ONNX Runtime's MatMulScaleFusion.
  for (Node* n : g.topological_order()) {
    const auto trans = product_trans(*n);
    if (!trans || is_op(n, "Gemm") || n->num_inputs() != 2 || !n->has_input(0) ||
        !n->has_input(1) || known_rank(n->inputs[0]) < 2 || known_rank(n->inputs[1]) < 2)
      continue;
    const DataType dt = n->inputs[0]->type.elem;
    if ((dt != DataType::Float && dt != DataType::Float16 && dt != DataType::BFloat16) ||
        n->inputs[1]->type.elem != dt || constant_value(g, n->inputs[1]))
      continue;
    float alpha = n->attr_float("alpha", 1.0f);
    Value* operands[2] = {n->inputs[0], n->inputs[1]};
    bool changed = false;
    for (Value*& v : operands) {
      if (only_consumer(g, v) != n) continue;
      if (auto s = scaled_value(g, v, dt, known_rank(v))) {
        alpha *= s->first;
        v = s->second;
        changed = true;
      }
    }
    // A scale after the product: the fused node writes the scaled value.
    Value* y = n->outputs[0];
    Node* after = only_consumer(g, y);
    const bool scaled_after = after && after->outputs.size() == 1 && after->outputs[0];
    auto out_scale = scaled_after ? scaled_value(g, after->outputs[0], dt, known_rank(y))
                                  : std::nullopt;
    if (out_scale && out_scale->second == y) {
      alpha *= out_scale->first;
      changed = true;
    } else {
      out_scale.reset();
    }
    if (!changed || !std::isfinite(alpha) || alpha == 0.0f) continue;
    // The replaced nodes are left, read by nobody, for dead-code elimination.
    Node* last = out_scale ? after : n;
    Value* out = last->outputs[0];
    detach_output(g, last, 0);
    Node* f = g.add_node("FusedMatMul", {operands[0], operands[1]}, {out}, "com.microsoft",
                         n->name + "_scaled");
    f->attrs["transA"] = Attribute::of_int("transA", trans->first ? 1 : 0);
    f->attrs["transB"] = Attribute::of_int("transB", trans->second ? 1 : 0);
    f->attrs["alpha"] = Attribute::of_float("alpha", alpha);
    ++fused;
  }
  if (fused) import_domain(model, "com.microsoft");
  return fused;
}

size_t fuse_bias_into_matmul(Model& model, bool activations) {
  Graph& g = *model.graph;
  size_t fused = 0;
  for (Node* n : g.topological_order()) {
    if (is_op(n, "Gemm")) {
      fused += fuse_gemm_bias(g, n, activations);
      continue;
    }
    const bool plain = is_op(n, "MatMul");
    if (!plain && !is_op(n, "FusedMatMul", "com.microsoft")) continue;
    if (n->num_inputs() != 2 || !n->has_input(0) || !n->has_input(1)) continue;
    if (!plain && (n->attr_int("transA", 0) != 0 || n->attr_float("alpha", 1.0f) != 1.0f ||
                   n->attr_int("transBatchA", 0) != 0 || n->attr_int("transBatchB", 0) != 0))
      continue;
    const bool trans_b = !plain && n->attr_int("transB", 0) != 0;
    const Value* a = n->inputs[0];
    const Value* b = n->inputs[1];
    Value* y = n->outputs[0];
    // A 2-D weight (one matrix for every row of A) of known width N. The product has A's rank
    // and dtype (read from A: models built in code reach the optimizer without inferred types).
    const int64_t width = known_rank(b) == 2 ? fixed_dim_from_end(b, trans_b ? 2 : 1) : -1;
    if (width < 0 || known_rank(a) < 2 || !is_float_type(a->type.elem) ||
        b->type.elem != a->type.elem)
      continue;
    Node* add = only_consumer(g, y);
    if (!is_op(add, "Add") || add->num_inputs() != 2) continue;
    Value* bias = add->inputs[add->inputs[0] == y ? 1 : 0];
    if (add->inputs[0] == add->inputs[1] || !is_row_bias(bias, a, width)) continue;
    replace_with_fused(g, n, add, bias, trans_b, activations);
    ++fused;
  }
  // The MatMul, Add and activation now have no readers; eliminate_dead_code removes them.
  if (fused) import_domain(model, "ai.onyx");
  return fused;
}

size_t fuse_transpose_into_matmul(Model& model) {
  Graph& g = *model.graph;
  size_t fused = 0;
  // Transpose(A * B) over the last two axes, the product read by the Transpose alone, becomes
  // B^T * A^T with the operands read transposed in place: what the gradient of a transposed
  // weight (dW = Transpose(dW^T), torch's Linear as MatMul(x, Transpose(W))) is made of.
  for (Node* t : g.topological_order()) {
    if (!swaps_last_two_axes(*t)) continue;
    Node* p = t->inputs[0]->producer;
    const bool gemm = is_op(p, "Gemm");
    if (!p || only_consumer(g, t->inputs[0]) != t || !product_trans(*p) ||
        (gemm && p->num_inputs() > 2 && p->has_input(2)) || p->num_inputs() < 2 ||
        known_rank(p->inputs[0]) < 2 || known_rank(p->inputs[1]) < 2)
      continue;
    const auto [ta, tb] = *product_trans(*p);
    Value* y = t->outputs[0];
    detach_output(g, t, 0);
    Node* f = g.add_node(gemm ? "Gemm" : "FusedMatMul", {p->inputs[1], p->inputs[0]}, {y},
                         gemm ? "" : "com.microsoft", p->name + "_transposed");
    f->attrs["transA"] = Attribute::of_int("transA", tb ? 0 : 1);
    f->attrs["transB"] = Attribute::of_int("transB", ta ? 0 : 1);
    f->attrs["alpha"] = Attribute::of_float("alpha", p->attr_float("alpha", 1.0f));
    ++fused;
  }
  // A product reading a Transpose of the last two axes reads its source transposed instead.
  for (Node* n : g.topological_order()) {
    if (!product_trans(*n) || n->num_inputs() < 2) continue;
    const bool plain = is_op(n, "MatMul");
    auto [ta, tb] = *product_trans(*n);
    bool trans[2] = {ta, tb};
    bool changed = false;
    for (int i = 0; i < 2; ++i) {
      // Through every Transpose in a row: a gradient's Transpose of a forward one cancels.
      for (const Value* v = n->inputs[i]; v && v->producer && swaps_last_two_axes(*v->producer);
           v = n->inputs[i]) {
        // Gemm's operands are 2-D: its transA / transB are exactly the swap.
        if (is_op(n, "Gemm") && known_rank(v) != 2) break;
        // A 1-D operand has nothing to transpose; the Transpose's rank is >= 2 by its checks.
        g.set_input(n, i, v->producer->inputs[0]);
        trans[i] = !trans[i];
        changed = true;
      }
    }
    if (!changed) continue;
    if (plain) {  // ONNX Runtime's contrib op; ours also takes MatMul's integer types.
      n->op_type = "FusedMatMul";
      n->domain = "com.microsoft";
    }
    n->attrs["transA"] = Attribute::of_int("transA", trans[0] ? 1 : 0);
    n->attrs["transB"] = Attribute::of_int("transB", trans[1] ? 1 : 0);
    ++fused;
  }
  if (fused) import_domain(model, "com.microsoft");
  return fused;
}

}  // namespace onyx
