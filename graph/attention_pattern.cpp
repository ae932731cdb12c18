#include "graph/attention_pattern.h"

#include <utility>

#include "graph/pattern_util.h"

namespace onyx {
namespace {

using pattern::is;
using pattern::one_element;
using pattern::private_producer;
using pattern::shape_of;

/// x when `v` is x * c (either order) with c one element, read only by `reader`; else v itself.
Value* unscaled(const Graph& g, Value* v, const Node* reader, DataType dt, AttentionSpelling& m) {
  Node* n = private_producer(g, v, reader);
  if (!is(n, "Mul") || n->inputs.size() != 2) return v;
  for (int i = 0; i < 2; ++i) {
    Value* x = n->inputs[i];
    const SymShape* xs = shape_of(x);
    if (one_element(n->inputs[1 - i], dt) && xs && xs->size() >= 2) {
      m.factors.push_back({n->inputs[1 - i], false});
      m.nodes.push_back(n);
      return x;
    }
  }
  return v;
}

/// Matches the scores below Softmax's input `x` (read by `reader`): [Div or Mul by a scalar]
/// MatMul(Q [* c1], Kt [* c2]); fills m's factors, nodes, q and kt.
bool match_scores(const Graph& g, Value* x, const Node* reader, DataType dt, AttentionSpelling& m) {
  Node* n = private_producer(g, x, reader);
  if (is(n, "Div") || is(n, "Mul")) {
    if (n->inputs.size() != 2) return false;
    const bool div = is(n, "Div");
    Node* product = nullptr;
    for (int i = 0; i < (div ? 1 : 2) && !product; ++i) {
      Node* p = private_producer(g, n->inputs[i], n);
      if (is(p, "MatMul") && one_element(n->inputs[1 - i], dt)) {
        product = p;
        m.factors.push_back({n->inputs[1 - i], div});
      }
    }
    if (!product) return false;
    m.nodes.push_back(n);
    n = product;
  }
  if (!is(n, "MatMul") || n->inputs.size() != 2) return false;
  m.nodes.push_back(n);
  m.q = unscaled(g, n->inputs[0], n, dt, m);
  m.kt = unscaled(g, n->inputs[1], n, dt, m);
  return true;
}

/// match_scores below an optional Where(cond, S', fill) / Where(cond, fill, S') with a
/// one-element fill (Hugging Face's causal masking).
bool match_filled_scores(const Graph& g, Value* x, const Node* reader, DataType dt, AttentionSpelling& m) {
  Node* w = private_producer(g, x, reader);
  if (!is(w, "Where") || w->inputs.size() != 3) return match_scores(g, x, reader, dt, m);
  const Value* cond = w->inputs[0];
  if (!cond || !cond->type.is_tensor() || cond->type.elem != DataType::Bool) return false;
  for (int i = 1; i <= 2; ++i) {
    if (!one_element(w->inputs[3 - i], dt)) continue;
    AttentionSpelling trial = m;
    trial.nodes.push_back(w);
    if (match_scores(g, w->inputs[i], w, dt, trial)) {
      trial.where_cond = w->inputs[0];
      trial.where_fill = w->inputs[3 - i];
      trial.scores_where_true = i == 1;
      m = std::move(trial);
      return true;
    }
  }
  return false;
}

}  // namespace

std::optional<AttentionSpelling> match_attention(const Graph& g, Node* last, int64_t opset) {
  if (!is(last, "MatMul") || last->inputs.size() != 2 || last->outputs.size() != 1) return std::nullopt;
  AttentionSpelling m;
  m.last = last;
  m.v = last->inputs[1];
  m.p = last->inputs[0];
  Node* sm = private_producer(g, m.p, last);
  if (!is(sm, "Softmax") || sm->inputs.size() != 1) return std::nullopt;
  const SymShape* ps = shape_of(m.p);
  if (!ps || ps->size() < 2) return std::nullopt;
  const auto rank = static_cast<int64_t>(ps->size());
  int64_t axis = sm->attr_int("axis", opset >= 13 ? -1 : 1);
  if (axis < 0) axis += rank;
  if (axis != rank - 1) return std::nullopt;
  const DataType dt = m.p->type.elem;
  if (!is_float(dt)) return std::nullopt;
  m.nodes = {last, sm};

  Value* x = sm->inputs[0];
  Node* add = private_producer(g, x, sm);
  if (is(add, "Add") && add->inputs.size() == 2) {
    // Scores + mask, either order: the scores are the operand the rest of the spelling matches.
    bool found = false;
    for (int i = 0; i < 2 && !found; ++i) {
      AttentionSpelling trial = m;
      trial.nodes.push_back(add);
      if (match_filled_scores(g, add->inputs[i], add, dt, trial)) {
        trial.mask = add->inputs[1 - i];
        m = std::move(trial);
        found = true;
      }
    }
    if (!found) return std::nullopt;
  } else if (!match_filled_scores(g, x, sm, dt, m)) {
    return std::nullopt;
  }
  // One rank for the products' operands: MatMul then broadcasts only batch dims, whose sizes
  // may be unknown here (exporters compute head shapes at run time); the backward reduces a
  // gradient to its input's shape where they broadcast.
  for (const Value* v : {m.q, m.kt, m.v}) {
    const SymShape* s = shape_of(v);
    if (!s || s->size() != ps->size() || v->type.elem != dt) return std::nullopt;
  }
  return m;
}

}  // namespace onyx
