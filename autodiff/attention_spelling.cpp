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
    bool ok = !m->mask || !needs_grad(m->mask);
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

  std::vector<Value*> d(3, nullptr);
  if (wants[2]) d[2] = c.op("MatMul", {swapped(m.p), dy});
  if (!wants[0] && !wants[1]) return d;
  Value* dp = c.op("MatMul", {dy, swapped(m.v)});
  Value* row = c.reduce("ReduceSum", c.op("Mul", {dp, m.p}), {rank - 1}, true);
  Value* dx = c.op("Mul", {c.op("Sub", {dp, row}), m.p});
  Value* alpha = nullptr;
  for (const auto& f : m.factors) {
    if (!alpha)
      alpha = f.divides ? c.op("Div", {c.scalar(1.0, f.value), f.value}) : f.value;
    else
      alpha = c.op(f.divides ? "Div" : "Mul", {alpha, f.value});
  }
  if (alpha) dx = c.op("Mul", {dx, alpha});
  if (wants[0]) d[0] = c.op("MatMul", {dx, swapped(m.kt)});
  if (wants[1]) d[1] = c.op("MatMul", {swapped(m.q), dx});
  for (int i = 0; i < 3; ++i)
    if (d[i] && d[i]->type.kind == ValueType::Kind::Unknown) d[i]->type = unit.inputs[i]->type;
  return d;
}

}  // namespace onyx::autodiff
