#include "autodiff/attention_spelling.h"

#include <algorithm>
#include <numeric>

#include "autodiff/gradient_rules.h"

namespace onyx::autodiff {

AttentionSpellings find_attention_spellings(const Model& model, const Graph& g,
                                            const std::vector<Node*>& order,
                                            const std::function<bool(const Value*)>& needs_grad,
                                            const std::set<Node*>& taken) {
  AttentionSpellings found;
  const std::set<Node*> in_order(order.begin(), order.end());
  const int64_t opset = model.opset("");
  for (Node* n : order) {
    std::optional<AttentionSpelling> m = match_attention(g, n, opset);
    if (!m || !(needs_grad(m->q) || needs_grad(m->kt) || needs_grad(m->v))) continue;
    bool ok = (!m->mask || !needs_grad(m->mask)) && (!m->where_fill || !needs_grad(m->where_fill));
    for (const auto& f : m->factors) ok = ok && !needs_grad(f.value);
    for (Node* k : m->nodes) ok = ok && in_order.count(k) && !taken.count(k) && !found.inside.count(k);
    if (!ok) continue;
    for (Node* k : m->nodes)
      if (k != n) found.inside.insert(k);
    found.by_last.emplace(n, std::move(*m));
  }
  return found;
}

std::vector<Value*> attention_spelling_grad(const Model& model, Graph& g, const AttentionSpelling& m,
                                            Value* dy, const std::vector<bool>& wants) {
  // A stand-in node gives the emitted nodes their names ("<last>_grad/...") and the opset's
  // ReduceSum form.
  Node unit;
  unit.name = m.last->name;
  unit.op_type = "Attention";
  unit.inputs = {m.q, m.kt, m.v};
  unit.outputs = {m.last->outputs[0]};
  unit.owner = &g;
  GradContext c(g, unit, {dy}, wants);
  c.set_opset(model.opset(""));
  c.set_model(&model);
  const auto rank = static_cast<int64_t>(m.p->type.shape->size());
  std::vector<int64_t> perm(rank);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[rank - 1], perm[rank - 2]);
  auto swapped = [&](Value* x) { return c.op("Transpose", {x}, {Attribute::of_ints("perm", perm)}); };

  // Each product has the output's batch dims (they hold every operand's) and the matrix dims of
  // the input whose gradient it is; it is then reduced to that input's shape where the input
  // broadcast (static when the dims are known).
  const std::optional<SymShape>& os = m.last->outputs[0]->type.shape;
  auto product = [&](Value* a, Value* b, Value* like) {
    Value* y = c.op("MatMul", {a, b});
    const std::optional<SymShape>& ls = like->type.shape;
    if (os && ls && os->size() == static_cast<size_t>(rank) && ls->size() == static_cast<size_t>(rank)) {
      SymShape s(os->begin(), os->end() - 2);
      s.insert(s.end(), ls->end() - 2, ls->end());
      y->type = ValueType::tensor(m.p->type.elem, std::move(s));
    }
    return c.sum_to(y, like);
  };
  std::vector<Value*> d(3, nullptr);
  if (wants[2]) d[2] = product(swapped(m.p), dy, m.v);
  if (!wants[0] && !wants[1]) return d;
  Value* dp = c.op("MatMul", {dy, swapped(m.v)});
  Value* row = c.reduce("ReduceSum", c.op("Mul", {dp, m.p}), {rank - 1}, true);
  Value* dx = c.op("Mul", {c.op("Sub", {dp, row}), m.p});
  // Where's gradient: zero where the fill was taken (a wholly masked row's P is not zero there).
  // It has P's type: the forward Where's output, which Softmax kept, already broadcast cond.
  if (m.where_cond) {
    Value* zero = c.scalar(0.0, m.p);
    dx = c.op("Where", m.scores_where_true ? std::vector<Value*>{m.where_cond, dx, zero}
                                           : std::vector<Value*>{m.where_cond, zero, dx});
    dx->type = m.p->type;
  }
  Value* alpha = nullptr;
  for (const auto& f : m.factors) {
    if (!alpha)
      alpha = f.divides ? c.op("Div", {c.scalar(1.0, f.value), f.value}) : f.value;
    else
      alpha = c.op(f.divides ? "Div" : "Mul", {alpha, f.value});
  }
  if (alpha) dx = c.op("Mul", {dx, alpha});
  // A mask that broadcast the scores needs no reduction of dX here: the products are linear
  // per batch element, so reducing dQ and dKt to their inputs' shapes sums the same terms.
  if (wants[0]) d[0] = product(dx, swapped(m.kt), m.q);
  if (wants[1]) d[1] = product(swapped(m.q), dx, m.kt);
  return d;
}

}  // namespace onyx::autodiff
