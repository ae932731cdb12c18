// Training-graph fusion: the gradients of a LayerNormalization, which the gradient rule
// (autodiff/rules_norm.cpp, layer_norm_grad) writes as plain ONNX nodes over an [outer, inner]
// view so the training graph stays portable, become one ai.onyx LayerNormalizationGrad (the CPU
// provider's layer_norm_grad.cpp): two passes over each row instead of about fifteen passes
// over the activation (3.6 % of a BERT-small training step at 1 thread).
//
// The rule's nodes where the forward node's Mean and InvStdDev are exact in X's dtype (its
// stash_type) and nothing reads those two outputs but the rule:
//   x2 = Reshape(X, rows)                  g2 = Reshape(Mul(dY, scale), rows)
//   xc = Sub(x2, Reshape(Mean, [-1, 1]))   t1 = Sub(g2, Mul(xh, ReduceMean(Mul(g2, xh), [1])))
//   inv = Reshape(InvStdDev, [-1, 1])      t2 = Sub(t1, ReduceMean(g2, [1]))
//   xh = Mul(xc, inv)                      dX = Reshape(Mul(t2, inv), Shape(X))
// `rows` = [outer, -1]: Concat(ReduceProd(Slice(Shape(X), [0], [axis])), [-1]), or a constant
// once X's shape is known. The parameter gradients, sum_to(Mul(dY, Reshape(xh, Shape(X))), scale)
// and sum_to(dY, B), become the fused node's row sums where sum_to wrote ReduceSum over the
// leading axes then Squeeze (scale of X.shape[axis:]'s static shape); otherwise they stay.
// The match starts at each LayerNormalization and checks every edge; anything else is left alone.
#include <optional>

#include "inference/fusion_util.h"
#include "inference/optimizer.h"

namespace onyx {
namespace {

/// The source of v = Reshape(source, `to`) with a constant `to`, else nullptr.
Value* reshape_of(const Graph& g, const Value* v, const std::vector<int64_t>& to) {
  Node* r = made_by(v, "Reshape");
  if (!r || r->num_inputs() != 2 || constant_ints(g, r->inputs[1]) != to) return nullptr;
  return r->inputs[0];
}

/// The axes of a Reduce* node (attribute before opset 18 / 13, input after), when constant.
std::optional<std::vector<int64_t>> reduce_axes(const Graph& g, const Node* r) {
  if (r->num_inputs() > 1) return constant_ints(g, r->inputs[1]);
  return r->attr_ints("axes");
}

/// The input of v = ReduceMean(input, axes [1] or [-1], keepdims) over a rank-2 view.
Value* row_mean_of(const Graph& g, const Value* v) {
  Node* r = made_by(v, "ReduceMean");
  if (!r || r->attr_int("keepdims", 1) != 1 || r->attr_int("noop_with_empty_axes", 0) != 0)
    return nullptr;
  auto axes = reduce_axes(g, r);
  if (axes != std::vector<int64_t>{1} && axes != std::vector<int64_t>{-1}) return nullptr;
  return r->inputs[0];
}

/// X's static dims, when its rank and every dim are known.
std::optional<std::vector<int64_t>> static_dims(const Value* x) {
  if (!x->type.is_tensor() || !x->type.shape) return std::nullopt;
  std::vector<int64_t> dims;
  for (const Dim& d : *x->type.shape) {
    if (!d.is_fixed()) return std::nullopt;
    dims.push_back(d.value);
  }
  return dims;
}

/// True when `to` reshapes back to X's shape: Shape(X), or X's static shape as a constant.
bool restores_shape_of(const Graph& g, const Value* to, const Value* x) {
  if (Node* s = made_by(to, "Shape")) return s->inputs[0] == x && s->attrs.empty();
  auto c = constant_ints(g, to);
  return c && c == static_dims(x);
}

/// True when `rows` is the rule's [outer, -1] view of X at `axis` (the attribute as written).
bool is_rows_view(const Graph& g, const Value* rows, const Value* x, int64_t axis) {
  if (auto c = constant_ints(g, rows)) {
    auto dims = static_dims(x);
    if (!dims || c->size() != 2) return false;
    const int64_t rank = static_cast<int64_t>(dims->size());
    const int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a > rank) return false;
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < rank; ++i) (i < a ? outer : inner) *= (*dims)[i];
    return (*c)[0] == outer && ((*c)[1] == -1 || (*c)[1] == inner);
  }
  Node* concat = made_by(rows, "Concat");
  if (!concat || concat->num_inputs() != 2 || concat->attr_int("axis", 0) != 0 ||
      constant_ints(g, concat->inputs[1]) != std::vector<int64_t>{-1})
    return false;
  Node* prod = made_by(concat->inputs[0], "ReduceProd");
  if (!prod || prod->num_inputs() != 1 || prod->attr_int("keepdims", 1) != 1 ||
      !prod->attr_ints("axes").empty())
    return false;
  Node* slice = made_by(prod->inputs[0], "Slice");
  if (!slice || slice->num_inputs() != 3) return false;
  Node* shape = made_by(slice->inputs[0], "Shape");
  return shape && shape->inputs[0] == x && shape->attrs.empty() &&
         constant_ints(g, slice->inputs[1]) == std::vector<int64_t>{0} &&
         constant_ints(g, slice->inputs[2]) == std::vector<int64_t>{axis};
}

/// The output of Squeeze(ReduceSum(v, lead, keepdims), lead) or of Reshape(ReduceSum(v, lead,
/// keepdims), `inner`), lead = [0, axis), each intermediate read by the next alone: sum_to's
/// static form for a parameter of X.shape[axis:] (`inner`, static), or its dynamic form once
/// constant folding has computed the shapes.
Value* lead_sum_of(const Graph& g, Node* sum, int64_t axis, const std::vector<int64_t>& inner) {
  // noop_with_empty_axes (the dynamic form sets it) does not matter: the axes are not empty.
  if (!is_op(sum, "ReduceSum") || sum->attr_int("keepdims", 1) != 1 || axis < 1) return nullptr;
  std::vector<int64_t> lead;
  for (int64_t i = 0; i < axis; ++i) lead.push_back(i);
  if (reduce_axes(g, sum) != lead) return nullptr;
  Node* next = only_consumer(g, sum->outputs[0]);
  if (!next || next->inputs[0] != sum->outputs[0]) return nullptr;
  if (is_op(next, "Squeeze")) {
    auto axes = next->num_inputs() > 1 ? constant_ints(g, next->inputs[1])
                                       : std::optional(next->attr_ints("axes"));
    return axes == lead ? next->outputs[0] : nullptr;
  }
  if (is_op(next, "Reshape") && next->num_inputs() == 2 &&
      constant_ints(g, next->inputs[1]) == inner && next->attr_int("allowzero", 0) == 0)
    return next->outputs[0];
  return nullptr;
}

struct Match {
  Value *dy, *x, *scale, *mean, *inv_std, *dx;
  Value *sum_dy_xh = nullptr, *sum_dy = nullptr;  // the parameter gradients, when sum_to's form
  int64_t axis;
  Node* dx_node;
};

std::optional<Match> match_at(const Graph& g, Node* ln) {
  if (ln->num_inputs() < 2 || ln->outputs.size() < 3 || !ln->outputs[1] || !ln->outputs[2])
    return std::nullopt;
  Value *x = ln->inputs[0], *scale = ln->inputs[1];
  const DataType dt = x->type.elem;
  if ((dt != DataType::Float && dt != DataType::Double) || scale->type.elem != dt ||
      ln->attr_int("stash_type", 1) != static_cast<int64_t>(dt))
    return std::nullopt;
  const int64_t axis = ln->attr_int("axis", -1);
  // inv = Reshape(InvStdDev, [-1, 1]), read by xh = Mul(xc, inv) and dx2 = Mul(t2, inv).
  Value* inv_std = ln->outputs[2];
  if (inv_std->consumers.size() != 1 || is_graph_output(g, inv_std)) return std::nullopt;
  Node* inv_r = inv_std->consumers[0].first;
  if (!is_op(inv_r, "Reshape") || reshape_of(g, inv_r->outputs[0], {-1, 1}) != inv_std)
    return std::nullopt;
  Value* inv = inv_r->outputs[0];
  Value* mean = ln->outputs[1];
  Node *xh_mul = nullptr, *dx_mul = nullptr, *xc_sub = nullptr;
  if (inv->consumers.size() != 2) return std::nullopt;
  for (const auto& [n, idx] : inv->consumers) {
    if (!is_op(n, "Mul") || idx != 1) return std::nullopt;
    Node* sub = made_by(n->inputs[0], "Sub");
    if (sub && reshape_of(g, sub->inputs[1], {-1, 1}) == mean)
      xh_mul = n, xc_sub = sub;
    else
      dx_mul = n;
  }
  if (!xh_mul || !dx_mul) return std::nullopt;
  // xc = Sub(x2, Reshape(Mean, [-1, 1])), x2 = Reshape(X, rows); Mean read by the rule alone.
  if (mean->consumers.size() != 1 || is_graph_output(g, mean)) return std::nullopt;
  Node* x2r = made_by(xc_sub->inputs[0], "Reshape");
  if (!x2r || x2r->num_inputs() != 2 || x2r->inputs[0] != x) return std::nullopt;
  Value* rows = x2r->inputs[1];
  if (!is_rows_view(g, rows, x, axis)) return std::nullopt;
  Value* xh = xh_mul->outputs[0];
  // dx2 = Mul(t2, inv), t2 = Sub(t1, ReduceMean(g2)), t1 = Sub(g2, Mul(xh, ReduceMean(Mul(g2, xh)))).
  Node* t2 = made_by(dx_mul->inputs[0], "Sub");
  Node* t1 = t2 ? made_by(t2->inputs[0], "Sub") : nullptr;
  if (!t1) return std::nullopt;
  Value* g2 = t1->inputs[0];
  if (row_mean_of(g, t2->inputs[1]) != g2) return std::nullopt;
  Node* q = made_by(t1->inputs[1], "Mul");
  if (!q || q->inputs[0] != xh) return std::nullopt;
  Node* p = made_by(row_mean_of(g, q->inputs[1]), "Mul");
  if (!p || p->inputs[0] != g2 || p->inputs[1] != xh) return std::nullopt;
  // g2 = Reshape(Mul(dY, scale), rows): the same rows (one value, or equal constants).
  Node* g2r = made_by(g2, "Reshape");
  if (!g2r || g2r->num_inputs() != 2) return std::nullopt;
  if (g2r->inputs[1] != rows &&
      (!constant_ints(g, rows) || constant_ints(g, g2r->inputs[1]) != constant_ints(g, rows)))
    return std::nullopt;
  Node* gs = made_by(g2r->inputs[0], "Mul");
  if (!gs || gs->inputs[1] != scale) return std::nullopt;
  Value* dy = gs->inputs[0];
  if (dy->type.elem != dt) return std::nullopt;
  // dX = Reshape(dx2, Shape(X)), dx2 read by it alone.
  Node* dx_node = only_consumer(g, dx_mul->outputs[0]);
  if (!is_op(dx_node, "Reshape") || dx_node->num_inputs() != 2 ||
      !restores_shape_of(g, dx_node->inputs[1], x))
    return std::nullopt;
  // The kernel reads one scale value per element of X.shape[axis:] and needs dY of X's shape:
  // both proven from the shapes inference gave (scale's leading 1s aside).
  const auto& xs = x->type.shape;
  const auto& ss = scale->type.shape;
  if (!xs || !ss || !dy->type.shape || *dy->type.shape != *xs) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(xs->size());
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) return std::nullopt;
  for (const Dim& d : *xs)
    if (!d.is_fixed() && d.param.empty()) return std::nullopt;
  SymShape inner(xs->begin() + a, xs->end()), sdims(*ss);
  while (sdims.size() > inner.size() && sdims.front().is_fixed() && sdims.front().value == 1)
    sdims.erase(sdims.begin());
  if (sdims != inner) return std::nullopt;
  for (const Dim& d : inner)
    if (!d.is_fixed()) return std::nullopt;
  Match m{dy, x, scale, mean, inv_std, dx_node->outputs[0], nullptr, nullptr, axis, dx_node};
  // The parameter gradients in sum_to's form, when the parameter is X.shape[axis:] itself.
  std::vector<int64_t> inner_dims;
  for (const Dim& d : inner) inner_dims.push_back(d.value);
  if (*ss == inner) {
    for (const auto& [n, idx] : xh->consumers) {
      if (!is_op(n, "Reshape") || n->num_inputs() != 2 || !restores_shape_of(g, n->inputs[1], x))
        continue;
      Node* mul = only_consumer(g, n->outputs[0]);
      if (!is_op(mul, "Mul") || mul->inputs[0] != dy || mul->inputs[1] != n->outputs[0]) continue;
      if (Value* s = lead_sum_of(g, only_consumer(g, mul->outputs[0]), a, inner_dims))
        m.sum_dy_xh = s;
    }
    if (ln->num_inputs() > 2 && ln->inputs[2] && ln->inputs[2]->type.shape &&
        *ln->inputs[2]->type.shape == inner)
      for (const auto& [n, idx] : dy->consumers)
        if (Value* s = lead_sum_of(g, n, a, inner_dims); s && n->inputs[0] == dy) m.sum_dy = s;
  }
  return m;
}

}  // namespace

size_t fuse_layer_norm_grad(Model& model, const ExecutionProvider& runs_it) {
  Graph& g = *model.graph;
  std::vector<Match> matches;
  for (const auto& n : g.nodes())
    if (is_op(n.get(), "LayerNormalization"))
      if (auto m = match_at(g, n.get())) {
        // Only for a provider with the kernel: elsewhere (CUDA) the rule's nodes stay on it.
        if (runs_it.registry().find("LayerNormalizationGrad", "ai.onyx", 1, runs_it.name(),
                                    m->x->type.elem))
          matches.push_back(*m);
      }
  for (const Match& m : matches) {
    detach_output(g, m.dx_node, 0);
    for (Value* s : {m.sum_dy_xh, m.sum_dy})
      if (s) detach_output(g, s->producer, s->producer_output);
    Node* f = g.add_node("LayerNormalizationGrad", {m.dy, m.x, m.scale, m.mean, m.inv_std},
                         {m.dx, m.sum_dy_xh, m.sum_dy}, "ai.onyx", m.dx->name + "_fused");
    f->attrs["axis"] = Attribute::of_int("axis", m.axis);
  }
  if (!matches.empty()) import_domain(model, "ai.onyx");
  // The rule's other nodes now have no readers; eliminate_dead_code removes them.
  return matches.size();
}

}  // namespace onyx
