// Training-graph fusion: the input gradient of a training-mode BatchNormalization, which the
// gradient rule (autodiff/rules_norm.cpp, batch_norm_grad) writes as plain ONNX nodes so the
// training graph stays portable, becomes one ai.onyx BatchNormTrainingGrad
// (the CPU provider's batch_norm_grad.cpp): three passes over the activation instead of a dozen.
//
// The rule's nodes, [N, C, S] views of X and dY, reductions over axes {0, 2} with keepdims:
//   x3 = Reshape(X, [0, 0, -1])            dy3 = Reshape(dY, [0, 0, -1])
//   mean = Div(ReduceSum(x3), m)           sdy = ReduceSum(dy3)               (read outside)
//   xc = Sub(x3, mean)                     sdyxh = ReduceSum(Mul(dy3, xh))     (read outside)
//   var = Div(ReduceSum(Mul(xc, xc)), m)   g1 = Sub(dy3, Div(sdy, m))
//   inv = Reciprocal(Sqrt(Add(var, eps)))  g2 = Sub(g1, Mul(xh, Div(sdyxh, m)))
//   xh = Mul(xc, inv)                      dX = Reshape(Mul(g2, Mul(s3, inv)), ...)
//   s3 = Reshape(scale, [1, -1, 1])        m = N * S (a constant, or computed from X)
// The match starts at each Reciprocal and checks every edge; anything else is left alone.
#include <optional>

#include "inference/fusion_util.h"
#include "inference/optimizer.h"

namespace onyx {
namespace {

/// A single-valued float constant, else nullopt.
std::optional<double> const_scalar(const Graph& g, const Value* v) {
  const Tensor* t = constant_value(g, v);
  if (!t || t->numel() != 1 || (t->dtype() != DataType::Float && t->dtype() != DataType::Double))
    return std::nullopt;
  return t->to_double_vector()[0];
}

/// The source of v = Reshape(source, `to`) with a constant `to`, else nullptr.
Value* reshape_source(const Graph& g, const Value* v, const std::vector<int64_t>& to) {
  Node* r = made_by(v, "Reshape");
  if (!r || r->num_inputs() != 2 || constant_ints(g, r->inputs[1]) != to) return nullptr;
  return r->inputs[0];
}

/// The input of v = ReduceSum(input, axes {0, 2}, keepdims) as the rule writes it, else nullptr.
Value* channel_sum_of(const Graph& g, const Value* v) {
  Node* r = made_by(v, "ReduceSum");
  if (!r || r->attr_int("keepdims", 1) != 1 || r->attr_int("noop_with_empty_axes", 0) != 0)
    return nullptr;
  std::optional<std::vector<int64_t>> axes =
      r->num_inputs() > 1 ? constant_ints(g, r->inputs[1]) : r->attr_ints("axes");
  if (axes != std::vector<int64_t>{0, 2}) return nullptr;
  return r->inputs[0];
}

/// Div(num, m): num when the divisor is m, else nullptr.
Value* divided_by(const Value* v, const Value* m) {
  Node* d = made_by(v, "Div");
  return d && d->num_inputs() == 2 && d->inputs[1] == m ? d->inputs[0] : nullptr;
}

/// m is the element count per channel of x3 = [N, C, S]: a constant equal to N * S when X's
/// shape is static, or Cast(Div(Size(X), Gather(Shape(X), 1)), X's dtype) as the rule writes it
/// (the Gather folded to X's static channel count where that is known).
bool is_count_per_channel(const Graph& g, const Value* m, const Value* x) {
  const auto& s = x->type.shape;
  if (auto c = const_scalar(g, m)) {
    if (!s || s->size() < 2) return false;
    double count = 1;
    for (size_t i = 0; i < s->size(); ++i) {
      if (!(*s)[i].is_fixed()) return false;
      if (i != 1) count *= static_cast<double>((*s)[i].value);
    }
    return *c == count;
  }
  Node* cast = made_by(m, "Cast");
  if (!cast) cast = made_by(m, "CastLike");
  Node* div = cast ? made_by(cast->inputs[0], "Div") : nullptr;
  if (!div || div->num_inputs() != 2) return false;
  Node* size = made_by(div->inputs[0], "Size");
  if (!size || size->inputs[0] != x) return false;
  if (auto ch = constant_ints(g, div->inputs[1]))
    return s && s->size() >= 2 && (*s)[1].is_fixed() && *ch == std::vector<int64_t>{(*s)[1].value};
  Node* gather = made_by(div->inputs[1], "Gather");
  if (!gather || gather->attr_int("axis", 0) != 0) return false;
  Node* shape = made_by(gather->inputs[0], "Shape");
  auto idx = constant_ints(g, gather->inputs[1]);
  return shape && shape->inputs[0] == x && shape->attrs.empty() && idx &&
         *idx == std::vector<int64_t>{1};
}

/// The single reader of v that is `op`, when v has exactly `count` readers; else nullptr.
Node* reader(const Value* v, const char* op, size_t count) {
  if (v->consumers.size() != count) return nullptr;
  Node* found = nullptr;
  for (const auto& [n, idx] : v->consumers) {
    if (!is_op(n, op)) continue;
    if (found && found != n) return nullptr;
    found = n;
  }
  return found;
}

struct Match {
  Value *dy, *x, *scale, *dx, *sdy, *sdyxh;
  double eps;
  Node *dx_node, *sdy_node, *sdyxh_node;  // producers of the three values the fusion keeps
};

std::optional<Match> match_at(const Graph& g, Node* recip) {
  // inv = Reciprocal(Sqrt(Add(var, eps))), var = Div(ReduceSum(Mul(xc, xc)), m)
  Value* inv = recip->outputs[0];
  Node* sqrt = made_by(recip->inputs[0], "Sqrt");
  Node* add = sqrt ? made_by(sqrt->inputs[0], "Add") : nullptr;
  if (!add || add->num_inputs() != 2) return std::nullopt;
  auto eps = const_scalar(g, add->inputs[1]);
  Node* var_div = made_by(add->inputs[0], "Div");
  if (!eps || !var_div || var_div->num_inputs() != 2) return std::nullopt;
  Value* m = var_div->inputs[1];
  Node* sq = made_by(channel_sum_of(g, var_div->inputs[0]), "Mul");
  if (!sq || sq->inputs[0] != sq->inputs[1]) return std::nullopt;
  Value* xc = sq->inputs[0];
  // xc = Sub(x3, Div(ReduceSum(x3), m)), x3 = Reshape(X, [0, 0, -1])
  Node* sub = made_by(xc, "Sub");
  if (!sub || sub->num_inputs() != 2) return std::nullopt;
  Value* x3 = sub->inputs[0];
  if (channel_sum_of(g, divided_by(sub->inputs[1], m)) != x3) return std::nullopt;
  Value* x = reshape_source(g, x3, {0, 0, -1});
  if (!x || !is_count_per_channel(g, m, x)) return std::nullopt;
  // inv's two readers: xh = Mul(xc, inv) and k = Mul(s3, inv).
  if (inv->consumers.size() != 2) return std::nullopt;
  Node *xh_mul = nullptr, *k_mul = nullptr;
  for (const auto& [n, idx] : inv->consumers) {
    if (!is_op(n, "Mul")) return std::nullopt;
    (other_input(n, inv) == xc ? xh_mul : k_mul) = n;
  }
  if (!xh_mul || !k_mul || xh_mul->inputs[0] != xc) return std::nullopt;
  Value* scale = reshape_source(g, other_input(k_mul, inv), {1, -1, 1});
  if (!scale) return std::nullopt;
  Value* xh = xh_mul->outputs[0];
  // xh's readers: P = Mul(dy3, xh) and Q = Mul(xh, Div(sdyxh, m)).
  if (xh->consumers.size() != 2) return std::nullopt;
  Node *p_mul = nullptr, *q_mul = nullptr;
  for (const auto& [n, idx] : xh->consumers) {
    if (!is_op(n, "Mul")) return std::nullopt;
    (n->inputs[1] == xh ? p_mul : q_mul) = n;
  }
  if (!p_mul || !q_mul || q_mul->inputs[0] != xh) return std::nullopt;
  Value* dy3 = p_mul->inputs[0];
  Value* dy = reshape_source(g, dy3, {0, 0, -1});
  Node* sdyxh_node = reader(p_mul->outputs[0], "ReduceSum", 1);
  if (!dy || !sdyxh_node) return std::nullopt;
  Value* sdyxh = sdyxh_node->outputs[0];
  if (channel_sum_of(g, sdyxh) != p_mul->outputs[0] ||
      divided_by(q_mul->inputs[1], m) != sdyxh)
    return std::nullopt;
  // dy3's readers: P, sdy = ReduceSum(dy3) and g1 = Sub(dy3, Div(sdy, m)).
  Node* g1 = reader(dy3, "Sub", 3);
  Node* sdy_node = reader(dy3, "ReduceSum", 3);
  if (!g1 || !sdy_node || g1->inputs[0] != dy3) return std::nullopt;
  Value* sdy = sdy_node->outputs[0];
  if (channel_sum_of(g, sdy) != dy3 || divided_by(g1->inputs[1], m) != sdy) return std::nullopt;
  // g2 = Sub(g1, Q); dX = Reshape(Mul(g2, k)).
  Node* g2 = reader(g1->outputs[0], "Sub", 1);
  if (!g2 || g2->inputs[0] != g1->outputs[0] || g2->inputs[1] != q_mul->outputs[0])
    return std::nullopt;
  Node* dx_mul = reader(g2->outputs[0], "Mul", 1);
  if (!dx_mul || other_input(dx_mul, g2->outputs[0]) != k_mul->outputs[0]) return std::nullopt;
  Node* dx_node = reader(dx_mul->outputs[0], "Reshape", 1);
  if (!dx_node) return std::nullopt;
  // dX = Reshape(dx3, Shape(X)), or X's static shape once folded.
  Value* to = dx_node->num_inputs() == 2 ? dx_node->inputs[1] : nullptr;
  Node* shape_of = to ? made_by(to, "Shape") : nullptr;
  bool restores_x = shape_of && shape_of->inputs[0] == x && shape_of->attrs.empty();
  if (auto c = to ? constant_ints(g, to) : std::nullopt; c && x->type.shape) {
    std::vector<int64_t> xs;
    for (const Dim& d : *x->type.shape) xs.push_back(d.is_fixed() ? d.value : -2);
    restores_x = *c == xs;
  }
  if (!restores_x) return std::nullopt;
  // The fused node computes dX and the two sums from dY, X and the scale alone, so the match is
  // exact whoever else reads the values in between (they keep their producers; those nobody
  // reads any more are removed as dead code).
  const DataType dt = x->type.elem;
  if ((dt != DataType::Float && dt != DataType::Double) || dy->type.elem != dt ||
      scale->type.elem != dt)
    return std::nullopt;
  return Match{dy, x, scale, dx_node->outputs[0], sdy, sdyxh, *eps, dx_node, sdy_node, sdyxh_node};
}

}  // namespace

size_t fuse_batch_norm_grad(Model& model) {
  Graph& g = *model.graph;
  std::vector<Match> matches;
  for (const auto& n : g.nodes())
    if (is_op(n.get(), "Reciprocal") && n->num_inputs() == 1)
      if (auto m = match_at(g, n.get())) matches.push_back(*m);
  for (const Match& m : matches) {
    detach_output(g, m.dx_node, 0);
    detach_output(g, m.sdy_node, 0);
    detach_output(g, m.sdyxh_node, 0);
    Node* f = g.add_node("BatchNormTrainingGrad", {m.dy, m.x, m.scale}, {m.dx, m.sdy, m.sdyxh},
                         "ai.onyx", m.dx->name + "_fused");
    f->attrs["epsilon"] = Attribute::of_float("epsilon", static_cast<float>(m.eps));
  }
  if (!matches.empty()) import_domain(model, "ai.onyx");
  // The rule's other nodes now have no readers; eliminate_dead_code removes them.
  return matches.size();
}

}  // namespace onyx
